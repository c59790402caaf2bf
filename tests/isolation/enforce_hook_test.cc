// `gpumux enforce` as the container runtime runs it: a setter killed half way leaves nothing
// once its container is gone, and a real runc container started with the hook in its config.json
// (as the CDI spec puts it there) gets its grant as the hard limit on its own cgroup, whatever
// its own environment says, until it stops.
//
// The runc test needs root, runc and a cgroup v2 hierarchy runc puts containers into (this
// project's machines mount cgroup v1 with a unified hierarchy at /sys/fs/cgroup/unified beside
// it: the hook is pointed there with --cgroup-root); it is skipped, with the reason, elsewhere.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "gpumux/isolation/cgroup.h"
#include "gpumux/isolation/limits.h"
#include "tests/testing/builders.h"
#include "tests/testing/process.h"
#include "tests/testing/runc_bundle.h"

namespace gpumux::isolation {
namespace {

namespace fs = std::filesystem;
constexpr const char* kUuid = "GPU-cccc0000-1111-2222-3333-444455556666";

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

class EnforceHook : public ::testing::Test {
 protected:
  void SetUp() override {
    nvml_state_ = dir_.Write(
        "nvml-state", std::string("gpu=") + kUuid + "|NVIDIA H100|81559|0|0|0|0||" + flags_ + "\n");
    state_ = (dir_.path() / "state").string();
  }
  std::string Calls() const { return test::ReadFileText(nvml_state_ + ".limits"); }
  // The hook's command line for one GPU share of `mib`.
  std::vector<std::string> Hook(const std::string& stage, const std::string& cgroup_root,
                                const std::string& proc_root = "/proc") const {
    std::vector<std::string> argv{GPUMUX_BINARY,        "enforce",       stage,
                                  "--state-dir",        state_,          "--nvml-library",
                                  GPUMUX_FAKE_NVML_LIB, "--cgroup-root", cgroup_root,
                                  "--proc-root",        proc_root};
    if (stage == "createRuntime") {
      argv.insert(argv.end(), {"--pod", "ml/train", "--pod-uid", "u1", "--container", "main",
                               "--gpu", std::string(kUuid) + "=8192"});
    }
    return argv;
  }

  std::string flags_;
  test::ScratchDir dir_;
  std::string nvml_state_, state_;
};

class KilledSetter : public EnforceHook {
 protected:
  void SetUp() override {
    flags_ = "hang-after-set";
    EnforceHook::SetUp();
  }
};

TEST_F(KilledSetter, LeavesNothingOnceItsContainerIsGone) {
  const fs::path cgroups = dir_.path() / "cgroup";
  fs::create_directories(cgroups / "kubepods" / "pod-u1" / "ctr-k");
  std::ofstream(cgroups / "cgroup.controllers") << "memory\n";
  fs::create_directories(dir_.path() / "proc" / "4321");
  std::ofstream(dir_.path() / "proc" / "4321" / "cgroup") << "0::/kubepods/pod-u1/ctr-k\n";
  const std::string stdin_file =
      dir_.Write("state.json", R"({"ociVersion":"1.0.2","id":"ctr-k","pid":4321,"bundle":"/b"})");
  test::ProcessSpec spec{
      .argv = Hook("createRuntime", cgroups.string(), (dir_.path() / "proc").string()),
      .set_env = {"GPUMUX_FAKE_NVML=" + nvml_state_},
      .stdin_path = stdin_file};
  const pid_t pid = test::StartProcess(spec);
  ASSERT_GT(pid, 0);
  // The stand-in records the limit, then hangs: the setter is killed right there.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!Contains(Calls(), "ctr-k") && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(Contains(Calls(), "ctr-k")) << "the limit was never set";
  ::kill(pid, SIGKILL);
  EXPECT_EQ(test::WaitProcess(pid).signal, SIGKILL);
  LimitRecords records(state_);
  ASSERT_EQ(records.List().size(), 1u) << "the intent was recorded before the limit was set";
  EXPECT_EQ(records.List()[0].state, "applying");
  // The runtime gives up on a container whose hook died: its cgroup goes; a reconcile (the
  // device plugin's, at start) finds the record and removes it.
  fs::remove(cgroups / "kubepods" / "pod-u1" / "ctr-k");
  const test::Captured r = test::RunCaptured(
      {.argv = Hook("reconcile", cgroups.string()), .set_env = {"GPUMUX_FAKE_NVML=" + nvml_state_}},
      dir_.path(), "reconcile");
  EXPECT_TRUE(r.exit.Exited(0)) << r.err;
  EXPECT_TRUE(Contains(r.out, "reclaimed the limits of ml/train/main")) << r.out;
  EXPECT_TRUE(records.List().empty());
}

// --- a real container --------------------------------------------------------------------------

class RuncEnforce : public EnforceHook {
 protected:
  void SetUp() override {
    EnforceHook::SetUp();
    if (const std::string& reason = test::RuncUnavailableReason(); !reason.empty()) {
      GTEST_SKIP() << reason;
    }
    for (const char* root : {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"}) {
      if (DetectCgroupHierarchy(root).v2) {
        cgroup_root_ = root;
        break;
      }
    }
    if (cgroup_root_.empty())
      GTEST_SKIP() << "no cgroup v2 hierarchy for runc to put containers in";
    active_ = true;
    ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), 0);
    fs::create_directories(root_);
  }
  void TearDown() override {
    if (!active_) return;
    test::RunProcess({.argv = {"runc", "--root", root_.string(), "delete", "--force", id_}});
    // runc removes the container's cgroup, not the parent it made for it, in every hierarchy.
    std::error_code ec;
    for (const auto& h : fs::directory_iterator("/sys/fs/cgroup", ec)) {
      fs::remove(h.path() / parent_.substr(1), ec);
    }
    fs::remove(fs::path("/sys/fs/cgroup") / parent_.substr(1), ec);
    ::prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0);
    while (::waitpid(-1, nullptr, WNOHANG) > 0) {
    }
  }

  std::string cgroup_root_;
  bool active_ = false;
  fs::path root_ = dir_.path() / "runc-root";
  std::string id_ = "gpumux-enforce-" + std::to_string(::getpid());
  std::string parent_ = "/gpumux-enforce-test-" + std::to_string(::getpid());
};

TEST_F(RuncEnforce, TheContainersOwnCgroupHoldsItsGrantWhateverItsEnvironmentSays) {
  // The container clears its environment and asks for more: the limit is on its cgroup.
  const fs::path bundle = dir_.path() / "bundle";
  ASSERT_EQ(test::MakeBusyboxBundle(
                bundle, test::kBusybox,
                {"/bin/sh", "-c", "env -i sh -c 'cat /proc/self/cgroup; sleep 30'"},
                {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=81559M", "GPUMUX_GPU_MEM_MIB=81559"}),
            "");
  nlohmann::json config = nlohmann::json::parse(test::ReadFileText(bundle / "config.json"));
  const std::string cgroup_path = parent_ + "/ctr";
  config["linux"]["cgroupsPath"] = cgroup_path;
  const std::vector<std::string> env{"GPUMUX_FAKE_NVML=" + nvml_state_};
  config["hooks"]["createRuntime"] = {
      {{"path", GPUMUX_BINARY}, {"args", Hook("createRuntime", cgroup_root_)}, {"env", env}}};
  config["hooks"]["poststop"] = {
      {{"path", GPUMUX_BINARY}, {"args", Hook("poststop", cgroup_root_)}, {"env", env}}};
  std::ofstream(bundle / "config.json") << config.dump();
  const test::Captured run =
      test::RunCaptured({.argv = {"runc", "--root", root_.string(), "run", "--detach", "--bundle",
                                  bundle.string(), id_}},
                        dir_.path(), "run");
  ASSERT_TRUE(run.exit.Exited(0)) << run.err;
  const std::string container_cgroup = cgroup_root_ + cgroup_path;
  EXPECT_TRUE(Contains(Calls(), std::string("set|") + kUuid + "|" + container_cgroup + "|0|" +
                                    std::to_string(8192ULL << 20) + "|"))
      << "the container's own cgroup, " << container_cgroup << ", with its grant: " << Calls();
  LimitRecords records(state_);
  ASSERT_EQ(records.List().size(), 1u);
  EXPECT_EQ(records.List()[0].cgroup, container_cgroup);
  EXPECT_EQ(records.List()[0].container_id, id_);
  // Stopped and deleted: poststop clears the limit and the record; the cgroup is gone.
  test::RunProcess({.argv = {"runc", "--root", root_.string(), "kill", id_, "KILL"}});
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  test::ProcessExit deleted;
  do {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    deleted = test::RunProcess({.argv = {"runc", "--root", root_.string(), "delete", id_}});
  } while (!deleted.Exited(0) && std::chrono::steady_clock::now() < deadline);
  ASSERT_TRUE(deleted.Exited(0));
  EXPECT_TRUE(records.List().empty());
  EXPECT_FALSE(FolderExists(container_cgroup));
}

}  // namespace
}  // namespace gpumux::isolation
