// The extender end to end against an in-test API server on loopback: the real libcurl client,
// the reflectors, the cluster state and the verbs. Binds write the grant annotation and create
// the Binding; parallel binds never over-grant a GPU; a restarted extender rebuilds its grants
// from the pods' annotations.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <thread>

#include <nlohmann/json.hpp>

#include "gpumux/k8s/cluster_sync.h"
#include "gpumux/k8s/extender.h"
#include "tests/k8s/k8s_fixtures.h"
#include "tests/testing/fake_apiserver.h"

namespace gpumux::k8s {
namespace {

using nlohmann::json;
using testing::NodeJson;
using testing::PodWithOne;

// An extender (state + sync + verbs) talking to `server`.
struct Daemon {
  explicit Daemon(const test::FakeApiServer& server, std::string policy = "best-fit") {
    ClientConfig config;
    config.server = server.url();
    api = MakeCurlClient(config);
    ClusterStateOptions options;
    options.policy = std::move(policy);
    state = std::move(*ClusterState::Create(options, {}));
    ClusterSyncOptions sync_options;
    sync_options.reflector.initial_backoff = std::chrono::milliseconds(20);
    sync = std::make_unique<ClusterSync>(*api, *state, sync_options);
    sync->Start();
    EXPECT_TRUE(sync->WaitSynced(std::chrono::seconds(10)));
    extender = std::make_unique<Extender>(*state, api.get());
  }
  ~Daemon() { sync->Stop(); }
  std::unique_ptr<KubeApi> api;
  std::unique_ptr<ClusterState> state;
  std::unique_ptr<ClusterSync> sync;
  std::unique_ptr<Extender> extender;
};

json FilterBody(const json& pod, const std::vector<std::string>& nodes) {
  return {{"Pod", pod}, {"Nodes", nullptr}, {"NodeNames", nodes}};
}

json BindBody(const json& pod, const std::string& node) {
  return {{"PodName", pod["metadata"]["name"]},
          {"PodNamespace", "default"},
          {"PodUID", pod["metadata"]["uid"]},
          {"Node", node}};
}

// Waits until `predicate` holds (the watch is asynchronous).
template <typename F>
bool Eventually(F predicate) {
  for (int i = 0; i < 500; ++i) {
    if (predicate()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return predicate();
}

TEST(ExtenderIntegration, APodIsFilteredScoredAndBoundWithAGrantNamingRealGpuUuids) {
  test::FakeApiServer server;
  ASSERT_TRUE(server.ok()) << server.error();
  server.AddNode(NodeJson("n1", 2));
  server.AddNode(NodeJson("n2", 2));
  const json pod = PodWithOne("train", 0, 8192, 250);
  server.AddPod(pod);
  Daemon d(server);

  auto filter = d.extender->Handle(Verb::kFilter, FilterBody(pod, {"n1", "n2"}).dump());
  ASSERT_EQ(filter.http_status, 200) << filter.body;
  EXPECT_EQ(json::parse(filter.body)["NodeNames"].size(), 2u);
  auto bind = d.extender->Handle(Verb::kBind, BindBody(pod, "n2").dump());
  ASSERT_EQ(bind.http_status, 200);
  EXPECT_EQ(json::parse(bind.body)["Error"], "") << bind.body;
  EXPECT_EQ(bind.placements, 1);

  const json stored = *server.GetPod("default", "train");
  EXPECT_EQ(stored["spec"]["nodeName"], "n2");
  auto grant = DecodeGrant(stored["metadata"]["annotations"]["gpumux.io/grant"].get<std::string>());
  ASSERT_TRUE(grant.has_value()) << grant.error().message;
  EXPECT_EQ(grant->node, "n2");
  ASSERT_EQ(grant->containers.size(), 1u);
  EXPECT_EQ(grant->containers[0].gpus[0].uuid.rfind("GPU-n2-", 0), 0u);
  EXPECT_EQ(grant->containers[0].gpu_mem_mib, 8192);
  EXPECT_EQ(grant->containers[0].gpu_milli, 250);
  EXPECT_TRUE(Eventually([&] { return d.state->counters().grants_bound == 1; }));
  EXPECT_EQ(server.bindings(), 1);
}

TEST(ExtenderIntegration, AnOversizedPodFailsEveryNodeWithAReadableReason) {
  test::FakeApiServer server;
  server.AddNode(NodeJson("n1", 8));
  const json pod = PodWithOne("huge", 64, 0, 0);
  server.AddPod(pod);
  Daemon d(server);
  auto filter = d.extender->Handle(Verb::kFilter, FilterBody(pod, {"n1"}).dump());
  const json reply = json::parse(filter.body);
  EXPECT_TRUE(reply["NodeNames"].empty());
  EXPECT_EQ(reply["FailedAndUnresolvableNodes"]["n1"], "gpumux: needs 64 GPUs, node has 8");
  EXPECT_EQ(filter.failure, "no_fit");
}

TEST(ExtenderIntegration, ParallelBindsNeverOverGrantAGpu) {
  test::FakeApiServer server;
  server.AddNode(NodeJson("n1", 2, {"A100", 40960}));  // 4 pods of 10000 MiB per GPU
  constexpr int kPods = 24;
  std::vector<json> pods;
  for (int i = 0; i < kPods; ++i) {
    std::string name = "p";
    name += std::to_string(i);
    pods.push_back(PodWithOne(name, 0, 10000, 0));
    server.AddPod(pods.back());
  }
  Daemon d(server);
  std::atomic<int> bound{0}, refused{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      for (int i = t; i < kPods; i += 6) {
        auto reply = d.extender->Handle(Verb::kBind, BindBody(pods[static_cast<std::size_t>(i)], "n1").dump());
        const std::string error = json::parse(reply.body)["Error"];
        if (error.empty()) {
          ++bound;
        } else {
          EXPECT_NE(error.find("no longer fits"), std::string::npos) << error;
          ++refused;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(bound.load(), 8);
  EXPECT_EQ(refused.load(), kPods - 8);
  // What the API server holds: no GPU carries more than its memory.
  std::map<int, std::int64_t> used;
  for (const json& p : pods) {
    const json stored = *server.GetPod("default", p["metadata"]["name"]);
    if (!stored["metadata"].contains("annotations") ||
        !stored["metadata"]["annotations"].contains("gpumux.io/grant") ||
        !stored["spec"].contains("nodeName")) {
      continue;
    }
    auto grant = DecodeGrant(stored["metadata"]["annotations"]["gpumux.io/grant"].get<std::string>());
    ASSERT_TRUE(grant.has_value());
    used[grant->containers[0].gpus[0].index] += grant->containers[0].gpu_mem_mib;
  }
  ASSERT_EQ(used.size(), 2u);
  for (const auto& [gpu, mib] : used) EXPECT_LE(mib, 40960) << "GPU " << gpu;
}

TEST(ExtenderIntegration, ARestartedExtenderRebuildsItsGrantsFromTheAnnotations) {
  test::FakeApiServer server;
  server.AddNode(NodeJson("n1", 1));
  const json first = PodWithOne("first", 1, 0, 0);
  const json second = PodWithOne("second", 1, 0, 0);
  server.AddPod(first);
  server.AddPod(second);
  {
    Daemon d(server);
    auto reply = d.extender->Handle(Verb::kBind, BindBody(first, "n1").dump());
    ASSERT_EQ(json::parse(reply.body)["Error"], "") << reply.body;
  }
  Daemon restarted(server);
  EXPECT_EQ(restarted.state->counters().grants_bound, 1);
  auto reply = restarted.extender->Handle(Verb::kBind, BindBody(second, "n1").dump());
  const std::string error = json::parse(reply.body)["Error"];
  EXPECT_NE(error.find("no longer fits"), std::string::npos) << "the GPU is still granted: " << error;
  EXPECT_FALSE(server.GetPod("default", "second")->at("spec").contains("nodeName"));
  // The first pod ends: the restarted extender sees it through the watch and frees the GPU.
  json done = *server.GetPod("default", "first");
  done["status"]["phase"] = "Succeeded";
  server.UpdatePod(done);
  ASSERT_TRUE(Eventually([&] { return restarted.state->counters().grants_bound == 0; }));
  reply = restarted.extender->Handle(Verb::kBind, BindBody(second, "n1").dump());
  EXPECT_EQ(json::parse(reply.body)["Error"], "") << reply.body;
}

TEST(ExtenderIntegration, AFailedBindingGivesTheGpusBackAndSaysWhy) {
  test::FakeApiServer server;
  server.AddNode(NodeJson("n1", 1));
  const json a = PodWithOne("a", 1, 0, 0);
  const json b = PodWithOne("b", 1, 0, 0);
  server.AddPod(a);
  server.AddPod(b);
  Daemon d(server);
  server.FailNext("POST", "/pods/a/binding", 500, "InternalError", "etcd is unhappy");
  auto reply = d.extender->Handle(Verb::kBind, BindBody(a, "n1").dump());
  const std::string error = json::parse(reply.body)["Error"];
  EXPECT_NE(error.find("etcd is unhappy"), std::string::npos) << error;
  EXPECT_EQ(reply.failure, "api_error");
  reply = d.extender->Handle(Verb::kBind, BindBody(b, "n1").dump());
  EXPECT_EQ(json::parse(reply.body)["Error"], "") << reply.body;
}

TEST(ExtenderIntegration, APodReplacedUnderTheSameNameIsAConflict) {
  test::FakeApiServer server;
  server.AddNode(NodeJson("n1", 1));
  const json pod = PodWithOne("p", 1, 0, 0);
  server.AddPod(pod);
  Daemon d(server);
  json bind = BindBody(pod, "n1");
  bind["PodUID"] = "some-other-uid";
  auto reply = d.extender->Handle(Verb::kBind, bind.dump());
  EXPECT_FALSE(json::parse(reply.body)["Error"].get<std::string>().empty());
  EXPECT_FALSE(server.GetPod("default", "p")->at("spec").contains("nodeName"));
}

TEST(ExtenderIntegration, BindIsRefusedUntilTheStateIsSynced) {
  ClusterStateOptions options;
  auto state = std::move(*ClusterState::Create(options, {}));
  test::FakeApiServer server;
  ClientConfig config;
  config.server = server.url();
  auto api = MakeCurlClient(config);
  Extender extender(*state, api.get());
  auto reply = extender.Handle(Verb::kBind, BindBody(PodWithOne("p", 1, 0, 0), "n1").dump());
  EXPECT_EQ(reply.failure, "not_synced");
}

}  // namespace
}  // namespace gpumux::k8s
