// The device plugin's enforcement (deviceplugin/enforcement.h) without a GPU: the NVML stand-in
// (tests/gpu/fake_nvml.cc), a prepared cgroup v2 tree, a CDI folder and a stand-in HAMi-core
// library in a scratch folder. What Allocate adds to a shared container, per backend; that a
// runtime which did not run the hook turns memory partitioning off; the published record.
#include "gpumux/deviceplugin/enforcement.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "gpumux/deviceplugin/node_agent.h"
#include "gpumux/isolation/limits.h"
#include "tests/testing/builders.h"
#include "tests/testing/process.h"

namespace gpumux::deviceplugin {
namespace {

namespace fs = std::filesystem;
constexpr const char* kUuid0 = "GPU-dddd0000-1111-2222-3333-444455556666";
constexpr const char* kUuid1 = "GPU-eeee0000-1111-2222-3333-444455556666";

class EnforcerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(dir_.path() / "cgroup");
    std::ofstream(dir_.path() / "cgroup" / "cgroup.controllers") << "memory\n";
    dir_.Write("nvml-state", std::string("gpu=") + kUuid0 + "|NVIDIA H100|81559|0|0|0|0||\n" +
                                 "gpu=" + kUuid1 + "|NVIDIA H100|81559|0|1|0|0||\n");
    ::setenv("GPUMUX_FAKE_NVML", (dir_.path() / "nvml-state").c_str(), 1);
    hami_ = dir_.Write("libvgpu.so", "a stand-in: never loaded here\n");
  }
  void TearDown() override { ::unsetenv("GPUMUX_FAKE_NVML"); }

  EnforcementOptions Options() const {
    EnforcementOptions o;
    o.nvml_library = GPUMUX_FAKE_NVML_LIB;
    o.cgroup_root = (dir_.path() / "cgroup").string();
    o.state_dir = (dir_.path() / "state").string();
    isolation::HookSettings hook;
    hook.spec_dir = (dir_.path() / "cdi").string();
    hook.command = {"/opt/gpumux/gpumux"};
    o.hook = hook;
    return o;
  }
  std::unique_ptr<Enforcer> Make(EnforcementOptions o) const {
    return Enforcer::Create(std::move(o), {{0, kUuid0, 0}, {1, kUuid1, 1}});
  }
  static kube::ContainerGrant Share(std::int64_t mib, std::int64_t milli, bool milli_asked = true) {
    kube::ContainerGrant g;
    g.name = "main";
    g.gpus = {{0, kUuid0}};
    g.gpu_mem_mib = mib;
    g.gpu_milli = milli;
    g.milli_requested = milli_asked;
    return g;
  }
  const GrantContext context_{"ml", "train", "uid-1", "node-1", "fgd"};
  test::ScratchDir dir_;
  std::string hami_;
};

TEST_F(EnforcerTest, APartitionedShareGetsTheHooksCdiDeviceAndAWholeGpuNothing) {
  auto e = Make(Options());
  const auto current = e->Current();
  ASSERT_EQ(current.size(), 2u);
  EXPECT_EQ(current[0].memory, kube::MemoryEnforcement::kHard) << current[0].note;
  auto edits = e->Edits(context_, Share(8192, 250));
  ASSERT_TRUE(edits.has_value()) << edits.error().message;
  EXPECT_EQ(edits->cdi_devices, std::vector<std::string>{"gpumux.io/enforce=uid-1_main"});
  EXPECT_TRUE(edits->mounts.empty());
  EXPECT_TRUE(edits->envs.empty());
  const auto spec = nlohmann::json::parse(
      test::ReadFileText(dir_.path() / "cdi" / "gpumux.io-enforce_uid-1_main.json"));
  const auto args =
      spec["devices"][0]["containerEdits"]["hooks"][0]["args"].get<std::vector<std::string>>();
  EXPECT_NE(std::find(args.begin(), args.end(), std::string(kUuid0) + "=8192:0"), args.end());
  kube::ContainerGrant whole = Share(0, 1000);
  whole.exclusive = true;
  EXPECT_TRUE(e->Edits(context_, whole)->cdi_devices.empty());
  EXPECT_TRUE(e->Edits(context_, Share(0, 250))->cdi_devices.empty())
      << "a share without a memory grant has nothing to be held to";
}

TEST_F(EnforcerTest, TheSoftLimitIsTheConfiguredShareOfTheHardOne) {
  EnforcementOptions o = Options();
  o.soft_limit_percent = 50;
  ASSERT_TRUE(Make(o)->Edits(context_, Share(8192, 250)).has_value());
  const std::string spec =
      test::ReadFileText(dir_.path() / "cdi" / "gpumux.io-enforce_uid-1_main.json");
  EXPECT_NE(spec.find(std::string(kUuid0) + "=8192:4096"), std::string::npos) << spec;
}

TEST_F(EnforcerTest, HamiCoreGetsItsLibraryPreloadedAndExactlyHamisVariables) {
  EnforcementOptions o = Options();
  o.allowed = {isolation::kHamiCore};
  o.hami_core_library = hami_;
  auto e = Make(o);
  EXPECT_EQ(e->Current()[0].compute, kube::ComputeEnforcement::kHamiCore);
  auto edits = e->Edits(context_, Share(8192, 250));
  ASSERT_TRUE(edits.has_value()) << edits.error().message;
  EXPECT_TRUE(edits->cdi_devices.empty());
  EXPECT_EQ(edits->envs, (std::map<std::string, std::string>{
                             {"CUDA_DEVICE_MEMORY_LIMIT_0", "8192m"},
                             {"CUDA_DEVICE_SM_LIMIT", "25"},
                             {"CUDA_DEVICE_MEMORY_SHARED_CACHE", "/tmp/gpumux-vgpu/vgpu.cache"}}));
  const std::string state = (dir_.path() / "state" / "hami-core").string();
  ASSERT_EQ(edits->mounts.size(), 4u);
  EXPECT_EQ(edits->mounts[0].host_path, hami_);
  EXPECT_EQ(edits->mounts[0].container_path, "/usr/local/vgpu/libvgpu.so");
  EXPECT_TRUE(edits->mounts[0].read_only);
  EXPECT_EQ(edits->mounts[1].container_path, "/etc/ld.so.preload");
  EXPECT_TRUE(edits->mounts[1].read_only);
  EXPECT_EQ(test::ReadFileText(edits->mounts[1].host_path), "/usr/local/vgpu/libvgpu.so\n");
  EXPECT_EQ(edits->mounts[2].host_path, state + "/containers/uid-1_main");
  EXPECT_EQ(edits->mounts[2].container_path, "/tmp/gpumux-vgpu");
  EXPECT_FALSE(edits->mounts[2].read_only);
  EXPECT_EQ(edits->mounts[3].container_path, "/tmp/vgpulock");
  EXPECT_TRUE(fs::is_directory(edits->mounts[2].host_path));
  // A share without a compute ask gets no SM limit; the folder goes with its pod.
  EXPECT_FALSE(e->Edits(context_, Share(8192, 1, false))->envs.contains("CUDA_DEVICE_SM_LIMIT"));
  const auto removed = e->Maintain(std::set<std::string>{"another-pod"});
  EXPECT_FALSE(fs::exists(state + "/containers/uid-1_main"));
  EXPECT_FALSE(removed.empty());
}

TEST_F(EnforcerTest, ARuntimeThatDidNotRunTheHookTurnsPartitioningOffAndSaysSo) {
  auto e = Make(Options());
  ASSERT_TRUE(e->Edits(context_, Share(8192, 250)).has_value());  // the spec is written
  // The container runs, but no limit was recorded for it: the runtime ignored the CDI device.
  const std::vector<Handshake::RunningShare> running = {{"uid-1", "ml/train", "main", {0}}};
  const auto said = e->Maintain(std::nullopt, running);
  ASSERT_EQ(said.size(), 1u);
  EXPECT_NE(said[0].find("without running its CDI hook"), std::string::npos) << said[0];
  EXPECT_TRUE(e->Rediscover());
  const auto now = e->Current();
  EXPECT_EQ(now[0].memory, kube::MemoryEnforcement::kNone);
  EXPECT_NE(now[0].note.find("ml/train/main"), std::string::npos) << now[0].note;
  EXPECT_TRUE(e->Edits(context_, Share(8192, 250))->cdi_devices.empty());
}

TEST_F(EnforcerTest, AContainerWithItsLimitRecordedIsNoSignOfTrouble) {
  auto e = Make(Options());
  ASSERT_TRUE(e->Edits(context_, Share(8192, 250)).has_value());
  isolation::LimitRecords records((dir_.path() / "state").string());
  fs::create_directories(dir_.path() / "cgroup" / "c1");
  ASSERT_TRUE(records.Put({"c1",
                           "ml/train",
                           "uid-1",
                           "main",
                           (dir_.path() / "cgroup" / "c1").string(),
                           "applied",
                           {{kUuid0, 8192, 0}},
                           0}));
  EXPECT_TRUE(e->Maintain(std::nullopt, {{"uid-1", "ml/train", "main", {0}}}).empty());
  EXPECT_FALSE(e->Rediscover());
  EXPECT_EQ(e->recorded_limits(), 1);
}

// The records are judged by the host's cgroups as this process sees them: a record whose cgroup
// is gone from the hierarchy at --cgroup-root is reclaimed; without that hierarchy (a DaemonSet
// missing its mount) nothing is, rather than every record at once.
TEST_F(EnforcerTest, RecordsAreReclaimedOnlyWhereTheCgroupHierarchyIsSeen) {
  isolation::LimitRecords records((dir_.path() / "state").string());
  const std::string gone = (dir_.path() / "cgroup" / "gone").string();
  ASSERT_TRUE(
      records.Put({"c-gone", "ml/a", "uid-a", "main", gone, "applied", {{kUuid0, 1, 0}}, 0}));
  EnforcementOptions blind = Options();
  blind.cgroup_root = (dir_.path() / "not-a-cgroup-root").string();
  fs::create_directories(blind.cgroup_root);
  (void)Make(blind)->Maintain(std::nullopt);
  EXPECT_EQ(records.List().size(), 1u) << "kept: the hierarchy is not seen";
  auto e = Make(Options());
  const auto said = e->Maintain(std::nullopt);
  EXPECT_TRUE(records.List().empty());
  EXPECT_EQ(e->reclaimed_total(), 1);
  ASSERT_EQ(said.size(), 1u);
  EXPECT_NE(said[0].find("ml/a/main"), std::string::npos) << said[0];
}

TEST_F(EnforcerTest, TheInventorySaysWhatEachGpuEnforcesNoneIncluded) {
  std::vector<gpu::Gpu> gpus(2);
  gpus[0].index = 0;
  gpus[0].uuid = kUuid0;
  gpus[1].index = 1;
  gpus[1].uuid = kUuid1;
  const auto e = Make(Options());
  auto list = nlohmann::json::parse(InventoryAnnotation(gpus, {true, true}, e->Current()));
  EXPECT_EQ(list[0]["enforcement"]["memory"], "hard");
  EXPECT_EQ(list[0]["enforcement"]["version"], 1);
  list = nlohmann::json::parse(InventoryAnnotation(gpus, {true, true}));
  EXPECT_EQ(list[1]["enforcement"]["memory"], "none");
}

}  // namespace
}  // namespace gpumux::deviceplugin
