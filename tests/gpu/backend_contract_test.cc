// The contract every gpu::Backend keeps, run against each of them (the fake backend, and the
// NVML backend on the stand-in library): a sorted snapshot with unique UUIDs, every XID
// delivered once with its GPU, WaitXid bounded by its timeout, List and WaitXid on two threads.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <set>
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

// Two GPUs, GPU-c0 and GPU-c1, described to one backend, and a way to make XIDs happen.
class Harness {
 public:
  virtual ~Harness() = default;
  virtual std::unique_ptr<Backend> Open() = 0;
  // May run on another thread than the backend's callers (what it writes is replaced
  // atomically).
  virtual void AddXid(int gpu, std::uint64_t xid) = 0;

 protected:
  void Replace(const std::string& name, const std::string& content) {
    test::ReplaceFile(dir_, name, content);
  }
  std::string PathOf(const std::string& name) const { return (dir_.path() / name).string(); }

 private:
  test::ScratchDir dir_;
};

class FakeHarness : public Harness {
 public:
  std::unique_ptr<Backend> Open() override {
    Write();
    auto b = OpenFake(PathOf("gpus.csv"));
    EXPECT_TRUE(b.has_value()) << b.error().message;
    return b ? std::move(*b) : nullptr;
  }
  void AddXid(int gpu, std::uint64_t xid) override {
    std::string& list = xids_[static_cast<std::size_t>(gpu)];
    if (!list.empty()) list += ';';
    list += std::to_string(xid);
    Write();
  }

 private:
  void Write() {
    std::string s = "index,uuid,model,memory_mib,xids\n0,GPU-c0,T4,15360,";
    s += xids_[0];
    s += "\n1,GPU-c1,T4,15360,";
    s += xids_[1];
    s += '\n';
    Replace("gpus.csv", s);
  }
  std::string xids_[2];
};

class NvmlHarness : public Harness {
 public:
  NvmlHarness() {
    state_ = "gpu=GPU-c0|T4|15360|0|0|0|0||\ngpu=GPU-c1|T4|15360|0|1|0|0||\n";
    Replace("nvml-state", state_);
    ::setenv("GPUMUX_FAKE_NVML", PathOf("nvml-state").c_str(), 1);
  }
  ~NvmlHarness() override { ::unsetenv("GPUMUX_FAKE_NVML"); }
  NvmlHarness(const NvmlHarness&) = delete;
  NvmlHarness& operator=(const NvmlHarness&) = delete;

  std::unique_ptr<Backend> Open() override {
    auto b = OpenNvml(GPUMUX_FAKE_NVML_LIB);
    EXPECT_TRUE(b.has_value()) << b.error().message;
    return b ? std::move(*b) : nullptr;
  }
  void AddXid(int gpu, std::uint64_t xid) override {
    state_ += "xid=";
    state_ += std::to_string(gpu);
    state_ += '|';
    state_ += std::to_string(xid);
    state_ += '\n';
    Replace("nvml-state", state_);
  }

 private:
  std::string state_;
};

struct BackendKind {
  const char* name;
  std::function<std::unique_ptr<Harness>()> make;
};

class BackendContract : public ::testing::TestWithParam<BackendKind> {
 protected:
  void SetUp() override {
    harness_ = GetParam().make();
    backend_ = harness_->Open();
    ASSERT_NE(backend_, nullptr);
  }
  // WaitXid until `n` events came or `budget` passed.
  std::vector<XidEvent> Collect(std::size_t n, milliseconds budget) {
    std::vector<XidEvent> seen;
    const auto deadline = Clock::now() + budget;
    while (seen.size() < n && Clock::now() < deadline) {
      auto x = backend_->WaitXid(milliseconds(100));
      EXPECT_TRUE(x.has_value()) << x.error().message;
      if (x) seen.insert(seen.end(), x->begin(), x->end());
    }
    return seen;
  }

  std::unique_ptr<Harness> harness_;
  std::unique_ptr<Backend> backend_;
};

TEST_P(BackendContract, ListsASnapshotSortedByIndexWithUniqueUuids) {
  auto gpus = backend_->List();
  ASSERT_TRUE(gpus.has_value()) << gpus.error().message;
  ASSERT_EQ(gpus->size(), 2u);
  std::set<std::string> uuids;
  for (std::size_t i = 0; i < gpus->size(); ++i) {
    EXPECT_EQ((*gpus)[i].index, static_cast<int>(i));
    EXPECT_FALSE((*gpus)[i].uuid.empty());
    uuids.insert((*gpus)[i].uuid);
    EXPECT_EQ((*gpus)[i].name, "T4");
    EXPECT_EQ((*gpus)[i].memory_total_mib, 15360);
    EXPECT_EQ((*gpus)[i].minor, static_cast<int>(i));
    EXPECT_EQ((*gpus)[i].health, Health::kHealthy);
  }
  EXPECT_EQ(uuids, (std::set<std::string>{"GPU-c0", "GPU-c1"}));
}

TEST_P(BackendContract, AnXidIsDeliveredOnceWithItsGpu) {
  std::thread writer([&] {
    std::this_thread::sleep_for(milliseconds(50));
    harness_->AddXid(1, 79);
  });
  const std::vector<XidEvent> seen = Collect(1, milliseconds(5000));
  writer.join();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].uuid, "GPU-c1");
  EXPECT_EQ(seen[0].xid, 79u);
  auto again = backend_->WaitXid(milliseconds(30));
  ASSERT_TRUE(again.has_value());
  EXPECT_TRUE(again->empty());
}

TEST_P(BackendContract, WaitXidWithNothingToSayReturnsAfterTheTimeout) {
  for (const milliseconds timeout : {milliseconds(0), milliseconds(50)}) {
    const auto start = Clock::now();
    auto xids = backend_->WaitXid(timeout);
    const auto waited = Clock::now() - start;
    ASSERT_TRUE(xids.has_value()) << xids.error().message;
    EXPECT_TRUE(xids->empty());
    EXPECT_GE(waited, timeout);
    EXPECT_LT(waited, timeout + milliseconds(1000));
  }
}

TEST_P(BackendContract, ListAndWaitXidRunOnTwoThreadsAtOnce) {
  std::atomic<bool> stop{false};
  std::atomic<std::size_t> count{0};
  std::vector<XidEvent> seen;  // the waiter's until it is joined
  std::thread waiter([&] {
    while (!stop) {
      auto x = backend_->WaitXid(milliseconds(1500));
      EXPECT_TRUE(x.has_value());
      if (x) seen.insert(seen.end(), x->begin(), x->end());
      count = seen.size();
    }
  });
  // While WaitXid blocks (up to 1.5 s), List() answers promptly; XIDs keep arriving meanwhile.
  for (std::uint64_t i = 1; i <= 20; ++i) {
    harness_->AddXid(static_cast<int>(i % 2), 1000 + i);
    const auto start = Clock::now();
    auto gpus = backend_->List();
    EXPECT_LT(Clock::now() - start, milliseconds(750));
    ASSERT_TRUE(gpus.has_value()) << gpus.error().message;
    EXPECT_EQ(gpus->size(), 2u);
  }
  const auto deadline = Clock::now() + milliseconds(5000);
  while (count < 20 && Clock::now() < deadline) std::this_thread::sleep_for(milliseconds(10));
  stop = true;
  waiter.join();
  ASSERT_EQ(seen.size(), 20u);
  for (std::size_t i = 0; i < seen.size(); ++i) {
    EXPECT_EQ(seen[i].xid, 1001 + i);
    EXPECT_EQ(seen[i].uuid, (i + 1) % 2 == 0 ? "GPU-c0" : "GPU-c1");
  }
}

INSTANTIATE_TEST_SUITE_P(
    Backends, BackendContract,
    ::testing::Values(BackendKind{"fake", [] { return std::make_unique<FakeHarness>(); }},
                      BackendKind{"nvml", [] { return std::make_unique<NvmlHarness>(); }}),
    test::CaseName());

}  // namespace
}  // namespace gpumux::gpu
