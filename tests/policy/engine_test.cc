#include "gpumux/policy/engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <ostream>
#include <string>
#include <vector>

#include "gpumux/policy/best_fit.h"
#include "gpumux/policy/exclusive.h"
#include "tests/testing/builders.h"
#include "tests/testing/policy_harness.h"

namespace gpumux::policy {
namespace {

using test::ClusterBuilder;
using test::PolicyHarness;
using test::RequestBuilder;
using test::ScriptedPolicy;

// Three equal nodes a, b, c: 8 cores, 16 GiB, two T4s each.
std::vector<core::NodeSpec> ThreeNodes() {
  return ClusterBuilder()
      .Node("a", 8000, 16384)
      .Gpus(2)
      .Node("b", 8000, 16384)
      .Gpus(2)
      .Node("c", 8000, 16384)
      .Gpus(2)
      .Specs();
}

ScriptedPolicy::ScoreFn ByNode(std::map<core::NodeIndex, std::int64_t> scores) {
  return [scores](const Cycle&, const core::NodeView& n) { return scores.at(n.index); };
}

TEST(Engine, TheHighestScoreWins) {
  PolicyHarness h(ThreeNodes());
  ScriptedPolicy p(ByNode({{0, 10}, {1, 30}, {2, 20}}));
  Engine engine(h.ledger(), p, {0, 1, 2}, h.rng());
  const Decision d = engine.Decide(RequestBuilder().Cpu(1000).Gpus(2, 300));
  ASSERT_TRUE(d.placement.has_value());
  EXPECT_EQ(d.placement->node, 1);
  EXPECT_EQ(d.placement->gpus, (std::vector<int>{0, 1}));
  EXPECT_EQ(d.score, 30);
  EXPECT_EQ(d.feasible_nodes, 3);
  // The ledger is not changed by a decision.
  EXPECT_EQ(h.ledger().tenant_count(), 0U);
}

TEST(Engine, ScoresMayBeNegative) {
  PolicyHarness h(ThreeNodes());
  ScriptedPolicy p(ByNode({{0, -10}, {1, -30}, {2, -5}}));
  Engine engine(h.ledger(), p, {0, 1, 2}, h.rng());
  const Decision d = engine.Decide(RequestBuilder().Cpu(1000));
  ASSERT_TRUE(d.placement.has_value());
  EXPECT_EQ(d.placement->node, 2);
  EXPECT_EQ(d.score, -5);
}

struct TieCase {
  const char* name;
  std::vector<std::int64_t> ranks;
  core::NodeIndex winner;
};
void PrintTo(const TieCase& c, std::ostream* os) { *os << c.name; }

class EngineTies : public ::testing::TestWithParam<std::tuple<TieCase, ScoreKind>> {};

TEST_P(EngineTies, GoToTheSmallestNodeRank) {
  const auto& [c, kind] = GetParam();
  PolicyHarness h(ThreeNodes());
  ScriptedPolicy p([](const Cycle&, const core::NodeView&) { return std::int64_t{7}; }, kind);
  Engine engine(h.ledger(), p, c.ranks, h.rng());
  const Decision d = engine.Decide(RequestBuilder().Share(100));
  ASSERT_TRUE(d.placement.has_value());
  EXPECT_EQ(d.placement->node, c.winner);
  EXPECT_EQ(d.score, 7);
}

INSTANTIATE_TEST_SUITE_P(
    Table, EngineTies,
    ::testing::Combine(::testing::Values(TieCase{"ranks_in_index_order", {0, 1, 2}, 0},
                                         TieCase{"the_middle_node_ranked_first", {2, 0, 1}, 1},
                                         TieCase{"the_last_node_ranked_first", {1, 2, 0}, 2},
                                         TieCase{"ranks_need_not_start_at_zero", {30, 20, 10}, 2},
                                         TieCase{
                                             "ranks_may_be_negative_and_sparse", {5, -100, 7}, 1}),
                       ::testing::Values(ScoreKind::kPure, ScoreKind::kUsesFeasibleSet)),
    [](const ::testing::TestParamInfo<EngineTies::ParamType>& param_info) {
      return std::string(std::get<0>(param_info.param).name) +
             (std::get<1>(param_info.param) == ScoreKind::kPure ? "_pure" : "_feasible_set");
    });

TEST(Engine, AnInfeasibleNodeIsNeverScoredOrChosen) {
  PolicyHarness h(ThreeNodes());
  h.Place("cpu-hog", RequestBuilder().Cpu(7000), 2, {});
  ScriptedPolicy p(ByNode({{0, 10}, {1, 20}, {2, 1000}}));
  Engine engine(h.ledger(), p, {0, 1, 2}, h.rng());
  const Decision d = engine.Decide(RequestBuilder().Cpu(2000));
  ASSERT_TRUE(d.placement.has_value());
  EXPECT_EQ(d.placement->node, 1);
  EXPECT_EQ(d.feasible_nodes, 2);
  EXPECT_EQ(std::count(p.scored().begin(), p.scored().end(), 2), 0);
}

TEST(Engine, ScoreNodesAnswersForTheGivenNodesInTheirOrder) {
  PolicyHarness h(ThreeNodes());
  h.Place("cpu-hog", RequestBuilder().Cpu(7000), 2, {});
  ScriptedPolicy p(ByNode({{0, 10}, {1, Policy::kDecline}, {2, 1000}}));
  Engine engine(h.ledger(), p, {0, 1, 2}, h.rng());
  const std::vector<core::NodeIndex> nodes = {2, 0, 1, 0};
  EXPECT_EQ(engine.ScoreNodes(RequestBuilder().Cpu(2000), nodes),
            (std::vector<std::int64_t>{Engine::kNoFit, 10, Policy::kDecline, 10}));
}

TEST(Engine, ScoreNodesGivesFeasibleSetPoliciesOnlyTheFittingCandidates) {
  PolicyHarness h(ThreeNodes());
  h.Place("cpu-hog", RequestBuilder().Cpu(7000), 2, {});
  ScriptedPolicy p(ByNode({{0, 1}, {1, 2}, {2, 3}}), ScoreKind::kUsesFeasibleSet);
  Engine engine(h.ledger(), p, {0, 1, 2}, h.rng());
  const std::vector<core::NodeIndex> nodes = {2, 1};
  EXPECT_EQ(engine.ScoreNodes(RequestBuilder().Cpu(2000), nodes),
            (std::vector<std::int64_t>{Engine::kNoFit, 2}));
  EXPECT_EQ(p.last_feasible(), (std::vector<core::NodeIndex>{1}));
}

TEST(Engine, DecideOnPlacesOnThatNodeOnlyOrSaysWhyNot) {
  PolicyHarness h(ThreeNodes());
  h.Place("cpu-hog", RequestBuilder().Cpu(7000), 2, {});
  ScriptedPolicy p(ByNode({{0, 10}, {1, Policy::kDecline}, {2, 1000}}));
  Engine engine(h.ledger(), p, {0, 1, 2}, h.rng());
  const core::Request r = RequestBuilder().Cpu(2000).Share(500);
  const Decision on0 = engine.DecideOn(r, 0);
  ASSERT_TRUE(on0.placement.has_value());
  EXPECT_EQ(on0.placement->node, 0);
  EXPECT_EQ(on0.placement->gpus.size(), 1u);
  const Decision on1 = engine.DecideOn(r, 1);
  EXPECT_FALSE(on1.placement.has_value());
  EXPECT_TRUE(on1.declined);
  const Decision on2 = engine.DecideOn(r, 2);
  EXPECT_FALSE(on2.placement.has_value());
  EXPECT_FALSE(on2.declined);
  EXPECT_EQ(on2.feasible_nodes, 0);
}

TEST(Engine, APlanPlacesEachContainerWithTheEarlierOnesPlacedAndGivesTheLedgerBack) {
  PolicyHarness h(ThreeNodes());
  BestFitPolicy p;
  Engine engine(h.ledger(), p, {0, 1, 2}, h.rng());
  // Two containers of 1.5 GPUs of compute: together they need more than node a's two GPUs can
  // give one at a time only if the second sees the first.
  const std::vector<core::Request> pod = {RequestBuilder().Cpu(1000).Gpus(1, 600),
                                          RequestBuilder().Cpu(1000).Gpus(1, 600)};
  const NodePlan plan = engine.PlanOn(pod, 0, h.ledger());
  ASSERT_TRUE(plan.fits()) << plan.reason;
  ASSERT_EQ(plan.containers.size(), 2U);
  EXPECT_NE(plan.containers[0].placement->gpus, plan.containers[1].placement->gpus)
      << "the second container saw the first on its GPU";
  EXPECT_EQ(h.ledger().tenant_count(), 0U) << "the ledger is given back as it was";
  // A third such container does not fit: the plan names it and why.
  const std::vector<core::Request> three = {pod[0], pod[0], pod[0]};
  const NodePlan no = engine.PlanOn(three, 0, h.ledger());
  EXPECT_EQ(no.outcome, NodePlan::Outcome::kDoesNotFit);
  EXPECT_EQ(no.failed, 2U);
  EXPECT_FALSE(no.reason.empty());
  EXPECT_TRUE(no.containers.empty());
  EXPECT_EQ(h.ledger().tenant_count(), 0U);
  // Four GPUs on a two-GPU node can never fit; without a reason when none is asked for.
  const std::vector<core::Request> big = {RequestBuilder().Cpu(1000).Gpus(4, 1000)};
  const NodePlan never = engine.PlanOn(big, 0, h.ledger(), Explain::kNoReason);
  EXPECT_EQ(never.outcome, NodePlan::Outcome::kUnresolvable);
  EXPECT_EQ(never.reason, "");
  EXPECT_FALSE(engine.ExplainMisfit(big[0], 0).resolvable);
}

TEST(Engine, APlanOnANodeThePolicyDeclinesSaysSo) {
  PolicyHarness h(ThreeNodes());
  ScriptedPolicy p([](const Cycle&, const core::NodeView&) { return Policy::kDecline; });
  Engine engine(h.ledger(), p, {0, 1, 2}, h.rng());
  const std::vector<core::Request> pod = {RequestBuilder().Cpu(1000).Gpus(1, 300)};
  const NodePlan plan = engine.PlanOn(pod, 1, h.ledger());
  EXPECT_EQ(plan.outcome, NodePlan::Outcome::kDeclined);
  EXPECT_NE(plan.reason.find("would rather wait"), std::string::npos) << plan.reason;
}

TEST(Engine, ARequestThatFitsNowhereGetsNoPlacement) {
  PolicyHarness h(ThreeNodes());
  for (ScoreKind kind : {ScoreKind::kPure, ScoreKind::kUsesFeasibleSet}) {
    ScriptedPolicy p(ByNode({{0, 1}, {1, 2}, {2, 3}}), kind);
    Engine engine(h.ledger(), p, {0, 1, 2}, h.rng());
    for (const core::Request& r :
         {RequestBuilder().Cpu(8001).Build(), RequestBuilder().Gpus(3).Build(),
          RequestBuilder().Share(100).Models({"H100"}).Build()}) {
      const Decision d = engine.Decide(r);
      EXPECT_FALSE(d.placement.has_value());
      EXPECT_EQ(d.feasible_nodes, 0);
    }
    EXPECT_EQ(p.score_calls(), 0);
  }
}

TEST(Engine, PureScoresAreMemoisedUntilTheNodeChanges) {
  PolicyHarness h(ThreeNodes());
  // Prefers the fullest node (least free CPU).
  ScriptedPolicy p([](const Cycle&, const core::NodeView& n) { return 100 - n.cpu_free / 1000; });
  Engine engine(h.ledger(), p, {0, 1, 2}, h.rng());
  const core::Request r = RequestBuilder().Cpu(1000).Share(100);

  Decision d = engine.Decide(r);
  ASSERT_TRUE(d.placement.has_value());
  EXPECT_EQ(d.placement->node, 0) << "all equal: rank 0";
  EXPECT_EQ(p.score_calls(), 3);

  d = engine.Decide(r);
  EXPECT_EQ(d.placement->node, 0);
  EXPECT_EQ(p.score_calls(), 3) << "nothing changed: every score memoised";

  // A change on node c between two decisions: only c is scored again, and it now wins.
  h.Place("x", RequestBuilder().Cpu(3000), 2, {});
  p.ClearLog();
  d = engine.Decide(r);
  ASSERT_TRUE(d.placement.has_value());
  EXPECT_EQ(d.placement->node, 2);
  EXPECT_EQ(d.score, 95);
  EXPECT_EQ(p.scored(), (std::vector<core::NodeIndex>{2}));

  // Releasing it makes c equal again; the tie goes back to a.
  ASSERT_TRUE(h.ledger().Release("x"));
  p.ClearLog();
  d = engine.Decide(r);
  EXPECT_EQ(d.placement->node, 0);
  EXPECT_EQ(p.scored(), (std::vector<core::NodeIndex>{2}));

  // Another request shape is scored afresh.
  p.ClearLog();
  engine.Decide(RequestBuilder().Cpu(2000).Share(100));
  EXPECT_EQ(p.scored().size(), 3U);
}

TEST(Engine, ANodeMadeFeasibleAgainIsScoredAgain) {
  PolicyHarness h(ThreeNodes());
  h.Place("full", RequestBuilder().Cpu(8000), 0, {});
  ScriptedPolicy p(ByNode({{0, 50}, {1, 10}, {2, 10}}));
  Engine engine(h.ledger(), p, {0, 1, 2}, h.rng());
  const core::Request r = RequestBuilder().Cpu(500);
  EXPECT_EQ(engine.Decide(r).placement->node, 1);
  ASSERT_TRUE(h.ledger().Release("full"));
  EXPECT_EQ(engine.Decide(r).placement->node, 0);
}

TEST(Engine, ARealPolicysDecisionFollowsTheLedgerBetweenDecisions) {
  PolicyHarness h(ThreeNodes());
  BestFitPolicy p;
  Engine engine(h.ledger(), p, {0, 1, 2}, h.rng());
  const core::Request r = RequestBuilder().Cpu(1000).Share(300);
  Decision d = engine.Decide(r);
  ASSERT_TRUE(d.placement.has_value());
  EXPECT_EQ(d.placement->node, 0);
  // Best fit now prefers b, which has less left over.
  h.Place("y", RequestBuilder().Cpu(1000).Share(500), 1, {1});
  d = engine.Decide(r);
  ASSERT_TRUE(d.placement.has_value());
  EXPECT_EQ(d.placement->node, 1);
  EXPECT_EQ(d.placement->gpus, (std::vector<int>{1})) << "best fit: the 500-free GPU";
  // Commit it; the next identical request goes to b again (fuller still), but GPU 1 has only
  // 200 left now, so it gets GPU 0.
  ASSERT_TRUE(h.ledger().Assign("r1", d.request, *d.placement));
  d = engine.Decide(r);
  ASSERT_TRUE(d.placement.has_value());
  EXPECT_EQ(d.placement->node, 1);
  EXPECT_EQ(d.placement->gpus, (std::vector<int>{0}));
}

TEST(Engine, MemoisedScoresAreKeptApartByScoreEpoch) {
  // A policy whose scores depend on the whole cluster (fgd-sat-reserve's "idle GPUs are scarce")
  // says so through its epoch; no node's generation changes, yet nothing memoised under one
  // epoch may be read under another.
  PolicyHarness h(ThreeNodes());
  ScriptedPolicy p([&](const Cycle&, const core::NodeView& n) {
    return n.index * static_cast<std::int64_t>(p.epoch);
  });
  Engine engine(h.ledger(), p, {0, 1, 2}, h.rng());
  const core::Request r = RequestBuilder().Cpu(1000).Share(100);
  EXPECT_EQ(engine.Decide(r).placement->node, 0);
  EXPECT_EQ(engine.Decide(r).placement->node, 0);
  EXPECT_EQ(p.score_calls(), 3) << "same epoch: the memoised scores stand";
  p.epoch = 1;
  EXPECT_EQ(engine.Decide(r).placement->node, 2) << "new epoch: every node scored again";
  EXPECT_EQ(p.score_calls(), 6);
  EXPECT_EQ(engine.ScoreNodes(r, std::vector<core::NodeIndex>{0, 1, 2}),
            (std::vector<std::int64_t>{0, 1, 2}));
  EXPECT_EQ(p.score_calls(), 6) << "and memoised again under the new epoch";
  p.epoch = 0;
  EXPECT_EQ(engine.Decide(r).placement->node, 0);
  EXPECT_EQ(p.score_calls(), 6) << "the first epoch's scores are kept: no node changed since";
}

TEST(Engine, MemoisedScoresAreKeptApartByAcceptableModels) {
  PolicyHarness h(ClusterBuilder()
                      .Node("t4", 8000, 16384)
                      .Gpus(2, "T4")
                      .Node("a10", 8000, 16384)
                      .Gpus(2, "A10", 24576)
                      .Specs());
  ScriptedPolicy p(ByNode({{0, 10}, {1, 5}}));
  Engine engine(h.ledger(), p, {0, 1}, h.rng());
  const core::Request a10 = RequestBuilder().Share(100).Models({"A10"});
  const core::Request t4 = RequestBuilder().Share(100).Models({"T4"});
  const core::Request any = RequestBuilder().Share(100);
  EXPECT_EQ(engine.Decide(a10).placement->node, 1);
  EXPECT_EQ(engine.Decide(t4).placement->node, 0);
  EXPECT_EQ(engine.Decide(a10).placement->node, 1);
  EXPECT_EQ(engine.Decide(any).placement->node, 0);
  EXPECT_EQ(engine.Decide(a10).feasible_nodes, 1);
}

TEST(Engine, AFeasibleSetPolicySeesTheFeasibleNodesInRankOrderEveryTime) {
  PolicyHarness h(ThreeNodes());
  h.Place("hog", RequestBuilder().Cpu(8000), 1, {});
  ScriptedPolicy p(ByNode({{0, 1}, {1, 1}, {2, 1}}), ScoreKind::kUsesFeasibleSet);
  Engine engine(h.ledger(), p, {2, 1, 0}, h.rng());
  const core::Request r = RequestBuilder().Cpu(100);
  EXPECT_EQ(engine.Decide(r).placement->node, 2);
  EXPECT_EQ(p.last_feasible(), (std::vector<core::NodeIndex>{2, 0}));
  EXPECT_EQ(engine.Decide(r).placement->node, 2);
  EXPECT_EQ(p.begin_calls(), 2);
  EXPECT_EQ(p.score_calls(), 4) << "nothing memoised";
}

TEST(Engine, TheRequestIsAdaptedBeforeFiltering) {
  // Node a's only GPU is partly used: a shared 300 fits there, an exclusive one does not.
  PolicyHarness h(
      ClusterBuilder().Node("a", 8000, 16384).Gpus(1).Node("b", 8000, 16384).Gpus(1).Specs());
  h.Place("s", RequestBuilder().Share(100), 0, {0});
  ExclusivePolicy p;
  Engine engine(h.ledger(), p, {0, 1}, h.rng());
  const Decision d = engine.Decide(RequestBuilder("pod").Share(300));
  EXPECT_EQ(d.request.sharing, core::GpuSharing::kExclusive);
  EXPECT_EQ(d.request.name, "pod");
  EXPECT_EQ(d.feasible_nodes, 1);
  ASSERT_TRUE(d.placement.has_value());
  EXPECT_EQ(d.placement->node, 1);
  EXPECT_EQ(&engine.policy(), &p);
}

// The score memo keeps one entry per node for every request shape it has seen; with shapes
// that never repeat (1,000 distinct gpu-mem sizes) it grew by a node list per shape forever.
TEST(Engine, TheScoreMemoKeepsABoundedNumberOfShapes) {
  PolicyHarness h(ThreeNodes());
  ScriptedPolicy p([](const Cycle&, const core::NodeView& n) { return std::int64_t{n.index}; });
  // Room for 9 entries of 3 nodes: the floor of kMinMemoShapes shapes applies.
  Engine engine(h.ledger(), p, {0, 1, 2}, h.rng(), EngineOptions{.memo_entries = 9});
  ASSERT_EQ(engine.memo_shape_limit(), EngineOptions::kMinMemoShapes);
  for (core::MiB mib = 1; mib <= 1000; ++mib) {
    const Decision d = engine.Decide(RequestBuilder().Share(100).GpuMemory(mib));
    ASSERT_TRUE(d.placement.has_value());
    EXPECT_EQ(d.placement->node, 2);
    ASSERT_LE(engine.memo_shapes(), engine.memo_shape_limit()) << "after " << mib << " shapes";
  }
  EXPECT_EQ(p.score_calls(), 3000) << "every new shape is scored once per node";
}

TEST(Engine, TheDefaultMemoLimitIsAboutSixteenMiBOfEntries) {
  ClusterBuilder nodes;
  for (int i = 0; i < 5000; ++i) nodes.Node(test::Numbered("n", i), 8000, 16384).Gpus(1);
  PolicyHarness h(nodes.Specs());
  ScriptedPolicy p([](const Cycle&, const core::NodeView&) { return std::int64_t{1}; });
  std::vector<std::int64_t> ranks(5000);
  std::iota(ranks.begin(), ranks.end(), 0);
  Engine engine(h.ledger(), p, ranks, h.rng());
  EXPECT_EQ(engine.memo_shape_limit(), (std::size_t{1} << 20) / 5000);
}

// A shape in steady use (replicas of one deployment) stays memoised however many one-off shapes
// pass by: the least recently used shape is the one dropped.
TEST(Engine, AShapeInSteadyUseStaysMemoisedWhileOneOffShapesComeAndGo) {
  PolicyHarness h(ThreeNodes());
  ScriptedPolicy p([](const Cycle&, const core::NodeView& n) { return std::int64_t{n.index}; });
  Engine engine(h.ledger(), p, {0, 1, 2}, h.rng(), EngineOptions{.memo_entries = 0});
  const core::Request replica = RequestBuilder().Cpu(500).Share(250);
  engine.Decide(replica);
  for (core::MiB mib = 1; mib <= 100; ++mib) {
    engine.Decide(RequestBuilder().Share(100).GpuMemory(mib));
    p.ClearLog();
    engine.Decide(replica);
    ASSERT_TRUE(p.scored().empty())
        << "the replica's shape was re-scored after " << mib << " one-off shapes";
  }
}

// A memo slot given to a new shape must not answer with the scores of the shape it held before,
// even where the node has not changed since: every decision matches a fresh engine's.
TEST(Engine, AShapeDroppedFromTheMemoAndSeenAgainIsScoredAfresh) {
  PolicyHarness h(ClusterBuilder()
                      .Node("a", 8000, 16384)
                      .Gpus(1, "T4", 4096)
                      .Node("b", 8000, 16384)
                      .Gpus(1, "T4", 8192)
                      .Node("c", 8000, 16384)
                      .Gpus(1, "T4", 16384)
                      .Specs());
  // The score depends on the request, so one shape's memo is wrong for another.
  const auto score = [](const Cycle& c, const core::NodeView& n) {
    return (c.request.gpu_mib / 100 + 7 * n.index) % 5;
  };
  ScriptedPolicy kept(score);
  Engine engine(h.ledger(), kept, {0, 1, 2}, h.rng(), EngineOptions{.memo_entries = 0});
  for (int round = 0; round < 3; ++round) {
    for (core::MiB mib = 100; mib <= 16000; mib += 500) {
      const core::Request r = RequestBuilder().Share(100).GpuMemory(mib);
      ScriptedPolicy fresh_policy(score);
      Engine fresh(h.ledger(), fresh_policy, {0, 1, 2}, h.rng());
      const Decision got = engine.Decide(r);
      const Decision want = fresh.Decide(r);
      ASSERT_EQ(got.placement.has_value(), want.placement.has_value()) << mib;
      ASSERT_EQ(got.feasible_nodes, want.feasible_nodes) << mib;
      if (!want.placement) continue;
      ASSERT_EQ(got.placement->node, want.placement->node) << "round " << round << ", " << mib;
      ASSERT_EQ(got.score, want.score) << mib;
      const std::vector<core::NodeIndex> all{0, 1, 2};
      ASSERT_EQ(engine.ScoreNodes(r, all), fresh.ScoreNodes(r, all)) << mib;
    }
  }
}

}  // namespace
}  // namespace gpumux::policy
