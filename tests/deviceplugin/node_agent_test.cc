// The node agent (what `gpumux device-plugin` runs) with the fake GPU backend: the inventory
// published on the node, health from the backend's file and from XID events reaching the
// kubelet and the annotation, /readyz and /metrics; and the `gpumux device-plugin` binary.
#include "gpumux/deviceplugin/node_agent.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>

#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "gpumux/kube/node_lock.h"
#include "gpumux/kube/objects.h"
#include "tests/hook/hook_fixtures.h"
#include "tests/testing/fake_apiserver.h"
#include "tests/testing/fake_kubelet.h"
#include "tests/testing/kube_fixtures.h"
#include "tests/testing/process.h"

namespace gpumux::deviceplugin {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

// A fake backend file, rewritten atomically (rename) as the backend asks.
class GpuFile {
 public:
  GpuFile() {
    std::string name = "gpumux-gpus-";
    name += std::to_string(::getpid());
    name += '-';
    name += std::to_string(counter_++);
    path_ = std::filesystem::temp_directory_path() / (name + ".csv");
    Write({"healthy", "healthy"}, {"", ""});
  }
  ~GpuFile() {
    std::error_code ec;
    std::filesystem::remove(path_, ec);
  }
  void Write(const std::vector<std::string>& health, const std::vector<std::string>& xids) {
    const auto tmp = path_.string() + ".tmp";
    {
      std::ofstream out(tmp);
      out << "index,uuid,model,memory_mib,minor,health,xids\n";
      for (std::size_t i = 0; i < health.size(); ++i) {
        out << i << ",GPU-n1-" << i << ",NVIDIA A100-SXM4-40GB,40960," << i << "," << health[i]
            << "," << xids[i] << "\n";
      }
    }
    std::filesystem::rename(tmp, path_);
  }
  std::string path() const { return path_.string(); }

 private:
  static inline int counter_ = 0;
  std::filesystem::path path_;
};

json Annotations(const test::FakeApiServer& server) {
  return (*server.GetNode("n1"))["metadata"]["annotations"];
}

template <typename F>
bool Eventually(F predicate, std::chrono::milliseconds timeout = 10s) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (predicate()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return predicate();
}

TEST(NodeAgent, PublishesTheInventoryAndFollowsHealthFromTheBackendAndXids) {
  GpuFile file;
  test::FakeApiServer server;
  json node = kube::testing::NodeJson("n1", 0);
  node["metadata"]["annotations"] = json::object();
  server.AddNode(node);
  kube::ClientConfig config;
  config.server = server.url();
  auto api = kube::MakeCurlClient(config);
  test::FakeKubelet kubelet;
  NodeAgentOptions options;
  options.plugin.node_name = "n1";
  options.plugin.kubelet_dir = kubelet.dir().string();
  options.plugin.kubelet_poll = 20ms;
  options.health_interval = 30ms;
  options.health.transient_recovery_ms = 60'000;
  options.metrics_port = 0;
  auto backend = gpu::OpenFake(file.path());
  ASSERT_TRUE(backend.has_value()) << backend.error().message;
  auto agent = NodeAgent::Create(options, std::move(*backend), api.get());
  ASSERT_TRUE(agent.has_value()) << agent.error().message;
  ASSERT_TRUE((*agent)->Start().has_value());
  ASSERT_TRUE(kubelet.WaitRegistrations(3, 10s));

  // The inventory, the unit and the handshake are on the node.
  json a = Annotations(server);
  EXPECT_EQ(a[std::string(kube::kAnnotationHandshake)], "node-lock/v1");
  EXPECT_EQ(a[std::string(kube::kAnnotationGpuMemUnit)], "1024");
  json gpus = json::parse(a[std::string(kube::kAnnotationGpus)].get<std::string>());
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[1]["uuid"], "GPU-n1-1");
  EXPECT_EQ(gpus[1]["model"], "NVIDIA A100-SXM4-40GB");
  EXPECT_EQ(gpus[1]["memory_mib"], 40960);
  EXPECT_EQ(gpus[1]["health"], "Healthy");
  // What the extender reads back from it.
  auto decoded = kube::DecodeNode(*server.GetNode("n1"), {});
  ASSERT_TRUE(decoded.has_value());
  EXPECT_EQ(decoded->spec.gpus.size(), 2u);

  httplib::Client http("127.0.0.1", (*agent)->metrics_port());
  EXPECT_TRUE(Eventually([&] {
    auto r = http.Get("/readyz");
    return r && r->status == 200;
  }));
  EXPECT_EQ(http.Get("/healthz")->status, 200);

  // The backend says GPU 1 is unhealthy: the kubelet and the annotation learn it.
  file.Write({"healthy", "unhealthy"}, {"", ""});
  EXPECT_TRUE(kubelet.WaitDevices(
      "gpumux.io/gpu", [](const auto& d) { return d.size() == 2 && d[1].health == "Unhealthy"; },
      10s));
  EXPECT_TRUE(Eventually([&] {
    json g =
        json::parse(Annotations(server)[std::string(kube::kAnnotationGpus)].get<std::string>());
    return g[1]["health"] == "Unhealthy";
  }));
  // An application XID (13) changes nothing; a fatal one (79) takes GPU 0 out for good.
  file.Write({"healthy", "healthy"}, {"13", ""});
  EXPECT_TRUE(kubelet.WaitDevices(
      "gpumux.io/gpu", [](const auto& d) { return d[1].health == "Healthy"; }, 10s));
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(kubelet.Devices("gpumux.io/gpu")[0].health, "Healthy");
  file.Write({"healthy", "healthy"}, {"13;79", ""});
  EXPECT_TRUE(kubelet.WaitDevices(
      "gpumux.io/gpu", [](const auto& d) { return d[0].health == "Unhealthy"; }, 10s));
  EXPECT_TRUE(kubelet.WaitDevices(
      "gpumux.io/gpu-mem", [](const auto& d) { return d[0].health == "Unhealthy"; }, 10s));

  const std::string metrics = http.Get("/metrics")->body;
  EXPECT_NE(metrics.find("gpumux_device_plugin_gpus{health=\"Unhealthy\"} 1"), std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("gpumux_device_plugin_xid_events_total{class=\"fatal\"} 1"),
            std::string::npos);
  EXPECT_NE(metrics.find("gpumux_device_plugin_xid_events_total{class=\"application\"}"),
            std::string::npos);
  (*agent)->Stop();
  EXPECT_FALSE(std::filesystem::exists(kubelet.dir() / "gpumux-gpu.sock"));
}

TEST(NodeAgent, ReadyzWaitsForTheInventoryToBePublished) {
  GpuFile file;
  test::FakeApiServer server;  // no node n1: every publish fails with 404
  kube::ClientConfig config;
  config.server = server.url();
  auto api = kube::MakeCurlClient(config);
  test::FakeKubelet kubelet;
  NodeAgentOptions options;
  options.plugin.node_name = "n1";
  options.plugin.kubelet_dir = kubelet.dir().string();
  options.plugin.kubelet_poll = 20ms;
  options.health_interval = 30ms;
  options.metrics_port = 0;
  auto agent = NodeAgent::Create(options, std::move(*gpu::OpenFake(file.path())), api.get());
  ASSERT_TRUE(agent.has_value());
  ASSERT_TRUE((*agent)->Start().has_value());
  ASSERT_TRUE(kubelet.WaitRegistrations(3, 10s));
  std::string why;
  EXPECT_FALSE((*agent)->ready(&why));
  EXPECT_NE(why.find("not published"), std::string::npos) << why;
  EXPECT_NE(why.find("404"), std::string::npos) << why;
  // The node appears: the next health round publishes.
  json node = kube::testing::NodeJson("n1", 0);
  node["metadata"]["annotations"] = json::object();
  server.AddNode(node);
  EXPECT_TRUE(Eventually([&] { return (*agent)->ready(); }));
}

// A node "n1" on an in-test API server, a fake kubelet, and an agent for them (Start()).
struct AgentOnANode {
  AgentOnANode() {
    json node = kube::testing::NodeJson("n1", 0);
    node["metadata"]["annotations"] = json::object();
    server.AddNode(node);
    kube::ClientConfig config;
    config.server = server.url();
    api = kube::MakeCurlClient(config);
    options.plugin.node_name = "n1";
    options.plugin.kubelet_dir = kubelet.dir().string();
    options.plugin.kubelet_poll = 20ms;
    options.health_interval = 30ms;
    options.metrics_port = -1;
  }
  // The started agent, or null (with a test failure) when it could not be made or started.
  NodeAgent* Start() {
    auto made = NodeAgent::Create(options, std::move(*gpu::OpenFake(file.path())), api.get());
    if (!made) {
      ADD_FAILURE() << made.error().message;
      return nullptr;
    }
    agent = std::move(*made);
    if (auto started = agent->Start(); !started) {
      ADD_FAILURE() << started.error().message;
      return nullptr;
    }
    return agent.get();
  }
  std::string PluginState() const {
    return Annotations(server).value(std::string(kAnnotationDevicePlugin), std::string());
  }
  // Sets (or, with an empty name, removes) the node lock, as the extender and plugin do: a
  // conditional patch, read again when the agent changed the node in between (409).
  void SetLock(const std::string& pod) {
    std::optional<kube::NodeLock> lock;
    if (!pod.empty()) lock = kube::NodeLock{1, "default", pod, "uid-" + pod, 1'800'000'000, {}};
    for (int attempt = 0; attempt < 20; ++attempt) {
      const kube::NodeLockView view = kube::ReadNodeLock(*server.GetNode("n1"));
      auto replaced = kube::ReplaceNodeLock(*api, "n1", view.resource_version, lock);
      if (replaced) return;
      ASSERT_EQ(replaced.error().http_status, 409) << replaced.error().ToString();
    }
    FAIL() << "the node lock could not be written in 20 attempts";
  }

  GpuFile file;
  test::FakeApiServer server;
  std::unique_ptr<kube::KubeApi> api;
  test::FakeKubelet kubelet;
  NodeAgentOptions options;
  std::unique_ptr<NodeAgent> agent;  // destroyed first
};

// gpumux.io/device-plugin follows the plugin: "starting" before it registers with the kubelet,
// "ready" only once the kubelet has opened ListAndWatch on every resource, "stopping" before it
// stops serving (the kubelet's streams end after it is written).
TEST(NodeAgent, TellsTheNodeStartingReadyAndStoppingAsTheKubeletSeesThePlugin) {
  std::mutex mu;  // before the kubelet, whose observer uses them
  std::map<std::string, std::vector<std::string>> seen;  // kubelet event -> states then
  AgentOnANode n;
  auto state = [&]() -> std::string {
    const std::string now = n.PluginState();
    return now.empty() ? "<none>" : now;
  };
  n.kubelet.SetObserver([&](std::string_view event, const std::string&) {
    const std::string now = state();
    std::lock_guard lock(mu);
    seen[std::string(event)].push_back(now);
  });
  n.kubelet.HoldListAndWatch();
  NodeAgent* agent = n.Start();
  ASSERT_NE(agent, nullptr);
  test::FakeKubelet& kubelet = n.kubelet;
  ASSERT_TRUE(kubelet.WaitRegistrations(3, 10s));
  {
    std::lock_guard lock(mu);
    EXPECT_EQ(seen["register"], std::vector<std::string>(3, std::string(kDevicePluginStarting)))
        << "the node must say starting before the plugin registers";
  }
  // Registered, but the kubelet has not opened ListAndWatch: not ready (and never marked so,
  // since "ready" is only published once serving() holds).
  // (The kubelet sees a Register call a moment before the plugin counts its answer.)
  EXPECT_TRUE(Eventually([&] { return agent->plugin().registered(); }));
  EXPECT_FALSE(agent->plugin().serving());
  std::string why;
  EXPECT_FALSE(agent->ready(&why));
  EXPECT_NE(why.find("ListAndWatch"), std::string::npos) << why;
  EXPECT_EQ(state(), kDevicePluginStarting);

  kubelet.ReleaseListAndWatch();
  EXPECT_TRUE(Eventually([&] { return state() == kDevicePluginReady; })) << state();
  EXPECT_TRUE(agent->plugin().serving());
  EXPECT_TRUE(agent->ready());
  // The fake kubelet notes each list on its own stream thread, a moment after the plugin's
  // write returned (the CI rehearsal under ASan saw 1 of 3 at the instant "ready" was read).
  EXPECT_TRUE(Eventually([&] {
    std::lock_guard lock(mu);
    return seen["list"].size() == 3u;
  }));

  agent->Stop();
  EXPECT_EQ(state(), kDevicePluginStopping);
  ASSERT_TRUE(Eventually([&] {
    std::lock_guard lock(mu);
    return seen["end"].size() == 3u;
  }));
  std::lock_guard lock(mu);
  EXPECT_EQ(seen["end"], std::vector<std::string>(3, std::string(kDevicePluginStopping)))
      << "the node must say stopping before the kubelet loses the plugin";
}

// Fault 5 of the real-cluster review: a pod bound just before the plugin was told to stop
// (the extender had not seen "stopping" yet) was rejected by the kubelet (Allocate: "the client
// connection is closing"). The plugin keeps serving while the node lock names a pod.
TEST(NodeAgent, KeepsServingOnStopWhileThePodHoldingTheNodeLockWaitsForItsDevices) {
  AgentOnANode n;
  n.options.stop_drain = 30s;
  n.options.stop_drain_poll = 10ms;
  NodeAgent* started = n.Start();
  ASSERT_NE(started, nullptr);
  NodeAgent& agent = *started;
  ASSERT_TRUE(Eventually([&] { return agent.ready(); }));
  n.SetLock("late");
  std::atomic<bool> stopped{false};
  std::thread stopper([&] {
    agent.Stop();
    stopped = true;
  });
  ASSERT_TRUE(Eventually([&] { return n.PluginState() == kDevicePluginStopping; }));
  std::this_thread::sleep_for(200ms);
  EXPECT_FALSE(stopped.load()) << "stopped under a pod that still needs its devices";
  EXPECT_TRUE(agent.plugin().serving());
  n.SetLock("");  // the kubelet allocated the pod's devices: the plugin removed the lock
  stopper.join();
  EXPECT_TRUE(stopped.load());
}

TEST(NodeAgent, StopsAfterItsDrainTimeWhenTheNodeLockIsNeverReleased) {
  AgentOnANode n;
  n.options.stop_drain = 300ms;
  n.options.stop_drain_poll = 10ms;
  NodeAgent* started = n.Start();
  ASSERT_NE(started, nullptr);
  NodeAgent& agent = *started;
  ASSERT_TRUE(Eventually([&] { return agent.ready(); }));
  n.SetLock("never");
  agent.Stop();  // returns: bounded by stop_drain
  EXPECT_FALSE(agent.plugin().serving());
}

// The kubelet restarts: the plugin registers again, and the node says ready again once the new
// kubelet lists the devices.
TEST(NodeAgent, IsReadyAgainAfterAKubeletRestart) {
  AgentOnANode n;
  NodeAgent* started = n.Start();
  ASSERT_NE(started, nullptr);
  NodeAgent& agent = *started;
  EXPECT_TRUE(Eventually([&] { return n.PluginState() == kDevicePluginReady; }));
  n.kubelet.HoldListAndWatch();
  n.kubelet.Restart();
  ASSERT_TRUE(n.kubelet.WaitRegistrations(6, 10s));
  EXPECT_TRUE(Eventually([&] { return !agent.plugin().serving(); }));
  EXPECT_TRUE(Eventually([&] { return n.PluginState() == kDevicePluginStarting; }));
  n.kubelet.ReleaseListAndWatch();
  EXPECT_TRUE(Eventually([&] { return n.PluginState() == kDevicePluginReady; }));
}

// --- the binary ---

TEST(DevicePluginCli, RunsOfflineWithTheFakeBackendAndStopsOnSigterm) {
  GpuFile file;
  test::FakeKubelet kubelet;
  const auto scratch = kubelet.dir();
  test::ProcessSpec spec;
  spec.argv = {GPUMUX_BINARY,   "device-plugin",
               "--node-name",   "n1",
               "--backend",     "fake",
               "--gpus-file",   file.path(),
               "--kubelet-dir", kubelet.dir().string(),
               "--offline",     "--metrics-address",
               "127.0.0.1:0",   "--resources",
               "gpu,gpu-milli"};
  spec.stderr_path = (scratch / "plugin.err").string();
  const pid_t pid = test::StartProcess(spec);
  ASSERT_GT(pid, 0);
  EXPECT_TRUE(kubelet.WaitRegistrations(2, 20s));
  EXPECT_TRUE(kubelet.WaitDevices(
      "gpumux.io/gpu-milli", [](const auto& d) { return d.size() == 2000; }, 20s));
  EXPECT_TRUE(kubelet.Devices("gpumux.io/gpu-mem").empty());  // not served
  // Offline, Allocate is refused: the pod cannot be identified.
  v1beta1::AllocateResponse response;
  EXPECT_EQ(kubelet.Allocate("gpumux.io/gpu", {{"GPU-n1-0"}}, &response).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  ::kill(pid, SIGTERM);
  const test::ProcessExit exit = test::WaitProcess(pid);
  EXPECT_TRUE(exit.Exited(0)) << test::ReadFileText(scratch / "plugin.err");
  const std::string log = test::ReadFileText(scratch / "plugin.err");
  EXPECT_NE(log.find("serving node=n1 gpus=2 resources=\"gpumux.io/gpu, gpumux.io/gpu-milli\""),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("signal=SIGTERM"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(kubelet.dir() / "gpumux-gpu.sock"));
}

// Runs `gpumux device-plugin` until it exits by itself, or until it has registered every
// resource with `kubelet` (then stops it with SIGTERM).
struct PluginRun {
  test::ProcessExit exit;
  bool registered = false;
  std::string err;
};
PluginRun RunPlugin(test::ProcessSpec spec, test::FakeKubelet& kubelet, std::size_t resources,
                    const std::string& tag) {
  const std::filesystem::path err_path = kubelet.dir() / (tag + ".err");
  spec.stderr_path = err_path.string();
  const std::size_t before = kubelet.registrations().size();
  PluginRun run;
  const pid_t pid = test::StartProcess(spec);
  if (pid <= 0) return run;
  int status = 0;
  pid_t done = 0;
  for (int i = 0; i < 2000 && done == 0; ++i) {
    done = ::waitpid(pid, &status, WNOHANG);
    if (done != 0) break;
    if (kubelet.registrations().size() >= before + resources) {
      run.registered = true;
      break;
    }
    std::this_thread::sleep_for(10ms);
  }
  if (done == 0) {
    ::kill(pid, SIGTERM);
    run.exit = test::WaitProcess(pid);
  } else if (WIFEXITED(status)) {
    run.exit.code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    run.exit.signal = WTERMSIG(status);
  }
  run.err = test::ReadFileText(err_path);
  return run;
}

// The OCI runtime path's ledger on the same node: the plugin does not register while it holds a
// live reservation (the two would grant the same GPU), and starts once only dead ones are left.
TEST(DevicePluginCli, RefusesToStartWhileTheOciRuntimePathHoldsGpus) {
  GpuFile file;
  test::FakeKubelet kubelet;
  const std::string state_dir = (kubelet.dir() / "hook-state").string();
  hook::Reservation live =
      hook::testing_fixtures::Held("0123456789abcdef", {0}, hook::CurrentProcess(::getpid()));
  live.pod = {"default", "render", "main"};
  ASSERT_TRUE(hook::ReservationStore(state_dir)
                  .Update([&](hook::ReservationFile& f) -> core::Result<bool> {
                    f.reservations.push_back(live);
                    return true;
                  })
                  .has_value());
  test::ProcessSpec spec;
  spec.argv = {GPUMUX_BINARY,   "device-plugin",
               "--node-name",   "n1",
               "--backend",     "fake",
               "--gpus-file",   file.path(),
               "--kubelet-dir", kubelet.dir().string(),
               "--offline",     "--metrics-address",
               "off",           "--hook-state-dir",
               state_dir};
  const PluginRun refused = RunPlugin(spec, kubelet, 3, "refused");
  EXPECT_FALSE(refused.registered) << "it must not register";
  EXPECT_TRUE(refused.exit.Exited(1)) << refused.err;
  EXPECT_NE(refused.err.find("cannot start error=\"the OCI runtime path's GPU reservation ledger " +
                             state_dir +
                             "/reservations.json holds 1 live reservation (GPU 0 "
                             "reserved by 'default/render/main' since 2024-05-01T10:00:00Z); a "
                             "device plugin beside it would grant GPUs twice; use one of the two"),
            std::string::npos)
      << refused.err;
  EXPECT_FALSE(std::filesystem::exists(kubelet.dir() / "gpumux-gpu.sock"));

  // GPUMUX_STATE_DIR is the default, as for the hook.
  spec.argv.resize(spec.argv.size() - 2);
  spec.set_env = {"GPUMUX_STATE_DIR=" + state_dir};
  const PluginRun by_env = RunPlugin(spec, kubelet, 3, "refused-env");
  EXPECT_FALSE(by_env.registered);
  EXPECT_TRUE(by_env.exit.Exited(1)) << by_env.err;
  EXPECT_NE(by_env.err.find("holds 1 live reservation"), std::string::npos) << by_env.err;

  // The container is gone (its holder has exited): the plugin starts.
  ASSERT_TRUE(hook::ReservationStore(state_dir)
                  .Update([&](hook::ReservationFile& f) -> core::Result<bool> {
                    f.reservations[0].holder = hook::ProcessRef{0, 0};
                    return true;
                  })
                  .has_value());
  const PluginRun started = RunPlugin(spec, kubelet, 3, "started");
  EXPECT_TRUE(started.registered) << started.err;
  EXPECT_TRUE(started.exit.Exited(0)) << started.err;
}

TEST(DevicePluginCli, BadUsageIsExitTwoWithTheReason) {
  GpuFile file;
  const auto scratch = std::filesystem::temp_directory_path();
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--backend", "fake", "--gpus-file", file.path(), "--offline"}, "the node name is unknown"},
      {{"--node-name", "n", "--backend", "fake", "--offline"}, "--backend fake needs --gpus-file"},
      {{"--node-name", "n", "--backend", "fake", "--gpus-file", file.path()},
       "give exactly one of --kubeconfig, --in-cluster and --offline"},
      {{"--node-name", "n", "--backend", "fake", "--gpus-file", file.path(), "--offline",
        "--resources", "gpu,nvidia.com/gpu"},
       "unknown resource 'nvidia.com/gpu'"},
      {{"--node-name", "n", "--backend", "fake", "--gpus-file", file.path(), "--offline",
        "--metrics-address", "9402"},
       "--metrics-address must be HOST:PORT"},
      {{"--node-name", "n", "--backend", "fake", "--gpus-file", file.path(), "--offline",
        "--gpu-mem-unit-mib", "0"},
       "--gpu-mem-unit-mib must be 1..1048576"},
      {{"--node-name", "n", "--backend", "fake", "--gpus-file", file.path(), "--offline",
        "--ignore-xids", "13,x"},
       "'x' is not an XID number"},
      {{"--node-name", "n", "--backend", "fake", "--gpus-file", file.path(), "--offline", "--mount",
        "/usr/lib"},
       "--mount needs --inject-devices"},
      {{"--node-name", "n", "--backend", "fake", "--gpus-file", file.path(), "--offline",
        "--enforcement", "memory-partitioning,cgroups"},
       "'cgroups' is not auto, none, memory-partitioning, mps or hami-core"},
      {{"--node-name", "n", "--backend", "fake", "--gpus-file", file.path(), "--offline",
        "--enforcement", "mps"},
       "--enforcement mps needs --mps"},
      {{"--node-name", "n", "--backend", "fake", "--gpus-file", file.path(), "--offline",
        "--cdi-hook", "gpumux"},
       "--cdi-hook must start with the absolute host path"},
      {{"--node-name", "n", "--backend", "fake", "--gpus-file", file.path(), "--offline",
        "--cdi-hook", "/opt/gpumux", "--install-cdi-hook", "/opt/x"},
       "give --cdi-hook or --install-cdi-hook, not both"},
      {{"--node-name", "n", "--backend", "fake", "--gpus-file", file.path(), "--offline",
        "--memory-soft-limit-percent", "150"},
       "--memory-soft-limit-percent must be in 0..100"},
  };
  int i = 0;
  for (const auto& [args, message] : cases) {
    test::ProcessSpec spec;
    spec.argv = {GPUMUX_BINARY, "device-plugin"};
    spec.argv.insert(spec.argv.end(), args.begin(), args.end());
    spec.unset_env = {"NODE_NAME"};
    std::string tag = "dp-usage-";
    tag += std::to_string(i++);
    const auto run = test::RunCaptured(spec, scratch, tag);
    EXPECT_TRUE(run.exit.Exited(2)) << message << ": " << run.err;
    EXPECT_NE(run.err.find(message), std::string::npos) << run.err;
  }
  // Bad input in the GPU file, or a device list the kubelet cannot take: exit 2 naming it.
  const auto scratch_dir = std::filesystem::path(scratch);
  const std::string huge = (scratch_dir / "gpumux-dp-huge-gpus.csv").string();
  std::ofstream(huge) << "index,uuid,model,memory_mib\n0,GPU-a,T4,1099511627776\n";
  const std::string big = (scratch_dir / "gpumux-dp-big-gpus.csv").string();
  std::ofstream(big) << "index,uuid,model,memory_mib\n0,GPU-a,H100,81920\n";
  const std::vector<std::pair<std::vector<std::string>, std::string>> inputs = {
      {{"--gpus-file", huge},
       huge + ":2: column 'memory_mib': 1099511627776 MiB is more memory than a GPU may have"},
      {{"--gpus-file", big, "--gpu-mem-unit-mib", "1"},
       "cannot start error=\"gpumux.io/gpu-mem would list more than 65536 devices"},
  };
  for (const auto& [args, message] : inputs) {
    test::ProcessSpec spec;
    spec.argv = {GPUMUX_BINARY, "device-plugin", "--node-name",   "n",    "--backend",
                 "fake",        "--offline",     "--kubelet-dir", "/tmp", "--metrics-address",
                 "off"};
    spec.argv.insert(spec.argv.end(), args.begin(), args.end());
    const auto run = test::RunCaptured(spec, scratch, "dp-input");
    EXPECT_TRUE(run.exit.Exited(2)) << message << ": " << run.err;
    EXPECT_NE(run.err.find(message), std::string::npos) << run.err;
  }
  // Only the served resources' limits count: gpu alone starts with the 1 MiB unit.
  {
    test::FakeKubelet kubelet;
    test::ProcessSpec spec;
    spec.argv = {GPUMUX_BINARY,        "device-plugin",
                 "--node-name",        "n",
                 "--backend",          "fake",
                 "--gpus-file",        big,
                 "--gpu-mem-unit-mib", "1",
                 "--resources",        "gpu"};
    for (const char* a : {"--offline", "--metrics-address", "off", "--kubelet-dir"}) {
      spec.argv.push_back(a);
    }
    spec.argv.push_back(kubelet.dir().string());
    const PluginRun run = RunPlugin(spec, kubelet, 1, "gpu-only");
    EXPECT_TRUE(run.registered) << run.err;
    EXPECT_TRUE(run.exit.Exited(0)) << run.err;
  }
  std::filesystem::remove(huge);
  std::filesystem::remove(big);
  // A missing GPU file is a runtime error naming it.
  test::ProcessSpec spec;
  spec.argv = {GPUMUX_BINARY, "device-plugin", "--node-name", "n",
               "--backend",   "fake",          "--gpus-file", "/nonexistent/gpus.csv",
               "--offline",   "--kubelet-dir", "/tmp"};
  const auto run = test::RunCaptured(spec, scratch, "dp-missing");
  EXPECT_TRUE(run.exit.Exited(1)) << run.err;
  EXPECT_NE(run.err.find("/nonexistent/gpus.csv"), std::string::npos) << run.err;
}

}  // namespace
}  // namespace gpumux::deviceplugin
