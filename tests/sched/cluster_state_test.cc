#include "gpumux/sched/cluster_state.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "gpumux/core/time.h"
#include "tests/testing/kube_fixtures.h"

namespace gpumux::sched {
namespace {

using kube::testing::ContainerOf;
using kube::testing::NodeJson;
using kube::testing::PodJson;
using kube::testing::PodWithOne;
using nlohmann::json;
using Kind = NodeVerdict::Kind;

class ClusterStateTest : public ::testing::Test {
 protected:
  std::unique_ptr<ClusterState> Make(std::string policy = "best-fit", std::int64_t ttl = 60) {
    ClusterStateOptions options;
    options.policy = std::move(policy);
    options.grant_ttl_seconds = ttl;
    options.log = [this](std::string_view line) { log_.emplace_back(line); };
    auto state = ClusterState::Create(std::move(options), [this] { return now_; });
    EXPECT_TRUE(state.has_value());
    return std::move(*state);
  }
  static kube::PodInfo Pod(const json& pod) {
    auto p = kube::DecodePod(pod);
    EXPECT_TRUE(p.has_value());
    return *p;
  }
  // The pod as the API server shows it after a successful bind.
  static json Bound(json pod, const kube::Grant& grant) {
    pod["metadata"]["annotations"]["gpumux.io/grant"] = kube::EncodeGrant(grant);
    pod["spec"]["nodeName"] = grant.node;
    pod["status"]["phase"] = "Running";
    return pod;
  }
  std::int64_t now_ = 1'800'000'000;
  std::vector<std::string> log_;
};

TEST_F(ClusterStateTest, FilterSaysWhichGpuCameClosestAndByHowMuch) {
  auto state = Make();
  const json nodes[] = {NodeJson("n1", 1, {"A100", 10000})};
  state->SetNodes(nodes);
  auto grant = state->Assume(Pod(PodWithOne("a", 0, 6000, 0)), "n1");
  ASSERT_TRUE(grant.has_value()) << grant.error().message;
  const std::vector<std::string> names = {"n1"};
  auto v = state->Evaluate(Pod(PodWithOne("b", 0, 8192, 0)), names);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].kind, Kind::kDoesNotFit);
  EXPECT_NE(v[0].reason.find("closest is GPU 0 (4000 MiB"), std::string::npos) << v[0].reason;
  EXPECT_NE(v[0].reason.find("4192 MiB short"), std::string::npos) << v[0].reason;
}

TEST_F(ClusterStateTest, MoreGpusThanTheNodeHasIsUnresolvable) {
  auto state = Make();
  const json nodes[] = {NodeJson("n1", 8)};
  state->SetNodes(nodes);
  const std::vector<std::string> names = {"n1", "ghost"};
  auto v = state->Evaluate(Pod(PodWithOne("big", 64, 0, 0)), names);
  EXPECT_EQ(v[0].kind, Kind::kUnresolvable);
  EXPECT_EQ(v[0].reason, "needs 64 GPUs, node has 8");
  EXPECT_EQ(v[1].kind, Kind::kUnknownNode) << "retriable: the node may be new";
  EXPECT_NE(v[1].reason.find("not known"), std::string::npos);
}

TEST_F(ClusterStateTest, FgdSatReserveKeepsTheLastIdleGpusForWholeGpuPods) {
  // policy/fgd_sat.h through the extender's own state: typical pods whole GPU 0.5, 810 milli
  // 0.46, 160 milli 0.04 (a 190 remainder fits 4 % of the GPU pods: stranded).
  ClusterStateOptions options;
  options.policy = "fgd-sat-reserve";
  options.context.knobs["reserve-max-wait-seconds"] = 600;
  options.log = [this](std::string_view line) { log_.emplace_back(line); };
  const auto typical = [](core::MilliCpu cpu, core::MilliGpu milli, double weight) {
    policy::TypicalPod p;
    p.cpu_milli = cpu;
    p.gpu_milli = milli;
    p.gpu_count = 1;
    p.weight = weight;
    return p;
  };
  options.context.typical_pods = {typical(100, 1000, 0.5), typical(100, 810, 0.46),
                                  typical(100, 160, 0.04)};
  auto made = ClusterState::Create(std::move(options), [this] { return now_; });
  ASSERT_TRUE(made.has_value()) << made.error().message;
  ClusterState& state = **made;
  const json nodes[] = {NodeJson("n1", 12), NodeJson("n2", 1)};
  state.SetNodes(nodes);
  for (int i = 0; i < 11; ++i) {  // n1: 11 of 12 GPUs whole-GPU pods
    ASSERT_TRUE(state.Assume(Pod(PodWithOne("w" + std::to_string(i), 1, 0, 0)), "n1"));
  }
  ASSERT_TRUE(state.Assume(Pod(PodWithOne("small", 0, 0, 160)), "n2"));
  // 1 of 13 GPUs idle (< 10 %): the 810 is declined on n1's idle GPU, and fits n2's shared one.
  const std::vector<std::string> names = {"n1", "n2"};
  auto v = state.Evaluate(Pod(PodWithOne("p810", 0, 0, 810)), names);
  EXPECT_EQ(v[0].kind, Kind::kDeclined);
  EXPECT_EQ(v[0].reason, "policy fgd-sat-reserve would rather wait than use this node");
  EXPECT_EQ(v[1].kind, Kind::kFits) << v[1].reason;
  // A whole-GPU pod takes the kept GPU.
  EXPECT_EQ(state.Evaluate(Pod(PodWithOne("whole", 1, 0, 0)), names)[0].kind, Kind::kFits);
  // A pod created ten minutes ago is overdue: never held back (--reserve-max-wait-seconds).
  json old = PodWithOne("old810", 0, 0, 810);
  old["metadata"]["creationTimestamp"] = core::FormatRfc3339(now_ - 600);
  const std::vector<std::string> only_n1 = {"n1"};
  EXPECT_EQ(state.Evaluate(Pod(old), only_n1)[0].kind, Kind::kFits);
  auto grant = state.Assume(Pod(old), "n1");
  ASSERT_TRUE(grant.has_value()) << grant.error().message;
  EXPECT_EQ(grant->containers[0].gpus.size(), 1u);
  // One second younger, the same pod would have been held.
  old["metadata"]["creationTimestamp"] = core::FormatRfc3339(now_ - 599);
  old["metadata"]["name"] = "young810";
  old["metadata"]["uid"] = "uid-young810";
  const json more_nodes[] = {NodeJson("n1", 12), NodeJson("n2", 1), NodeJson("n3", 1)};
  state.SetNodes(more_nodes);  // n3: an idle GPU again (1 of 14 idle: still scarce)
  const std::vector<std::string> only_n3 = {"n3"};
  EXPECT_EQ(state.Evaluate(Pod(old), only_n3)[0].kind, Kind::kDeclined);
  // Preempt (FitsWithout) says what the filter says: no room while the pod is held, room once it
  // is overdue (before, preempt never applied the overdue rule and refused the room).
  const std::vector<std::string> no_victims;
  EXPECT_FALSE(state.FitsWithout(Pod(old), "n3", no_victims));
  json late = old;
  late["metadata"]["creationTimestamp"] = core::FormatRfc3339(now_ - 600);
  late["metadata"]["name"] = "late810";
  late["metadata"]["uid"] = "uid-late810";
  EXPECT_EQ(state.Evaluate(Pod(late), only_n3)[0].kind, Kind::kFits);
  EXPECT_TRUE(state.FitsWithout(Pod(late), "n3", no_victims));
  // The extender asks its requeuer to retry the held pod then.
  EXPECT_EQ(state.OverdueInSeconds(Pod(old)), 1);
  EXPECT_EQ(state.OverdueInSeconds(Pod(PodWithOne("no-creation-time", 0, 0, 810))), std::nullopt);
  EXPECT_EQ(Make()->OverdueInSeconds(Pod(old)), std::nullopt) << "no wait limit set";
}

TEST_F(ClusterStateTest, PodsAskingForNothingPassEverywhere) {
  auto state = Make();
  const json nodes[] = {NodeJson("n1", 0)};
  state->SetNodes(nodes);
  const std::vector<std::string> names = {"n1"};
  auto v = state->Evaluate(Pod(PodJson("cpu-only", {ContainerOf{}})), names);
  EXPECT_EQ(v[0].kind, Kind::kFits);
}

TEST_F(ClusterStateTest, AssumedGrantsAreBookedAndExpireWhenNeverBound) {
  auto state = Make("best-fit", 60);
  const json nodes[] = {NodeJson("n1", 1)};
  state->SetNodes(nodes);
  const kube::PodInfo a = Pod(PodWithOne("a", 1, 0, 0));
  ASSERT_TRUE(state->Assume(a, "n1").has_value());
  const kube::PodInfo b = Pod(PodWithOne("b", 1, 0, 0));
  EXPECT_FALSE(state->Assume(b, "n1").has_value()) << "the only GPU is assumed by a";
  now_ += 61;
  EXPECT_EQ(state->ExpireAssumed(), 1);
  EXPECT_TRUE(state->Assume(b, "n1").has_value());
  EXPECT_EQ(state->counters().grants_expired, 1);
}

TEST_F(ClusterStateTest, ABoundGrantNeverExpires) {
  auto state = Make("best-fit", 10);
  const json nodes[] = {NodeJson("n1", 1)};
  state->SetNodes(nodes);
  const json pod = PodWithOne("a", 1, 0, 0);
  auto grant = state->Assume(Pod(pod), "n1");
  ASSERT_TRUE(grant.has_value());
  state->UpsertPod(Bound(pod, *grant));
  now_ += 1000;
  EXPECT_EQ(state->ExpireAssumed(), 0);
  EXPECT_EQ(state->counters().grants_bound, 1);
}

TEST_F(ClusterStateTest, ARestartRebuildsGrantsFromAnnotationsSoNothingIsGrantedTwice) {
  const json nodes[] = {NodeJson("n1", 2)};
  std::vector<json> pods;
  {
    auto before = Make();
    before->SetNodes(nodes);
    for (const char* name : {"a", "b"}) {
      const json pod = PodWithOne(name, 1, 0, 0);
      auto grant = before->Assume(Pod(pod), "n1");
      ASSERT_TRUE(grant.has_value());
      pods.push_back(Bound(pod, *grant));
    }
  }
  auto after = Make();
  after->SetNodes(nodes);
  after->SetPods(pods);
  EXPECT_EQ(after->counters().grants_bound, 2);
  EXPECT_FALSE(after->Assume(Pod(PodWithOne("c", 1, 0, 0)), "n1").has_value());
  // One finishes: its GPU is free again.
  pods[0]["status"]["phase"] = "Succeeded";
  after->UpsertPod(pods[0]);
  EXPECT_TRUE(after->Assume(Pod(PodWithOne("c", 1, 0, 0)), "n1").has_value());
}

TEST_F(ClusterStateTest, AnAssumedGrantSeenAfterARestartHoldsUntilItsTtl) {
  auto state = Make("best-fit", 60);
  const json nodes[] = {NodeJson("n1", 1)};
  state->SetNodes(nodes);
  json pod = PodWithOne("a", 1, 0, 0);
  kube::Grant g;
  g.node = "n1";
  g.policy = "best-fit";
  g.assumed_at = now_ - 30;
  g.containers.push_back({"main", {{0, "GPU-n1-0"}}, 1000, 0, false, true});
  pod["metadata"]["annotations"]["gpumux.io/grant"] = kube::EncodeGrant(g);
  const json pods[] = {pod};
  state->SetPods(pods);
  EXPECT_EQ(state->counters().grants_assumed, 1);
  EXPECT_FALSE(state->Assume(Pod(PodWithOne("b", 1, 0, 0)), "n1").has_value());
  now_ += 31;
  EXPECT_EQ(state->ExpireAssumed(), 1);
  EXPECT_TRUE(state->Assume(Pod(PodWithOne("b", 1, 0, 0)), "n1").has_value());
}

TEST_F(ClusterStateTest, ConflictingGrantsAreReportedNotDoubleBooked) {
  auto state = Make();
  const json nodes[] = {NodeJson("n1", 1)};
  state->SetNodes(nodes);
  std::vector<json> pods;
  for (const char* name : {"a", "b"}) {
    kube::Grant g;
    g.node = "n1";
    g.assumed_at = now_;
    g.containers.push_back({"main", {{0, "GPU-n1-0"}}, 1000, 0, false, true});
    json pod = PodWithOne(name, 1, 0, 0);
    pods.push_back(Bound(pod, g));
  }
  state->SetPods(pods);
  EXPECT_EQ(state->counters().grants_bound, 1) << "both pods claim it: one holds it";
  EXPECT_EQ(state->counters().grants_in_conflict, 1) << "the other is in conflict";
  EXPECT_EQ(state->counters().grant_conflicts, 1);
  const json inspect = sched::StateJson(state->Snapshot());
  EXPECT_EQ(inspect["nodes"][0]["gpus"][0]["tenants"].size(), 1u);
  ASSERT_EQ(inspect["grants_not_in_ledger"].size(), 1u);
  EXPECT_EQ(inspect["grants_not_in_ledger"][0]["state"], "conflict");
  // The holder ends: the pod in conflict takes its place, and nothing is counted twice.
  pods[0]["status"]["phase"] = "Succeeded";
  state->UpsertPod(pods[0]);
  EXPECT_EQ(state->counters().grants_bound, 1);
  EXPECT_EQ(state->counters().grants_in_conflict, 0);
  EXPECT_EQ(state->counters().grant_conflicts, 1);
}

TEST_F(ClusterStateTest, NodeChangesKeepGrants) {
  auto state = Make();
  json n1 = NodeJson("n1", 2);
  state->UpsertNode(n1);
  const json pod = PodWithOne("a", 2, 0, 0);
  auto grant = state->Assume(Pod(pod), "n1");
  ASSERT_TRUE(grant.has_value());
  state->UpsertPod(Bound(pod, *grant));
  state->UpsertNode(NodeJson("n2", 2));  // the node set changes: the ledger is rebuilt
  const std::vector<std::string> names = {"n1", "n2"};
  auto v = state->Evaluate(Pod(PodWithOne("b", 1, 0, 0)), names);
  EXPECT_EQ(v[0].kind, Kind::kDoesNotFit);
  EXPECT_EQ(v[1].kind, Kind::kFits);
}

TEST_F(ClusterStateTest, MultiContainerPodsGetOneGrantPerContainer) {
  auto state = Make();
  const json nodes[] = {NodeJson("n1", 1, {"A100", 10000})};
  state->SetNodes(nodes);
  const kube::PodInfo pod =
      Pod(PodJson("two", {ContainerOf{"a", 0, 4000, 0}, ContainerOf{"b", 0, 4000, 0}}));
  const std::vector<std::string> names = {"n1"};
  EXPECT_EQ(state->Evaluate(pod, names)[0].kind, Kind::kFits);
  auto grant = state->Assume(pod, "n1");
  ASSERT_TRUE(grant.has_value());
  ASSERT_EQ(grant->containers.size(), 2u);
  EXPECT_EQ(grant->containers[1].gpus[0].uuid, "GPU-n1-0");
  const kube::PodInfo three =
      Pod(PodJson("three", {ContainerOf{"a", 0, 1000, 0}, ContainerOf{"b", 0, 1500, 0}}));
  EXPECT_EQ(state->Evaluate(three, names)[0].kind, Kind::kDoesNotFit);
}

TEST_F(ClusterStateTest, PreemptionChecksTheNodeWithoutTheVictims) {
  auto state = Make();
  const json nodes[] = {NodeJson("n1", 1)};
  state->SetNodes(nodes);
  const json victim = PodWithOne("low", 1, 0, 0);
  auto grant = state->Assume(Pod(victim), "n1");
  ASSERT_TRUE(grant.has_value());
  state->UpsertPod(Bound(victim, *grant));
  const kube::PodInfo high = Pod(PodWithOne("high", 1, 0, 0));
  const std::vector<std::string> none, uids = {"uid-low"};
  EXPECT_FALSE(state->FitsWithout(high, "n1", none));
  EXPECT_TRUE(state->FitsWithout(high, "n1", uids));
  EXPECT_EQ(state->counters().grants_bound, 1) << "the trial leaves the victim in place";
}

TEST_F(ClusterStateTest, AnUnreadableGrantIsCountedLoggedAndShownNotSilentlyDropped) {
  auto state = Make();
  const json nodes[] = {NodeJson("n1", 1)};
  state->SetNodes(nodes);
  json pod = PodWithOne("a", 1, 0, 0);
  pod["metadata"]["annotations"]["gpumux.io/grant"] = "{not json";
  pod["spec"]["nodeName"] = "n1";
  state->UpsertPod(pod);
  state->UpsertPod(pod);  // the same problem again is not counted twice
  EXPECT_EQ(state->counters().unreadable_grants, 1);
  ASSERT_FALSE(log_.empty());
  EXPECT_NE(log_.back().find("gpumux.io/grant"), std::string::npos) << log_.back();
  EXPECT_EQ(sched::StateJson(state->Snapshot())["grants_not_in_ledger"].size(), 1u);
}

TEST_F(ClusterStateTest, UnknownPolicyIsAnError) {
  ClusterStateOptions options;
  options.policy = "no-such-policy";
  EXPECT_FALSE(ClusterState::Create(options, {}).has_value());
}

ClusterStateOptions InUnits(std::int64_t unit) {
  ClusterStateOptions options;
  options.policy = "best-fit";
  options.gpu_mem_unit_mib = unit;
  return options;
}

json NodeWithUnit(const std::string& name, const json& unit) {
  json node = NodeJson(name, 1, {"A100", 40960});
  node["metadata"]["annotations"]["gpumux.io/gpu-mem-unit-mib"] = unit;
  return node;
}

TEST_F(ClusterStateTest, ANodeCountingGpuMemInAnotherUnitIsUnresolvableForGpuMemPods) {
  auto state = std::move(*ClusterState::Create(InUnits(1024), [this] { return now_; }));
  const json nodes[] = {NodeWithUnit("gib", "1024"), NodeWithUnit("mib", "1"),
                        NodeWithUnit("broken", "lots"), NodeJson("silent", 1, {"A100", 40960})};
  state->SetNodes(nodes);
  const std::vector<std::string> names = {"gib", "mib", "broken", "silent"};
  const auto share = kube::DecodePod(PodWithOne("share", 0, 8, 0), 1024);
  ASSERT_TRUE(share.has_value());
  auto v = state->Evaluate(*share, names);
  EXPECT_EQ(v[0].kind, Kind::kFits) << v[0].reason;
  EXPECT_EQ(v[1].kind, Kind::kUnresolvable);
  EXPECT_EQ(v[1].reason,
            "node counts gpumux.io/gpu-mem in 1 MiB units, this extender in 1024 MiB "
            "(--gpu-mem-unit-mib)");
  EXPECT_EQ(v[2].kind, Kind::kUnresolvable);
  EXPECT_NE(v[2].reason.find("annotation gpumux.io/gpu-mem-unit-mib: \"lots\""), std::string::npos)
      << v[2].reason;
  EXPECT_EQ(v[3].kind, Kind::kFits) << "a node that publishes no unit is not checked";

  const auto whole = kube::DecodePod(PodWithOne("whole", 1, 0, 0), 1024);
  for (const NodeVerdict& w : state->Evaluate(*whole, names)) {
    EXPECT_EQ(w.kind, Kind::kFits) << "whole GPUs have no memory unit: " << w.reason;
  }
  const std::vector<std::string> two = {"mib", "gib"};
  const auto pair = kube::DecodePod(
      PodJson("pair", {ContainerOf{"a", 0, 1, 0}, ContainerOf{"b", 0, 1, 0}}), 1024);
  auto multi = state->Evaluate(*pair, two);
  EXPECT_EQ(multi[0].kind, Kind::kUnresolvable) << "multi-container pods too";
  EXPECT_EQ(multi[1].kind, Kind::kFits) << multi[1].reason;

  auto refused = state->Assume(*share, "mib");
  ASSERT_FALSE(refused.has_value());
  EXPECT_NE(refused.error().message.find("in 1 MiB units"), std::string::npos);
  const std::vector<std::string> no_victims;
  EXPECT_FALSE(state->FitsWithout(*share, "mib", no_victims));
  EXPECT_TRUE(state->Assume(*share, "gib").has_value());

  // The plugin is reconfigured: the node's new unit is seen at once.
  state->UpsertNode(NodeWithUnit("mib", "1024"));
  EXPECT_EQ(state->Evaluate(*share, names)[1].kind, Kind::kFits);
  EXPECT_EQ(sched::StateJson(state->Snapshot())["gpu_mem_unit_mib"], 1024);
}

// A node whose device plugin is starting or stopping takes no pod for now (the kubelet would
// reject it: fault 5 of the real-cluster review), and no pod is preempted for it.
TEST_F(ClusterStateTest, ANodeWhoseDevicePluginIsNotReadyTakesNoPodForNow) {
  auto state = Make();
  auto node_in = [](const std::string& name, const char* plugin) {
    json node = NodeJson(name, 1);
    if (plugin != nullptr) node["metadata"]["annotations"]["gpumux.io/device-plugin"] = plugin;
    return node;
  };
  const json nodes[] = {node_in("starting", "starting"), node_in("ready", "ready"),
                        node_in("stopping", "stopping"), node_in("silent", nullptr)};
  state->SetNodes(nodes);
  const std::vector<std::string> names = {"starting", "ready", "stopping", "silent"};
  const auto pod = kube::DecodePod(PodWithOne("p", 1, 0, 0), 1);
  ASSERT_TRUE(pod.has_value());
  auto v = state->Evaluate(*pod, names);
  EXPECT_EQ(v[0].kind, Kind::kUnresolvable);
  EXPECT_EQ(v[0].reason,
            "the device plugin on node starting is starting (gpumux.io/device-plugin); the "
            "kubelet would reject a pod admitted now");
  EXPECT_EQ(v[1].kind, Kind::kFits) << v[1].reason;
  EXPECT_EQ(v[2].kind, Kind::kUnresolvable);
  EXPECT_EQ(v[3].kind, Kind::kFits) << "a node whose plugin announces no state is not checked";
  const std::vector<std::string> no_victims;
  EXPECT_FALSE(state->FitsWithout(*pod, "stopping", no_victims));

  state->UpsertNode(node_in("starting", "ready"));
  EXPECT_EQ(state->Evaluate(*pod, names)[0].kind, Kind::kFits);
}

TEST_F(ClusterStateTest, PodsFromTheWatchAreDecodedInTheStatesUnit) {
  auto state = std::move(*ClusterState::Create(InUnits(1024), [this] { return now_; }));
  const json nodes[] = {NodeJson("n1", 1, {"A100", 40960})};
  state->SetNodes(nodes);
  state->UpsertPod(PodWithOne("p", 0, 8, 0));
  const auto p = state->FindPod("uid-p");
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->containers[0].request.gpu_mib, 8192);
  EXPECT_EQ(state->gpu_mem_unit_mib(), 1024);
}

TEST_F(ClusterStateTest, AGpuMemUnitOutsideItsRangeIsRefused) {
  EXPECT_FALSE(ClusterState::Create(InUnits(0), {}).has_value());
  EXPECT_FALSE(ClusterState::Create(InUnits(kube::kMaxGpuMemUnitMib + 1), {}).has_value());
}

TEST_F(ClusterStateTest, APodAwaitsDevicesUntilItRunsEndsOrIsDeleted) {
  auto state = Make();
  EXPECT_FALSE(state->PodAwaitsDevices("uid-p")) << "unknown";
  json pod = PodWithOne("p", 1, 0, 0);
  state->UpsertPod(pod);
  EXPECT_TRUE(state->PodAwaitsDevices("uid-p"));
  pod["spec"]["nodeName"] = "n1";
  state->UpsertPod(pod);
  EXPECT_TRUE(state->PodAwaitsDevices("uid-p")) << "bound, still Pending";
  pod["status"]["phase"] = "Running";
  state->UpsertPod(pod);
  EXPECT_FALSE(state->PodAwaitsDevices("uid-p")) << "its containers run: devices allocated";
  pod["status"]["phase"] = "Pending";
  pod["metadata"]["deletionTimestamp"] = "2026-11-21T10:00:00Z";
  state->UpsertPod(pod);
  EXPECT_FALSE(state->PodAwaitsDevices("uid-p")) << "being deleted";
  pod["metadata"].erase("deletionTimestamp");
  pod["status"]["phase"] = "Failed";
  state->UpsertPod(pod);
  EXPECT_FALSE(state->PodAwaitsDevices("uid-p")) << "finished";
  pod["status"]["phase"] = "Pending";
  state->UpsertPod(pod);
  state->RemovePod(pod);
  EXPECT_FALSE(state->PodAwaitsDevices("uid-p")) << "deleted";
  EXPECT_EQ(state->Now(), now_);
}

}  // namespace
}  // namespace gpumux::sched
