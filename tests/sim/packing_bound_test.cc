#include "gpumux/sim/packing_bound.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gpumux/core/rng.h"
#include "tests/sim/sim_fixtures.h"
#include "tests/testing/builders.h"

namespace gpumux::sim {
namespace {

using test::ClusterBuilder;
using test::RequestBuilder;

double Bound(const core::Cluster& cluster, const std::vector<core::Request>& pods) {
  auto b = LpAllocationBound(cluster, pods);
  EXPECT_TRUE(b.has_value()) << b.error().message;
  return b ? b->alloc_pct : -1;
}

TEST(LpAllocationBound, TwoSharesAboveHalfCannotShareAGpu) {
  // Capacity alone would allow 1200 of 1000 milli: the cut keeps one 600 per GPU.
  const core::Cluster one_gpu = ClusterBuilder().Node("n", 8000, 32768).Gpus(1).Build();
  EXPECT_NEAR(Bound(one_gpu, {RequestBuilder("a").Share(600), RequestBuilder("b").Share(600)}),
              60.0, 1e-6);
  // 400s: two fit (800), a third does not; the cut for k = 2 weighs each 1/2.
  EXPECT_NEAR(Bound(one_gpu, {RequestBuilder("a").Share(400), RequestBuilder("b").Share(400),
                              RequestBuilder("c").Share(400)}),
              80.0, 1e-6);
  // What fits exactly is the bound: 1000 of 1000.
  EXPECT_NEAR(Bound(one_gpu, {RequestBuilder("a").Share(700), RequestBuilder("b").Share(300),
                              RequestBuilder("c").Share(500)}),
              100.0, 1e-6);
}

// Two 470s and a 70 on one GPU: the milli row and the cuts allow all of them fractionally
// (1010 of 1000 milli, so 100 %); counting the ways to fill the GPU, the two 470s leave 60 milli
// the 70 does not fit, so the bound falls to just above the best packing (940).
TEST(LpAllocationBound, CountingTheWaysToFillAGpuSeesTheRemainders) {
  const core::Cluster one_gpu = ClusterBuilder().Node("n", 8000, 32768).Gpus(1).Build();
  const double b = Bound(one_gpu, {RequestBuilder("a").Share(470), RequestBuilder("b").Share(470),
                                   RequestBuilder("c").Share(70)});
  EXPECT_GE(b, 94.0 - 1e-6);
  EXPECT_LT(b, 95.0);
}

TEST(LpAllocationBound, CpuModelsAndSizesLimitWhatCounts) {
  // Two GPUs and 4 cores: whole-GPU pods of 3 cores each; the pooled LP takes 4/3 of them.
  const core::Cluster cpu_bound = ClusterBuilder().Node("n", 4000, 32768).Gpus(2).Build();
  const std::vector<core::Request> heavy = {RequestBuilder("a").Cpu(3000).Gpus(1),
                                            RequestBuilder("b").Cpu(3000).Gpus(1)};
  EXPECT_NEAR(Bound(cpu_bound, heavy), 100.0 * (4.0 / 3.0) / 2.0, 1e-6);
  // A pod for a model no node has, a pod larger than any node, and a CPU-only pod count nothing.
  const core::Cluster t4 = ClusterBuilder().Node("n", 8000, 32768).Gpus(2, "T4").Build();
  EXPECT_NEAR(Bound(t4, {RequestBuilder("a").Gpus(1).Models({"A100"}), RequestBuilder("b").Gpus(4),
                         RequestBuilder("c").Cpu(1000)}),
              0.0, 1e-6);
  // Nothing arrived: 0.
  EXPECT_NEAR(Bound(t4, {}), 0.0, 1e-6);
}

// A node with GPUs of two models and sizes: a pod for the second model, or for more memory
// than the first GPU has, fits it (the engine places both), so the bound counts them.
TEST(LpAllocationBound, ANodeOfMixedGpusTakesWhatItsOtherGpuFits) {
  const core::Cluster mixed =
      ClusterBuilder().Node("n", 16000, 65536).Gpus(1, "T4", 16384).Gpus(1, "A100", 40960).Build();
  EXPECT_NEAR(Bound(mixed, {RequestBuilder("a").Gpus(1).Models({"A100"})}), 50.0, 1e-6);
  EXPECT_NEAR(Bound(mixed, {RequestBuilder("b").Gpus(1).GpuMemory(30000)}), 50.0, 1e-6);
}

double BoundAbove(const core::Cluster& cluster, const std::vector<core::Request>& arrivals,
                  const std::vector<CurveFloor>& floors) {
  auto b = LpAllocationBoundAbove(cluster, arrivals, floors);
  EXPECT_TRUE(b.has_value()) << b.error().message;
  return b ? b->alloc_pct : -1;
}

// One GPU, an 810-milli share, then a whole-GPU pod (arrived demand 81 %, then 181 %). Free to
// choose, the LP takes the whole pod; held to a floor at column 81 it must place the share, and
// the cut keeps the whole pod off its GPU.
TEST(LpAllocationBoundAbove, AFloorMakesThePolicyPlaceWhatArrivedFirst) {
  const core::Cluster one_gpu = ClusterBuilder().Node("n", 8000, 32768).Gpus(1).Build();
  const std::vector<core::Request> arrivals = {RequestBuilder("share").Share(810),
                                               RequestBuilder("whole").Gpus(1)};
  EXPECT_NEAR(Bound(one_gpu, arrivals), 100.0, 1e-6);
  EXPECT_NEAR(BoundAbove(one_gpu, arrivals, {}), 100.0, 1e-6);
  EXPECT_NEAR(BoundAbove(one_gpu, arrivals, {{81, 81.0}}), 81.0, 1e-6);
  // A floor of 40 %: at least 40/81 of the share, the rest of the GPU for the whole pod.
  EXPECT_NEAR(BoundAbove(one_gpu, arrivals, {{81, 40.0}}), 100.0 - 19.0 * 40.0 / 81.0, 1e-6);
  // A floor on a column no arrival is in is left out; one no packing meets is an error.
  EXPECT_NEAR(BoundAbove(one_gpu, arrivals, {{50, 100.0}}), 100.0, 1e-6);
  auto impossible = LpAllocationBoundAbove(one_gpu, arrivals, std::vector<CurveFloor>{{81, 90.0}});
  ASSERT_FALSE(impossible.has_value());
  EXPECT_NE(impossible.error().message.find("curve floor"), std::string::npos);
}

// A column is the mean over its arrivals of the allocation after each: one GPU, an 810-milli
// share (81 %) and a 4-milli one (81.4 %) in column 81, then a whole-GPU pod. Both shares placed
// make the column's mean (810 + 814) / 2 = 812 milli, 81.2 %: a floor of 81.2 % is met (and the
// whole pod cannot come), one of 81.3 % is not, though the allocation after the column is 81.4 %.
TEST(LpAllocationBoundAbove, AColumnIsTheMeanOverItsArrivals) {
  const core::Cluster one_gpu = ClusterBuilder().Node("n", 8000, 32768).Gpus(1).Build();
  const std::vector<core::Request> arrivals = {
      RequestBuilder("a").Share(810), RequestBuilder("b").Share(4), RequestBuilder("c").Gpus(1)};
  EXPECT_NEAR(BoundAbove(one_gpu, arrivals, {{81, 81.2}}), 81.4, 1e-6);
  EXPECT_FALSE(
      LpAllocationBoundAbove(one_gpu, arrivals, std::vector<CurveFloor>{{81, 81.3}}).has_value());
}

// A random small cluster and pod list: the bound is above every real packing, whatever the
// policy or the order, and the best packing found is below the bound.
TEST(LpAllocationBound, IsAboveEveryRealPackingOnRandomInstances) {
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    core::Rng rng(seed, "bound-test");
    ClusterBuilder cb;
    const int nodes = 2 + static_cast<int>(rng.Below(4));
    for (int n = 0; n < nodes; ++n) {
      cb.Node("n" + std::to_string(n), 4000 + 4000 * static_cast<core::MilliCpu>(rng.Below(4)),
              65536)
          .Gpus(1 + static_cast<int>(rng.Below(4)), rng.Below(2) == 0 ? "T4" : "V100");
    }
    std::vector<core::Request> pods;
    for (int i = 0; i < 40; ++i) {
      RequestBuilder b("p" + std::to_string(i));
      b.Cpu(500 + 500 * static_cast<core::MilliCpu>(rng.Below(6)));
      switch (rng.Below(4)) {
        case 0:
          b.Gpus(1 + static_cast<int>(rng.Below(2)));
          break;
        case 1:
          b.Share(100 * (1 + static_cast<core::MilliGpu>(rng.Below(9))));
          break;
        case 2:
          b.Share(100 * (1 + static_cast<core::MilliGpu>(rng.Below(9)))).Models({"T4"});
          break;
        default:
          break;  // CPU-only
      }
      pods.push_back(b.Build());
    }
    auto workload = MakeWorkload("random", cb.Specs(), pods);
    ASSERT_TRUE(workload.has_value()) << workload.error().message;
    const ArrivalPlan plan = MakeStudyArrivals(workload->pods, workload->cluster, seed, 1.3);
    const std::vector<Arrival> prefix = DemandPrefix(*workload, plan, 130);
    std::vector<core::Request> arrived;
    for (const Arrival& a : prefix) arrived.push_back(workload->pods[a.pod]);
    const double bound = Bound(workload->cluster, arrived);
    for (const char* policy : {"fgd", "best-fit", "first-node", "fgd-sat-reserve", "spread"}) {
      ArrivalPlan online = plan;
      online.arrivals = prefix;
      auto r = RunExperiment(*workload, online, policy, seed, 1.3);
      ASSERT_TRUE(r.has_value()) << r.error().message;
      const double pct = static_cast<double>(r->used_gpu_milli) /
                         static_cast<double>(workload->cluster.total_gpu_milli()) * 100.0;
      EXPECT_LE(pct, bound + 1e-6) << policy;
    }
    const std::vector<std::string> policies = {"fgd", "best-fit"};
    auto best = HindsightPacking(*workload, plan, prefix, policies, seed);
    ASSERT_TRUE(best.has_value());
    EXPECT_LE(best->alloc_pct, bound + 1e-6) << best->policy;
    auto guided = LpGuidedPacking(*workload, plan, prefix, seed);
    ASSERT_TRUE(guided.has_value());
    EXPECT_LE(guided->alloc_pct, bound + 1e-6);
  }
}

// The prefix is the experiment's curve column: its last arrival's rounded arrived % is the
// demand, the next one's is above.
TEST(DemandPrefix, EndsWhereTheCurvesColumnEnds) {
  const Workload& w = testing_fixtures::EmbeddedWorkload();
  const ArrivalPlan plan = MakeStudyArrivals(w.pods, w.cluster, 42, 1.3);
  const auto arrived_pct = [&](std::size_t n) {
    core::MilliGpu milli = 0;
    for (std::size_t i = 0; i < n; ++i) milli += w.pods[plan.arrivals[i].pod].total_gpu_milli();
    return RoundHalfEven(
        static_cast<double>(milli) / static_cast<double>(w.cluster.total_gpus()) / 10.0, 0);
  };
  const std::vector<Arrival> prefix = DemandPrefix(w, plan, 100);
  ASSERT_GT(prefix.size(), 0u);
  ASSERT_LT(prefix.size(), plan.arrivals.size());
  EXPECT_EQ(arrived_pct(prefix.size()), 100);
  EXPECT_EQ(arrived_pct(prefix.size() + 1), 101);
  EXPECT_EQ(DemandPrefix(w, plan, 130).size(), plan.arrivals.size());
}

// On the default trace, seed 42: the best packing found is at most the bound, at least what
// fgd reaches online, and below 90 % demand every pod fits (both are the demand).
TEST(ComputeBounds, BracketsTheOptimumOnTheDefaultTrace) {
  const Workload& w = testing_fixtures::EmbeddedWorkload();
  const std::vector<std::uint64_t> seeds = {42};
  const std::vector<double> demands = {50, 100, 130};
  BoundOptions options;
  options.hindsight_policies = {"fgd"};
  options.threads = 1;
  auto rows = ComputeBounds(w, seeds, demands, options);
  ASSERT_TRUE(rows.has_value()) << rows.error().message;
  ASSERT_EQ(rows->size(), 3u);
  EXPECT_NEAR((*rows)[0].hindsight.alloc_pct, (*rows)[0].lp.alloc_pct, 1e-6) << "all fit at 50%";
  EXPECT_NEAR((*rows)[0].lp.alloc_pct, 50, 0.6);
  for (const BoundRow& r : *rows) {
    EXPECT_LE(r.hindsight.alloc_pct, r.lp.alloc_pct + 1e-6) << r.demand_pct;
    EXPECT_LE(r.lp.alloc_pct, 100.0);
  }
  const ArrivalPlan plan = MakeStudyArrivals(w.pods, w.cluster, 42, 1.3);
  auto fgd = RunExperiment(w, plan, "fgd", 42, 1.3);
  ASSERT_TRUE(fgd.has_value());
  EXPECT_LE(*fgd->alloc_pct_at_130, (*rows)[2].lp.alloc_pct);
  EXPECT_LT((*rows)[1].lp.alloc_pct, 99.0) << "the cuts make the bound at 100% demand bite";
  for (const BoundRow& r : *rows) EXPECT_FALSE(r.lp_above.has_value());
}

// Held at or above fgd's own curve: fgd meets the floors, so the bound is at least what it
// allocates, and at most the bound without floors.
TEST(ComputeBounds, AtLeastAPolicysCurveIsBetweenItAndTheFreeBound) {
  const Workload& w = testing_fixtures::EmbeddedWorkload();
  const std::vector<std::uint64_t> seeds = {42};
  const std::vector<double> demands = {95, 130};
  BoundOptions options;
  options.hindsight_policies = {"fgd"};
  options.threads = 1;
  options.at_least = "fgd";
  auto rows = ComputeBounds(w, seeds, demands, options);
  ASSERT_TRUE(rows.has_value()) << rows.error().message;
  ASSERT_EQ(rows->size(), 2u);
  for (const BoundRow& r : *rows) {
    ASSERT_TRUE(r.lp_above.has_value() && r.at_least_pct.has_value()) << r.demand_pct;
    EXPECT_LE(*r.at_least_pct, r.lp_above->alloc_pct + 1e-6) << r.demand_pct;
    EXPECT_LE(r.lp_above->alloc_pct, r.lp.alloc_pct + 1e-6) << r.demand_pct;
  }
  EXPECT_LT((*rows)[1].lp_above->alloc_pct, (*rows)[1].lp.alloc_pct - 1.0)
      << "at 130 % the floors keep the 810-milli shares that arrived before saturation";
}

}  // namespace
}  // namespace gpumux::sim
