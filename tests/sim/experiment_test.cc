#include "gpumux/sim/experiment.h"

#include <gtest/gtest.h>

#include <chrono>
#include <limits>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "tests/sim/sim_fixtures.h"
#include "tests/testing/builders.h"

namespace gpumux::sim {
namespace {

using test::ClusterBuilder;
using test::RequestBuilder;

struct RoundCase {
  const char* name;
  double x;
  int decimals;
  double expected;  // what Python's round(x, decimals) gives
};
void PrintTo(const RoundCase& c, std::ostream* os) { *os << c.name; }

class RoundHalfEvenTable : public ::testing::TestWithParam<RoundCase> {};

TEST_P(RoundHalfEvenTable, MatchesPythonsRound) {
  EXPECT_EQ(RoundHalfEven(GetParam().x, GetParam().decimals), GetParam().expected);
}

INSTANTIATE_TEST_SUITE_P(
    Table, RoundHalfEvenTable,
    ::testing::Values(RoundCase{"an_exact_tie_0_125_goes_down_to_even", 0.125, 2, 0.12},
                      RoundCase{"an_exact_tie_0_375_goes_up_to_even", 0.375, 2, 0.38},
                      RoundCase{"two_and_a_half_rounds_to_2", 2.5, 0, 2.0},
                      RoundCase{"three_and_a_half_rounds_to_4", 3.5, 0, 4.0},
                      RoundCase{"a_half_rounds_to_0", 0.5, 0, 0.0},
                      RoundCase{"one_and_a_half_rounds_to_2", 1.5, 0, 2.0},
                      RoundCase{"minus_two_and_a_half_rounds_to_minus_2", -2.5, 0, -2.0},
                      RoundCase{"minus_0_125_rounds_to_minus_0_12", -0.125, 2, -0.12},
                      RoundCase{"2_675_is_below_the_tie_in_binary", 2.675, 2, 2.67},
                      RoundCase{"1_005_is_below_the_tie_in_binary", 1.005, 2, 1.0},
                      RoundCase{"95_145_is_below_the_tie_in_binary", 95.145, 2, 95.14},
                      RoundCase{"one_decimal", 1234.5678, 1, 1234.6},
                      RoundCase{"zero_stays_zero", 0.0, 2, 0.0}),
    test::CaseName());

// One node with two GPUs (2000 milli). Pods: a = 1 whole GPU, b = 500, c = 800.
class SmallExperiment : public ::testing::Test {
 protected:
  SmallExperiment() {
    auto w = MakeWorkload(
        "small", ClusterBuilder().Node("n", 64000, 65536).Gpus(2).Specs(),
        {RequestBuilder("a").Cpu(1000).Gpus(1), RequestBuilder("b").Cpu(1000).Share(500),
         RequestBuilder("c").Cpu(1000).Share(800)});
    if (!w) ADD_FAILURE() << w.error().message;
    workload_ = std::make_unique<Workload>(std::move(*w));
    plan_.arrivals = {Arrival{0, "a", {}, {}}, Arrival{1, "b", {}, {}}, Arrival{2, "c", {}, {}}};
    plan_.node_rank = {0};
    plan_.origin = "hand-made";
  }
  std::unique_ptr<Workload> workload_;
  ArrivalPlan plan_;
};

TEST_F(SmallExperiment, PlacesWhatFitsAndCountsTheRestAsFailed) {
  ExperimentOptions options;
  options.record_placements = true;
  options.check_invariants = true;
  auto r = RunExperiment(*workload_, plan_, "best-fit", 42, 1.3, options);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ(r->workload, "small");
  EXPECT_EQ(r->policy, "best-fit");
  EXPECT_EQ(r->seed, 42U);
  EXPECT_EQ(r->origin, "hand-made");
  EXPECT_EQ(r->pods, 3);
  EXPECT_EQ(r->placed, 2);
  EXPECT_EQ(r->failed_pods, 1);
  EXPECT_EQ(r->used_gpu_milli, 1500);
  EXPECT_EQ(r->busy_gpus, 2);
  EXPECT_EQ(r->used_cpu_milli, 2000);
  EXPECT_EQ(r->replay_mismatches, -1) << "not a replay";
  ASSERT_EQ(r->placements.size(), 3U);
  EXPECT_EQ(r->placements[0].node, 0);
  EXPECT_EQ(r->placements[0].gpus, (std::vector<int>{0}));
  EXPECT_EQ(r->placements[1].gpus, (std::vector<int>{1}));
  EXPECT_EQ(r->placements[2].node, -1);
  EXPECT_EQ(r->placements[2].pod, "c");
  EXPECT_EQ(r->placements[2].seq, 2U);
  // Unallocated capacity at the last arrival at or below 100% / 130% arrived: 500 milli.
  EXPECT_DOUBLE_EQ(r->unallocated_gpus_at_100, 0.5);
  EXPECT_DOUBLE_EQ(r->unallocated_gpus_at_130, 0.5);
  EXPECT_GE(r->frag_pct_at_130, 0.0);
  EXPECT_GE(r->wall_ms, 0.0);
}

TEST_F(SmallExperiment, TheCurveAveragesEventsByRoundedArrivedPercent) {
  // Arrived: a 1000 -> 50%, b 1500 -> 75%, c 2300 -> 115%. Allocated: 50%, 75%, 75%.
  auto r = RunExperiment(*workload_, plan_, "best-fit", 1, 1.3);
  ASSERT_TRUE(r.has_value());
  const Curve& c = r->alloc_curve;
  ASSERT_EQ(c.size(), 131U);
  EXPECT_EQ(c[50], 50.0);
  EXPECT_EQ(c[75], 75.0);
  EXPECT_EQ(c[115], 75.0);
  EXPECT_EQ(c[49], 50.0) << "no event at 49: the neighbours 48..50";
  EXPECT_EQ(c[51], 50.0);
  EXPECT_EQ(c[74], 75.0);
  EXPECT_FALSE(c[0].has_value());
  EXPECT_FALSE(c[60].has_value());
  EXPECT_FALSE(c[100].has_value());
  EXPECT_FALSE(r->alloc_pct_at_100.has_value());
  EXPECT_FALSE(r->alloc_pct_at_130.has_value());
  EXPECT_EQ(r->frag_ratio_curve.size(), 131U);
}

TEST_F(SmallExperiment, ALoadAbove130WidensTheCurve) {
  auto r = RunExperiment(*workload_, plan_, "best-fit", 1, 1.5);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->alloc_curve.size(), 151U);
  EXPECT_EQ(r->load, 1.5);
}

TEST_F(SmallExperiment, AReplayCountsAndDescribesPlacementsThatDiffer) {
  plan_.has_expected = true;
  plan_.arrivals[0].expected_node = "n";
  plan_.arrivals[0].expected_gpus = {0};
  plan_.arrivals[1].expected_node = "n";
  plan_.arrivals[1].expected_gpus = {0};  // gpumux gives GPU 1
  auto r = RunExperiment(*workload_, plan_, "best-fit", 1, 1.3);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->replay_mismatches, 1);
  EXPECT_EQ(r->first_mismatch, "seq 1 b: study n [0], gpumux n [1]");
  plan_.arrivals[1].expected_gpus = {1};
  plan_.arrivals[2].expected_node = "n";
  r = RunExperiment(*workload_, plan_, "best-fit", 1, 1.3);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->replay_mismatches, 1);
  EXPECT_EQ(r->first_mismatch, "seq 2 c: study n [], gpumux failed []");
}

TEST_F(SmallExperiment, AnUnknownPolicyIsAnError) {
  auto r = RunExperiment(*workload_, plan_, "nosuch", 1, 1.3);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, core::ErrorCode::kNotFound);
  EXPECT_NE(r.error().message.find("fgd"), std::string::npos);
}

// A plan from a caller (not a parsed replay) with one name twice used to abort in the ledger
// ("engine chose a placement the ledger refuses"): now an error naming the arrival.
TEST_F(SmallExperiment, AnArrivalNameThatArrivesTwiceIsAnErrorNotAnAbort) {
  plan_.arrivals[2] = Arrival{1, "b", {}, {}};
  auto r = RunExperiment(*workload_, plan_, "best-fit", 1, 1.3);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().message,
            "hand-made: arrival 2: pod 'b' arrives twice (arrival names must be distinct)");
}

TEST_F(SmallExperiment, APlanThatDoesNotFitTheWorkloadIsAnError) {
  ArrivalPlan wrong_pod = plan_;
  wrong_pod.arrivals[1].pod = 3;
  auto r = RunExperiment(*workload_, wrong_pod, "best-fit", 1, 1.3);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().message, "hand-made: arrival 'b' names pod #3 of 3");
  ArrivalPlan wrong_ranks = plan_;
  wrong_ranks.node_rank = {0, 1};
  r = RunExperiment(*workload_, wrong_ranks, "best-fit", 1, 1.3);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().message, "hand-made: 2 node ranks for 1 node");
}

TEST(Experiment, TwoNodesOfTheSameRankAreAnErrorNotAnAbort) {
  auto w = MakeWorkload(
      "two", ClusterBuilder().Node("a", 8000, 8192).Gpus(1).Node("b", 8000, 8192).Gpus(1).Specs(),
      {RequestBuilder("p").Cpu(1).Share(100)});
  ASSERT_TRUE(w.has_value()) << w.error().message;
  ArrivalPlan plan;
  plan.arrivals = {Arrival{0, "p", {}, {}}};
  plan.node_rank = {3, 3};
  plan.origin = "hand-made";
  auto r = RunExperiment(*w, plan, "best-fit", 1, 1.3);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().message,
            "hand-made: two nodes have the same rank (ranks break score ties: they must differ)");
}

TEST_F(SmallExperiment, ALoadOutsideZeroToAHundredIsAnError) {
  for (double load : {0.0, -1.0, 101.0, 1e300, std::numeric_limits<double>::quiet_NaN()}) {
    auto r = RunExperiment(*workload_, plan_, "best-fit", 1, load);
    ASSERT_FALSE(r.has_value()) << load;
    EXPECT_NE(r.error().message.find("is outside (0, 100]"), std::string::npos)
        << r.error().message;
  }
}

TEST(Experiment, ALongExperimentReportsItsProgressFromItsThread) {
  const Workload& w = testing_fixtures::EmbeddedWorkload();
  const ArrivalPlan plan = MakeStudyArrivals(w.pods, w.cluster, 7, 1.3);
  ExperimentOptions options;
  options.progress_interval = std::chrono::milliseconds(0);  // every check: every 64 arrivals
  std::vector<std::size_t> done;
  options.progress = [&](const ExperimentProgress& p) {
    EXPECT_EQ(p.policy, "best-fit");
    EXPECT_EQ(p.seed, 7U);
    EXPECT_EQ(p.total, plan.arrivals.size());
    EXPECT_GE(p.elapsed_s, 0.0);
    done.push_back(p.done);
  };
  auto r = RunExperiment(w, plan, "best-fit", 7, 1.3, options);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  ASSERT_EQ(done.size(), (plan.arrivals.size() - 1) / 64);
  for (std::size_t i = 0; i < done.size(); ++i) EXPECT_EQ(done[i], 64 * (i + 1));

  // An experiment shorter than the interval says nothing.
  options.progress_interval = std::chrono::hours(1);
  done.clear();
  ASSERT_TRUE(RunExperiment(w, plan, "best-fit", 7, 1.3, options).has_value());
  EXPECT_TRUE(done.empty());
}

TEST(NumFeasibleNodesToFind, IsKubeSchedulersNumber) {
  EXPECT_EQ(NumFeasibleNodesToFind(99, 0), 99U) << "fewer than 100 nodes: every node";
  EXPECT_EQ(NumFeasibleNodesToFind(5000, 100), 5000U);
  EXPECT_EQ(NumFeasibleNodesToFind(500, 10), 100U) << "never fewer than 100";
  EXPECT_EQ(NumFeasibleNodesToFind(5000, 30), 1500U);
  EXPECT_EQ(NumFeasibleNodesToFind(1213, 0), 497U) << "adaptive: 50 - 1213/125 = 41 %";
  EXPECT_EQ(NumFeasibleNodesToFind(5000, 0), 500U) << "adaptive: 50 - 40 = 10 %";
  EXPECT_EQ(NumFeasibleNodesToFind(20000, 0), 1000U) << "adaptive: at least 5 %";
}

// kube-scheduler's sampling (percentage_of_nodes_to_score): 200 equal empty nodes, 100 of them
// examined per pod (the minimum) from a start that moves on by the nodes examined. Every
// node fits, so pod 0 is decided among nodes 0-99 and pod 1 among 100-199 (best-fit: equal
// empty nodes tie, the smallest rank wins; a node already holding a pod is fuller and wins).
TEST(Experiment, SampledNodesAreAWindowThatMovesOnEachPod) {
  ClusterBuilder cluster;
  for (int i = 0; i < 200; ++i) cluster.Node("n" + std::to_string(i), 8000, 8192).Gpus(1);
  auto w = MakeWorkload("window", cluster.Specs(), {RequestBuilder("p").Cpu(1).Share(100)});
  ASSERT_TRUE(w.has_value()) << w.error().message;
  ArrivalPlan plan;
  for (std::size_t i = 0; i < 3; ++i) plan.arrivals.push_back({0, "p" + std::to_string(i), {}, {}});
  plan.node_rank.resize(200);
  for (std::int64_t i = 0; i < 200; ++i) plan.node_rank[static_cast<std::size_t>(i)] = 199 - i;
  plan.origin = "hand-made";
  ExperimentOptions options;
  options.record_placements = true;
  options.check_invariants = true;
  options.percentage_of_nodes_to_score = 10;
  auto r = RunExperiment(*w, plan, "best-fit", 1, 1.3, options);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  ASSERT_EQ(r->placements.size(), 3U);
  EXPECT_EQ(r->placements[0].node, 99) << "the smallest rank among nodes 0-99";
  EXPECT_EQ(r->placements[1].node, 199) << "the smallest rank among nodes 100-199";
  EXPECT_EQ(r->placements[2].node, 99) << "back to nodes 0-99: node 99 is the fullest";
  options.percentage_of_nodes_to_score = 100;
  r = RunExperiment(*w, plan, "best-fit", 1, 1.3, options);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  for (const PlacementRecord& p : r->placements) EXPECT_EQ(p.node, 199) << "every node";
}

// Nodes that do not fit are examined but not sampled: nodes 0-49 have no GPU, so pod 0's window
// is nodes 50-149 and pod 1's, from node 150 on, is 150-199 and, past the end, 50-99. A policy
// that draws among the feasible nodes (random) draws among the window only.
TEST(Experiment, SampledNodesSkipNodesThatDoNotFitAndRandomDrawsInTheWindow) {
  ClusterBuilder cluster;
  for (int i = 0; i < 200; ++i) {
    cluster.Node("n" + std::to_string(i), 8000, 8192);
    if (i >= 50) cluster.Gpus(1);
  }
  auto w = MakeWorkload("window", cluster.Specs(), {RequestBuilder("p").Cpu(1).Share(100)});
  ASSERT_TRUE(w.has_value()) << w.error().message;
  ArrivalPlan plan;
  for (std::size_t i = 0; i < 2; ++i) plan.arrivals.push_back({0, "p" + std::to_string(i), {}, {}});
  plan.node_rank.resize(200);
  for (std::int64_t i = 0; i < 200; ++i) plan.node_rank[static_cast<std::size_t>(i)] = i;
  plan.origin = "hand-made";
  ExperimentOptions options;
  options.record_placements = true;
  options.percentage_of_nodes_to_score = 0;  // 200 nodes: 48 %, so the minimum of 100
  auto r = RunExperiment(*w, plan, "best-fit", 1, 1.3, options);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ(r->placements[0].node, 50) << "the smallest rank among nodes 50-149";
  EXPECT_EQ(r->placements[1].node, 50) << "the fullest node of 150-199 and 50-99";
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    r = RunExperiment(*w, plan, "random", seed, 1.3, options);
    ASSERT_TRUE(r.has_value()) << r.error().message;
    const int first = r->placements[0].node;
    const int second = r->placements[1].node;
    EXPECT_TRUE(first >= 50 && first < 150) << "seed " << seed << ": " << first;
    EXPECT_TRUE(second >= 150 || (second >= 50 && second < 100))
        << "seed " << seed << ": " << second;
  }
}

TEST(MakeWorkload, RefusesAPodNamedLikeAResampledCopyOfAnother) {
  // The copies of pod "a" are named "a-tuned-0", "a-tuned-1", ...: a pod of that name would
  // collide with one of them in the ledger.
  auto w = MakeWorkload(
      "w", ClusterBuilder().Node("x", 8000, 8192).Gpus(1).Specs(),
      {RequestBuilder("a").Cpu(1).Share(100), RequestBuilder("a-tuned-0").Cpu(1).Share(100)});
  ASSERT_FALSE(w.has_value());
  EXPECT_EQ(w.error().message,
            "pod 'a-tuned-0' is named like a resampled copy of pod 'a' (names "
            "'<pod>-tuned-<number>' are the copies' names)");
  // Names that only look alike are fine.
  for (const char* name : {"b-tuned-0", "a-tuned-", "a-tuned-x", "-tuned-1", "a-tuned"}) {
    auto ok = MakeWorkload(
        "w", ClusterBuilder().Node("x", 8000, 8192).Gpus(1).Specs(),
        {RequestBuilder("a").Cpu(1).Share(100), RequestBuilder(name).Cpu(1).Share(100)});
    EXPECT_TRUE(ok.has_value()) << name << ": " << ok.error().message;
  }
}

TEST(MakeWorkload, RefusesInvalidNodesAndPodsAndComputesTypicalPods) {
  auto bad_nodes = MakeWorkload("w", ClusterBuilder().Node("x", 1, 1).Node("x", 1, 1).Specs(),
                                {RequestBuilder().Cpu(1)});
  ASSERT_FALSE(bad_nodes.has_value());
  EXPECT_NE(bad_nodes.error().message.find("appears twice"), std::string::npos);
  auto no_gpus =
      MakeWorkload("w", ClusterBuilder().Node("x", 1, 1).Specs(), {RequestBuilder().Cpu(1)});
  ASSERT_FALSE(no_gpus.has_value());
  EXPECT_NE(no_gpus.error().message.find("no GPUs"), std::string::npos);
  auto bad_pod = MakeWorkload("w", ClusterBuilder().Node("x", 1, 1).Gpus(1).Specs(),
                              {RequestBuilder("p").Share(1001)});
  ASSERT_FALSE(bad_pod.has_value());
  EXPECT_NE(bad_pod.error().message.find("request p"), std::string::npos);
  auto ok = MakeWorkload("w", ClusterBuilder().Node("x", 1, 1).Gpus(1).Specs(),
                         {RequestBuilder().Cpu(1).Share(500), RequestBuilder().Cpu(1).Share(500)});
  ASSERT_TRUE(ok.has_value());
  ASSERT_EQ(ok->typical.size(), 1U);
  EXPECT_EQ(ok->typical[0].count, 2);
  EXPECT_DOUBLE_EQ(ok->typical[0].weight, 1.0);
}

TEST(Experiment, TheSameSeedGivesTheSameRunOnTheDefaultTrace) {
  const Workload& w = testing_fixtures::EmbeddedWorkload();
  const ArrivalPlan plan = MakeStudyArrivals(w.pods, w.cluster, 7, 1.3);
  ExperimentOptions options;
  options.record_placements = true;
  auto a = RunExperiment(w, plan, "random", 7, 1.3, options);
  auto b = RunExperiment(w, plan, "random", 7, 1.3, options);
  ASSERT_TRUE(a.has_value());
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(a->alloc_curve, b->alloc_curve);
  EXPECT_EQ(a->failed_pods, b->failed_pods);
  ASSERT_EQ(a->placements.size(), b->placements.size());
  for (std::size_t i = 0; i < a->placements.size(); ++i) {
    ASSERT_EQ(a->placements[i].node, b->placements[i].node) << i;
    ASSERT_EQ(a->placements[i].gpus, b->placements[i].gpus) << i;
  }
  EXPECT_EQ(a->placed + a->failed_pods, a->pods);
}

// The FGD study's own run (policy FGD, default trace, load 1.3, seed 42), replayed pod by pod:
// every placement must equal the study's, and the curve must equal the study's published row.
TEST(StudyReplay, FgdSeed42MatchesTheStudyPodByPodAndItsPublishedCurve) {
  const auto dir = testing_fixtures::StudyReplayDir();
  if (!dir) GTEST_SKIP() << testing_fixtures::kNoReplayReason;
  const Workload& w = testing_fixtures::EmbeddedWorkload();
  auto plan = LoadReplay(*dir, w.pods, w.cluster);
  ASSERT_TRUE(plan.has_value()) << plan.error().message;
  auto r = RunExperiment(w, *plan, "fgd", 42, 1.3);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ(r->pods, 10866);
  EXPECT_EQ(r->replay_mismatches, 0) << r->first_mismatch;
  EXPECT_EQ(r->first_mismatch, "");
  ASSERT_TRUE(r->alloc_pct_at_100.has_value());
  ASSERT_TRUE(r->alloc_pct_at_130.has_value());
  EXPECT_EQ(*r->alloc_pct_at_100, 95.14);
  EXPECT_EQ(*r->alloc_pct_at_130, 95.29);

  const ExpectedRow* row =
      testing_fixtures::EmbeddedExpected().Find("openb_pod_list_default", "fgd", 1.3, 42);
  ASSERT_NE(row, nullptr);
  EXPECT_EQ(row->policy, "06-FGD");
  ASSERT_EQ(row->curve.size(), 131U);
  ASSERT_EQ(r->alloc_curve.size(), 131U);
  for (std::size_t x = 0; x <= 130; ++x) {
    EXPECT_EQ(r->alloc_curve[x], row->curve[x]) << "column " << x;
  }
}

}  // namespace
}  // namespace gpumux::sim
