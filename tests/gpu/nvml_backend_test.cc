// The NVML backend through its real dlopen path, against tests/gpu/fake_nvml.cc: a library
// with NVML's entry points and C ABI whose GPUs come from a state file ($GPUMUX_FAKE_NVML).
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "gpumux/gpu/backend.h"
#include "tests/gpu/gpu_testing.h"
#include "tests/testing/builders.h"

namespace gpumux::gpu {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

using test::Contains;

constexpr const char* kTwoGpus =
    "gpu=GPU-8f0c0000-1111-2222-3333-444455556666|NVIDIA H100 80GB HBM3|81559|1024|0|37|12|"
    "4242:512,777:-1|\n"
    "gpu=GPU-9a1d0000-1111-2222-3333-444455556666|NVIDIA H100 80GB HBM3|81559|0|1|0|0||\n";
constexpr const char* kUuid0 = "GPU-8f0c0000-1111-2222-3333-444455556666";
constexpr const char* kUuid1 = "GPU-9a1d0000-1111-2222-3333-444455556666";

class NvmlBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    state_ = (dir_.path() / "nvml-state").string();
    SetState(kTwoGpus);
    ::setenv("GPUMUX_FAKE_NVML", state_.c_str(), 1);
  }
  void TearDown() override { ::unsetenv("GPUMUX_FAKE_NVML"); }

  // Replaces the fake library's state atomically (it reads the file on every call).
  void SetState(const std::string& content) { test::ReplaceFile(dir_, "nvml-state", content); }
  std::unique_ptr<Backend> Open(const std::string& library = GPUMUX_FAKE_NVML_LIB) {
    auto b = OpenNvml(library);
    EXPECT_TRUE(b.has_value()) << b.error().message;
    return b ? std::move(*b) : nullptr;
  }

  test::ScratchDir dir_;
  std::string state_;
};

TEST_F(NvmlBackendTest, ListsExactlyWhatTheLibraryDescribes) {
  auto b = Open();
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->Name(), "nvml");
  auto gpus = b->List();
  ASSERT_TRUE(gpus.has_value()) << gpus.error().message;
  ASSERT_EQ(gpus->size(), 2u);
  const Gpu& g = (*gpus)[0];
  EXPECT_EQ(g.index, 0);
  EXPECT_EQ(g.uuid, kUuid0);
  EXPECT_EQ(g.name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(g.memory_total_mib, 81559);
  EXPECT_EQ(g.memory_used_mib, 1024);
  EXPECT_EQ(g.minor, 0);
  EXPECT_EQ(g.utilization_gpu, 37);
  EXPECT_EQ(g.utilization_memory, 12);
  ASSERT_EQ(g.processes.size(), 2u);
  EXPECT_EQ(g.processes[0].pid, 4242u);
  EXPECT_EQ(g.processes[0].used_mib, 512);
  EXPECT_EQ(g.processes[1].pid, 777u);
  EXPECT_EQ(g.processes[1].used_mib, -1);  // NVML_VALUE_NOT_AVAILABLE
  EXPECT_EQ(g.health, Health::kHealthy);
  EXPECT_EQ(g.health_reason, "");
  EXPECT_EQ((*gpus)[1].index, 1);
  EXPECT_EQ((*gpus)[1].uuid, kUuid1);
  EXPECT_EQ((*gpus)[1].minor, 1);
  EXPECT_TRUE((*gpus)[1].processes.empty());
}

TEST_F(NvmlBackendTest, AnOldLibraryWithoutVersionedCallsStillListsProcessesAndXids) {
  auto b = Open(GPUMUX_FAKE_NVML_LEGACY_LIB);
  ASSERT_NE(b, nullptr);
  auto gpus = b->List();
  ASSERT_TRUE(gpus.has_value()) << gpus.error().message;
  ASSERT_EQ((*gpus)[0].processes.size(), 2u);
  EXPECT_EQ((*gpus)[0].processes[0].pid, 4242u);  // v1 records: {pid, usedGpuMemory}
  EXPECT_EQ((*gpus)[0].processes[0].used_mib, 512);
  EXPECT_EQ((*gpus)[0].processes[1].pid, 777u);
  SetState(std::string(kTwoGpus) + "xid=0|48\n");
  auto xids = b->WaitXid(milliseconds(2000));
  ASSERT_TRUE(xids.has_value()) << xids.error().message;
  ASSERT_EQ(xids->size(), 1u);
  EXPECT_EQ((*xids)[0].uuid, kUuid0);
  EXPECT_EQ((*xids)[0].xid, 48u);
}

TEST_F(NvmlBackendTest, ManyProcessesAreFetchedWithALargerBuffer) {
  std::string processes;
  for (int pid = 1000; pid < 1040; ++pid) {
    if (!processes.empty()) processes += ',';
    processes += std::to_string(pid);
    processes += ":100";
  }
  std::string state = "gpu=GPU-a|T4|15360|4000|0|1|1|";
  state += processes;
  state += "|\n";
  SetState(state);
  auto b = Open();
  ASSERT_NE(b, nullptr);
  auto gpus = b->List();
  ASSERT_TRUE(gpus.has_value());
  ASSERT_EQ((*gpus)[0].processes.size(), 40u);
  EXPECT_EQ((*gpus)[0].processes[39].pid, 1039u);
}

TEST_F(NvmlBackendTest, XidEventsComeThroughWaitXidOnceEach) {
  SetState(std::string(kTwoGpus) + "xid=0|13\n");  // before the backend: not delivered
  auto b = Open();
  ASSERT_NE(b, nullptr);
  std::thread writer([&] {
    std::this_thread::sleep_for(milliseconds(50));
    SetState(std::string(kTwoGpus) + "xid=0|13\nxid=1|79\nxid=0|31\n");
  });
  std::vector<XidEvent> seen;
  const auto deadline = Clock::now() + milliseconds(5000);
  while (seen.size() < 2 && Clock::now() < deadline) {
    auto xids = b->WaitXid(milliseconds(500));
    ASSERT_TRUE(xids.has_value()) << xids.error().message;
    seen.insert(seen.end(), xids->begin(), xids->end());
  }
  writer.join();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].uuid, kUuid1);
  EXPECT_EQ(seen[0].xid, 79u);
  EXPECT_EQ(seen[1].uuid, kUuid0);
  EXPECT_EQ(seen[1].xid, 31u);
  auto again = b->WaitXid(milliseconds(20));
  ASSERT_TRUE(again.has_value());
  EXPECT_TRUE(again->empty());
}

TEST_F(NvmlBackendTest, WithoutEventSupportWaitXidJustSleepsTheTimeout) {
  SetState(
      "gpu=GPU-a|T4|15360|0|0|0|0||no-events\n"
      "gpu=GPU-b|T4|15360|0|1|0|0||no-events\n");
  auto b = Open();
  ASSERT_NE(b, nullptr);
  SetState(
      "gpu=GPU-a|T4|15360|0|0|0|0||no-events\n"
      "gpu=GPU-b|T4|15360|0|1|0|0||no-events\nxid=0|79\n");
  const auto start = Clock::now();
  auto xids = b->WaitXid(milliseconds(60));
  ASSERT_TRUE(xids.has_value());
  EXPECT_TRUE(xids->empty());
  EXPECT_GE(Clock::now() - start, milliseconds(55));
  EXPECT_TRUE(b->List().has_value());
}

TEST_F(NvmlBackendTest, AGpuThatIsLostIsUnhealthyAndKeepsItsIdentity) {
  auto b = Open();
  ASSERT_NE(b, nullptr);
  // Lost after OpenNvml read it once: the GPU keeps its UUID, name and memory.
  SetState(
      "gpu=GPU-8f0c0000-1111-2222-3333-444455556666|NVIDIA H100 80GB HBM3|81559|1024|0|37|12||\n"
      "gpu=GPU-9a1d0000-1111-2222-3333-444455556666|NVIDIA H100 80GB HBM3|81559|0|1|0|0||lost\n");
  auto gpus = b->List();
  ASSERT_TRUE(gpus.has_value()) << gpus.error().message;
  ASSERT_EQ(gpus->size(), 2u);
  const Gpu& lost = (*gpus)[1];
  EXPECT_EQ(lost.uuid, kUuid1);
  EXPECT_EQ(lost.name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(lost.memory_total_mib, 81559);
  EXPECT_EQ(lost.memory_used_mib, -1);
  EXPECT_EQ(lost.health, Health::kUnhealthy);
  EXPECT_TRUE(Contains(lost.health_reason, "GPU is lost (15)")) << lost.health_reason;
  EXPECT_EQ((*gpus)[0].health, Health::kHealthy);
}

TEST_F(NvmlBackendTest, AGpuLostBeforeItsUuidWasEverReadIsLeftOut) {
  SetState(
      "gpu=GPU-a|T4|15360|0|0|0|0||lost\n"
      "gpu=GPU-b|T4|15360|0|1|0|0||\n");
  auto b = Open();
  ASSERT_NE(b, nullptr);
  auto gpus = b->List();
  ASSERT_TRUE(gpus.has_value());
  ASSERT_EQ(gpus->size(), 1u);
  EXPECT_EQ((*gpus)[0].uuid, "GPU-b");
  EXPECT_EQ((*gpus)[0].index, 1);
}

TEST_F(NvmlBackendTest, AQueryTheGpuDoesNotSupportLeavesItsFieldUnknown) {
  SetState("gpu=GPU-a|T4|15360|0|0|50|50||no-util\n");
  auto b = Open();
  ASSERT_NE(b, nullptr);
  auto gpus = b->List();
  ASSERT_TRUE(gpus.has_value());
  EXPECT_EQ((*gpus)[0].utilization_gpu, -1);
  EXPECT_EQ((*gpus)[0].utilization_memory, -1);
  EXPECT_EQ((*gpus)[0].health, Health::kHealthy);
}

TEST_F(NvmlBackendTest, TheBackendShutsNvmlDownAndUnloadsIt) {
  void* lib = ::dlopen(GPUMUX_FAKE_NVML_LIB, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << ::dlerror();
  auto live = reinterpret_cast<int (*)()>(::dlsym(lib, "gpumux_fake_nvml_live_inits"));
  ASSERT_NE(live, nullptr);
  const int before = live();
  {
    auto b = Open();
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(live(), before + 1);
  }
  EXPECT_EQ(live(), before);
  ::dlclose(lib);
}

TEST_F(NvmlBackendTest, AMissingLibraryIsAClearErrorNamingIt) {
  const std::string path = (dir_.path() / "libnvidia-ml.so.1").string();
  auto b = OpenNvml(path);
  ASSERT_FALSE(b.has_value());
  EXPECT_EQ(b.error().code, core::ErrorCode::kNotFound);
  EXPECT_TRUE(Contains(b.error().message, path + ": cannot open (")) << b.error().message;
  EXPECT_TRUE(Contains(b.error().message, "is the NVIDIA driver installed?")) << b.error().message;
  EXPECT_TRUE(Contains(b.error().message, "--backend fake")) << b.error().message;
}

TEST_F(NvmlBackendTest, ALibraryThatIsNotNvmlIsRefused) {
  auto b = OpenNvml("libm.so.6");
  ASSERT_FALSE(b.has_value());
  EXPECT_TRUE(Contains(b.error().message, "libm.so.6: has no nvmlInit_v2")) << b.error().message;
}

TEST_F(NvmlBackendTest, AFailedInitSaysWhy) {
  SetState("init_error=9\n");
  auto b = OpenNvml(GPUMUX_FAKE_NVML_LIB);
  ASSERT_FALSE(b.has_value());
  EXPECT_TRUE(Contains(b.error().message, "nvmlInit_v2 failed: Driver Not Loaded (9)"))
      << b.error().message;
}

TEST_F(NvmlBackendTest, AHostWithoutGpusListsNone) {
  auto b = Open();
  ASSERT_NE(b, nullptr);
  SetState("# no GPUs\n");
  auto gpus = b->List();
  ASSERT_TRUE(gpus.has_value());
  EXPECT_TRUE(gpus->empty());
}

TEST_F(NvmlBackendTest, ACountThatFailsIsAnErrorNamingTheCall) {
  auto b = Open();
  ASSERT_NE(b, nullptr);
  SetState(std::string(kTwoGpus) + "count_error=15\n");
  auto gpus = b->List();
  ASSERT_FALSE(gpus.has_value());
  EXPECT_TRUE(Contains(gpus.error().message, "nvmlDeviceGetCount_v2: GPU is lost (15)"))
      << gpus.error().message;
}

}  // namespace
}  // namespace gpumux::gpu
