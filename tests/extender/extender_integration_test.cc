// The extender end to end against an in-test API server on loopback: the real libcurl client,
// the reflectors, the cluster state and the verbs. Binds write the grant annotation and create
// the Binding; parallel binds never over-grant a GPU; a restarted extender rebuilds its grants
// from the pods' annotations.
#include <gtest/gtest.h>

#include <atomic>
#include <ctime>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <thread>

#include "gpumux/core/time.h"
#include "gpumux/extender/cluster_sync.h"
#include "gpumux/extender/extender.h"
#include "gpumux/extender/requeue.h"
#include "gpumux/kube/node_lock.h"
#include "tests/testing/fake_apiserver.h"
#include "tests/testing/kube_fixtures.h"

namespace gpumux::extender {
namespace {

using kube::testing::HandshakeNodeJson;
using kube::testing::NodeJson;
using kube::testing::PodWithOne;
using nlohmann::json;

// How a test's extender is set up beyond the defaults.
struct DaemonSetup {
  std::string policy = "best-fit";
  sched::Clock clock;  // empty: the system clock
  ExtenderOptions extender;
  std::int64_t gpu_mem_unit_mib = 1;
  // Binds wait for a busy node lock only when a test asks (else they are refused at once).
  bool wait_for_locks = false;
  std::int64_t reserve_max_wait_seconds = 0;
  policy::PolicyContext context;  // typical pods, fgd-sat-reserve's threshold, ...
};

// The real client with a script of what the network does to some calls: a POST forwarded to
// the API server (which commits it) whose answer is then lost (a 500 from a proxy, a client
// timeout), or a GET that fails without being sent. Unscripted calls pass through.
class LossyApi : public kube::KubeApi {
 public:
  explicit LossyApi(kube::KubeApi& real) : real_(&real) {}
  // The next POST whose path contains `substring` is sent, then answered with `error`.
  void LoseAnswerOfNextPost(std::string substring, kube::ApiError error) {
    std::lock_guard lock(mu_);
    lost_posts_.push_back({std::move(substring), std::move(error)});
  }
  // The next GET whose path contains `substring` fails with `error` (nothing is sent).
  void FailNextGet(std::string substring, kube::ApiError error) {
    std::lock_guard lock(mu_);
    failed_gets_.push_back({std::move(substring), std::move(error)});
  }
  // GETs of `path` answer `object` (what the in-test API server does not serve: a Lease).
  void Serve(std::string path, json object) {
    std::lock_guard lock(mu_);
    served_[std::move(path)] = std::move(object);
  }

  kube::ApiResult<json> Get(const std::string& path) override {
    if (auto error = Take(failed_gets_, path)) return tl::unexpected(*error);
    {
      std::lock_guard lock(mu_);
      if (auto it = served_.find(path); it != served_.end()) return it->second;
    }
    return real_->Get(path);
  }
  kube::ApiResult<json> List(const std::string& path, int page_size) override {
    return real_->List(path, page_size);
  }
  kube::ApiResult<json> Patch(const std::string& path, const json& body,
                              kube::PatchType type) override {
    return real_->Patch(path, body, type);
  }
  kube::ApiResult<json> Post(const std::string& path, const json& body) override {
    auto error = Take(lost_posts_, path);
    auto answer = real_->Post(path, body);
    if (error) return tl::unexpected(*error);
    return answer;
  }
  kube::ApiResult<void> Watch(const std::string& path, const std::string& resource_version,
                              const std::function<bool(kube::WatchEvent&&)>& on_event,
                              std::stop_token stop, int timeout_seconds) override {
    return real_->Watch(path, resource_version, on_event, stop, timeout_seconds);
  }

 private:
  using Script = std::vector<std::pair<std::string, kube::ApiError>>;
  std::optional<kube::ApiError> Take(Script& script, const std::string& path) {
    std::lock_guard lock(mu_);
    for (auto it = script.begin(); it != script.end(); ++it) {
      if (path.find(it->first) == std::string::npos) continue;
      kube::ApiError error = std::move(it->second);
      script.erase(it);
      return error;
    }
    return std::nullopt;
  }
  kube::KubeApi* real_;
  std::mutex mu_;
  Script lost_posts_, failed_gets_;
  std::map<std::string, json> served_;
};

DaemonSetup WithPolicy(std::string policy) {
  DaemonSetup setup;
  setup.policy = std::move(policy);
  return setup;
}

// An extender (state + sync + verbs) talking to `server`; the verbs go through `lossy`.
struct Daemon {
  explicit Daemon(const test::FakeApiServer& server, std::string policy = "best-fit")
      : Daemon(server, WithPolicy(std::move(policy))) {}
  Daemon(const test::FakeApiServer& server, DaemonSetup setup) {
    kube::ClientConfig config;
    config.server = server.url();
    api = kube::MakeCurlClient(config);
    sched::ClusterStateOptions options;
    options.policy = std::move(setup.policy);
    options.gpu_mem_unit_mib = setup.gpu_mem_unit_mib;
    options.context = std::move(setup.context);
    if (setup.reserve_max_wait_seconds > 0) {
      options.context.knobs["reserve-max-wait-seconds"] =
          static_cast<double>(setup.reserve_max_wait_seconds);
    }
    state = std::move(*sched::ClusterState::Create(options, std::move(setup.clock)));
    ClusterSyncOptions sync_options;
    sync_options.reflector.initial_backoff = std::chrono::milliseconds(20);
    sync_options.on_node_event = [this](const kube::WatchEvent& e) { board.Observe(e); };
    sync = std::make_unique<ClusterSync>(*api, *state, sync_options);
    sync->Start();
    EXPECT_TRUE(sync->WaitSynced(std::chrono::seconds(10)));
    if (!setup.wait_for_locks) setup.extender.bind_wait = std::chrono::milliseconds(0);
    if (setup.extender.lock_board == nullptr) setup.extender.lock_board = &board;
    lossy = std::make_unique<LossyApi>(*api);
    extender = std::make_unique<Extender>(*state, lossy.get(), setup.extender);
  }
  ~Daemon() { sync->Stop(); }
  std::unique_ptr<kube::KubeApi> api;
  std::unique_ptr<LossyApi> lossy;
  std::unique_ptr<sched::ClusterState> state;
  kube::NodeLockBoard board;  // before sync: the sync's thread uses it
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

using kube::testing::Eventually;

// Adds pending pods `names` (one container asking for `gpu_mem` MiB) and returns them.
std::vector<json> AddPods(test::FakeApiServer& server, const std::vector<std::string>& names,
                          std::int64_t gpu_mem) {
  std::vector<json> pods;
  for (const std::string& name : names) {
    pods.push_back(PodWithOne(name, 0, gpu_mem, 0));
    server.AddPod(pods.back());
  }
  return pods;
}

// Pods p0, p1, ... asking for `gpu_mem` MiB each.
std::vector<json> AddNumberedPods(test::FakeApiServer& server, int count, std::int64_t gpu_mem) {
  std::vector<std::string> names;
  for (int i = 0; i < count; ++i) {
    std::string name = "p";
    name += std::to_string(i);
    names.push_back(std::move(name));
  }
  return AddPods(server, names, gpu_mem);
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
  auto grant =
      kube::DecodeGrant(stored["metadata"]["annotations"]["gpumux.io/grant"].get<std::string>());
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

TEST(ExtenderIntegration, AHeldPodIsRetriedWhenItBecomesOverdueWithoutAnyEvent) {
  // fgd-sat-reserve never holds an overdue pod (--reserve-max-wait-seconds), so the filter asks
  // the requeuer to retry a pod it held when the pod becomes overdue; kube-scheduler would
  // otherwise try it again only on some later cluster event or at its 5-minute flush.
  test::FakeApiServer server;
  server.AddNode(NodeJson("n1", 2));
  const std::int64_t now = 1'800'000'000;
  const json whole = PodWithOne("whole", 1, 0, 0);
  json held = PodWithOne("held", 0, 0, 810);
  held["metadata"]["creationTimestamp"] = core::FormatRfc3339(now - 599);  // overdue in 1 s
  json huge = PodWithOne("huge", 4, 0, 0);
  huge["metadata"]["creationTimestamp"] = core::FormatRfc3339(now - 599);
  for (const json& pod : {whole, held, huge}) server.AddPod(pod);
  kube::ClientConfig config;
  config.server = server.url();
  auto api = kube::MakeCurlClient(config);
  Requeuer requeuer(*api);
  requeuer.Start();
  DaemonSetup setup;
  setup.policy = "fgd-sat-reserve";
  setup.clock = [now] { return now; };
  setup.reserve_max_wait_seconds = 600;
  setup.extender.requeuer = &requeuer;
  // A 190-milli remainder fits only the 160s (4 % of GPU pods): stranded. With one GPU of two
  // busy, idle GPUs are scarce under a threshold of 0.6.
  const auto typical = [](core::MilliGpu milli, double weight) {
    policy::TypicalPod p;
    p.cpu_milli = 100;
    p.gpu_milli = milli;
    p.gpu_count = 1;
    p.weight = weight;
    return p;
  };
  setup.context.typical_pods = {typical(1000, 0.5), typical(810, 0.46), typical(160, 0.04)};
  setup.context.knobs["reserve-idle-fraction"] = 0.6;
  Daemon d(server, setup);
  ASSERT_EQ(d.extender->Handle(Verb::kFilter, FilterBody(whole, {"n1"}).dump()).failure, "");
  ASSERT_EQ(
      json::parse(d.extender->Handle(Verb::kBind, BindBody(whole, "n1").dump()).body)["Error"], "");

  auto filter = d.extender->Handle(Verb::kFilter, FilterBody(held, {"n1"}).dump());
  EXPECT_NE(filter.body.find("would rather wait"), std::string::npos) << filter.body;
  EXPECT_EQ(d.extender->Handle(Verb::kFilter, FilterBody(huge, {"n1"}).dump()).failure, "no_fit");
  EXPECT_EQ(requeuer.waiting(), 2u);
  EXPECT_TRUE(Eventually([&] { return requeuer.requeued() == 1; }))
      << "no event comes in this test: only the retry time makes the patch";
  const auto stamped = [&](const char* name) {
    return server.GetPod("default", name)
        ->at("metadata")
        .value("annotations", json::object())
        .contains(std::string(kAnnotationRequeuedAt));
  };
  EXPECT_TRUE(stamped("held"));
  EXPECT_FALSE(stamped("huge")) << "a pod no policy held gets no timed retry";
  requeuer.Stop();
}

TEST(ExtenderIntegration, ParallelBindsNeverOverGrantAGpu) {
  test::FakeApiServer server;
  server.AddNode(NodeJson("n1", 2, {"A100", 40960}));  // 4 pods of 10000 MiB per GPU
  constexpr int kPods = 24;
  const std::vector<json> pods = AddNumberedPods(server, kPods, 10000);
  Daemon d(server);
  std::atomic<int> bound{0}, refused{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      for (int i = t; i < kPods; i += 6) {
        auto reply = d.extender->Handle(Verb::kBind,
                                        BindBody(pods[static_cast<std::size_t>(i)], "n1").dump());
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
    auto grant =
        kube::DecodeGrant(stored["metadata"]["annotations"]["gpumux.io/grant"].get<std::string>());
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
  EXPECT_NE(error.find("no longer fits"), std::string::npos)
      << "the GPU is still granted: " << error;
  EXPECT_FALSE(server.GetPod("default", "second")->at("spec").contains("nodeName"));
  // The first pod ends: the restarted extender sees it through the watch and frees the GPU.
  json done = *server.GetPod("default", "first");
  done["status"]["phase"] = "Succeeded";
  server.UpdatePod(done);
  ASSERT_TRUE(Eventually([&] { return restarted.state->counters().grants_bound == 0; }));
  reply = restarted.extender->Handle(Verb::kBind, BindBody(second, "n1").dump());
  EXPECT_EQ(json::parse(reply.body)["Error"], "") << reply.body;
}

TEST(ExtenderIntegration, ABindingRefusedBeforeItsCommitIsReadBackThenGivesTheGpusBack) {
  test::FakeApiServer server;
  server.AddNode(NodeJson("n1", 1));
  const json a = PodWithOne("a", 1, 0, 0);
  const json b = PodWithOne("b", 1, 0, 0);
  server.AddPod(a);
  server.AddPod(b);
  Daemon d(server);
  // The API server answers 500 without applying the Binding.
  server.FailNext("POST", "/pods/a/binding", 500, "InternalError", "etcd is unhappy");
  const std::int64_t reads = server.requests("get pod");
  auto reply = d.extender->Handle(Verb::kBind, BindBody(a, "n1").dump());
  const std::string error = json::parse(reply.body)["Error"];
  EXPECT_NE(error.find("etcd is unhappy"), std::string::npos) << error;
  EXPECT_NE(error.find("not bound"), std::string::npos)
      << "says what the read-back showed: " << error;
  EXPECT_EQ(reply.failure, "api_error");
  EXPECT_EQ(server.requests("get pod"), reads + 1) << "a 500 is ambiguous: the pod is read back";
  EXPECT_FALSE(server.GetPod("default", "a")->at("spec").contains("nodeName"))
      << "the real outcome: a is not bound";
  // So its GPU really is free.
  reply = d.extender->Handle(Verb::kBind, BindBody(b, "n1").dump());
  EXPECT_EQ(json::parse(reply.body)["Error"], "") << reply.body;
  EXPECT_EQ(server.bindings(), 1);
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
  sched::ClusterStateOptions options;
  auto state = std::move(*sched::ClusterState::Create(options, {}));
  test::FakeApiServer server;
  kube::ClientConfig config;
  config.server = server.url();
  auto api = kube::MakeCurlClient(config);
  Extender extender(*state, api.get());
  auto reply = extender.Handle(Verb::kBind, BindBody(PodWithOne("p", 1, 0, 0), "n1").dump());
  EXPECT_EQ(reply.failure, "not_synced");
}

// --- the node lock (node_lock.h) ---------------------------------------------------------------

std::string ErrorOf(const VerbReply& reply) { return json::parse(reply.body)["Error"]; }

// The lock the API server holds on `node`.
std::optional<kube::NodeLock> LockOn(const test::FakeApiServer& server, const std::string& node) {
  return kube::ReadNodeLock(*server.GetNode(node)).lock;
}

bool HasGrant(const test::FakeApiServer& server, const std::string& pod) {
  const json stored = *server.GetPod("default", pod);
  return stored["metadata"].contains("annotations") &&
         stored["metadata"]["annotations"].contains("gpumux.io/grant");
}

// Tenants the state has booked on a node's GPUs (assumed or bound).
std::size_t TenantsOn(const sched::ClusterState& state, const std::string& node) {
  std::size_t n = 0;
  const json inspect = sched::StateJson(state.Snapshot());
  for (const json& item : inspect["nodes"]) {
    if (item["name"] != node) continue;
    for (const json& gpu : item["gpus"]) n += gpu["tenants"].size();
  }
  return n;
}

// The device plugin's part, done by hand: every device of the holder was served, so the lock
// is removed (with the resourceVersion it was read at).
void DevicePluginFinishes(const test::FakeApiServer& server, kube::KubeApi& api,
                          const std::string& node) {
  const kube::NodeLockView view = kube::ReadNodeLock(*server.GetNode(node));
  auto removed = kube::ReplaceNodeLock(api, node, view.resource_version, std::nullopt);
  ASSERT_TRUE(removed.has_value()) << removed.error().ToString();
}

// The API server with `nodes` and two pending pods a and b, and an extender on it.
class ExtenderNodeLock : public ::testing::Test {
 protected:
  void Start(std::vector<json> nodes, DaemonSetup setup = {}, std::int64_t gpu_mem = 1000) {
    for (json& node : nodes) server_.AddNode(std::move(node));
    pods_ = AddPods(server_, {"a", "b"}, gpu_mem);
    daemon_ = std::make_unique<Daemon>(server_, std::move(setup));
  }
  // Binds pod "a" or "b" to `node`.
  VerbReply Bind(const std::string& pod, const std::string& node) {
    return daemon_->extender->Handle(Verb::kBind, BindBody(pods_[pod == "a" ? 0 : 1], node).dump());
  }
  std::optional<kube::NodeLock> Lock(const std::string& node) const {
    return LockOn(server_, node);
  }
  std::size_t Tenants(const std::string& node) const { return TenantsOn(*daemon_->state, node); }

  test::FakeApiServer server_;
  std::vector<json> pods_;
  std::unique_ptr<Daemon> daemon_;  // destroyed before the server
};

TEST_F(ExtenderNodeLock, ASecondPodOnABusyNodeIsRefusedUntilTheFirstWasServed) {
  // The same size: the race that matching by request size loses.
  Start({HandshakeNodeJson("n1", 1, {"A100", 40960})}, {}, 10000);
  auto bind_a = Bind("a", "n1");
  ASSERT_EQ(ErrorOf(bind_a), "") << bind_a.body;
  auto lock = Lock("n1");
  ASSERT_TRUE(lock.has_value());
  EXPECT_EQ(lock->PodKey(), "default/a");
  EXPECT_EQ(lock->uid, "uid-a");
  EXPECT_TRUE(lock->served.empty());

  auto bind_b = Bind("b", "n1");
  EXPECT_EQ(bind_b.failure, "node_busy");
  EXPECT_EQ(bind_b.placements, 0);
  const std::string error = ErrorOf(bind_b);
  EXPECT_NE(error.find("node n1 is allocating devices for pod default/a"), std::string::npos)
      << error;
  EXPECT_NE(error.find("default/b will be retried"), std::string::npos) << error;
  EXPECT_EQ(Lock("n1")->uid, "uid-a") << "the holder keeps the lock";
  EXPECT_FALSE(HasGrant(server_, "b"));
  EXPECT_FALSE(server_.GetPod("default", "b")->at("spec").contains("nodeName"));
  EXPECT_EQ(Tenants("n1"), 1u) << "b's booking was given back";

  // The device plugin serves a and removes the lock: b binds, and the lock names b.
  DevicePluginFinishes(server_, *daemon_->api, "n1");
  bind_b = Bind("b", "n1");
  ASSERT_EQ(ErrorOf(bind_b), "") << bind_b.body;
  EXPECT_EQ(Lock("n1")->uid, "uid-b");
  EXPECT_TRUE(HasGrant(server_, "b"));
  EXPECT_EQ(Tenants("n1"), 2u);
  EXPECT_EQ(server_.bindings(), 2);
}

TEST_F(ExtenderNodeLock, ParallelBindsOnOneHandshakeNodeBindExactlyOnePod) {
  constexpr int kPods = 6;
  const std::vector<json> pods = AddNumberedPods(server_, kPods, 1000);
  Start({HandshakeNodeJson("n1", 2, {"A100", 40960})});
  std::atomic<int> bound{0}, busy{0};
  std::vector<std::thread> threads;
  for (const json& pod : pods) {
    threads.emplace_back([&] {
      auto reply = daemon_->extender->Handle(Verb::kBind, BindBody(pod, "n1").dump());
      if (reply.failure.empty()) ++bound;
      if (reply.failure == "node_busy") ++busy;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(bound.load(), 1);
  EXPECT_EQ(busy.load(), kPods - 1);
  EXPECT_EQ(server_.bindings(), 1);
  EXPECT_EQ(Tenants("n1"), 1u) << "every refused booking was given back";
  const auto lock = Lock("n1");
  ASSERT_TRUE(lock.has_value());
  EXPECT_TRUE(server_.GetPod("default", lock->name)->at("spec").contains("nodeName"))
      << "the lock names the pod that was bound";
}

TEST_F(ExtenderNodeLock, APodRefusedOnABusyNodeCanBindElsewhere) {
  Start({HandshakeNodeJson("n1", 1), HandshakeNodeJson("n2", 1)});
  ASSERT_EQ(ErrorOf(Bind("a", "n1")), "");
  EXPECT_EQ(Bind("b", "n1").failure, "node_busy");
  auto elsewhere = Bind("b", "n2");
  ASSERT_EQ(ErrorOf(elsewhere), "") << elsewhere.body;
  EXPECT_EQ(Lock("n2")->uid, "uid-b");
  EXPECT_EQ(Lock("n1")->uid, "uid-a");
  EXPECT_EQ(Tenants("n1"), 1u);
  EXPECT_EQ(Tenants("n2"), 1u);
}

// Fault 12 of the real-cluster review: a holder bound to the node whose devices the kubelet
// has not allocated yet (a long kubelet restart) keeps the lock past the TTL; taking it over
// would let Allocate serve it with the next pod's GPUs.
TEST_F(ExtenderNodeLock, ABoundHolderStillWaitingForItsDevicesKeepsTheLockPastTheTtl) {
  auto now = std::make_shared<std::atomic<std::int64_t>>(1'800'000'000);
  DaemonSetup setup;
  setup.clock = [now] { return now->load(); };
  setup.extender.node_lock_ttl_seconds = 30;
  Start({HandshakeNodeJson("n1", 2)}, std::move(setup));
  ASSERT_EQ(ErrorOf(Bind("a", "n1")), "");
  EXPECT_EQ(Lock("n1")->since, 1'800'000'000) << "since is the extender's clock";
  ASSERT_TRUE(Eventually([&] { return daemon_->state->FindPod("uid-a")->node_name == "n1"; }));

  *now += 3600;
  auto refused = Bind("b", "n1");
  EXPECT_EQ(refused.failure, "node_busy");
  EXPECT_NE(ErrorOf(refused).find("(3600 s)"), std::string::npos) << refused.body;
  EXPECT_EQ(Lock("n1")->uid, "uid-a");

  // Once the kubelet has started it (Running), its devices were allocated: stale at once.
  json a = *server_.GetPod("default", "a");
  a["status"]["phase"] = "Running";
  server_.UpdatePod(a);
  ASSERT_TRUE(Eventually([&] { return daemon_->state->FindPod("uid-a")->phase == "Running"; }));
  auto taken = Bind("b", "n1");
  ASSERT_EQ(ErrorOf(taken), "") << taken.body;
  EXPECT_EQ(Lock("n1")->uid, "uid-b");
}

// A lock left by a bind that failed and could not release it names a pod that is not bound:
// no kubelet will ask for its devices, so it goes stale after the TTL.
TEST_F(ExtenderNodeLock, AnUnboundHoldersLockIsTakenOverAfterTheTtl) {
  auto now = std::make_shared<std::atomic<std::int64_t>>(1'800'000'000);
  DaemonSetup setup;
  setup.clock = [now] { return now->load(); };
  setup.extender.node_lock_ttl_seconds = 30;
  auto logged = std::make_shared<std::vector<std::string>>();  // bind runs on this thread
  setup.extender.log = [logged](std::string_view line) { logged->emplace_back(line); };
  Start({HandshakeNodeJson("n1", 1)}, std::move(setup));
  kube::NodeLock left;
  left.ns = "default";
  left.name = "a";
  left.uid = "uid-a";
  left.since = *now;
  const kube::NodeLockView view = kube::ReadNodeLock(*server_.GetNode("n1"));
  ASSERT_TRUE(kube::ReplaceNodeLock(*daemon_->api, "n1", view.resource_version, left).has_value());

  *now += 30;
  auto refused = Bind("b", "n1");
  EXPECT_EQ(refused.failure, "node_busy");
  EXPECT_NE(ErrorOf(refused).find("(30 s)"), std::string::npos) << refused.body;

  *now += 1;
  auto taken = Bind("b", "n1");
  ASSERT_EQ(ErrorOf(taken), "") << taken.body;
  const auto lock = Lock("n1");
  EXPECT_EQ(lock->uid, "uid-b");
  EXPECT_EQ(lock->since, 1'800'000'031);
  ASSERT_EQ(logged->size(), 1u);
  EXPECT_EQ(logged->front(),
            "bind took the node lock over pod=default/b node=n1 detail=\"took over the lock of "
            "pod default/a (31 s, not bound and older than the TTL)\"");
}

// Issue 45: two replicas of the extender bind at once for a while (the old leader's verbs still
// in flight after kube-scheduler's lease moved). Replica B's watch is stopped once it has
// synced, so it never sees what A does: the most a lagging watch can lag.
class TwoReplicas : public ::testing::Test {
 protected:
  void Start(std::vector<json> nodes, std::int64_t gpu_mem) {
    for (json& node : nodes) server_.AddNode(std::move(node));
    pods_ = AddPods(server_, {"a", "b"}, gpu_mem);
    a_ = std::make_unique<Daemon>(server_);
    b_ = std::make_unique<Daemon>(server_);
    b_->sync->Stop();
  }
  VerbReply Bind(Daemon& d, const json& pod, const std::string& node) {
    return d.extender->Handle(Verb::kBind, BindBody(pod, node).dump());
  }
  std::string NodeOf(const std::string& pod) const {
    return server_.GetPod("default", pod)->value("/spec/nodeName"_json_pointer, "");
  }
  std::string GrantNodeOf(const std::string& pod) const {
    const json stored = *server_.GetPod("default", pod);
    auto grant =
        kube::DecodeGrant(stored["metadata"]["annotations"]["gpumux.io/grant"].get<std::string>());
    return grant ? grant->node : "unreadable: " + grant.error().message;
  }

  test::FakeApiServer server_;
  std::vector<json> pods_;
  std::unique_ptr<Daemon> a_, b_;  // destroyed before the server
};

// A bound a on n1's only GPU and its device plugin released the lock; B, which never saw that,
// books b on the same GPU (two 30,000 MiB pods on 40,960). The lock is free, but the fence
// reads n1's pods fresh and finds a bound with a grant B's watch has not shown: b is not bound.
TEST_F(TwoReplicas, AReplicaWhoseWatchIsBehindDoesNotBindOnAStaleView) {
  Start({HandshakeNodeJson("n1", 1)}, 30000);
  ASSERT_EQ(ErrorOf(Bind(*a_, pods_[0], "n1")), "");
  DevicePluginFinishes(server_, *a_->api, "n1");
  const VerbReply b = Bind(*b_, pods_[1], "n1");
  EXPECT_EQ(b.failure, "stale_view") << b.body;
  EXPECT_NE(ErrorOf(b).find("pod default/a is bound to n1 with a grant this extender's watch "
                            "has not shown yet"),
            std::string::npos)
      << b.body;
  EXPECT_EQ(NodeOf("b"), "") << "b was bound beside a: the GPU granted twice";
  EXPECT_FALSE(LockOn(server_, "n1").has_value()) << "the lock B took is given back";
  EXPECT_EQ(TenantsOn(*b_->state, "n1"), 0u) << "and so is its booking";
  EXPECT_EQ(server_.bindings(), 1);
}

// The fence reads the node's pods as a consistent read (no resourceVersion: the API server
// answers as of now, from its watch cache after a progress check on 1.31+, else from etcd),
// never "any version" (resourceVersion=0), which may be older than the lock. Asking for "not
// older than" the lock's own write was tried: the pods' cache does not move with a node write,
// and each such read waited for the next pod event (scale.SmallRunOnARealControlPlane's
// 150-pod burst on 50 nodes: 4.3 pods/s, p99 29 s, one read timed out; 10.0 pods/s as it is).
TEST_F(TwoReplicas, TheFenceIsAConsistentReadOfTheNodesPods) {
  Start({HandshakeNodeJson("n1", 1)}, 1000);
  ASSERT_EQ(ErrorOf(Bind(*a_, pods_[0], "n1")), "");
  bool fenced = false;
  for (const test::SeenRequest& r : server_.seen()) {
    if (r.method == "GET" &&
        r.target.find("fieldSelector=spec.nodeName%3Dn1") != std::string::npos) {
      EXPECT_EQ(r.target.find("resourceVersion"), std::string::npos) << r.target;
      fenced = true;
    }
  }
  EXPECT_TRUE(fenced) << "no read of n1's pods";
}

// The fence costs a LIST of the node's pods: it runs only near a hand-over of kube-scheduler's
// lease (acquired within handover_window), or when the lease cannot be read (as here before).
TEST_F(TwoReplicas, OnlyBindsNearAHandOverOfTheLeaseAreFenced) {
  Start({HandshakeNodeJson("n1", 2)}, 1000);
  const auto fence_reads = [&] {
    int n = 0;
    for (const test::SeenRequest& r : server_.seen()) {
      n += r.method == "GET" &&
           r.target.find("fieldSelector=spec.nodeName%3Dn1") != std::string::npos;
    }
    return n;
  };
  const std::string lease =
      "/apis/coordination.k8s.io/v1/namespaces/gpumux-system/leases/gpumux-scheduler";
  const auto acquired = [&](std::int64_t ago) {
    a_->lossy->Serve(lease, {{"spec",
                              {{"holderIdentity", "vm_1"},
                               {"acquireTime", core::FormatRfc3339(std::time(nullptr) - ago)}}}});
  };
  acquired(3600);
  ASSERT_EQ(ErrorOf(Bind(*a_, pods_[0], "n1")), "");
  EXPECT_EQ(fence_reads(), 0) << "an hour after the hand-over: one leader, no fence";
  DevicePluginFinishes(server_, *a_->api, "n1");
  acquired(5);
  ASSERT_EQ(ErrorOf(Bind(*a_, pods_[1], "n1")), "");
  EXPECT_EQ(fence_reads(), 1) << "5 s after it: fenced";
}

// A holds n1's lock for c (bound, its devices not yet allocated); B has never seen c. It asks
// the API server about the holder instead of taking a live lock for a gone one's.
TEST_F(TwoReplicas, ALockHeldByAPodAReplicaHasNotSeenIsAskedAboutNotTakenOver) {
  Start({HandshakeNodeJson("n1", 2)}, 1000);
  const json c = PodWithOne("c", 0, 1000, 0);
  server_.AddPod(c);  // after B's watch stopped
  ASSERT_TRUE(Eventually([&] { return a_->state->FindPod(c["metadata"]["uid"]).has_value(); }));
  ASSERT_EQ(ErrorOf(Bind(*a_, c, "n1")), "");
  const VerbReply b = Bind(*b_, pods_[1], "n1");
  EXPECT_EQ(b.failure, "node_busy") << b.body;
  ASSERT_TRUE(LockOn(server_, "n1").has_value());
  EXPECT_EQ(LockOn(server_, "n1")->uid, c["metadata"]["uid"]) << "c's lock was taken over";
  EXPECT_EQ(NodeOf("b"), "");
}

// A binds a to n1; B, which still sees a pending, binds it to n2. The grant travels in the
// Binding: B's is refused (a is bound), and a keeps A's grant. With the grant written before
// the Binding, B's would have overwritten it: a bound to n1 with a grant for n2 is void (lost).
TEST_F(TwoReplicas, TwoReplicasBindingOnePodLeaveItTheGrantOfTheBindingThatWon) {
  Start({HandshakeNodeJson("n1", 1), HandshakeNodeJson("n2", 1)}, 1000);
  ASSERT_EQ(ErrorOf(Bind(*a_, pods_[0], "n1")), "");
  const VerbReply late = Bind(*b_, pods_[0], "n2");
  EXPECT_NE(ErrorOf(late), "") << late.body;
  EXPECT_EQ(NodeOf("a"), "n1");
  EXPECT_EQ(GrantNodeOf("a"), "n1");
  EXPECT_FALSE(LockOn(server_, "n2").has_value());
  EXPECT_EQ(server_.bindings(), 1);
}

// A setup whose binds wait up to `wait` for a busy node lock or a device plugin not ready.
DaemonSetup WaitingUpTo(std::chrono::milliseconds wait) {
  DaemonSetup setup;
  setup.wait_for_locks = true;
  setup.extender.bind_wait = wait;
  return setup;
}

// A bind on a thread of its own (one that waits); join() before reading `reply`.
struct BindOnAThread {
  explicit BindOnAThread(std::function<VerbReply()> bind)
      : thread([this, bind = std::move(bind)] {
          reply = bind();
          done = true;
        }) {}
  void join() { thread.join(); }
  std::atomic<bool> done{false};
  VerbReply reply;
  std::thread thread;  // last: starts once the members above exist
};

// Fault 3 of the real-cluster review: a bind refused because another pod holds the lock sent
// its pod into kube-scheduler's 1 -> 10 s backoff (8 pods on one node took 31.5 s). Now it
// keeps its booking and waits for the node watch to show the lock released.
TEST_F(ExtenderNodeLock, ABindWaitsForTheLockAndBindsOnceTheDevicePluginReleasesIt) {
  Start({HandshakeNodeJson("n1", 2, {"A100", 40960})}, WaitingUpTo(std::chrono::seconds(20)),
        10000);
  ASSERT_EQ(ErrorOf(Bind("a", "n1")), "");
  BindOnAThread bind_b([&] { return Bind("b", "n1"); });
  ASSERT_TRUE(Eventually([&] { return daemon_->extender->waiting_binds() == 1; }));
  EXPECT_FALSE(bind_b.done.load());
  EXPECT_EQ(Tenants("n1"), 2u) << "the waiting bind keeps its booking";
  EXPECT_FALSE(HasGrant(server_, "b"));

  DevicePluginFinishes(server_, *daemon_->api, "n1");
  bind_b.join();
  ASSERT_EQ(ErrorOf(bind_b.reply), "") << bind_b.reply.body;
  EXPECT_EQ(Lock("n1")->uid, "uid-b");
  EXPECT_TRUE(HasGrant(server_, "b"));
  EXPECT_EQ(server_.bindings(), 2);
  EXPECT_EQ(daemon_->extender->waiting_binds(), 0);
}

TEST_F(ExtenderNodeLock, ABindWaitsForTheDevicePluginToBeReady) {
  DaemonSetup setup = WaitingUpTo(std::chrono::seconds(20));
  setup.extender.bind_poll = std::chrono::milliseconds(20);
  json node = HandshakeNodeJson("n1", 2);
  node["metadata"]["annotations"]["gpumux.io/device-plugin"] = "starting";
  Start({node}, std::move(setup));
  BindOnAThread bind_a([&] { return Bind("a", "n1"); });
  ASSERT_TRUE(Eventually([&] { return daemon_->extender->waiting_binds() == 1; }));
  EXPECT_FALSE(bind_a.done.load());
  EXPECT_FALSE(Lock("n1").has_value());
  node = *server_.GetNode("n1");
  node["metadata"]["annotations"]["gpumux.io/device-plugin"] = "ready";
  server_.UpdateNode(node);
  bind_a.join();
  ASSERT_EQ(ErrorOf(bind_a.reply), "") << bind_a.reply.body;
  EXPECT_EQ(Lock("n1")->uid, "uid-a");
}

TEST_F(ExtenderNodeLock, ABindOnANodeWhosePluginStaysNotReadyIsRefusedWithTheReason) {
  json node = HandshakeNodeJson("n1", 2);
  node["metadata"]["annotations"]["gpumux.io/device-plugin"] = "stopping";
  Start({node});
  auto refused = Bind("a", "n1");
  EXPECT_EQ(refused.failure, "plugin_not_ready");
  EXPECT_NE(ErrorOf(refused).find("the device plugin on node n1 is stopping"), std::string::npos)
      << refused.body;
  EXPECT_EQ(Tenants("n1"), 0u);
  EXPECT_FALSE(HasGrant(server_, "a"));
}

TEST_F(ExtenderNodeLock, AWaitingBindGivesUpAfterItsWaitAndGivesTheBookingBack) {
  Start({HandshakeNodeJson("n1", 2)}, WaitingUpTo(std::chrono::milliseconds(300)));
  ASSERT_EQ(ErrorOf(Bind("a", "n1")), "");
  auto refused = Bind("b", "n1");
  EXPECT_EQ(refused.failure, "node_busy");
  EXPECT_EQ(Tenants("n1"), 1u);
  EXPECT_EQ(daemon_->extender->waiting_binds(), 0);
}

TEST_F(ExtenderNodeLock, BindsBeyondTheWaitingLimitAreRefusedAtOnce) {
  DaemonSetup setup = WaitingUpTo(std::chrono::seconds(20));
  setup.extender.max_waiting_binds = 1;
  const std::vector<json> more = AddPods(server_, {"c"}, 1000);
  Start({HandshakeNodeJson("n1", 3)}, std::move(setup));
  ASSERT_EQ(ErrorOf(Bind("a", "n1")), "");
  BindOnAThread bind_b([&] { return Bind("b", "n1"); });
  ASSERT_TRUE(Eventually([&] { return daemon_->extender->waiting_binds() == 1; }));
  auto bind_c = daemon_->extender->Handle(Verb::kBind, BindBody(more[0], "n1").dump());
  EXPECT_EQ(bind_c.failure, "node_busy") << "no waiting slot left: refused without waiting";
  DevicePluginFinishes(server_, *daemon_->api, "n1");
  bind_b.join();
  EXPECT_EQ(ErrorOf(bind_b.reply), "") << bind_b.reply.body;
}

TEST_F(ExtenderNodeLock, ALockWhoseHolderWasDeletedIsTakenOverAtOnce) {
  Start({HandshakeNodeJson("n1", 1)});
  ASSERT_EQ(ErrorOf(Bind("a", "n1")), "");
  server_.DeletePod("default", "a");
  ASSERT_TRUE(Eventually([&] { return !daemon_->state->FindPod("uid-a").has_value(); }));
  auto taken = Bind("b", "n1");
  ASSERT_EQ(ErrorOf(taken), "") << taken.body;
  EXPECT_EQ(Lock("n1")->uid, "uid-b");
}

TEST_F(ExtenderNodeLock, AFailedBindReleasesTheLockItTook) {
  Start({HandshakeNodeJson("n1", 1)});
  server_.FailNext("POST", "/pods/a/binding", 500, "InternalError", "etcd is unhappy");
  auto failed = Bind("a", "n1");
  EXPECT_NE(ErrorOf(failed).find("etcd is unhappy"), std::string::npos) << failed.body;
  EXPECT_FALSE(Lock("n1").has_value()) << "the Binding failed: the lock is released";
  EXPECT_EQ(Tenants("n1"), 0u);

  // The fence (the node's pods read after the lock) fails: nothing is bound, the lock goes.
  server_.FailNext("GET", "fieldSelector=spec.nodeName%3Dn1", 500, "InternalError",
                   "no list today");
  failed = Bind("a", "n1");
  EXPECT_NE(ErrorOf(failed).find("reading the pods of n1 before binding"), std::string::npos)
      << failed.body;
  EXPECT_NE(ErrorOf(failed).find("no list today"), std::string::npos) << failed.body;
  EXPECT_FALSE(Lock("n1").has_value()) << "the fence failed: the lock is released";
  EXPECT_EQ(Tenants("n1"), 0u);

  auto bound = Bind("b", "n1");
  ASSERT_EQ(ErrorOf(bound), "") << bound.body;
  EXPECT_EQ(Lock("n1")->uid, "uid-b");
}

TEST_F(ExtenderNodeLock, AnApiErrorWhileTakingTheLockGivesTheBookingBack) {
  Start({HandshakeNodeJson("n1", 1)});
  server_.FailNext("PATCH", "/api/v1/nodes/n1", 403, "Forbidden", "nodes is forbidden");
  auto failed = Bind("a", "n1");
  EXPECT_EQ(failed.failure, "api_error");
  EXPECT_NE(ErrorOf(failed).find("taking the node lock (gpumux.io/allocating) on n1"),
            std::string::npos)
      << failed.body;
  EXPECT_NE(ErrorOf(failed).find("nodes is forbidden"), std::string::npos) << failed.body;
  EXPECT_EQ(Tenants("n1"), 0u);
  EXPECT_FALSE(HasGrant(server_, "a"));
}

TEST_F(ExtenderNodeLock, ANodeWithoutTheHandshakeGetsNoLock) {
  Start({NodeJson("n1", 1)});
  ASSERT_EQ(ErrorOf(Bind("a", "n1")), "");
  ASSERT_EQ(ErrorOf(Bind("b", "n1")), "") << "without the handshake binds are not serialised";
  const json node = *server_.GetNode("n1");
  EXPECT_FALSE(node["metadata"]["annotations"].contains("gpumux.io/allocating")) << node.dump();
  EXPECT_EQ(server_.requests("patch node"), 0);
  EXPECT_EQ(server_.requests("get node"), 2) << "one read of the node per bind";
}

// --- ambiguous answers: the Binding may have been applied although its answer says otherwise ---

struct LostAnswer {
  std::string name;
  kube::ApiError error;
};

void PrintTo(const LostAnswer& c, std::ostream* os) { *os << c.name; }

class ExtenderLostBindingAnswer : public ::testing::TestWithParam<LostAnswer> {};

TEST_P(ExtenderLostBindingAnswer, IsReadBackSoTheBoundPodKeepsItsGpuAndNoSecondPodGetsIt) {
  test::FakeApiServer server;
  server.AddNode(NodeJson("n1", 1));
  const json a = PodWithOne("a", 1, 0, 0);
  const json b = PodWithOne("b", 1, 0, 0);
  server.AddPod(a);
  server.AddPod(b);
  Daemon d(server);
  d.lossy->LoseAnswerOfNextPost("/pods/a/binding", GetParam().error);
  auto first = d.extender->Handle(Verb::kBind, BindBody(a, "n1").dump());
  ASSERT_TRUE(server.GetPod("default", "a")->at("spec").contains("nodeName"))
      << "the API server applied the Binding";
  EXPECT_EQ(ErrorOf(first), "") << "the read-back shows a bound with its grant: " << first.body;
  EXPECT_EQ(first.placements, 1);
  auto second = d.extender->Handle(Verb::kBind, BindBody(b, "n1").dump());
  EXPECT_NE(ErrorOf(second).find("no longer fits"), std::string::npos)
      << "the only GPU was granted twice: " << second.body;
  EXPECT_FALSE(server.GetPod("default", "b")->at("spec").contains("nodeName"));
  EXPECT_EQ(server.bindings(), 1);
  EXPECT_TRUE(Eventually([&] { return d.state->counters().grants_bound == 1; }));
  EXPECT_EQ(d.state->counters().grant_conflicts, 0);
}

INSTANTIATE_TEST_SUITE_P(
    Answers, ExtenderLostBindingAnswer,
    ::testing::Values(LostAnswer{"a_500_after_the_commit",
                                 kube::ApiError{500, "InternalError", "etcd leader changed"}},
                      LostAnswer{"a_client_timeout",
                                 kube::ApiError{0, "Timeout was reached",
                                                "Operation timed out after 3000 milliseconds"}}),
    [](const ::testing::TestParamInfo<LostAnswer>& param_info) { return param_info.param.name; });

TEST(ExtenderIntegration, ABindingWhoseOutcomeCannotBeReadBackKeepsItsGpusUntilTheWatchShowsIt) {
  test::FakeApiServer server;
  server.AddNode(NodeJson("n1", 1));
  const json a = PodWithOne("a", 1, 0, 0);
  const json b = PodWithOne("b", 1, 0, 0);
  server.AddPod(a);
  server.AddPod(b);
  Daemon d(server);
  d.lossy->LoseAnswerOfNextPost("/pods/a/binding",
                                kube::ApiError{0, "Timeout was reached", "Operation timed out"});
  d.lossy->FailNextGet("/pods/a",
                       kube::ApiError{0, "Couldn't connect to server", "connection refused"});
  auto first = d.extender->Handle(Verb::kBind, BindBody(a, "n1").dump());
  EXPECT_EQ(first.failure, "api_error");
  EXPECT_NE(ErrorOf(first).find("Operation timed out"), std::string::npos) << first.body;
  EXPECT_NE(ErrorOf(first).find("connection refused"), std::string::npos) << first.body;
  // Whatever the watch shows meanwhile, the GPU stays booked for a.
  auto second = d.extender->Handle(Verb::kBind, BindBody(b, "n1").dump());
  EXPECT_NE(ErrorOf(second).find("no longer fits"), std::string::npos)
      << "a GPU that a may hold was given away: " << second.body;
  // The watch shows a bound: the booking is bound, the GPU still taken.
  EXPECT_TRUE(Eventually([&] { return d.state->counters().grants_bound == 1; }));
  second = d.extender->Handle(Verb::kBind, BindBody(b, "n1").dump());
  EXPECT_NE(ErrorOf(second).find("no longer fits"), std::string::npos) << second.body;
  EXPECT_EQ(server.bindings(), 1);
  EXPECT_FALSE(server.GetPod("default", "b")->at("spec").contains("nodeName"));
}

// --- filter before and after the first sync ----------------------------------------------------

TEST(ExtenderIntegration, FilterBeforeTheFirstSyncIsARetriableErrorNotUnresolvable) {
  sched::ClusterStateOptions options;
  auto state = std::move(*sched::ClusterState::Create(options, {}));
  Extender extender(*state, nullptr);
  const json pod = PodWithOne("p", 1, 0, 0);
  auto reply = extender.Handle(Verb::kFilter, FilterBody(pod, {"n1", "n2"}).dump());
  ASSERT_EQ(reply.http_status, 200) << reply.body;
  const json body = json::parse(reply.body);
  EXPECT_NE(body["Error"].get<std::string>().find("waiting for its first sync"), std::string::npos)
      << reply.body;
  EXPECT_TRUE(body["FailedAndUnresolvableNodes"].is_null() ||
              body["FailedAndUnresolvableNodes"].empty())
      << "unresolvable would skip preemption: " << reply.body;
  EXPECT_EQ(reply.failure, "not_synced");
}

TEST(ExtenderIntegration, ANodeNotKnownAfterTheSyncFailsRetriablyNotUnresolvably) {
  test::FakeApiServer server;
  server.AddNode(NodeJson("n1", 1));
  const json pod = PodWithOne("p", 1, 0, 0);
  server.AddPod(pod);
  Daemon d(server);
  auto reply = d.extender->Handle(Verb::kFilter, FilterBody(pod, {"n1", "brand-new"}).dump());
  const json body = json::parse(reply.body);
  EXPECT_EQ(body["NodeNames"], json::array({"n1"})) << reply.body;
  EXPECT_FALSE(body["FailedAndUnresolvableNodes"].contains("brand-new")) << reply.body;
  ASSERT_TRUE(body["FailedNodes"].contains("brand-new")) << reply.body;
  EXPECT_NE(body["FailedNodes"]["brand-new"].get<std::string>().find("not known"),
            std::string::npos)
      << reply.body;
}

// --- the unit of gpumux.io/gpu-mem --------------------------------------------------------------

TEST(ExtenderGpuMemUnit, PodsAskInUnitsAndNodesCountingInAnotherUnitAreUnresolvable) {
  test::FakeApiServer server;
  server.AddNode(HandshakeNodeJson("gib", 1, {"A100", 40960}, 1024));
  server.AddNode(HandshakeNodeJson("quarter", 1, {"A100", 40960}, 256));
  server.AddNode(NodeJson("silent", 1, {"A100", 40960}));  // publishes no unit: not checked
  const json share = PodWithOne("share", 0, 8, 0);         // 8 GiB
  const json whole = PodWithOne("whole", 1, 0, 0);
  server.AddPod(share);
  server.AddPod(whole);
  DaemonSetup setup;
  setup.gpu_mem_unit_mib = 1024;
  Daemon d(server, setup);

  auto filter =
      d.extender->Handle(Verb::kFilter, FilterBody(share, {"gib", "quarter", "silent"}).dump());
  const json reply = json::parse(filter.body);
  EXPECT_EQ(reply["NodeNames"], json::array({"gib", "silent"})) << filter.body;
  EXPECT_EQ(reply["FailedAndUnresolvableNodes"]["quarter"],
            "gpumux: node counts gpumux.io/gpu-mem in 256 MiB units, this extender in 1024 MiB "
            "(--gpu-mem-unit-mib)");
  filter = d.extender->Handle(Verb::kFilter, FilterBody(whole, {"gib", "quarter"}).dump());
  EXPECT_EQ(json::parse(filter.body)["NodeNames"].size(), 2u)
      << "a pod asking for no gpu-mem is not affected: " << filter.body;

  auto refused = d.extender->Handle(Verb::kBind, BindBody(share, "quarter").dump());
  EXPECT_NE(ErrorOf(refused).find("256 MiB units"), std::string::npos) << refused.body;
  auto bound = d.extender->Handle(Verb::kBind, BindBody(share, "gib").dump());
  ASSERT_EQ(ErrorOf(bound), "") << bound.body;
  auto grant = kube::DecodeGrant(server.GetPod("default", "share")
                                     ->at("metadata")
                                     .at("annotations")
                                     .at("gpumux.io/grant")
                                     .get<std::string>());
  ASSERT_TRUE(grant.has_value());
  EXPECT_EQ(grant->containers[0].gpu_mem_mib, 8192) << "the grant is in MiB";
}

}  // namespace
}  // namespace gpumux::extender
