// `gpumux extender` as a real process: the offline mode, the API-server mode against the in-test
// fake API server (list + watch, bind), the config file, signals and exit statuses.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "gpumux/kube/objects.h"
#include "gpumux/store/store.h"
#include "tests/testing/fake_apiserver.h"
#include "tests/testing/kube_fixtures.h"
#include "tests/testing/process.h"

namespace gpumux::extender {
namespace {

namespace fs = std::filesystem;
using kube::testing::GpuOf;
using kube::testing::NodeJson;
using kube::testing::PodWithOne;
using nlohmann::json;
using SteadyClock = std::chrono::steady_clock;
using std::chrono::milliseconds;

bool Eventually(const std::function<bool()>& condition,
                std::chrono::milliseconds limit = milliseconds(10000)) {
  const auto give_up = SteadyClock::now() + limit;
  while (SteadyClock::now() < give_up) {
    if (condition()) return true;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return condition();
}

void WriteFile(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

// Waits for `pid` for up to `limit`; kills it (and reports no exit) when it takes longer.
std::optional<test::ProcessExit> WaitExit(pid_t pid, std::chrono::milliseconds limit) {
  const auto give_up = SteadyClock::now() + limit;
  while (true) {
    int status = 0;
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) {
      test::ProcessExit e;
      if (WIFEXITED(status)) e.code = WEXITSTATUS(status);
      if (WIFSIGNALED(status)) e.signal = WTERMSIG(status);
      return e;
    }
    if (r < 0) return std::nullopt;
    if (SteadyClock::now() > give_up) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return std::nullopt;
    }
    std::this_thread::sleep_for(milliseconds(5));
  }
}

class ExtenderCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string pattern = (fs::temp_directory_path() /
                           (std::string("gpumux-extender-cli-") + info->name() + "-XXXXXX"))
                              .string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    scratch_ = pattern;
    json list = {{"apiVersion", "v1"}, {"kind", "NodeList"}, {"items", json::array()}};
    list["items"].push_back(NodeJson("gpu-1", 8, GpuOf{"H100", 81920}));
    list["items"].push_back(NodeJson("gpu-2", 8, GpuOf{"H100", 81920}));
    list["items"].push_back(NodeJson("small", 2, GpuOf{"T4", 4096}));
    nodes_file_ = scratch_ / "nodes.json";
    WriteFile(nodes_file_, list.dump());
  }

  void TearDown() override {
    for (pid_t pid : running_) {
      kill(pid, SIGKILL);
      WaitExit(pid, milliseconds(5000));
    }
    std::error_code ec;
    fs::remove_all(scratch_, ec);
  }

  // Starts `gpumux extender args...`; stderr goes to `<tag>.err`.
  pid_t Start(const std::vector<std::string>& args, const std::string& tag) {
    test::ProcessSpec spec;
    spec.argv = {GPUMUX_BINARY, "extender"};
    spec.argv.insert(spec.argv.end(), args.begin(), args.end());
    spec.stdout_path = (scratch_ / (tag + ".out")).string();
    spec.stderr_path = (scratch_ / (tag + ".err")).string();
    spec.unset_env = {"KUBECONFIG"};
    const pid_t pid = test::StartProcess(spec);
    if (pid > 0) running_.push_back(pid);
    return pid;
  }

  std::string Err(const std::string& tag) const {
    return test::ReadFileText(scratch_ / (tag + ".err"));
  }

  // The port from the "listening on 127.0.0.1:PORT" line; 0 when it does not come in 10 s.
  int WaitForPort(const std::string& tag) const {
    int port = 0;
    Eventually([&] {
      const std::string err = Err(tag);
      const std::string marker = "listening on 127.0.0.1:";
      const std::size_t at = err.find(marker);
      if (at == std::string::npos) return false;
      port = std::atoi(err.c_str() + at + marker.size());
      return port > 0;
    });
    return port;
  }

  std::optional<test::ProcessExit> Signal(pid_t pid, int sig, milliseconds limit) {
    kill(pid, sig);
    auto e = WaitExit(pid, limit);
    running_.erase(std::remove(running_.begin(), running_.end(), pid), running_.end());
    return e;
  }

  // Runs `gpumux extender args...` to its end (at most 10 s).
  test::Captured Run(const std::vector<std::string>& args, const std::string& tag) {
    const pid_t pid = Start(args, tag);
    test::Captured c;
    auto e = WaitExit(pid, milliseconds(10000));
    running_.erase(std::remove(running_.begin(), running_.end(), pid), running_.end());
    if (e) c.exit = *e;
    c.out = test::ReadFileText(scratch_ / (tag + ".out"));
    c.err = Err(tag);
    return c;
  }

  static json FilterArgs(const json& pod, const std::vector<std::string>& names) {
    return {{"Pod", pod}, {"Nodes", nullptr}, {"NodeNames", names}};
  }

  fs::path scratch_;
  fs::path nodes_file_;
  std::vector<pid_t> running_;
};

TEST_F(ExtenderCliTest, OfflineNodesServeTheProtocolAndSigtermStopsPromptly) {
  const pid_t pid =
      Start({"--offline-nodes", nodes_file_.string(), "--listen", "127.0.0.1:0"}, "offline");
  ASSERT_GT(pid, 0);
  const int port = WaitForPort("offline");
  ASSERT_GT(port, 0) << Err("offline");
  httplib::Client client("127.0.0.1", port);
  auto health = client.Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  auto ready = client.Get("/readyz");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 200) << "offline nodes are synced at once";

  // 8 units of the default 1024 MiB: 8 GiB, more than the small node's 4 GiB GPUs.
  const json pod = PodWithOne("share", 0, 8, 250);
  auto filter = client.Post("/gpumux/filter", FilterArgs(pod, {"gpu-1", "gpu-2", "small"}).dump(),
                            "application/json");
  ASSERT_TRUE(filter);
  ASSERT_EQ(filter->status, 200) << filter->body;
  EXPECT_EQ(json::parse(filter->body)["NodeNames"], json::array({"gpu-1", "gpu-2"}))
      << filter->body;
  auto bind = client.Post("/gpumux/bind",
                          json{{"PodName", "share"},
                               {"PodNamespace", "default"},
                               {"PodUID", "uid-share"},
                               {"Node", "gpu-1"}}
                              .dump(),
                          "application/json");
  ASSERT_TRUE(bind);
  EXPECT_EQ(bind->status, 200);
  EXPECT_FALSE(json::parse(bind->body)["Error"].get<std::string>().empty())
      << "without an API server bind must say it cannot bind: " << bind->body;

  client.set_keep_alive(true);  // an idle keep-alive connection must not delay the stop
  ASSERT_TRUE(client.Get("/healthz"));
  const auto start = SteadyClock::now();
  auto e = Signal(pid, SIGTERM, milliseconds(5000));
  const auto took = SteadyClock::now() - start;
  ASSERT_TRUE(e.has_value()) << "did not stop within 5 s:\n" << Err("offline");
  EXPECT_TRUE(e->Exited(0)) << ::testing::PrintToString(*e) << "\n" << Err("offline");
  EXPECT_LT(took, milliseconds(2000));
  const std::string err = Err("offline");
  EXPECT_NE(err.find("synced nodes=3 gpus=18"), std::string::npos) << err;
  EXPECT_NE(err.find("gpu_mem_unit_mib=1024"), std::string::npos) << err;
  EXPECT_NE(err.find("signal=SIGTERM"), std::string::npos) << err;
  EXPECT_NE(err.find("gpumux extender: stopped"), std::string::npos) << err;
  EXPECT_EQ(err.find(" INFO  gpumux extender:"), 24U)
      << "lines start with a timestamp, then the level: " << err;
}

TEST_F(ExtenderCliTest, SigintStopsItToo) {
  const pid_t pid =
      Start({"--offline-nodes", nodes_file_.string(), "--listen", "127.0.0.1:0"}, "sigint");
  ASSERT_GT(pid, 0);
  ASSERT_GT(WaitForPort("sigint"), 0) << Err("sigint");
  auto e = Signal(pid, SIGINT, milliseconds(5000));
  ASSERT_TRUE(e.has_value()) << Err("sigint");
  EXPECT_TRUE(e->Exited(0)) << ::testing::PrintToString(*e);
  EXPECT_NE(Err("sigint").find("signal=SIGINT"), std::string::npos);
}

TEST_F(ExtenderCliTest, APortInUseIsARuntimeFailureWithTheReason) {
  const pid_t first =
      Start({"--offline-nodes", nodes_file_.string(), "--listen", "127.0.0.1:0"}, "first");
  ASSERT_GT(first, 0);
  const int port = WaitForPort("first");
  ASSERT_GT(port, 0) << Err("first");
  auto second = Run(
      {"--offline-nodes", nodes_file_.string(), "--listen", "127.0.0.1:" + std::to_string(port)},
      "second");
  EXPECT_TRUE(second.exit.Exited(1)) << ::testing::PrintToString(second.exit) << second.err;
  EXPECT_NE(second.err.find("Address already in use"), std::string::npos) << second.err;
  auto e = Signal(first, SIGTERM, milliseconds(5000));
  ASSERT_TRUE(e.has_value());
  EXPECT_TRUE(e->Exited(0));
}

TEST_F(ExtenderCliTest, TheConfigFileSetsDefaultsThatFlagsOverride) {
  fs::create_directories(scratch_ / "conf");
  fs::copy_file(nodes_file_, scratch_ / "conf" / "cluster.json");
  WriteFile(scratch_ / "conf" / "extender.yaml",
            "# gpumux extender settings\n"
            "listen: 127.0.0.1:0\n"
            "urlPrefix: /scheduler/\n"
            "policy: best-fit\n"
            "offlineNodes: cluster.json   # relative to this file\n"
            "grantTTLSeconds: 30\n"
            "nodeLockTTLSeconds: 45\n"
            "gpuMemUnitMiB: 512\n"
            "threads: 4\n"
            "maxConnections: 64\n"
            "requestReadTimeoutMs: 2000\n");
  const pid_t pid = Start(
      {"--config", (scratch_ / "conf" / "extender.yaml").string(), "--policy", "fgd"}, "config");
  ASSERT_GT(pid, 0);
  const int port = WaitForPort("config");
  ASSERT_GT(port, 0) << Err("config");
  const std::string err = Err("config");
  EXPECT_NE(err.find("serving policy=fgd"), std::string::npos) << "the flag wins: " << err;
  EXPECT_NE(err.find("verbs under /scheduler"), std::string::npos) << err;
  EXPECT_NE(err.find("4 threads"), std::string::npos) << err;
  EXPECT_NE(err.find("up to 64 connections"), std::string::npos) << err;
  EXPECT_NE(err.find("gpu_mem_unit_mib=512"), std::string::npos) << err;
  httplib::Client client("127.0.0.1", port);
  auto filter =
      client.Post("/scheduler/filter", FilterArgs(PodWithOne("p", 1, 0, 0), {"gpu-1"}).dump(),
                  "application/json");
  ASSERT_TRUE(filter);
  EXPECT_EQ(filter->status, 200) << filter->body;
  auto e = Signal(pid, SIGTERM, milliseconds(5000));
  ASSERT_TRUE(e.has_value());
  EXPECT_TRUE(e->Exited(0));
}

TEST_F(ExtenderCliTest, UsageErrorsExitTwoWithAMessage) {
  WriteFile(scratch_ / "bad-key.yaml", "listen: 127.0.0.1:0\nbogusSetting: 1\n");
  WriteFile(scratch_ / "bad-type.yaml", "threads: many\n");
  WriteFile(scratch_ / "bad-fraction.yaml", "policy: fgd-sat-reserve\nreserveIdleFraction: lots\n");
  WriteFile(scratch_ / "not-yaml.yaml", "listen: [unclosed\n");
  WriteFile(scratch_ / "not-json.json", "{\"items\": [");
  WriteFile(scratch_ / "no-name.json", R"({"items":[{"metadata":{}}]})");
  WriteFile(scratch_ / "kubeconfig", "apiVersion: v1\nkind: Config\n");
  const std::string nodes = nodes_file_.string();
  struct Case {
    std::string name;
    std::vector<std::string> args;
    std::vector<std::string> expected;  // substrings of stderr
  };
  const std::vector<Case> cases = {
      {"an unknown policy lists the known ones",
       {"--offline-nodes", nodes, "--policy", "nope"},
       {"unknown policy 'nope'", "fgd", "best-fit"}},
      {"an unknown config key is named with its file",
       {"--offline-nodes", nodes, "--config", (scratch_ / "bad-key.yaml").string()},
       {"unknown key 'bogusSetting'", "bad-key.yaml", "urlPrefix"}},
      {"a config value of the wrong type is named",
       {"--offline-nodes", nodes, "--config", (scratch_ / "bad-type.yaml").string()},
       {"key 'threads': 'many' is not an integer"}},
      {"a config file that is not YAML",
       {"--offline-nodes", nodes, "--config", (scratch_ / "not-yaml.yaml").string()},
       {"not-yaml.yaml", "not valid YAML"}},
      {"a missing config file",
       {"--offline-nodes", nodes, "--config", "/nonexistent.yaml"},
       {"/nonexistent.yaml"}},
      {"no cluster source", {"--listen", "127.0.0.1:0"}, {"no cluster source", "--offline-nodes"}},
      {"two cluster sources", {"--offline-nodes", nodes, "--in-cluster"}, {"only one of"}},
      {"a listen address without a port",
       {"--offline-nodes", nodes, "--listen", "localhost"},
       {"HOST:PORT"}},
      {"a port out of range",
       {"--offline-nodes", nodes, "--listen", "127.0.0.1:70000"},
       {"0..65535"}},
      {"a URL prefix with a space",
       {"--offline-nodes", nodes, "--url-prefix", "/a b"},
       {"--url-prefix"}},
      {"--context without --kubeconfig", {"--in-cluster", "--context", "x"}, {"--context"}},
      {"a missing offline nodes file",
       {"--offline-nodes", "/nonexistent.json"},
       {"/nonexistent.json"}},
      {"an offline nodes file that is not JSON",
       {"--offline-nodes", (scratch_ / "not-json.json").string()},
       {"not-json.json", "JSON"}},
      {"an offline node without a name",
       {"--offline-nodes", (scratch_ / "no-name.json").string()},
       {"node 0", "metadata.name"}},
      {"a kubeconfig without a context",
       {"--kubeconfig", (scratch_ / "kubeconfig").string()},
       {"--kubeconfig"}},
      {"a zero grant TTL",
       {"--offline-nodes", nodes, "--grant-ttl-seconds", "0"},
       {"--grant-ttl-seconds"}},
      {"a zero node lock TTL",
       {"--offline-nodes", nodes, "--node-lock-ttl-seconds", "0"},
       {"--node-lock-ttl-seconds must be at least 1"}},
      {"a zero gpu-mem unit",
       {"--offline-nodes", nodes, "--gpu-mem-unit-mib", "0"},
       {"--gpu-mem-unit-mib must be in 1..1048576"}},
      {"a gpu-mem unit above 1 TiB",
       {"--offline-nodes", nodes, "--gpu-mem-unit-mib", "2097152"},
       {"--gpu-mem-unit-mib must be in 1..1048576"}},
      {"an unknown flag", {"--offline-nodes", nodes, "--bogus"}, {"--bogus"}},
      {"an enforcement that is not one",
       {"--offline-nodes", nodes, "--require-enforcement", "isolation"},
       {"--require-enforcement: 'isolation' is not none, memory, compute or memory,compute"}},
      {"no connections allowed",
       {"--offline-nodes", nodes, "--max-connections", "0"},
       {"--max-connections must be in 1..65536"}},
      {"a request read timeout of 5 ms",
       {"--offline-nodes", nodes, "--request-read-timeout-ms", "5"},
       {"--request-read-timeout-ms must be in 100..600000"}},
      {"a folder given as the offline nodes file",
       {"--offline-nodes", scratch_.string(), "--listen", "127.0.0.1:0"},
       {"--offline-nodes " + scratch_.string() + ": is a directory (expected a file)"}},
      {"a folder given as the config file",
       {"--config", scratch_.string()},
       {"--config " + scratch_.string() + ": is a directory (expected a file)"}},
      {"observations for a policy without a profile",
       {"--offline-nodes", nodes, "--policy", "fgd", "--observations-from", "etcd://127.0.0.1:1"},
       {"--observations-from does not apply with --policy fgd", "co-location policies"}},
      {"an observation period of 0",
       {"--offline-nodes", nodes, "--policy", "least-delay", "--observations-from",
        "etcd://127.0.0.1:1", "--observations-every", "0"},
       {"--observations-every must be in 1..86400"}},
      {"an observation prefix without a store",
       {"--offline-nodes", nodes, "--policy", "least-delay", "--observations-prefix", "/x/"},
       {"--observations-prefix needs --observations-from"}},
      {"an observation store URL of an unknown scheme",
       {"--offline-nodes", nodes, "--policy", "least-delay", "--observations-from", "redis://x:1"},
       {"--observations-from: store 'redis://x:1': unknown scheme"}},
      {"a missing profile",
       {"--offline-nodes", nodes, "--policy", "least-delay", "--profile",
        "/nonexistent-profile.json"},
       {"--profile: /nonexistent-profile.json"}},
      {"a reserve threshold for a policy that does not reserve",
       {"--offline-nodes", nodes, "--policy", "fgd-sat", "--reserve-idle-fraction", "0.2"},
       {"--reserve-idle-fraction does not apply with --policy fgd-sat"}},
      {"a reserve threshold in the settings file that is not a number",
       {"--offline-nodes", nodes, "--config", (scratch_ / "bad-fraction.yaml").string()},
       {"key 'reserveIdleFraction' must be a number"}},
      {"a hold limit for a policy that holds nothing",
       {"--offline-nodes", nodes, "--policy", "fgd", "--reserve-max-wait-seconds", "60"},
       {"--reserve-max-wait-seconds does not apply with --policy fgd"}},
      {"a negative hold limit",
       {"--offline-nodes", nodes, "--policy", "fgd-sat-reserve", "--reserve-max-wait-seconds",
        "-1"},
       {"--reserve-max-wait-seconds must be in 0..86400"}},
      {"a reserve threshold above 1",
       {"--offline-nodes", nodes, "--policy", "fgd-sat-reserve", "--reserve-idle-fraction", "1.5"},
       {"--reserve-idle-fraction must be in (0, 1]"}},
  };
  int i = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const auto r = Run(c.args, "usage" + std::to_string(i++));
    EXPECT_TRUE(r.exit.Exited(2)) << ::testing::PrintToString(r.exit) << "\n" << r.err;
    for (const std::string& text : c.expected) {
      EXPECT_NE(r.err.find(text), std::string::npos) << "missing '" << text << "' in:\n" << r.err;
    }
  }
}

// Closing the loop: observations a coordinator wrote into a file store reach the policy's
// profile (gpumux_extender_observed_sets, /inspect), and are re-read when they change.
TEST_F(ExtenderCliTest, ObservationsFromAStoreReachTheProfileAndAreReadAgain) {
  const std::string store_path = (scratch_ / "coordinator.json").string();
  const auto put = [&](const std::string& key, const std::string& value) {
    auto store = store::OpenStore("file://" + store_path);  // closed again at once
    ASSERT_TRUE(store.has_value()) << store.error().message;
    ASSERT_TRUE((*store)->Put(key, value).has_value());
  };
  put("/gpumux/observations/googlenet+vgg16/4096+512/node-1",
      R"({"classes":["googlenet","vgg16"],"batches":[4096,512],"slowdown":[3.5,3.9],"count":4,)"
      R"("node":"node-1"})");
  const pid_t pid = Start(
      {"--offline-nodes", nodes_file_.string(), "--listen", "127.0.0.1:0", "--policy",
       "least-delay", "--observations-from", "file://" + store_path, "--observations-every", "1"},
      "observations");
  ASSERT_GT(pid, 0);
  const int port = WaitForPort("observations");
  ASSERT_GT(port, 0) << Err("observations");
  httplib::Client client("127.0.0.1", port);
  const auto metric = [&](const std::string& line) {
    auto r = client.Get("/metrics");
    return r && r->status == 200 && r->body.find(line) != std::string::npos;
  };
  EXPECT_TRUE(Eventually([&] { return metric("\ngpumux_extender_observed_sets 1\n"); }))
      << Err("observations");
  auto inspect = client.Get("/inspect");
  ASSERT_TRUE(inspect);
  const json profile = json::parse(inspect->body)["profile"];
  EXPECT_EQ(profile["name"], "iadeep-rtx3090-fitted") << profile;
  EXPECT_EQ(profile["observed_sets"], 1) << profile;
  // A second node measures another pair: read within a period or two.
  put("/gpumux/observations/alexnet+neumf/512+1024/node-2",
      R"({"classes":["alexnet","neumf"],"batches":[512,1024],"slowdown":[1.2,1.9],"count":1})");
  EXPECT_TRUE(Eventually([&] { return metric("\ngpumux_extender_observed_sets 2\n"); }))
      << Err("observations");
  EXPECT_TRUE(metric("\ngpumux_extender_profile_swaps_total 2\n"));
  auto e = Signal(pid, SIGTERM, milliseconds(5000));
  ASSERT_TRUE(e.has_value());
  EXPECT_TRUE(e->Exited(0)) << Err("observations");
  const std::string err = Err("observations");
  EXPECT_NE(err.find("profile=iadeep-rtx3090-fitted"), std::string::npos) << err;
  EXPECT_NE(err.find("observations applied url=file://" + store_path +
                     " summary=\"1 observation: 1 observed set, 4 windows on 1 node\""),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("summary=\"2 observations: 2 observed sets, 5 windows on 2 nodes\""),
            std::string::npos)
      << err;
}

TEST_F(ExtenderCliTest, HelpExplainsTheFlagsAndListsThePolicies) {
  const auto r = Run({"--help"}, "help");
  EXPECT_TRUE(r.exit.Exited(0)) << r.err;
  for (const char* text : {"--listen",
                           "127.0.0.1:12345",
                           "--url-prefix",
                           "/gpumux",
                           "--policy",
                           "fgd",
                           "best-fit",
                           "--config",
                           "--kubeconfig",
                           "--in-cluster",
                           "--context",
                           "--offline-nodes",
                           "--default-gpu-model",
                           "--default-gpu-memory-mib",
                           "--grant-ttl-seconds",
                           "SIGTERM",
                           "managedResources",
                           "--node-lock-ttl-seconds",
                           "--gpu-mem-unit-mib",
                           "--threads",
                           "--max-connections",
                           "--request-read-timeout-ms",
                           "gpumux.io/gpu-mem-unit-mib",
                           "'gpumux.io/gpu-mem: 8' asks for 8 GiB"}) {
    EXPECT_NE(r.out.find(text), std::string::npos) << "missing '" << text << "' in:\n" << r.out;
  }
  // The CLI default is the one the device plugin uses too.
  std::string unit_default = "--gpu-mem-unit-mib INT=";
  unit_default += std::to_string(kube::kDefaultGpuMemUnitMib);
  EXPECT_NE(r.out.find(unit_default), std::string::npos) << r.out;
}

// The whole daemon against the in-test API server: list + watch feed the state, /readyz turns
// ready, a pod is filtered and bound (grant annotation written, Binding created), a deleted pod
// gives its GPUs back, and SIGTERM stops the watches and the server promptly.
TEST_F(ExtenderCliTest, WithAnApiServerItSyncsBindsAndFollowsTheWatch) {
  test::FakeApiServer api;
  ASSERT_TRUE(api.ok()) << api.error();
  api.AddNode(NodeJson("gpu-1", 4, GpuOf{"H100", 81920}));
  api.AddNode(NodeJson("gpu-2", 4, GpuOf{"H100", 81920}));
  WriteFile(scratch_ / "kubeconfig",
            "apiVersion: v1\nkind: Config\n"
            "clusters:\n- name: fake\n  cluster:\n    server: " +
                api.url() +
                "\n"
                "users:\n- name: tester\n  user:\n    token: test-token\n"
                "contexts:\n- name: test\n  context:\n    cluster: fake\n    user: tester\n"
                "current-context: test\n");
  const pid_t pid = Start({"--kubeconfig", (scratch_ / "kubeconfig").string(), "--listen",
                           "127.0.0.1:0", "--grant-ttl-seconds", "60"},
                          "api");
  ASSERT_GT(pid, 0);
  const int port = WaitForPort("api");
  ASSERT_GT(port, 0) << Err("api");
  httplib::Client client("127.0.0.1", port);
  ASSERT_TRUE(Eventually([&] {
    auto r = client.Get("/readyz");
    return r && r->status == 200;
  })) << Err("api");

  // A node added after the sync arrives through the watch.
  api.AddNode(NodeJson("gpu-3", 4, GpuOf{"H100", 81920}));
  ASSERT_TRUE(Eventually([&] {
    auto r = client.Get("/metrics");
    return r && r->body.find("gpumux_extender_gpus 12") != std::string::npos;
  })) << Err("api");

  json pod = PodWithOne("trainer", 2, 0, 0);
  api.AddPod(pod);
  pod = *api.GetPod("default", "trainer");
  auto filter = client.Post("/gpumux/filter", FilterArgs(pod, {"gpu-1", "gpu-2", "gpu-3"}).dump(),
                            "application/json");
  ASSERT_TRUE(filter);
  ASSERT_EQ(filter->status, 200) << filter->body;
  EXPECT_EQ(json::parse(filter->body)["NodeNames"].size(), 3U) << filter->body;
  const std::string uid = pod["metadata"]["uid"];
  auto bind = client.Post(
      "/gpumux/bind",
      json{{"PodName", "trainer"}, {"PodNamespace", "default"}, {"PodUID", uid}, {"Node", "gpu-2"}}
          .dump(),
      "application/json");
  ASSERT_TRUE(bind);
  ASSERT_EQ(bind->status, 200) << bind->body;
  EXPECT_EQ(json::parse(bind->body)["Error"], "") << bind->body << "\n" << Err("api");
  EXPECT_EQ(api.bindings(), 1);
  const auto bound = api.GetPod("default", "trainer");
  ASSERT_TRUE(bound.has_value());
  EXPECT_EQ((*bound)["spec"]["nodeName"], "gpu-2");
  EXPECT_TRUE((*bound)["metadata"]["annotations"].contains("gpumux.io/grant")) << bound->dump();

  // The watch reports the pod bound: its grant becomes bound.
  ASSERT_TRUE(Eventually([&] {
    auto r = client.Get("/metrics");
    return r && r->body.find("gpumux_extender_grants{state=\"bound\"} 1") != std::string::npos &&
           r->body.find("gpumux_extender_placements_total 1") != std::string::npos;
  })) << client.Get("/metrics")->body;

  // Deleting the pod frees its GPUs.
  api.DeletePod("default", "trainer");
  ASSERT_TRUE(Eventually([&] {
    auto r = client.Get("/metrics");
    return r && r->body.find("gpumux_extender_grants{state=\"bound\"} 0") != std::string::npos;
  })) << Err("api");

  const auto start = SteadyClock::now();
  auto e = Signal(pid, SIGTERM, milliseconds(5000));
  ASSERT_TRUE(e.has_value()) << "did not stop within 5 s:\n" << Err("api");
  EXPECT_TRUE(e->Exited(0)) << ::testing::PrintToString(*e) << "\n" << Err("api");
  EXPECT_LT(SteadyClock::now() - start, milliseconds(3000));
  EXPECT_NE(Err("api").find("synced nodes=2"), std::string::npos) << Err("api");
}

}  // namespace
}  // namespace gpumux::extender
