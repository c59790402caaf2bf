// The MPS control daemons the device plugin supervises (mps.h), against a stand-in
// nvidia-cuda-mps-control (tests/testing/mps-control-standin.sh) that records what it is asked;
// and what Allocate hands a shared container (container_env.h).
#include "gpumux/deviceplugin/mps.h"

#include <gtest/gtest.h>
#include <signal.h>
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

TEST_F(MpsTest, AMissingControlProgramIsAnErrorNamingIt) {
  Make("/nonexistent/nvidia-cuda-mps-control");
  auto started = daemons_->Start();
  ASSERT_FALSE(started.has_value());
  EXPECT_NE(started.error().message.find("/nonexistent/nvidia-cuda-mps-control"),
            std::string::npos);
  EXPECT_FALSE(daemons_->Folders("GPU-a").has_value());
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
