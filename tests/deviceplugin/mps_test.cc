// The MPS control daemons the device plugin supervises (mps.h), against a stand-in
// nvidia-cuda-mps-control (tests/testing/mps-control-standin.sh) that records what it is asked;
// and what Allocate hands a shared container (container_env.h).
#include "gpumux/deviceplugin/mps.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace gpumux::deviceplugin {
namespace {

namespace fs = std::filesystem;

const std::string kStandIn =
    std::string(GPUMUX_SOURCE_DIR) + "/tests/testing/mps-control-standin.sh";

class MpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(::testing::TempDir()) / ("mps-" + std::to_string(getpid()));
    fs::remove_all(root_);
  }
  void TearDown() override {
    daemons_.reset();
    fs::remove_all(root_);
  }
  void Make(std::string control = kStandIn) {
    daemons_ = std::make_unique<MpsDaemons>(MpsOptions{std::move(control), root_.string(), nullptr},
                                            std::vector<std::string>{"GPU-a", "GPU-b"});
  }
  std::string Log(const std::string& uuid) const {
    std::ifstream in(root_ / uuid / "log" / "control.log");
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }
  bool Eventually(const std::function<bool()>& done) const {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!done() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return done();
  }
  pid_t DaemonPid(const std::string& uuid) const {
    std::ifstream in(root_ / uuid / "pipe" / "nvidia-cuda-mps-control.pid");
    pid_t pid = -1;
    in >> pid;
    return pid;
  }

  fs::path root_;
  std::unique_ptr<MpsDaemons> daemons_;
};

TEST_F(MpsTest, EachGpuGetsItsOwnDaemonSeeingOnlyThatGpu) {
  Make();
  ASSERT_TRUE(daemons_->Start().has_value());
  for (const std::string uuid : {"GPU-a", "GPU-b"}) {
    ASSERT_TRUE(Eventually([&] { return Log(uuid).find("start") != std::string::npos; }));
    EXPECT_EQ(Log(uuid), "start " + uuid + " " + (root_ / uuid / "pipe").string() + "\n");
    auto folders = daemons_->Folders(uuid);
    ASSERT_TRUE(folders.has_value());
    EXPECT_EQ(folders->pipe, (root_ / uuid / "pipe").string());
    EXPECT_EQ(folders->shm, (root_ / uuid / "shm").string());
  }
  EXPECT_FALSE(daemons_->Folders("GPU-c").has_value());
}

TEST_F(MpsTest, TheDaemonsLimitsRiseToTheLargestShareOnItsGpuAndItsServers) {
  Make();
  ASSERT_TRUE(daemons_->Start().has_value());
  // The daemon logs its start itself, as it runs: before the commands, for the order below.
  ASSERT_TRUE(Eventually([&] { return Log("GPU-a").find("start") != std::string::npos; }));
  ASSERT_TRUE(daemons_->Admit("GPU-a", 8192, 30).has_value());
  ASSERT_TRUE(daemons_->Admit("GPU-a", 4096, 20).has_value());  // smaller: nothing to raise
  ASSERT_TRUE(daemons_->Admit("GPU-a", 16384, 0).has_value());
  const std::string log = Log("GPU-a");
  const std::string want =
      "cmd get_server_list\n"
      "cmd set_default_device_pinned_mem_limit GPU-a 8192M\n"
      "cmd set_device_pinned_mem_limit 4242 GPU-a 8192M\n"
      "cmd set_default_active_thread_percentage 30\n"
      "cmd set_active_thread_percentage 4242 30\n"
      "cmd get_server_list\n"
      "cmd set_default_device_pinned_mem_limit GPU-a 16384M\n"
      "cmd set_device_pinned_mem_limit 4242 GPU-a 16384M\n";
  EXPECT_NE(log.find(want), std::string::npos) << log;
  EXPECT_EQ(Log("GPU-b").find("cmd"), std::string::npos);
}

TEST_F(MpsTest, ADaemonThatExitsIsStartedAgainWithItsLimits) {
  Make();
  ASSERT_TRUE(daemons_->Start().has_value());
  ASSERT_TRUE(Eventually([&] { return DaemonPid("GPU-b") > 0; }));
  ASSERT_TRUE(daemons_->Admit("GPU-b", 2048, 50).has_value());
  ::kill(DaemonPid("GPU-b"), SIGKILL);
  int restarted = 0;
  ASSERT_TRUE(Eventually([&] {
    restarted += daemons_->Check();
    return restarted > 0;
  }));
  EXPECT_EQ(restarted, 1);
  ASSERT_TRUE(Eventually([&] {
    const std::string log = Log("GPU-b");
    return log.rfind("set_active_thread_percentage 4242 50") > log.rfind("start");
  })) << Log("GPU-b");
  EXPECT_TRUE(daemons_->Folders("GPU-b").has_value());
}

TEST_F(MpsTest, StopQuitsEveryDaemonAndTheirFoldersAreNoLongerHandedOut) {
  Make();
  ASSERT_TRUE(daemons_->Start().has_value());
  ASSERT_TRUE(Eventually([&] { return DaemonPid("GPU-a") > 0 && DaemonPid("GPU-b") > 0; }));
  daemons_->Stop();
  EXPECT_NE(Log("GPU-a").find("cmd quit"), std::string::npos);
  EXPECT_FALSE(fs::exists(root_ / "GPU-a" / "pipe" / "nvidia-cuda-mps-control.pid"));
  EXPECT_FALSE(daemons_->Folders("GPU-a").has_value());
}

// shared/reliability-repros/mps-stop-unbounded: a control program whose `quit` hangs (or
// trickles a byte every few seconds, never ending) made Stop take 15 s per GPU, serially, or
// for ever, past the kubelet's 30 s grace. All daemons now quit together under one deadline,
// and whatever is left of them and their clients is killed.
TEST_F(MpsTest, StopEndsWithinItsDeadlineWhateverQuitDoesOnEveryGpu) {
  const fs::path script = root_.parent_path() / ("mps-hang-" + std::to_string(getpid()) + ".sh");
  std::ofstream(script)
      << "#!/bin/sh\n"
         "echo \"$$\" >> \"$CUDA_MPS_LOG_DIRECTORY/pids\"\n"
         "if [ \"$1\" = -f ]; then trap '' TERM INT; while :; do sleep 1; done; fi\n"
         "read -r cmd\n"
         "if [ \"$cmd\" = quit ]; then while :; do printf x; sleep 2; done; fi\n";
  fs::permissions(script, fs::perms::owner_all);
  daemons_ = std::make_unique<MpsDaemons>(MpsOptions{script.string(), root_.string(), nullptr},
                                          std::vector<std::string>{"GPU-a", "GPU-b", "GPU-c"});
  ASSERT_TRUE(daemons_->Start().has_value());
  const auto t0 = std::chrono::steady_clock::now();
  daemons_->Stop();
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_LT(took, std::chrono::seconds(8)) << "three GPUs, one deadline";
  for (const std::string uuid : {"GPU-a", "GPU-b", "GPU-c"}) {
    std::ifstream pids(root_ / uuid / "log" / "pids");
    for (pid_t pid = 0; pids >> pid;) {
      EXPECT_TRUE(Eventually([pid] { return ::kill(pid, 0) != 0; }))
          << uuid << ": process " << pid << " is still there";
    }
  }
  fs::remove(script);
}

TEST_F(MpsTest, AMissingControlProgramIsAnErrorNamingIt) {
  Make("/nonexistent/nvidia-cuda-mps-control");
  auto started = daemons_->Start();
  ASSERT_FALSE(started.has_value());
  EXPECT_NE(started.error().message.find("/nonexistent/nvidia-cuda-mps-control"),
            std::string::npos);
  EXPECT_FALSE(daemons_->Folders("GPU-a").has_value());
}

// MPS v3 (the stand-in speaks it with GPUMUX_MPS_STANDIN_V3 set, as an r615 driver would): each
// shared container gets a namespace of its own whose pipe folder is all it sees, with its limits.
class MpsV3Test : public MpsTest {
 protected:
  void SetUp() override {
    ::setenv("GPUMUX_MPS_STANDIN_V3", "1", 1);
    MpsTest::SetUp();
  }
  void TearDown() override {
    MpsTest::TearDown();
    ::unsetenv("GPUMUX_MPS_STANDIN_V3");
  }
};

TEST_F(MpsTest, ALegacyControlProgramIsDetectedAsSuch) {
  Make();
  EXPECT_EQ(daemons_->Detect(), MpsProtocol::kLegacy);
  ASSERT_TRUE(daemons_->Start().has_value());
  auto folder = daemons_->AdmitContainer("GPU-a", 8192, 30, "uid-1", "main");
  ASSERT_TRUE(folder.has_value()) << folder.error().message;
  EXPECT_FALSE(folder->has_value()) << "legacy MPS: the GPU's own pipe folder";
}

TEST_F(MpsV3Test, EachContainerGetsItsOwnNamespaceWithItsLimitsAndGoesWithItsPod) {
  Make();
  EXPECT_EQ(daemons_->Detect(), MpsProtocol::kNamespaces);
  ASSERT_TRUE(daemons_->Start().has_value());
  ASSERT_TRUE(Eventually([&] {
    return Log("GPU-a").find("server create gpumux") != std::string::npos;
  })) << Log("GPU-a");
  EXPECT_NE(Log("GPU-a").find("start3 GPU-a"), std::string::npos) << Log("GPU-a");
  auto a = daemons_->AdmitContainer("GPU-a", 8192, 30, "uid-1", "main");
  auto b = daemons_->AdmitContainer("GPU-a", 4096, 0, "uid-2", "main");
  ASSERT_TRUE(a.has_value() && a->has_value()) << (a ? "" : a.error().message);
  ASSERT_TRUE(b.has_value() && b->has_value());
  EXPECT_NE(**a, **b) << "two containers, two namespaces";
  EXPECT_EQ(fs::path(**a).parent_path(), root_ / "GPU-a" / "pipe" / "gpumux");
  EXPECT_TRUE(fs::exists(fs::path(**a) / "control"));
  const std::string ns = fs::path(**a).filename().string();
  const std::string log = Log("GPU-a");
  EXPECT_NE(log.find("cmd3 namespace create " + ns + " --server=gpumux"), std::string::npos) << log;
  EXPECT_NE(log.find("cmd3 namespace set " + ns +
                     " --server=gpumux --pinned-memory-limit=8192M --active-thread-percentage=30"),
            std::string::npos)
      << log;
  EXPECT_EQ(log.find("set_default_device_pinned_mem_limit"), std::string::npos)
      << "no server-wide limit under v3";
  // Asked again for the same container (a kubelet retry): the same namespace.
  EXPECT_EQ(**daemons_->AdmitContainer("GPU-a", 8192, 30, "uid-1", "main"), **a);
  // uid-2's pod is gone: its namespace is deleted, uid-1's kept.
  const auto removed = daemons_->Maintain({"uid-1"});
  ASSERT_EQ(removed.size(), 1u);
  EXPECT_FALSE(fs::exists(**b));
  EXPECT_TRUE(fs::exists(**a));
  EXPECT_NE(Log("GPU-a").find("cmd3 namespace delete " + fs::path(**b).filename().string() +
                              " --server=gpumux --force"),
            std::string::npos);
}

TEST_F(MpsV3Test, ARestartedDaemonGetsItsNamespacesBack) {
  Make();
  ASSERT_TRUE(daemons_->Start().has_value());
  ASSERT_TRUE(Eventually([&] { return DaemonPid("GPU-b") > 0; }));
  auto a = daemons_->AdmitContainer("GPU-b", 2048, 50, "uid-9", "main");
  ASSERT_TRUE(a.has_value() && a->has_value());
  const std::string ns = fs::path(**a).filename().string();
  ::kill(DaemonPid("GPU-b"), SIGKILL);
  int restarted = 0;
  ASSERT_TRUE(Eventually([&] {
    restarted += daemons_->Check();
    return restarted > 0;
  }));
  const std::string log = Log("GPU-b");
  const auto again = log.rfind("cmd3 namespace create " + ns);
  ASSERT_NE(again, std::string::npos) << log;
  EXPECT_GT(again, log.rfind("start3")) << log;
  EXPECT_NE(log.find("--active-thread-percentage=50", again), std::string::npos) << log;
}

GrantContext Context() { return {"team", "train", "uid-1", "n1", "fgd"}; }
std::vector<NodeGpu> Gpus() { return {{0, "GPU-a", 0}, {1, "GPU-b", 1}}; }

TEST(ContainerEnvMps, ASharedSingleGpuGrantGetsItsDaemonsFoldersOthersDoNot) {
  InjectOptions inject;
  inject.mps = [](const std::string& uuid) -> std::optional<MpsFolders> {
    return MpsFolders{"/mps/" + uuid + "/pipe", "/mps/" + uuid + "/shm"};
  };
  kube::ContainerGrant shared{"main", {{1, "GPU-b"}}, 300, 8192, true, false};
  auto env = BuildContainerEnv(shared, Context(), Gpus(), inject);
  ASSERT_TRUE(env.has_value());
  EXPECT_EQ(env->envs.at("CUDA_MPS_PIPE_DIRECTORY"), "/tmp/nvidia-mps");
  ASSERT_EQ(env->mounts.size(), 2u);
  EXPECT_EQ(env->mounts[0].host_path, "/mps/GPU-b/pipe");
  EXPECT_EQ(env->mounts[0].container_path, "/tmp/nvidia-mps");
  EXPECT_FALSE(env->mounts[0].read_only);
  EXPECT_EQ(env->mounts[1].container_path, "/dev/shm");
  kube::ContainerGrant whole{"main", {{0, "GPU-a"}}, 1000, 0, false, true};
  kube::ContainerGrant two{"main", {{0, "GPU-a"}, {1, "GPU-b"}}, 300, 8192, true, false};
  for (const auto& g : {whole, two}) {
    auto e = BuildContainerEnv(g, Context(), Gpus(), inject);
    ASSERT_TRUE(e.has_value());
    EXPECT_FALSE(e->envs.contains("CUDA_MPS_PIPE_DIRECTORY"));
    EXPECT_TRUE(e->mounts.empty());
  }
}

TEST(ContainerEnvCoordinator, EveryGrantedContainerGetsTheSocketFolderReadOnly) {
  InjectOptions inject;
  inject.coordinator_dir = "/var/run/gpumux-rig";
  kube::ContainerGrant whole{"main", {{0, "GPU-a"}}, 1000, 0, false, true};
  auto env = BuildContainerEnv(whole, Context(), Gpus(), inject);
  ASSERT_TRUE(env.has_value());
  ASSERT_EQ(env->mounts.size(), 1u);
  EXPECT_EQ(env->mounts[0].host_path, "/var/run/gpumux-rig");
  EXPECT_EQ(env->mounts[0].container_path, "/run/gpumux");
  EXPECT_TRUE(env->mounts[0].read_only);
  EXPECT_EQ(env->envs.at("GPUMUX_COORDINATOR"), "unix:///run/gpumux/coordinator.sock");
}

}  // namespace
}  // namespace gpumux::deviceplugin
