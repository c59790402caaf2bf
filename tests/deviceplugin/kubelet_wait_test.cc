// What the device plugin says while the kubelet is not there: that it waits for the kubelet's
// socket (naming it), and again once it appears and the plugin registers. The offline try-it of
// the README (`gpumux device-plugin ... --kubelet-dir /tmp/kubelet --offline`) shows exactly this.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gpumux/deviceplugin/plugin.h"
#include "tests/testing/fake_kubelet.h"
#include "tests/testing/process.h"

namespace gpumux::deviceplugin {
namespace {

using namespace std::chrono_literals;

// The plugin's log lines, safe from its threads.
class Lines {
 public:
  void Add(std::string_view line) {
    std::lock_guard lock(mu_);
    lines_.emplace_back(line);
  }
  // Waits up to 10 s for a line containing `text`; how many lines contain it.
  std::size_t WaitFor(const std::string& text) {
    for (int i = 0; i < 1000; ++i) {
      if (const std::size_t n = Count(text); n > 0) return n;
      std::this_thread::sleep_for(10ms);
    }
    return 0;
  }
  std::size_t Count(const std::string& text) const {
    std::lock_guard lock(mu_);
    return static_cast<std::size_t>(
        std::count_if(lines_.begin(), lines_.end(),
                      [&](const std::string& l) { return l.find(text) != std::string::npos; }));
  }
  std::string All() const {
    std::lock_guard lock(mu_);
    std::string out;
    for (const std::string& l : lines_) out += l + "\n";
    return out;
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::string> lines_;
};

TEST(DevicePluginWithoutAKubelet, SaysItWaitsForTheSocketOnceAndThatItRegisteredWhenItCame) {
  test::FakeKubelet kubelet;
  kubelet.Stop();  // no kubelet.sock yet
  const std::string socket = (kubelet.dir() / "kubelet.sock").string();
  Lines log;
  PluginOptions options;
  options.node_name = "n1";
  options.kubelet_dir = kubelet.dir().string();
  options.kubelet_poll = 20ms;
  options.resources = {Resource::kGpu};
  options.log = [&log](std::string_view line) { log.Add(line); };
  auto plugin = DevicePlugin::Create(options, {GpuSlot{0, "GPU-a", 40960, 0, true}}, nullptr);
  ASSERT_TRUE(plugin.has_value()) << plugin.error().message;
  ASSERT_TRUE((*plugin)->Start().has_value());

  EXPECT_EQ(
      log.WaitFor("waiting for the kubelet; registering once its socket appears kubelet_socket=" +
                  socket),
      1u)
      << log.All();
  std::this_thread::sleep_for(100ms);  // several polls
  EXPECT_EQ(log.Count("waiting for the kubelet"), 1u) << "said once, not per poll:\n" << log.All();
  EXPECT_FALSE((*plugin)->registered());

  kubelet.Start();
  ASSERT_TRUE(kubelet.WaitRegistrations(1, 10s));
  EXPECT_EQ(log.WaitFor("the kubelet's socket appeared: registering kubelet_socket=" + socket), 1u)
      << log.All();
  EXPECT_EQ(log.WaitFor("registered with the kubelet resource=gpumux.io/gpu devices=1 "
                        "kubelet_socket=" +
                        socket),
            1u)
      << "one device:\n"
      << log.All();

  // Gone again: said once more, with the same path.
  kubelet.Stop();
  EXPECT_EQ(
      log.WaitFor("the kubelet's socket is gone; registering once it appears kubelet_socket=" +
                  socket),
      1u)
      << log.All();
  (*plugin)->Stop();
}

// The README's offline try-it, as the binary: `gpumux device-plugin --node-name dev --backend
// fake --gpus-file gpus.csv --kubelet-dir DIR --offline` before the kubelet is there.
TEST(DevicePluginWithoutAKubelet, TheOfflineTryItSaysWhatItWaitsForThenThatItRegistered) {
  test::FakeKubelet kubelet;
  kubelet.Stop();
  const std::filesystem::path dir = kubelet.dir();
  const std::string socket = (dir / "kubelet.sock").string();
  std::ofstream(dir / "gpus.csv") << "index,uuid,model,memory_mib\n0,GPU-demo-0,A100,40960\n";
  test::ProcessSpec spec;
  spec.argv = {GPUMUX_BINARY,   "device-plugin", "--node-name", "dev",
               "--backend",     "fake",          "--gpus-file", (dir / "gpus.csv").string(),
               "--kubelet-dir", dir.string(),    "--offline",   "--metrics-address",
               "off",           "--resources",   "gpu"};
  spec.stderr_path = (dir / "plugin.err").string();
  spec.unset_env = {"NODE_NAME", "GPUMUX_STATE_DIR"};
  spec.set_env = {"GPUMUX_STATE_DIR=" + (dir / "state").string()};
  const pid_t pid = test::StartProcess(spec);
  ASSERT_GT(pid, 0);
  const auto err_has = [&](const std::string& text) {
    for (int i = 0; i < 1000; ++i) {
      if (test::ReadFileText(spec.stderr_path).find(text) != std::string::npos) return true;
      std::this_thread::sleep_for(10ms);
    }
    return false;
  };
  EXPECT_TRUE(err_has(
      "waiting for the kubelet; registering once its socket appears kubelet_socket=" + socket))
      << test::ReadFileText(spec.stderr_path);
  kubelet.Start();
  EXPECT_TRUE(kubelet.WaitRegistrations(1, 10s));
  EXPECT_TRUE(err_has("the kubelet's socket appeared: registering kubelet_socket=" + socket))
      << test::ReadFileText(spec.stderr_path);
  EXPECT_TRUE(
      err_has("registered with the kubelet resource=gpumux.io/gpu devices=1 "
              "kubelet_socket=" +
              socket))
      << test::ReadFileText(spec.stderr_path);
  ::kill(pid, SIGTERM);
  EXPECT_TRUE(test::WaitProcess(pid).Exited(0)) << test::ReadFileText(spec.stderr_path);
}

}  // namespace
}  // namespace gpumux::deviceplugin
