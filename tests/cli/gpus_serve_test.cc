// `gpumux gpus --serve`: Houdini's /gpus view from a real process on a loopback port.
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "tests/testing/process.h"

namespace gpumux::cli {
namespace {

using nlohmann::json;

int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

class GpusServeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/gpumux-gpus-serve-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    scratch_ = pattern;
    std::filesystem::create_directories(scratch_ / "dev");
    std::ofstream(scratch_ / "gpus.csv") << "index,uuid,model,memory_mib\n"
                                            "0,GPU-aaaa,NVIDIA A100-SXM4-80GB,81920\n"
                                            "1,GPU-bbbb,NVIDIA A100-SXM4-80GB,81920\n";
  }
  void TearDown() override {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      const test::ProcessExit e = test::WaitProcess(pid_);
      EXPECT_TRUE(e.Exited(0)) << test::ReadFileText(scratch_ / "err");
    }
    std::filesystem::remove_all(scratch_);
  }

  // Starts `gpumux gpus --serve` with the environment and waits until it answers /healthz.
  httplib::Client Start(std::vector<std::string> args, std::vector<std::string> env) {
    port_ = FreePort();
    std::vector<std::string> argv{GPUMUX_BINARY, "gpus", "--serve",
                                  "127.0.0.1:" + std::to_string(port_)};
    argv.insert(argv.end(), args.begin(), args.end());
    env.push_back("GPUMUX_DEV_DIR=" + (scratch_ / "dev").string());
    pid_ = test::StartProcess({argv,
                               env,
                               {"NVIDIA_VISIBLE_DEVICES", "GPUMUX_GPUS_FILE", "GPUMUX_GPU_UUIDS",
                                "GPUMUX_GPU_INDICES", "GPUMUX_GPUS", "HOUDINI_GPU_REQUESTED"},
                               "",
                               "",
                               (scratch_ / "err").string()});
    httplib::Client client("127.0.0.1", port_);
    for (int i = 0; i < 500 && !client.Get("/healthz"); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return client;
  }

  std::filesystem::path scratch_;
  pid_t pid_ = -1;
  int port_ = 0;
};

TEST_F(GpusServeTest, ReportsTheServicesGpuVariablesAndTheGpusNvidiaVisibleDevicesLeavesIt) {
  httplib::Client client =
      Start({"--backend", "fake", "--gpus-file", (scratch_ / "gpus.csv").string()},
            {"NVIDIA_VISIBLE_DEVICES=GPU-bbbb", "HOUDINI_GPU_REQUESTED=1", "UNRELATED=x"});
  auto res = client.Get("/gpus");
  ASSERT_TRUE(res) << test::ReadFileText(scratch_ / "err");
  ASSERT_EQ(res->status, 200);
  const json view = json::parse(res->body);
  EXPECT_EQ(view["environment"]["HOUDINI_GPU_REQUESTED"], "1");
  EXPECT_EQ(view["environment"]["NVIDIA_VISIBLE_DEVICES"], "GPU-bbbb");
  EXPECT_FALSE(view["environment"].contains("UNRELATED"));
  EXPECT_EQ(view["nvidia_smi_L"], json::array({"GPU 1: NVIDIA A100-SXM4-80GB (UUID: GPU-bbbb)"}));
  EXPECT_FALSE(view["service"].get<std::string>().empty());
  auto text = client.Get("/gpus?format=text");
  ASSERT_TRUE(text);
  EXPECT_NE(text->body.find("NVIDIA_VISIBLE_DEVICES=GPU-bbbb\nGPU 1: NVIDIA A100-SXM4-80GB "
                            "(UUID: GPU-bbbb)\n"),
            std::string::npos)
      << text->body;
}

TEST_F(GpusServeTest, InAContainerItSeesTheDeviceNodesItWasGivenWithTheGrantsUuids) {
  // As the runtime hook leaves a container: its GPU's device node, and the grant's variables.
  ASSERT_EQ(mknod((scratch_ / "dev" / "nvidia1").c_str(), S_IFCHR | 0666, makedev(195, 1)), 0);
  httplib::Client client =
      Start({}, {"NVIDIA_VISIBLE_DEVICES=GPU-bbbb", "GPUMUX_GPUS=1", "GPUMUX_GPU_UUIDS=GPU-bbbb"});
  auto res = client.Get("/gpus");
  ASSERT_TRUE(res) << test::ReadFileText(scratch_ / "err");
  const json view = json::parse(res->body);
  EXPECT_EQ(view["nvidia_smi_L"], json::array({"GPU 1: NVIDIA GPU (UUID: GPU-bbbb)"}));
  // A device node that appears later is seen at the next request.
  ASSERT_EQ(mknod((scratch_ / "dev" / "nvidia0").c_str(), S_IFCHR | 0666, makedev(195, 0)), 0);
  res = client.Get("/gpus");
  ASSERT_TRUE(res);
  EXPECT_EQ(json::parse(res->body)["gpus"].size(), 2u);
}

TEST_F(GpusServeTest, BadUsageIsRefusedBeforeServing) {
  struct Case {
    std::vector<std::string> args;
    std::string err;
  };
  for (const Case& c : std::vector<Case>{
           {{"--serve", "nowhere"}, "gpumux gpus: --serve must be HOST:PORT, not 'nowhere'"},
           {{"--serve", "127.0.0.1:0", "--json"}, "do not apply with --serve"},
           {{"--serve", "127.0.0.1:0", "--backend", "fake", "--gpus-file", "/nonexistent.csv"},
            "/nonexistent.csv"}}) {
    std::vector<std::string> argv{GPUMUX_BINARY, "gpus"};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    const test::Captured r = test::RunCaptured({argv}, scratch_, "bad");
    EXPECT_TRUE(r.exit.Exited(2)) << r.err;
    EXPECT_NE(r.err.find(c.err), std::string::npos) << r.err;
  }
}

}  // namespace
}  // namespace gpumux::cli
