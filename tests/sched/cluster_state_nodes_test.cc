// ClusterState and the nodes it cannot use: a node whose object does not decode, or that the
// cluster model cannot take, is kept by name as unusable with its reason (and never takes the
// other nodes down with it); a name it does not know is retriable; and nothing is logged while
// the state is locked.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <nlohmann/json.hpp>
#include <ostream>
#include <thread>

#include "gpumux/sched/cluster_state.h"
#include "tests/testing/kube_fixtures.h"

namespace gpumux::sched {
namespace {

using kube::testing::NodeJson;
using kube::testing::PodWithOne;
using nlohmann::json;
using Kind = NodeVerdict::Kind;

constexpr std::int64_t kNow = 1'800'000'000;

std::unique_ptr<ClusterState> Make(std::vector<std::string>* log, std::string policy = "best-fit") {
  ClusterStateOptions options;
  options.policy = std::move(policy);
  options.log = [log](std::string_view line) { log->emplace_back(line); };
  auto state = ClusterState::Create(std::move(options), [] { return kNow; });
  EXPECT_TRUE(state.has_value());
  return std::move(*state);
}

kube::PodInfo Pod(const json& pod) {
  auto p = kube::DecodePod(pod);
  EXPECT_TRUE(p.has_value());
  return *p;
}

json WithCpu(json node, const std::string& cpu) {
  node["status"]["allocatable"]["cpu"] = cpu;
  return node;
}

// A node publishing `gpus` GPUs through allocatable only (default model, no annotation).
json PlainNode(const std::string& name, int gpus) {
  json node = NodeJson(name, 0);
  node["metadata"]["annotations"].erase("gpumux.io/gpus");
  node["status"]["allocatable"]["gpumux.io/gpu"] = std::to_string(gpus);
  return node;
}

TEST(ClusterStateNodes, ANodeWithANegativeCpuIsUnusableWithItsReasonAndTheOthersStillServe) {
  // Today the cluster model refuses it; once DecodeNode refuses it too, the decode error is
  // the reason. Either way only that node is out.
  std::vector<std::string> log;
  auto state = Make(&log);
  const json nodes[] = {NodeJson("n1", 1), WithCpu(NodeJson("bad", 1), "-1"), NodeJson("n2", 1)};
  state->SetNodes(nodes);
  const std::vector<std::string> names = {"n1", "bad", "n2"};
  auto v = state->Evaluate(Pod(PodWithOne("p", 1, 0, 0)), names);
  EXPECT_EQ(v[0].kind, Kind::kFits) << v[0].reason;
  EXPECT_EQ(v[2].kind, Kind::kFits) << v[2].reason;
  EXPECT_EQ(v[1].kind, Kind::kUnresolvable);
  EXPECT_NE(v[1].reason.find("node bad"), std::string::npos) << v[1].reason;
  EXPECT_NE(v[1].reason.find("cpu"), std::string::npos) << v[1].reason;
  EXPECT_TRUE(state->Assume(Pod(PodWithOne("p", 1, 0, 0)), "n1").has_value());
  EXPECT_FALSE(state->Assume(Pod(PodWithOne("q", 1, 0, 0)), "bad").has_value());

  const StateCounters c = state->counters();
  EXPECT_EQ(c.nodes, 2);
  EXPECT_EQ(c.unusable_nodes, 1);
  const json inspect = sched::StateJson(state->Snapshot());
  ASSERT_EQ(inspect["unusable_nodes"].size(), 1u) << inspect.dump();
  EXPECT_EQ(inspect["unusable_nodes"][0]["name"], "bad");
  EXPECT_NE(inspect["unusable_nodes"][0]["reason"].get<std::string>().find("cpu"),
            std::string::npos);
  EXPECT_EQ(inspect["counters"]["unusable_nodes"], 1);

  // Fixed: usable again.
  state->UpsertNode(NodeJson("bad", 1));
  EXPECT_EQ(state->Evaluate(Pod(PodWithOne("q", 1, 0, 0)), names)[1].kind, Kind::kFits);
  EXPECT_EQ(state->counters().unusable_nodes, 0);
}

TEST(ClusterStateNodes, ANodeThatDoesNotDecodeIsCountedAndANamedOneIsKeptAsUnusable) {
  std::vector<std::string> log;
  auto state = Make(&log);
  json nameless = NodeJson("x", 1);
  nameless["metadata"].erase("name");  // DecodeNode's error today
  const json nodes[] = {NodeJson("n1", 1), nameless};
  state->SetNodes(nodes);
  EXPECT_EQ(state->counters().unreadable_nodes, 1) << "a node without a name is counted";
  EXPECT_EQ(state->counters().nodes, 1) << "and the others are kept";
  ASSERT_FALSE(log.empty());
  EXPECT_NE(log.back().find("metadata.name"), std::string::npos) << log.back();
  state->UpsertNode(nameless);
  EXPECT_EQ(state->counters().unreadable_nodes, 2);

  // A named node that DecodeNode refuses (a negative cpu, once objects.cc rejects it; until
  // then the cluster model does): kept by name, unresolvable with the reason.
  state->UpsertNode(WithCpu(NodeJson("n2", 1), "-1"));
  const std::vector<std::string> names = {"n1", "n2"};
  auto v = state->Evaluate(Pod(PodWithOne("p", 1, 0, 0)), names);
  EXPECT_EQ(v[0].kind, Kind::kFits);
  EXPECT_EQ(v[1].kind, Kind::kUnresolvable);
  EXPECT_EQ(v[1].reason.find("not known"), std::string::npos) << v[1].reason;
  EXPECT_NE(v[1].reason.find("cpu"), std::string::npos) << v[1].reason;
  EXPECT_EQ(state->counters().unusable_nodes, 1);
  state->RemoveNode("n2");
  EXPECT_EQ(state->counters().unusable_nodes, 0);
  EXPECT_EQ(state->Evaluate(Pod(PodWithOne("p", 1, 0, 0)), names)[1].reason.find("cpu"),
            std::string::npos);
}

TEST(ClusterStateNodes, ANodeWithMoreThan64GpusIsUnusableNotACrash) {
  std::vector<std::string> log;
  auto state = Make(&log, "fgd");
  const json nodes[] = {NodeJson("n1", 1), PlainNode("huge", 65)};
  state->SetNodes(nodes);
  const std::vector<std::string> names = {"n1", "huge"};
  auto v = state->Evaluate(Pod(PodWithOne("p", 1, 0, 0)), names);
  EXPECT_EQ(v[0].kind, Kind::kFits) << v[0].reason;
  EXPECT_EQ(v[1].kind, Kind::kUnresolvable);
  EXPECT_NE(v[1].reason.find("64"), std::string::npos) << v[1].reason;
  EXPECT_EQ(state->counters().unusable_nodes, 1);
}

TEST(ClusterStateNodes, MoreGpuModelsThanTheModelHoldsExcludeOnlyTheNodesBeyondTheLimit) {
  std::vector<std::string> log;
  auto state = Make(&log);
  std::vector<json> nodes;
  std::vector<std::string> names;
  for (int i = 0; i < 66; ++i) {
    char name[16];
    std::snprintf(name, sizeof name, "n%02d", i);
    nodes.push_back(NodeJson(name, 1, {"model-" + std::to_string(i), 40960}));
    names.emplace_back(name);
  }
  state->SetNodes(nodes);
  auto v = state->Evaluate(Pod(PodWithOne("p", 1, 0, 0)), names);
  int fits = 0, unusable = 0;
  for (const NodeVerdict& verdict : v) {
    if (verdict.kind == Kind::kFits) ++fits;
    if (verdict.kind == Kind::kUnresolvable) {
      ++unusable;
      EXPECT_NE(verdict.reason.find("distinct GPU models"), std::string::npos) << verdict.reason;
    }
  }
  EXPECT_EQ(fits, 64) << "nodes in name order until the 64th model";
  EXPECT_EQ(unusable, 2);
  EXPECT_EQ(v[64].kind, Kind::kUnresolvable);
  EXPECT_EQ(state->counters().unusable_nodes, 2);
}

TEST(ClusterStateNodes, ANameNotKnownIsRetriableAndSaysWhetherTheStateHasSynced) {
  std::vector<std::string> log;
  auto state = Make(&log);
  const json nodes[] = {NodeJson("n1", 1)};
  state->SetNodes(nodes);
  const std::vector<std::string> names = {"ghost"};
  auto before = state->Evaluate(Pod(PodWithOne("p", 1, 0, 0)), names);
  EXPECT_NE(before[0].kind, Kind::kUnresolvable) << "the node may be new";
  EXPECT_NE(before[0].reason.find("first sync"), std::string::npos) << before[0].reason;
  state->MarkSynced();
  auto after = state->Evaluate(Pod(PodWithOne("p", 1, 0, 0)), names);
  EXPECT_NE(after[0].kind, Kind::kUnresolvable) << "the watch may be a moment behind";
  EXPECT_NE(after[0].reason.find("node ghost is not known"), std::string::npos) << after[0].reason;
}

// --- logging happens after the state's lock is released ---------------------------------------

struct LogCase {
  std::string name;
  std::function<void(ClusterState&, std::int64_t& now)> act;
};

void PrintTo(const LogCase& c, std::ostream* os) { *os << c.name; }

json BoundPod(const std::string& name, const std::string& node, const std::string& grant_node) {
  json pod = PodWithOne(name, 1, 0, 0);
  kube::Grant g;
  g.node = grant_node;
  g.assumed_at = kNow;
  g.containers.push_back({"main", {{0, "GPU-" + grant_node + "-0"}}, 1000, 0, false, true});
  pod["metadata"]["annotations"]["gpumux.io/grant"] = kube::EncodeGrant(g);
  pod["spec"]["nodeName"] = node;
  pod["status"]["phase"] = "Running";
  return pod;
}

class ClusterStateLogging : public ::testing::TestWithParam<LogCase> {};

TEST_P(ClusterStateLogging, NoLineIsLoggedWhileTheStateIsLocked) {
  std::int64_t now = kNow;
  ClusterState* self = nullptr;
  int lines = 0, locked = 0;
  ClusterStateOptions options;
  options.policy = "best-fit";
  options.grant_ttl_seconds = 60;
  std::vector<std::thread> probes;  // joined once the case is done (the lock is free then)
  options.log = [&](std::string_view) {
    ++lines;
    // Another thread asks the state something: it must not wait for this line.
    auto done = std::make_shared<std::promise<void>>();
    std::future<void> answered = done->get_future();
    probes.emplace_back([self, done] {
      (void)self->FindPod("uid-none");
      done->set_value();
    });
    if (answered.wait_for(std::chrono::seconds(2)) != std::future_status::ready) ++locked;
  };
  auto state = std::move(*ClusterState::Create(std::move(options), [&] { return now; }));
  self = state.get();
  GetParam().act(*state, now);
  for (std::thread& probe : probes) probe.join();
  EXPECT_GT(lines, 0) << "the case logs something";
  EXPECT_EQ(locked, 0) << locked << " of " << lines << " lines were logged under the lock";
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ClusterStateLogging,
    ::testing::Values(
        LogCase{"a_node_with_a_malformed_gpu_list",
                [](ClusterState& s, std::int64_t&) {
                  json node = NodeJson("n1", 1);
                  node["metadata"]["annotations"]["gpumux.io/gpus"] = "[{";
                  s.UpsertNode(node);
                  const json nodes[] = {node};
                  s.SetNodes(nodes);
                }},
        LogCase{"a_node_with_a_malformed_gpu_mem_unit",
                [](ClusterState& s, std::int64_t&) {
                  json node = NodeJson("n1", 1);
                  node["metadata"]["annotations"]["gpumux.io/gpu-mem-unit-mib"] = "lots";
                  s.UpsertNode(node);
                }},
        LogCase{"a_node_the_cluster_model_refuses",
                [](ClusterState& s, std::int64_t&) {
                  const json nodes[] = {WithCpu(NodeJson("bad", 1), "-1")};
                  s.SetNodes(nodes);
                  (void)s.counters();
                }},
        LogCase{"an_unreadable_grant",
                [](ClusterState& s, std::int64_t&) {
                  json pod = PodWithOne("a", 1, 0, 0);
                  pod["metadata"]["annotations"]["gpumux.io/grant"] = "{not json";
                  s.UpsertPod(pod);
                }},
        LogCase{"conflicting_bound_grants_found_by_a_rebuild",
                [](ClusterState& s, std::int64_t&) {
                  const json nodes[] = {NodeJson("n1", 1)};
                  s.SetNodes(nodes);
                  const json pods[] = {BoundPod("a", "n1", "n1"), BoundPod("b", "n1", "n1")};
                  s.SetPods(pods);
                  (void)sched::StateJson(s.Snapshot());
                }},
        LogCase{"conflicting_bound_grants_seen_by_the_watch",
                [](ClusterState& s, std::int64_t&) {
                  const json nodes[] = {NodeJson("n1", 1)};
                  s.SetNodes(nodes);
                  (void)s.counters();
                  s.UpsertPod(BoundPod("a", "n1", "n1"));
                  s.UpsertPod(BoundPod("b", "n1", "n1"));
                }},
        LogCase{"a_pod_bound_elsewhere_than_its_grant",
                [](ClusterState& s, std::int64_t&) { s.UpsertPod(BoundPod("a", "n2", "n1")); }},
        LogCase{"an_expired_assumption",
                [](ClusterState& s, std::int64_t& now) {
                  const json nodes[] = {NodeJson("n1", 1)};
                  s.SetNodes(nodes);
                  ASSERT_TRUE(s.Assume(Pod(PodWithOne("a", 1, 0, 0)), "n1").has_value());
                  now += 61;
                  EXPECT_EQ(s.ExpireAssumed(), 1);
                }}),
    [](const ::testing::TestParamInfo<LogCase>& param_info) { return param_info.param.name; });

}  // namespace
}  // namespace gpumux::sched
