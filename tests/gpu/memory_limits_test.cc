// NVML's per-cgroup memory limits (gpu/memory_limits.h) through the real dlopen path, against
// the stand-in libnvidia-ml (tests/gpu/fake_nvml.cc): as current drivers export it, and as old
// ones did (no memory-limit calls at all).
#include "gpumux/gpu/memory_limits.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/gpu/gpu_testing.h"
#include "tests/testing/builders.h"

namespace gpumux::gpu {
namespace {

using test::Contains;

constexpr const char* kUuid0 = "GPU-aaaa0000-1111-2222-3333-444455556666";
constexpr const char* kUuid1 = "GPU-bbbb0000-1111-2222-3333-444455556666";
constexpr std::uint64_t kMiB = 1024 * 1024;

class MemoryLimitsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cgroup_ = (dir_.path() / "cg" / "kubepods" / "pod1" / "ctr1").string();
    std::filesystem::create_directories(cgroup_);
    SetState(std::string("gpu=") + kUuid0 + "|NVIDIA H100 80GB HBM3|81559|0|0|0|0||\n" +
             "gpu=" + kUuid1 + "|NVIDIA H100 80GB HBM3|81559|0|1|0|0||mig\n");
    ::setenv("GPUMUX_FAKE_NVML", (dir_.path() / "nvml-state").c_str(), 1);
  }
  void TearDown() override { ::unsetenv("GPUMUX_FAKE_NVML"); }

  void SetState(const std::string& content) { test::ReplaceFile(dir_, "nvml-state", content); }
  std::unique_ptr<MemoryLimits> Open(const std::string& library = GPUMUX_FAKE_NVML_LIB) {
    auto m = OpenMemoryLimits(library);
    EXPECT_TRUE(m.has_value()) << m.error().message;
    return m ? std::move(*m) : nullptr;
  }
  std::string Calls() const {
    std::ifstream in(dir_.path() / "nvml-state.limits");
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  test::ScratchDir dir_;
  std::string cgroup_;
};

TEST_F(MemoryLimitsTest, ASetLimitReadsBackAndNamesTheCgroupItWasSetOn) {
  auto m = Open();
  ASSERT_NE(m, nullptr);
  EXPECT_TRUE(m->HasLimitCalls());
  EXPECT_EQ(m->DriverVersion(), "615.71.09");
  ASSERT_TRUE(m->Set(kUuid0, cgroup_, 0, 8192 * kMiB).has_value());
  auto read = m->Get(kUuid0, cgroup_);
  ASSERT_TRUE(read.has_value()) << read.error().message;
  EXPECT_EQ(read->hard_bytes, 8192 * kMiB);
  EXPECT_EQ(read->soft_bytes, 0u);
  EXPECT_TRUE(Contains(Calls(), std::string("set|") + kUuid0 + "|" + cgroup_ + "|0|8589934592|"))
      << Calls();
}

TEST_F(MemoryLimitsTest, ClearingRemovesTheLimitAndAGoneCgroupHasNone) {
  auto m = Open();
  ASSERT_NE(m, nullptr);
  ASSERT_TRUE(m->Set(kUuid0, cgroup_, 1024 * kMiB, 4096 * kMiB).has_value());
  ASSERT_TRUE(m->Clear(kUuid0, cgroup_).has_value());
  auto cleared = m->Get(kUuid0, cgroup_);
  ASSERT_FALSE(cleared.has_value());
  EXPECT_EQ(cleared.error().code, core::ErrorCode::kNotFound);
  ASSERT_TRUE(m->Set(kUuid0, cgroup_, 0, 4096 * kMiB).has_value());
  std::filesystem::remove(cgroup_);  // the runtime removed the container's cgroup
  auto gone = m->Get(kUuid0, cgroup_);
  ASSERT_FALSE(gone.has_value());
  EXPECT_EQ(gone.error().code, core::ErrorCode::kNotFound);
}

TEST_F(MemoryLimitsTest, RefusesWhatNvidiaDocumentsAsRefused) {
  auto m = Open();
  ASSERT_NE(m, nullptr);
  // A MIG handle: NOT_SUPPORTED, for setting and for reading.
  auto mig = m->Set(kUuid1, cgroup_, 0, kMiB);
  ASSERT_FALSE(mig.has_value());
  EXPECT_EQ(mig.error().code, core::ErrorCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(mig.error().message, "Not Supported (3)")) << mig.error().message;
  EXPECT_TRUE(Contains(mig.error().message, kUuid1)) << mig.error().message;
  EXPECT_EQ(m->MigEnabled(kUuid1).value_or(false), true);
  EXPECT_EQ(m->MigEnabled(kUuid0).value_or(true), false);
  // soft above hard; more than the GPU has; a cgroup that does not exist; an unknown GPU.
  EXPECT_EQ(m->Set(kUuid0, cgroup_, 2 * kMiB, kMiB).error().code,
            core::ErrorCode::kInvalidArgument);
  EXPECT_EQ(m->Set(kUuid0, cgroup_, 0, 81560 * kMiB).error().code,
            core::ErrorCode::kInvalidArgument);
  auto missing = m->Set(kUuid0, cgroup_ + "-gone", 0, kMiB);
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().code, core::ErrorCode::kIo);
  EXPECT_TRUE(Contains(missing.error().message, cgroup_ + "-gone")) << missing.error().message;
  EXPECT_EQ(m->Set("GPU-nope", cgroup_, 0, kMiB).error().code, core::ErrorCode::kNotFound);
  EXPECT_EQ(Calls(), "") << "nothing refused was recorded";
}

TEST_F(MemoryLimitsTest, AnOldDriverOpensButHasNoLimitCalls) {
  auto m = Open(GPUMUX_FAKE_NVML_LEGACY_LIB);
  ASSERT_NE(m, nullptr);
  EXPECT_FALSE(m->HasLimitCalls());
  EXPECT_EQ(m->DriverVersion(), "535.54.03");
  auto set = m->Set(kUuid0, cgroup_, 0, kMiB);
  ASSERT_FALSE(set.has_value());
  EXPECT_EQ(set.error().code, core::ErrorCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(set.error().message, "nvmlDeviceSetMemoryLimits_v1")) << set.error().message;
  EXPECT_TRUE(Contains(set.error().message, "r615")) << set.error().message;
}

TEST_F(MemoryLimitsTest, NoLibraryIsNotFound) {
  auto m = OpenMemoryLimits((dir_.path() / "libnvidia-ml-missing.so").string());
  ASSERT_FALSE(m.has_value());
  EXPECT_EQ(m.error().code, core::ErrorCode::kNotFound);
}

}  // namespace
}  // namespace gpumux::gpu
