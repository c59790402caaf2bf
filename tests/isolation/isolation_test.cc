// The isolation module without a GPU: cgroup v2 detection on prepared trees (a v2 root, a v1 or
// hybrid layout), a process's cgroup from a prepared /proc, per-container limits and their
// records against the NVML stand-in (tests/gpu/fake_nvml.cc), what a node can enforce per GPU
// (the backends' matrix), and the CDI spec of the enforcement hook.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <utime.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "gpumux/isolation/cdi.h"
#include "gpumux/isolation/cgroup.h"
#include "gpumux/isolation/discovery.h"
#include "gpumux/isolation/limits.h"
#include "tests/testing/builders.h"
#include "tests/testing/process.h"

namespace gpumux::isolation {
namespace {

namespace fs = std::filesystem;
constexpr const char* kUuid0 = "GPU-aaaa0000-1111-2222-3333-444455556666";
constexpr const char* kUuid1 = "GPU-bbbb0000-1111-2222-3333-444455556666";
constexpr std::uint64_t kMiB = 1024 * 1024;

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A prepared host: a cgroup v2 tree, a /proc with one process in a container's cgroup, the NVML
// stand-in's state (two GPUs, the second in MIG mode), a state folder.
class Host : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(cgroups_ / "kubepods" / "pod-u1" / "ctr-a");
    std::ofstream(cgroups_ / "cgroup.controllers") << "cpuset cpu io memory pids dmem\n";
    Process(4242, "0::/kubepods/pod-u1/ctr-a\n");
    SetNvml(std::string("gpu=") + kUuid0 + "|NVIDIA H100|81559|0|0|0|0||\n" + "gpu=" + kUuid1 +
            "|NVIDIA H100|81559|0|1|0|0||mig\n");
    ::setenv("GPUMUX_FAKE_NVML", (dir_.path() / "nvml-state").c_str(), 1);
    auto nvml = gpu::OpenMemoryLimits(GPUMUX_FAKE_NVML_LIB);
    ASSERT_TRUE(nvml.has_value()) << nvml.error().message;
    nvml_ = std::move(*nvml);
  }
  void TearDown() override { ::unsetenv("GPUMUX_FAKE_NVML"); }

  void Process(int pid, const std::string& cgroup_file) {
    fs::create_directories(proc_ / std::to_string(pid));
    std::ofstream(proc_ / std::to_string(pid) / "cgroup") << cgroup_file;
  }
  void SetNvml(const std::string& state) { dir_.Write("nvml-state", state); }
  std::string Calls() const { return test::ReadFileText(dir_.path() / "nvml-state.limits"); }
  ApplyRequest Request(std::vector<GpuLimit> gpus) const {
    ApplyRequest r;
    r.container_id = "ctr-a";
    r.pid = 4242;
    r.pod = "ml/train";
    r.pod_uid = "u1";
    r.container = "main";
    r.gpus = std::move(gpus);
    r.proc_root = proc_.string();
    r.cgroup_root = cgroups_.string();
    r.now_unix_s = 1'700'000'000;
    return r;
  }

  test::ScratchDir dir_;
  fs::path cgroups_ = dir_.path() / "cgroup";
  fs::path proc_ = dir_.path() / "proc";
  std::string container_cgroup_ = (cgroups_ / "kubepods" / "pod-u1" / "ctr-a").string();
  std::unique_ptr<gpu::MemoryLimits> nvml_;
  LimitRecords records_{(dir_.path() / "state").string()};
};

// --- cgroups -------------------------------------------------------------------------------------

TEST_F(Host, AFolderWithCgroupControllersIsACgroupV2RootAndItsDmemIsNoted) {
  const CgroupHierarchy h = DetectCgroupHierarchy(cgroups_.string());
  EXPECT_TRUE(h.v2);
  EXPECT_TRUE(h.dmem);
  EXPECT_TRUE(Contains(h.description, "dmem")) << h.description;
}

TEST_F(Host, AHybridLayoutIsNotCgroupV2AtItsRootAndSaysWhereV2Is) {
  const fs::path hybrid = dir_.path() / "hybrid";
  fs::create_directories(hybrid / "memory");
  fs::create_directories(hybrid / "unified");
  std::ofstream(hybrid / "unified" / "cgroup.controllers") << "\n";
  const CgroupHierarchy h = DetectCgroupHierarchy(hybrid.string());
  EXPECT_FALSE(h.v2);
  EXPECT_TRUE(Contains(h.description, "v1 or hybrid")) << h.description;
  EXPECT_TRUE(Contains(h.description, (hybrid / "unified").string())) << h.description;
  const CgroupHierarchy unified = DetectCgroupHierarchy((hybrid / "unified").string());
  EXPECT_TRUE(unified.v2);
  EXPECT_FALSE(unified.dmem);
}

TEST_F(Host, ThisMachinesCgroupLayoutIsReportedAsItIs) {
  // The project's machines mount cgroup v1 with a unified hierarchy beside it: whatever this one
  // has, the report must agree with the presence of /sys/fs/cgroup/cgroup.controllers.
  const CgroupHierarchy h = DetectCgroupHierarchy(kDefaultCgroupRoot);
  EXPECT_EQ(h.v2, fs::exists("/sys/fs/cgroup/cgroup.controllers")) << h.description;
}

TEST_F(Host, AProcessCgroupIsItsUnifiedLineUnderTheRoot) {
  Process(7, "9:name=systemd:/elsewhere\n4:memory:/elsewhere\n0::/kubepods/pod-u1/ctr-a\n");
  auto cgroup = ProcessCgroup(proc_.string(), 7, cgroups_.string());
  ASSERT_TRUE(cgroup.has_value()) << cgroup.error().message;
  EXPECT_EQ(*cgroup, container_cgroup_);
}

TEST_F(Host, AProcessCgroupIsRefusedWhenItCannotBeNamed) {
  Process(8, "4:memory:/x\n");                  // no unified line
  Process(9, "0::/kubepods/pod-u1/missing\n");  // not a folder under the root
  Process(10, "0::/kubepods/../../etc\n");      // not a cgroup path
  EXPECT_EQ(ProcessCgroup(proc_.string(), 8, cgroups_.string()).error().code,
            core::ErrorCode::kFailedPrecondition);
  EXPECT_EQ(ProcessCgroup(proc_.string(), 9, cgroups_.string()).error().code,
            core::ErrorCode::kNotFound);
  EXPECT_EQ(ProcessCgroup(proc_.string(), 10, cgroups_.string()).error().code,
            core::ErrorCode::kInvalidArgument);
  auto gone = ProcessCgroup(proc_.string(), 11, cgroups_.string());
  ASSERT_FALSE(gone.has_value());
  EXPECT_TRUE(Contains(gone.error().message, "process 11")) << gone.error().message;
}

// --- limits
// ----------------------------------------------------------------------------------------

TEST_F(Host, ApplyingSetsTheHardLimitOnTheContainersOwnCgroupAndRecordsIt) {
  auto applied = ApplyLimits(Request({{kUuid0, 8192, 2048}}), *nvml_, records_);
  ASSERT_TRUE(applied.has_value()) << applied.error().message;
  EXPECT_EQ(applied->cgroup, container_cgroup_);
  EXPECT_EQ(applied->state, "applied");
  EXPECT_TRUE(Contains(Calls(), std::string("set|") + kUuid0 + "|" + container_cgroup_ + "|" +
                                    std::to_string(2048 * kMiB) + "|" +
                                    std::to_string(8192 * kMiB) + "|"))
      << Calls();
  auto stored = records_.Get("ctr-a");
  ASSERT_TRUE(stored.has_value() && stored->has_value());
  EXPECT_EQ(**stored, *applied);
  EXPECT_EQ(nvml_->Get(kUuid0, container_cgroup_)->hard_bytes, 8192 * kMiB);
}

// Records are read through core::ParseJson, with a record's own depth (8): a planted file
// nested deeper is named as unreadable and left, never parsed. The ninth level opens at byte 26.
TEST_F(Host, ARecordNestedTooDeepIsNamedUnreadable) {
  ASSERT_TRUE(records_.Put(
      {"ctr-a", "ml/a", "uid-a", "main", container_cgroup_, "applied", {{kUuid0, 1, 0}}, 0}));
  const std::string planted = (dir_.path() / "state" / "limits" / "ctr-deep.json").string();
  std::ofstream(planted) << R"({"version":1,"pod":)" << std::string(10000, '[')
                         << std::string(10000, ']') << "}";
  std::vector<std::string> unreadable;
  const auto listed = records_.List(&unreadable);
  ASSERT_EQ(listed.size(), 1u);
  ASSERT_EQ(unreadable.size(), 1u);
  EXPECT_EQ(unreadable[0], planted + ": nested deeper than 8 levels (at byte 26)");
}

TEST_F(Host, AContainerInTheRootCgroupIsRefusedNotLimitedWithTheWholeNode) {
  Process(4242, "0::/\n");
  auto applied = ApplyLimits(Request({{kUuid0, 8192, 0}}), *nvml_, records_);
  ASSERT_FALSE(applied.has_value());
  EXPECT_TRUE(Contains(applied.error().message, "root cgroup")) << applied.error().message;
  EXPECT_EQ(Calls(), "");
}

TEST_F(Host, AFailureOnOneGpuClearsTheOthersAndLeavesNoRecord) {
  // The second GPU is in MIG mode: NVML refuses its limit after the first one was set.
  auto applied = ApplyLimits(Request({{kUuid0, 8192, 0}, {kUuid1, 8192, 0}}), *nvml_, records_);
  ASSERT_FALSE(applied.has_value());
  EXPECT_TRUE(Contains(applied.error().message, "ml/train")) << applied.error().message;
  EXPECT_TRUE(Contains(applied.error().message, "Not Supported")) << applied.error().message;
  EXPECT_FALSE(nvml_->Get(kUuid0, container_cgroup_).has_value()) << "the first was cleared";
  EXPECT_TRUE(records_.List().empty());
}

TEST_F(Host, ReleasingClearsTheLimitAndRemovesTheRecord) {
  ASSERT_TRUE(ApplyLimits(Request({{kUuid0, 4096, 0}}), *nvml_, records_).has_value());
  ASSERT_TRUE(ReleaseLimits("ctr-a", nvml_.get(), records_).has_value());
  EXPECT_FALSE(nvml_->Get(kUuid0, container_cgroup_).has_value());
  EXPECT_TRUE(records_.List().empty());
  EXPECT_TRUE(ReleaseLimits("ctr-a", nvml_.get(), records_).has_value()) << "twice is fine";
}

TEST_F(Host, ReconcileRemovesOnlyTheRecordsOfContainersThatAreGone) {
  ASSERT_TRUE(ApplyLimits(Request({{kUuid0, 4096, 0}}), *nvml_, records_).has_value());
  fs::create_directories(cgroups_ / "kubepods" / "pod-u2" / "ctr-b");
  Process(5000, "0::/kubepods/pod-u2/ctr-b\n");
  ApplyRequest other = Request({{kUuid0, 2048, 0}});
  other.container_id = "ctr-b";
  other.pid = 5000;
  other.pod = "ml/other";
  ASSERT_TRUE(ApplyLimits(other, *nvml_, records_).has_value());
  fs::remove(cgroups_ / "kubepods" / "pod-u2" / "ctr-b");  // that container is gone
  const ReconcileResult r =
      ReconcileLimits(records_, nvml_.get(), [](const std::string& c) { return FolderExists(c); });
  EXPECT_EQ(r.kept, 1);
  EXPECT_EQ(r.reclaimed, 1);
  ASSERT_EQ(r.reclaimed_names.size(), 1u);
  EXPECT_TRUE(Contains(r.reclaimed_names[0], "ml/other")) << r.reclaimed_names[0];
  ASSERT_EQ(records_.List().size(), 1u);
  EXPECT_EQ(records_.List()[0].container_id, "ctr-a");
}

TEST_F(Host, AnUnreadableRecordIsNamedAndLeftForAPerson) {
  fs::create_directories(dir_.path() / "state" / "limits");
  std::ofstream(dir_.path() / "state" / "limits" / "bad.json") << std::string(100000, '[');
  std::vector<std::string> unreadable;
  EXPECT_TRUE(records_.List(&unreadable).empty());
  ASSERT_EQ(unreadable.size(), 1u);
  EXPECT_TRUE(Contains(unreadable[0], "bad.json")) << unreadable[0];
  EXPECT_TRUE(fs::exists(dir_.path() / "state" / "limits" / "bad.json"));
}

// --- what a node can enforce ---------------------------------------------------------------------

// The backends' matrix, as the stand-ins answer: each row one host, what GPU 0 (and the MIG GPU
// 1) enforce, and why not more.
TEST_F(Host, DiscoveryPicksTheStrongestBackendPerGpuAndSaysWhyNotMore) {
  DiscoveryInput in;
  in.uuids = {kUuid0, kUuid1};
  in.cgroup = DetectCgroupHierarchy(cgroups_.string());
  in.nvml = nvml_.get();
  in.cdi_hook = true;
  auto all = Discover(in);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].memory, kube::MemoryEnforcement::kHard);
  EXPECT_EQ(all[0].backends, std::vector<std::string>{kMemoryPartitioning});
  EXPECT_EQ(all[1].memory, kube::MemoryEnforcement::kNone);
  EXPECT_TRUE(Contains(all[1].note, "MIG mode")) << all[1].note;

  in.mps = true;  // legacy MPS beside partitioning: compute per server, memory still hard
  all = Discover(in);
  EXPECT_EQ(all[0].memory, kube::MemoryEnforcement::kHard);
  EXPECT_EQ(all[0].compute, kube::ComputeEnforcement::kMpsServer);
  EXPECT_EQ(all[1].memory, kube::MemoryEnforcement::kSoft) << "the MIG GPU: MPS only";
  EXPECT_EQ(all[0].Bits(), core::kEnforcesMemory) << "an MPS server's share is not the pod's own";
  in.mps_namespaces = true;  // MPS v3: a namespace per container
  all = Discover(in);
  EXPECT_EQ(all[0].compute, kube::ComputeEnforcement::kMpsNamespace);
  EXPECT_EQ(all[0].Bits(), core::kEnforcesMemory | core::kEnforcesCompute);
  EXPECT_EQ(all[1].compute, kube::ComputeEnforcement::kMpsNamespace);
  in.mps_namespaces = false;

  in.mps = false;
  const fs::path hybrid = dir_.path() / "hybrid";
  fs::create_directories(hybrid / "unified");
  in.cgroup = DetectCgroupHierarchy(hybrid.string());
  all = Discover(in);
  EXPECT_EQ(all[0].memory, kube::MemoryEnforcement::kNone);
  EXPECT_TRUE(Contains(all[0].note, "cgroup v2")) << all[0].note;

  in.cgroup = DetectCgroupHierarchy(cgroups_.string());
  in.cdi_hook = false;
  in.cdi_hook_note = "no --cdi-hook";
  EXPECT_TRUE(Contains(Discover(in)[0].note, "no --cdi-hook"));

  in.cdi_hook = true;
  in.allowed = {kHamiCore};
  in.hami_core_library = "/usr/local/vgpu/libvgpu.so";
  in.hami_core_present = true;
  all = Discover(in);
  EXPECT_EQ(all[0].memory, kube::MemoryEnforcement::kSoft);
  EXPECT_EQ(all[0].compute, kube::ComputeEnforcement::kHamiCore);
  EXPECT_EQ(all[0].Bits(), core::kEnforcesCompute);
  EXPECT_TRUE(Contains(all[0].note, "not in --enforcement")) << all[0].note;

  in.allowed = {};
  all = Discover(in);
  EXPECT_EQ(all[0].memory, kube::MemoryEnforcement::kNone);
  EXPECT_EQ(all[0].compute, kube::ComputeEnforcement::kNone);
}

TEST_F(Host, AnOldDriverOrNoNvmlHasNoPartitioningAndSaysWhy) {
  auto legacy = gpu::OpenMemoryLimits(GPUMUX_FAKE_NVML_LEGACY_LIB);
  ASSERT_TRUE(legacy.has_value());
  DiscoveryInput in;
  in.uuids = {kUuid0};
  in.cgroup = DetectCgroupHierarchy(cgroups_.string());
  in.nvml = legacy->get();
  in.cdi_hook = true;
  auto old = Discover(in);
  EXPECT_EQ(old[0].memory, kube::MemoryEnforcement::kNone);
  EXPECT_TRUE(Contains(old[0].note, "driver 535.54.03")) << old[0].note;
  in.nvml = nullptr;
  in.nvml_error = "libnvidia-ml.so.1: cannot open";
  EXPECT_TRUE(Contains(Discover(in)[0].note, "cannot open"));
  SetNvml(std::string("driver=610.10\ngpu=") + kUuid0 + "|NVIDIA H100|81559|0|0|0|0||\n");
  in.nvml = nvml_.get();
  EXPECT_TRUE(Contains(Discover(in)[0].note, "before r615")) << Discover(in)[0].note;
}

// --- the CDI spec
// -----------------------------------------------------------------------------------

TEST_F(Host, TheSpecRunsTheHookWithTheGrantAtCreateRuntimeAndPoststop) {
  HookSettings s;
  s.spec_dir = (dir_.path() / "cdi").string();
  s.command = {"/opt/gpumux/lib/ld-linux-x86-64.so.2", "--library-path", "/opt/gpumux/lib",
               "/opt/gpumux/gpumux"};
  s.state_dir = "/var/lib/gpumux";
  auto device = WriteEnforcementSpec(s, {"ml", "train", "5f1e-u1", "main", {{kUuid0, 8192, 0}}});
  ASSERT_TRUE(device.has_value()) << device.error().message;
  EXPECT_EQ(*device, "gpumux.io/enforce=5f1e-u1_main");
  EXPECT_TRUE(SpecExists(s.spec_dir, "5f1e-u1", "main"));
  const auto spec = nlohmann::json::parse(
      test::ReadFileText(fs::path(s.spec_dir) / "gpumux.io-enforce_5f1e-u1_main.json"));
  EXPECT_EQ(spec["kind"], "gpumux.io/enforce");
  const auto& edits = spec["devices"][0]["containerEdits"];
  ASSERT_EQ(edits["hooks"].size(), 2u);
  EXPECT_EQ(edits["hooks"][0]["hookName"], "createRuntime");
  EXPECT_EQ(edits["hooks"][0]["path"], s.command[0]);
  const auto args = edits["hooks"][0]["args"].get<std::vector<std::string>>();
  const std::vector<std::string> head(args.begin(), args.begin() + 6);
  EXPECT_EQ(head, (std::vector<std::string>{s.command[0], "--library-path", "/opt/gpumux/lib",
                                            "/opt/gpumux/gpumux", "enforce", "createRuntime"}));
  EXPECT_NE(std::find(args.begin(), args.end(), std::string(kUuid0) + "=8192:0"), args.end());
  EXPECT_EQ(edits["hooks"][1]["hookName"], "poststop");
  // A name that cannot be a CDI device is refused, not mangled.
  EXPECT_FALSE(WriteEnforcementSpec(s, {"ml", "x", "uid_with_underscore", "main", {{kUuid0, 1, 0}}})
                   .has_value());
}

TEST_F(Host, StaleSpecsOfGonePodsAreRemovedOnceOldEnough) {
  HookSettings s;
  s.spec_dir = (dir_.path() / "cdi").string();
  s.command = {"/opt/gpumux/gpumux"};
  ASSERT_TRUE(WriteEnforcementSpec(s, {"ml", "a", "live-uid", "main", {{kUuid0, 1, 0}}}));
  ASSERT_TRUE(WriteEnforcementSpec(s, {"ml", "b", "gone-uid", "main", {{kUuid0, 1, 0}}}));
  ASSERT_TRUE(WriteEnforcementSpec(s, {"ml", "c", "new-uid", "main", {{kUuid0, 1, 0}}}));
  for (const char* old : {"live-uid", "gone-uid"}) {
    const std::string f = s.spec_dir + "/gpumux.io-enforce_" + old + "_main.json";
    utimbuf t{1'000'000'000, 1'000'000'000};
    ASSERT_EQ(::utime(f.c_str(), &t), 0);
  }
  const auto removed = RemoveStaleSpecs(
      s.spec_dir, [](const std::string& uid) { return uid == "live-uid"; }, 60);
  EXPECT_EQ(removed, std::vector<std::string>{"gpumux.io-enforce_gone-uid_main.json"});
  EXPECT_TRUE(SpecExists(s.spec_dir, "new-uid", "main")) << "too young to be judged";
}

TEST_F(Host, TheInstalledHookRunsWithItsOwnLibraries) {
  // The test binary stands for gpumux: what is copied is the running program and what it was
  // started with; the command it returns runs it from the copy.
  auto command = InstallSelf((dir_.path() / "hook").string());
  ASSERT_TRUE(command.has_value()) << command.error().message;
  ASSERT_FALSE(command->empty());
  EXPECT_TRUE(fs::exists(dir_.path() / "hook" / "gpumux"));
  std::vector<std::string> argv = *command;
  argv.push_back("--gtest_list_tests");
  argv.push_back("--gtest_filter=Host.TheInstalledHookRunsWithItsOwnLibraries");
  const test::Captured run = test::RunCaptured({.argv = argv}, dir_.path(), "installed");
  EXPECT_TRUE(run.exit.Exited(0)) << run.err;
  EXPECT_TRUE(Contains(run.out, "TheInstalledHookRunsWithItsOwnLibraries")) << run.out;
}

}  // namespace
}  // namespace gpumux::isolation
