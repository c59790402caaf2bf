#include "gpumux/sim/protocol.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <numeric>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "gpumux/core/rng.h"
#include "tests/sim/sim_fixtures.h"
#include "tests/testing/builders.h"
#include "tests/testing/subprocess.h"

namespace gpumux::sim {
namespace {

using test::ClusterBuilder;
using test::RequestBuilder;
using testing_fixtures::EmbeddedWorkload;

core::MilliGpu ArrivedMilli(const ArrivalPlan& plan, std::span<const core::Request> pods) {
  core::MilliGpu total = 0;
  for (const Arrival& a : plan.arrivals) total += pods[a.pod].total_gpu_milli();
  return total;
}

template <typename T>
bool IsPermutationOfIota(std::vector<T> v) {
  std::sort(v.begin(), v.end());
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (v[i] != static_cast<T>(i)) return false;
  }
  return true;
}

TEST(MakeStudyArrivals, OnTheDefaultTraceTheOriginalPodsComeFirstThenNumberedCopies) {
  const Workload& w = EmbeddedWorkload();
  const ArrivalPlan plan = MakeStudyArrivals(w.pods, w.cluster, 42, 1.3);
  ASSERT_EQ(w.pods.size(), 8152U);
  ASSERT_GT(plan.arrivals.size(), w.pods.size()) << "the default trace is tuned up to 1.3";
  EXPECT_EQ(plan.origin, "seed 42");
  EXPECT_FALSE(plan.has_expected);

  std::vector<std::size_t> first;
  for (std::size_t i = 0; i < w.pods.size(); ++i) {
    const Arrival& a = plan.arrivals[i];
    ASSERT_LT(a.pod, w.pods.size());
    EXPECT_EQ(a.name, w.pods[a.pod].name);
    EXPECT_TRUE(a.expected_node.empty());
    first.push_back(a.pod);
  }
  EXPECT_TRUE(IsPermutationOfIota(first)) << "the first 8152 arrivals are the pods, once each";
  EXPECT_FALSE(std::is_sorted(first.begin(), first.end())) << "and shuffled";

  for (std::size_t i = w.pods.size(); i < plan.arrivals.size(); ++i) {
    const Arrival& a = plan.arrivals[i];
    ASSERT_LT(a.pod, w.pods.size());
    EXPECT_EQ(a.name, w.pods[a.pod].name + "-tuned-" + std::to_string(i - w.pods.size()));
  }
}

TEST(MakeStudyArrivals, TunesTheDefaultTraceUpToJustBelowTheLoad) {
  const Workload& w = EmbeddedWorkload();
  const ArrivalPlan plan = MakeStudyArrivals(w.pods, w.cluster, 42, 1.3);
  const double target = 1.3 * static_cast<double>(w.cluster.total_gpu_milli());
  ASSERT_EQ(w.cluster.total_gpu_milli(), 6212000);
  const core::MilliGpu total = ArrivedMilli(plan, w.pods);
  EXPECT_LE(static_cast<double>(total), target);
  // The first rejected draw would have passed the target, and a draw asks at most 1000 milli
  // per GPU.
  EXPECT_GT(static_cast<double>(total), target - 1000.0);
  // Every copy was accepted by the protocol's rule: the running total plus its per-GPU milli
  // stays within the target.
  core::MilliGpu running = TotalGpuMilli(w.pods);
  for (std::size_t i = w.pods.size(); i < plan.arrivals.size(); ++i) {
    const core::Request& p = w.pods[plan.arrivals[i].pod];
    ASSERT_LE(static_cast<double>(running + p.gpu_milli), target) << "copy " << i;
    running += p.total_gpu_milli();
  }
  EXPECT_EQ(running, total);
}

TEST(MakeStudyArrivals, NodeRanksAreAPermutationOfTheNodes) {
  const Workload& w = EmbeddedWorkload();
  const ArrivalPlan plan = MakeStudyArrivals(w.pods, w.cluster, 42, 1.3);
  ASSERT_EQ(plan.node_rank.size(), 1213U);
  EXPECT_TRUE(IsPermutationOfIota(plan.node_rank));
  std::vector<std::int64_t> identity(plan.node_rank.size());
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_NE(plan.node_rank, identity);
}

bool SamePlan(const ArrivalPlan& a, const ArrivalPlan& b) {
  if (a.arrivals.size() != b.arrivals.size() || a.node_rank != b.node_rank) return false;
  for (std::size_t i = 0; i < a.arrivals.size(); ++i) {
    if (a.arrivals[i].pod != b.arrivals[i].pod || a.arrivals[i].name != b.arrivals[i].name) {
      return false;
    }
  }
  return true;
}

TEST(MakeStudyArrivals, TheSameSeedGivesTheSamePlanAndAnotherSeedAnotherOrder) {
  const Workload& w = EmbeddedWorkload();
  const ArrivalPlan a = MakeStudyArrivals(w.pods, w.cluster, 42, 1.3);
  const ArrivalPlan b = MakeStudyArrivals(w.pods, w.cluster, 42, 1.3);
  const ArrivalPlan c = MakeStudyArrivals(w.pods, w.cluster, 43, 1.3);
  EXPECT_TRUE(SamePlan(a, b));
  EXPECT_FALSE(SamePlan(a, c));
  int same_position = 0;
  for (std::size_t i = 0; i < w.pods.size(); ++i) {
    same_position += a.arrivals[i].pod == c.arrivals[i].pod ? 1 : 0;
  }
  EXPECT_LT(same_position, 50) << "two shuffles of 8152 pods share about one position";
  EXPECT_NE(a.node_rank, c.node_rank);
}

TEST(MakeStudyArrivals, TheOrderDoesNotDependOnTheOrderOfThePodList) {
  // The pods are sorted by name before shuffling: the same set in another order gives the
  // same arrival names.
  const core::Cluster cluster = ClusterBuilder().Node("n", 8000, 8192).Gpus(4).Build();
  std::vector<core::Request> pods;
  for (int i = 0; i < 20; ++i) pods.push_back(RequestBuilder(test::Numbered("p", i)).Share(100));
  std::vector<core::Request> reversed(pods.rbegin(), pods.rend());
  const ArrivalPlan a = MakeStudyArrivals(pods, cluster, 7, 1.0);
  const ArrivalPlan b = MakeStudyArrivals(reversed, cluster, 7, 1.0);
  ASSERT_EQ(a.arrivals.size(), b.arrivals.size());
  for (std::size_t i = 0; i < a.arrivals.size(); ++i) {
    EXPECT_EQ(a.arrivals[i].name, b.arrivals[i].name) << i;
  }
}

// A one-GPU cluster (1000 milli) and ten 500-milli pods (5000): load 1.3 means 1300 milli, so
// pods are removed until the total is <= 1300: two pods remain.
TEST(MakeStudyArrivals, TunesDownATraceAboveTheTargetByRemovingPods) {
  const core::Cluster cluster = ClusterBuilder().Node("n", 64000, 65536).Gpus(1).Build();
  std::vector<core::Request> pods;
  for (int i = 0; i < 10; ++i) {
    pods.push_back(RequestBuilder(test::Numbered("p", i)).Cpu(100).Share(500));
  }
  const ArrivalPlan plan = MakeStudyArrivals(pods, cluster, 42, 1.3);
  ASSERT_EQ(plan.arrivals.size(), 2U);
  EXPECT_EQ(ArrivedMilli(plan, pods), 1000);
  for (const Arrival& a : plan.arrivals) {
    EXPECT_EQ(a.name, pods[a.pod].name) << "no copies when tuning down";
  }
  EXPECT_NE(plan.arrivals[0].pod, plan.arrivals[1].pod);

  // At exactly the list's total nothing is tuned: that plan is the plain shuffle, and the
  // tuned-down plan keeps a subsequence of it.
  const ArrivalPlan whole = MakeStudyArrivals(pods, cluster, 42, 5.0);
  ASSERT_EQ(whole.arrivals.size(), 10U);
  std::size_t j = 0;
  for (const Arrival& a : whole.arrivals) {
    if (j < plan.arrivals.size() && plan.arrivals[j].pod == a.pod) ++j;
  }
  EXPECT_EQ(j, plan.arrivals.size()) << "the kept pods keep their shuffled order";
}

TEST(MakeStudyArrivals, TuningDownStopsAtTheFirstTotalWithinTheTarget) {
  // Mixed sizes: 900 + 800 + ... + 100 = 4500 milli on two GPUs (2000); target 0.9 x 2000 = 1800.
  const core::Cluster cluster = ClusterBuilder().Node("n", 64000, 65536).Gpus(2).Build();
  std::vector<core::Request> pods;
  for (int i = 1; i <= 9; ++i) {
    pods.push_back(RequestBuilder(test::Numbered("p", i)).Share(100 * i));
  }
  for (std::uint64_t seed : {1ULL, 2ULL, 3ULL, 4ULL, 5ULL}) {
    const ArrivalPlan plan = MakeStudyArrivals(pods, cluster, seed, 0.9);
    const core::MilliGpu total = ArrivedMilli(plan, pods);
    EXPECT_LE(total, 1800) << "seed " << seed;
    EXPECT_GT(total, 1800 - 900) << "seed " << seed << ": the last removal crossed the target";
  }
}

TEST(MakeStudyArrivals, TunesUpWithCopiesOfSingleGpuPods) {
  // Two GPUs (2000), pods 1000 + 500 = 1500; load 1.3 -> 2600.
  const core::Cluster cluster = ClusterBuilder().Node("n", 64000, 65536).Gpus(2).Build();
  const std::vector<core::Request> pods{RequestBuilder("a").Gpus(1), RequestBuilder("b").Share(500),
                                        RequestBuilder("c").Cpu(100)};
  for (std::uint64_t seed : {1ULL, 2ULL, 3ULL}) {
    const ArrivalPlan plan = MakeStudyArrivals(pods, cluster, seed, 1.3);
    const core::MilliGpu total = ArrivedMilli(plan, pods);
    EXPECT_LE(total, 2600);
    EXPECT_GT(total, 2600 - 1000);
    ASSERT_GE(plan.arrivals.size(), 3U);
    for (std::size_t i = 3; i < plan.arrivals.size(); ++i) {
      EXPECT_EQ(plan.arrivals[i].name,
                pods[plan.arrivals[i].pod].name + "-tuned-" + std::to_string(i - 3));
    }
  }
}

TEST(MakeStudyArrivals, KeepsTheStudysPerGpuQuirkForMultiGpuCopies) {
  // protocol.h: a draw is accepted when the running total plus its *per-GPU* milli stays within
  // the target. One pod of 2 whole GPUs on a 4-GPU cluster, load 1.3 (5200): 2000 -> copy
  // (2000 + 1000 <= 5200) -> 4000 -> copy (4000 + 1000 <= 5200) -> 6000 -> stop.
  const core::Cluster cluster = ClusterBuilder().Node("n", 64000, 65536).Gpus(4).Build();
  const std::vector<core::Request> pods{RequestBuilder("pair").Gpus(2)};
  const ArrivalPlan plan = MakeStudyArrivals(pods, cluster, 42, 1.3);
  ASSERT_EQ(plan.arrivals.size(), 3U);
  EXPECT_EQ(plan.arrivals[1].name, "pair-tuned-0");
  EXPECT_EQ(plan.arrivals[2].name, "pair-tuned-1");
  EXPECT_EQ(ArrivedMilli(plan, pods), 6000);
}

TEST(MakeStudyArrivals, APodListWithoutGpuDemandTerminatesWithoutCopies) {
  // Every pod is CPU-only, so the total (0) is below any positive target and every draw adds 0:
  // there is nothing to resample towards, so the plan is the shuffled list without copies.
  const core::Cluster cluster = ClusterBuilder().Node("n", 64000, 65536).Gpus(1).Build();
  const std::vector<core::Request> pods{RequestBuilder("a").Cpu(1000),
                                        RequestBuilder("b").Cpu(2000)};
  ASSERT_TRUE(test::FinishesInChild([&] { MakeStudyArrivals(pods, cluster, 42, 1.3); }, 3));
  const ArrivalPlan plan = MakeStudyArrivals(pods, cluster, 42, 1.3);
  EXPECT_EQ(plan.arrivals.size(), 2U);
}

// The protocol as it was first written: removals by order.erase(begin() + victim), O(n) each.
// The O(log n) removal must make the same draws and keep the same pods in the same order.
std::vector<std::size_t> QuadraticRemovalOrder(std::span<const core::Request> pods,
                                               const core::Cluster& cluster, std::uint64_t seed,
                                               double load) {
  std::vector<std::size_t> order(pods.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return pods[a].name < pods[b].name; });
  core::Rng shuffle(seed, "shuffle");
  shuffle.Shuffle(std::span<std::size_t>(order));
  const double target = load * static_cast<double>(cluster.total_gpu_milli());
  core::MilliGpu total = TotalGpuMilli(pods);
  core::Rng tune(seed, "tune");
  while (static_cast<double>(total) > target && !order.empty()) {
    const auto victim = static_cast<std::ptrdiff_t>(tune.Below(order.size()));
    total -= pods[order[static_cast<std::size_t>(victim)]].total_gpu_milli();
    order.erase(order.begin() + victim);
  }
  return order;
}

TEST(MakeStudyArrivals, TuningDownKeepsExactlyThePodsTheQuadraticRemovalKept) {
  const Workload& w = EmbeddedWorkload();
  for (double load : {0.05, 0.3, 0.6, 0.77}) {  // all below the trace's own total
    for (std::uint64_t seed : {1ULL, 42ULL, 977ULL}) {
      const ArrivalPlan plan = MakeStudyArrivals(w.pods, w.cluster, seed, load);
      const std::vector<std::size_t> expected =
          QuadraticRemovalOrder(w.pods, w.cluster, seed, load);
      ASSERT_EQ(plan.arrivals.size(), expected.size()) << "load " << load << " seed " << seed;
      for (std::size_t i = 0; i < expected.size(); ++i) {
        ASSERT_EQ(plan.arrivals[i].pod, expected[i]) << "load " << load << " seed " << seed;
      }
    }
  }
  // Every pod removed (a load too small for any pod) and none removed.
  const core::Cluster one = ClusterBuilder().Node("n", 64000, 65536).Gpus(1).Build();
  std::vector<core::Request> pods;
  for (int i = 0; i < 50; ++i) pods.push_back(RequestBuilder(test::Numbered("p", i)).Share(700));
  EXPECT_TRUE(MakeStudyArrivals(pods, one, 3, 0.5).arrivals.empty());
  EXPECT_EQ(MakeStudyArrivals(pods, one, 3, 35.0).arrivals.size(), 50U);
}

// reliability-repros/simulate-tiny-pod-resample: one 1-milli pod resampled to 1.3 x 6,212 GPUs
// would be about 8 million arrivals. The limit refuses it before building anything.
TEST(MakeStudyArrivals, APlanBeyondTheArrivalLimitIsRefusedNamingSeedLoadAndLimit) {
  const Workload& w = EmbeddedWorkload();
  const std::vector<core::Request> tiny{RequestBuilder("p1").Share(1)};
  const ArrivalLimit limit{1000, "--max-arrivals"};
  for (auto r : {MakeStudyArrivals(tiny, w.cluster, 42, 1.3, limit).error(),
                 CountStudyArrivals(tiny, w.cluster, 42, 1.3, limit).error()}) {
    EXPECT_EQ(r.code, core::ErrorCode::kFailedPrecondition);
    EXPECT_EQ(r.message,
              "seed 42: resampling the 1 pod to load 1.3 makes more than 1000 arrivals, the "
              "limit per experiment (--max-arrivals)");
  }
  // The embedded trace at 1.3 makes 10,8xx arrivals: within 20,000, beyond 10,000 (tuned up).
  auto count = CountStudyArrivals(w.pods, w.cluster, 42, 1.3, ArrivalLimit{20000, "x"});
  ASSERT_TRUE(count.has_value()) << count.error().message;
  EXPECT_EQ(*count, MakeStudyArrivals(w.pods, w.cluster, 42, 1.3).arrivals.size());
  EXPECT_FALSE(CountStudyArrivals(w.pods, w.cluster, 42, 1.3, ArrivalLimit{10000, "x"}));
  // Tuned down, the pods left count: 8,152 pods thinned to load 0.3 fit a limit of 5,000.
  auto down = MakeStudyArrivals(w.pods, w.cluster, 42, 0.3, ArrivalLimit{5000, "x"});
  ASSERT_TRUE(down.has_value()) << down.error().message;
  EXPECT_LT(down->arrivals.size(), 5000U);
  EXPECT_FALSE(MakeStudyArrivals(w.pods, w.cluster, 42, 0.3, ArrivalLimit{1000, "x"}));
}

TEST(CheckStudyArrivals, NamesTheFirstSeedWhosePlanPassesTheLimit) {
  const core::Cluster cluster = ClusterBuilder().Node("n", 64000, 65536).Gpus(2).Build();
  // Two pods of 100 milli on 2,000 milli: load 1 makes copies up to 2,000 milli, 20 arrivals
  // (the study's rule stops at the first draw past the target, so exactly 20 here).
  const std::vector<core::Request> pods{RequestBuilder("a").Share(100),
                                        RequestBuilder("b").Share(100)};
  const std::vector<std::uint64_t> seeds{5, 6, 7};
  EXPECT_TRUE(CheckStudyArrivals(pods, cluster, seeds, 1.0, ArrivalLimit{20, "x"}));
  auto r = CheckStudyArrivals(pods, cluster, seeds, 1.0, ArrivalLimit{19, "--max-arrivals"});
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().message,
            "seed 5: resampling the 2 pods to load 1 makes more than 19 arrivals, the limit per "
            "experiment (--max-arrivals)");
  // Thinning only (load 0.05 is 100 milli: one pod is left): a list within the limit is within
  // it for every seed, and a list beyond it is counted seed by seed.
  EXPECT_TRUE(CheckStudyArrivals(pods, cluster, seeds, 0.05, ArrivalLimit{2, "x"}));
  EXPECT_TRUE(CheckStudyArrivals(pods, cluster, seeds, 0.05, ArrivalLimit{1, "x"}));
  EXPECT_EQ(CountStudyArrivals(pods, cluster, 5, 0.05, ArrivalLimit{1, "x"}).value_or(0), 1U);
}

TEST(MakeStudyArrivals, ResamplingAMillionPodsTakesSecondsNotMinutes) {
  // 10^6 pods of 1 GPU each on one GPU: all but one removed, 999,999 draws. The quadratic
  // removal moved about 5 * 10^11 indices here; the tree does it in well under a second.
  const core::Cluster one = ClusterBuilder().Node("n", 64000, 65536).Gpus(1).Build();
  std::vector<core::Request> pods;
  pods.reserve(1'000'000);
  for (int i = 0; i < 1'000'000; ++i)
    pods.push_back(RequestBuilder(test::Numbered("p", i)).Gpus(1));
  ASSERT_TRUE(test::FinishesInChild(
      [&] { (void)MakeStudyArrivals(pods, one, 42, 1.0, ArrivalLimit{}); }, 60));
}

// ---------------------------------------------------------------- replay folders

TEST(LoadReplay, AMissingFolderIsAnIoError) {
  const Workload& w = EmbeddedWorkload();
  test::ScratchDir dir;
  auto plan = LoadReplay((dir.path() / "nope").string(), w.pods, w.cluster);
  ASSERT_FALSE(plan.has_value());
  EXPECT_EQ(plan.error().code, core::ErrorCode::kIo);
  EXPECT_NE(plan.error().message.find("arrival.csv: cannot open: no such file"), std::string::npos)
      << plan.error().message;
}

constexpr const char* kReplayNodes = "node_prefixed,node,prefix\n0001-n-a,n-a,1\n0000-n-b,n-b,0\n";

class ReplayFolder : public ::testing::Test {
 protected:
  ReplayFolder()
      : cluster_(ClusterBuilder()
                     .Node("n-a", 8000, 8192)
                     .Gpus(2)
                     .Node("n-b", 8000, 8192)
                     .Gpus(2)
                     .Build()),
        pods_{RequestBuilder("p1").Share(500), RequestBuilder("p2").Gpus(2)} {}
  core::Result<ArrivalPlan> Load(const std::string& nodes, const std::string& arrivals) {
    dir_.Write("nodes.csv", nodes);
    dir_.Write("arrival.csv", arrivals);
    return LoadReplay(dir_.path().string(), pods_, cluster_);
  }
  test::ScratchDir dir_;
  core::Cluster cluster_;
  std::vector<core::Request> pods_;
};

TEST_F(ReplayFolder, ReadsRanksArrivalsAndTheStudysPlacements) {
  auto plan = Load(kReplayNodes,
                   "seq,pod,source_pod,node,gpu_index\n"
                   "0,p2,p2,0000-n-b,0-1\n"
                   "1,p1,p1,,\n"
                   "2,p1-tuned-0,p1,0001-n-a,1\n");
  ASSERT_TRUE(plan.has_value()) << plan.error().message;
  EXPECT_TRUE(plan->has_expected);
  EXPECT_EQ(plan->origin, "replay " + dir_.path().string());
  EXPECT_EQ(plan->node_rank, (std::vector<std::int64_t>{1, 0}));
  ASSERT_EQ(plan->arrivals.size(), 3U);
  EXPECT_EQ(plan->arrivals[0].pod, 1U);
  EXPECT_EQ(plan->arrivals[0].expected_node, "n-b");
  EXPECT_EQ(plan->arrivals[0].expected_gpus, (std::vector<int>{0, 1}));
  EXPECT_EQ(plan->arrivals[1].expected_node, "");
  EXPECT_TRUE(plan->arrivals[1].expected_gpus.empty());
  EXPECT_EQ(plan->arrivals[2].name, "p1-tuned-0");
  EXPECT_EQ(plan->arrivals[2].pod, 0U);
  EXPECT_EQ(plan->arrivals[2].expected_gpus, (std::vector<int>{1}));
}

struct ReplayErrorCase {
  const char* name;
  std::string nodes;
  std::string arrivals;
  const char* message;  // part of the error, including file:line
};
void PrintTo(const ReplayErrorCase& c, std::ostream* os) { *os << c.name; }

class ReplayErrors : public ReplayFolder, public ::testing::WithParamInterface<ReplayErrorCase> {};

TEST_P(ReplayErrors, NameTheFileAndLine) {
  auto plan = Load(GetParam().nodes, GetParam().arrivals);
  ASSERT_FALSE(plan.has_value());
  EXPECT_NE(plan.error().message.find(GetParam().message), std::string::npos)
      << plan.error().message;
}

const std::string kArrivalHeader = "seq,pod,source_pod,node,gpu_index\n";

INSTANTIATE_TEST_SUITE_P(
    Table, ReplayErrors,
    ::testing::Values(
        ReplayErrorCase{"a_node_not_in_the_cluster", "node_prefixed,node,prefix\n0000-n-z,n-z,0\n",
                        kArrivalHeader, "nodes.csv:2: node 'n-z' is not in the cluster"},
        ReplayErrorCase{"a_node_without_a_rank", "node_prefixed,node,prefix\n0000-n-a,n-a,0\n",
                        kArrivalHeader, "nodes.csv: no rank for node n-b"},
        ReplayErrorCase{"a_pod_not_in_the_pod_list", kReplayNodes, kArrivalHeader + "0,p9,p9,,\n",
                        "arrival.csv:2: source_pod 'p9' is not in the pod list"},
        ReplayErrorCase{"a_node_not_in_nodes_csv", kReplayNodes,
                        kArrivalHeader + "0,p1,p1,0007-n-q,0\n",
                        "arrival.csv:2: node '0007-n-q' is not in nodes.csv"},
        ReplayErrorCase{"a_bad_gpu_index", kReplayNodes, kArrivalHeader + "0,p1,p1,0000-n-b,x\n",
                        "arrival.csv:2: bad gpu_index 'x'"},
        ReplayErrorCase{"a_missing_column", kReplayNodes, "seq,pod,node\n",
                        "arrival.csv:1: missing column 'source_pod'"},
        // More digits than an int holds: signed overflow, then a silently wrapped index
        // (reliability-repros/replay-gpu-index-overflow: 99999999999 read as 1215752191).
        ReplayErrorCase{"a_gpu_index_with_more_digits_than_an_int_holds", kReplayNodes,
                        kArrivalHeader + "0,p1,p1,0000-n-b,99999999999\n",
                        "arrival.csv:2: bad gpu_index '99999999999': an index must be 0..63 (a "
                        "node has at most 64 GPUs)"},
        ReplayErrorCase{"a_gpu_index_beyond_int64", kReplayNodes,
                        kArrivalHeader + "0,p1,p1,0000-n-b,0-99999999999999999999999\n",
                        "arrival.csv:2: bad gpu_index '0-99999999999999999999999': an index "
                        "must be 0..63"},
        ReplayErrorCase{"a_gpu_index_one_past_the_node_limit", kReplayNodes,
                        kArrivalHeader + "0,p1,p1,0000-n-b,64\n",
                        "arrival.csv:2: bad gpu_index '64': an index must be 0..63"},
        ReplayErrorCase{"an_empty_gpu_index_between_dashes", kReplayNodes,
                        kArrivalHeader + "0,p2,p2,0000-n-b,0--1\n",
                        "arrival.csv:2: bad gpu_index '0--1': an empty index between dashes"},
        // reliability-repros/replay-duplicate-arrival: the same row twice aborted the ledger.
        ReplayErrorCase{"the_same_arrival_twice", kReplayNodes,
                        kArrivalHeader + "0,p1,p1,0000-n-b,0\n0,p1,p1,0000-n-b,0\n",
                        "arrival.csv:3: seq 0 where 1 is expected"},
        ReplayErrorCase{"one_pod_name_arriving_twice", kReplayNodes,
                        kArrivalHeader + "0,p1,p1,0000-n-b,0\n1,p2,p2,,\n2,p1,p1,,\n",
                        "arrival.csv:4: pod 'p1' arrives twice (first on line 2)"},
        ReplayErrorCase{"a_seq_that_skips", kReplayNodes, kArrivalHeader + "0,p1,p1,,\n2,p2,p2,,\n",
                        "arrival.csv:3: seq 2 where 1 is expected"},
        ReplayErrorCase{"a_negative_seq", kReplayNodes, kArrivalHeader + "-1,p1,p1,,\n",
                        "arrival.csv:2: seq -1 where 0 is expected"},
        ReplayErrorCase{"an_empty_arrival_name", kReplayNodes, kArrivalHeader + "0,,p1,,\n",
                        "arrival.csv:2: empty pod name"},
        ReplayErrorCase{"gpus_for_an_arrival_the_study_failed", kReplayNodes,
                        kArrivalHeader + "0,p1,p1,,0\n",
                        "arrival.csv:2: gpu_index '0' for an arrival the study failed"},
        ReplayErrorCase{"fewer_gpus_than_the_pod_asks", kReplayNodes,
                        kArrivalHeader + "0,p2,p2,0000-n-b,0\n",
                        "arrival.csv:2: gpu_index '0' names 1 GPU but pod 'p2' asks 2"},
        ReplayErrorCase{"no_gpu_for_a_gpu_pod", kReplayNodes,
                        kArrivalHeader + "0,p1,p1,0000-n-b,\n",
                        "arrival.csv:2: gpu_index '' names 0 GPUs but pod 'p1' asks 1"},
        ReplayErrorCase{"a_gpu_the_node_does_not_have", kReplayNodes,
                        kArrivalHeader + "0,p1,p1,0000-n-b,2\n",
                        "arrival.csv:2: gpu_index '2': node n-b has 2 GPUs"},
        ReplayErrorCase{"one_gpu_listed_twice", kReplayNodes,
                        kArrivalHeader + "0,p2,p2,0000-n-b,1-1\n",
                        "arrival.csv:2: bad gpu_index '1-1': GPU 1 is listed twice"},
        ReplayErrorCase{"no_arrivals", kReplayNodes, kArrivalHeader, "arrival.csv: no arrivals"},
        ReplayErrorCase{"a_rank_beyond_the_node_count",
                        "node_prefixed,node,prefix\n0001-n-a,n-a,1\n9999-n-b,n-b,9999\n",
                        kArrivalHeader, "nodes.csv:3: prefix 9999 is outside 0..1"},
        ReplayErrorCase{"a_negative_rank", "node_prefixed,node,prefix\n0001-n-a,n-a,-1\n",
                        kArrivalHeader, "nodes.csv:2: prefix -1 is outside 0..1"},
        ReplayErrorCase{"a_node_listed_twice",
                        "node_prefixed,node,prefix\n0001-n-a,n-a,1\n0000-n-a,n-a,0\n",
                        kArrivalHeader, "nodes.csv:3: node 'n-a' is listed twice"},
        ReplayErrorCase{"one_prefixed_name_for_two_nodes",
                        "node_prefixed,node,prefix\nx,n-a,1\nx,n-b,0\n", kArrivalHeader,
                        "nodes.csv:3: node_prefixed 'x' is listed twice"},
        ReplayErrorCase{"an_empty_prefixed_name", "node_prefixed,node,prefix\n,n-a,1\n",
                        kArrivalHeader, "nodes.csv:2: empty node_prefixed"}),
    test::CaseName());

TEST_F(ReplayFolder, TwoNodesWithTheSameRankAreAnInputError) {
  // Ranks break score ties and must be distinct (policy::Engine checks it by aborting, as an
  // internal invariant). A replay folder is external input: a repeated prefix comes back as an
  // error naming nodes.csv and never reaches the engine.
  auto plan = Load("node_prefixed,node,prefix\n0000-n-a,n-a,0\n0000-n-b,n-b,0\n",
                   "seq,pod,source_pod,node,gpu_index\n0,p1,p1,0000-n-a,0\n");
  ASSERT_FALSE(plan.has_value());
  EXPECT_NE(plan.error().message.find("nodes.csv:3:"), std::string::npos) << plan.error().message;
}

TEST_F(ReplayFolder, MoreRowsThanTheArrivalLimitAreRefusedAtTheFirstRowPastIt) {
  dir_.Write("nodes.csv", kReplayNodes);
  dir_.Write("arrival.csv", kArrivalHeader + "0,p1,p1,,\n1,p1-tuned-0,p1,,\n2,x,p1,,\n");
  auto plan = LoadReplay(dir_.path().string(), pods_, cluster_, ArrivalLimit{2, "--max-arrivals"});
  ASSERT_FALSE(plan.has_value());
  EXPECT_NE(plan.error().message.find("arrival.csv:4: more than 2 arrivals, the limit per "
                                      "experiment (--max-arrivals)"),
            std::string::npos)
      << plan.error().message;
  EXPECT_TRUE(LoadReplay(dir_.path().string(), pods_, cluster_, ArrivalLimit{3, "x"}));
}

TEST_F(ReplayFolder, AFolderInPlaceOfAFileIsNamed) {
  dir_.Write("nodes.csv", kReplayNodes);
  std::filesystem::create_directory(dir_.path() / "arrival.csv");
  auto plan = LoadReplay(dir_.path().string(), pods_, cluster_);
  ASSERT_FALSE(plan.has_value());
  EXPECT_EQ(plan.error().message, (dir_.path() / "arrival.csv").string() +
                                      ": cannot open: is a directory (expected a file)");
}

TEST_F(ReplayFolder, ParseReplayReadsStreamsAndNamesItsSources) {
  std::istringstream nodes(kReplayNodes);
  std::istringstream arrivals(kArrivalHeader + "0,p2,p2,0000-n-b,0-1\n1,p1,p1,,\n");
  auto plan = ParseReplay(nodes, "n.csv", arrivals, "a.csv", pods_, cluster_);
  ASSERT_TRUE(plan.has_value()) << plan.error().message;
  EXPECT_EQ(plan->origin, "replay a.csv");
  EXPECT_EQ(plan->arrivals.size(), 2U);
  std::istringstream nodes2(kReplayNodes);
  std::istringstream bad(kArrivalHeader + "0,p9,p9,,\n");
  auto err = ParseReplay(nodes2, "n.csv", bad, "a.csv", pods_, cluster_);
  ASSERT_FALSE(err.has_value());
  EXPECT_EQ(err.error().message, "a.csv:2: source_pod 'p9' is not in the pod list");
}

TEST(LoadReplay, TheStudysReplayOfFgdSeed42Has10866ArrivalsOnEveryNode) {
  const auto dir = testing_fixtures::StudyReplayDir();
  if (!dir) GTEST_SKIP() << testing_fixtures::kNoReplayReason;
  const Workload& w = EmbeddedWorkload();
  auto plan = LoadReplay(*dir, w.pods, w.cluster);
  ASSERT_TRUE(plan.has_value()) << plan.error().message;
  EXPECT_EQ(plan->arrivals.size(), 10866U);
  EXPECT_TRUE(IsPermutationOfIota(plan->node_rank));
  EXPECT_TRUE(plan->has_expected);
}

}  // namespace
}  // namespace gpumux::sim
