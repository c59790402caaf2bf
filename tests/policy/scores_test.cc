// Every policy's score and GPU choice on small hand-computed cases. The first test of each
// policy is the worked example of its header, with exactly the header's numbers.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gpumux/core/rng.h"
#include "gpumux/policy/best_fit.h"
#include "gpumux/policy/binpack_spread.h"
#include "gpumux/policy/dot_product.h"
#include "gpumux/policy/exclusive.h"
#include "gpumux/policy/fgd.h"
#include "gpumux/policy/gpu_clustering.h"
#include "gpumux/policy/gpu_packing.h"
#include "gpumux/policy/random_policy.h"
#include "gpumux/policy/registry.h"
#include "tests/testing/builders.h"
#include "tests/testing/policy_harness.h"

namespace gpumux::policy {
namespace {

using test::ClusterBuilder;
using test::PolicyHarness;
using test::RequestBuilder;

// One node, 32 cores, 64 GiB, two T4s, with a 500-milli tenant (no CPU) on GPU 1:
// GPUs free {1000, 500}, R = 1500, c_n = 32000.
class TwoGpuNode : public ::testing::Test {
 protected:
  TwoGpuNode() : h_(ClusterBuilder().Node("n", 32000, 65536).Gpus(2, "T4").Specs()) {
    h_.Place("half", RequestBuilder("half").Share(500), 0, {1});
  }
  PolicyHarness h_;
};

// ---------------------------------------------------------------- best-fit

using BestFit = TwoGpuNode;

TEST_F(BestFit, WorkedExampleScores84AndGrantsTheHalfFreeGpu) {
  BestFitPolicy p;
  const core::Request r = RequestBuilder().Cpu(8000).Share(500);
  EXPECT_EQ(h_.Score(p, r, 0), 84);
  EXPECT_EQ(h_.ChooseGpus(p, r, 0), (std::vector<int>{1}));
}

TEST(BestFitByHand, ACpuOnlyRequestScoresTheLeftoverOfBothDimensions) {
  // Empty node, R = 2000: leftover 0.5*24000/128000 + 0.5*2000/8000 = 0.21875 -> 78.
  PolicyHarness h(ClusterBuilder().Node("n", 32000, 65536).Gpus(2).Specs());
  BestFitPolicy p;
  EXPECT_EQ(h.Score(p, RequestBuilder().Cpu(8000), 0), 78);
  EXPECT_TRUE(h.ChooseGpus(p, RequestBuilder().Cpu(8000), 0).empty());
}

TEST(BestFitByHand, AWholeTwoGpuRequestTakesTheLowestIndexedGpus) {
  // 64 cores, 8 GPUs, GPU 0 taken: R = 7000. 16 cores and 2 whole GPUs leave
  // 0.5*48000/128000 + 0.5*5000/8000 = 0.5 -> 50.
  PolicyHarness h(ClusterBuilder().Node("n", 64000, 65536).Gpus(8).Specs());
  h.Place("x", RequestBuilder().Gpus(1), 0, {0});
  BestFitPolicy p;
  const core::Request r = RequestBuilder().Cpu(16000).Gpus(2);
  EXPECT_EQ(h.Score(p, r, 0), 50);
  EXPECT_EQ(h.ChooseGpus(p, r, 0), (std::vector<int>{1, 2}));
}

// ---------------------------------------------------------------- binpack / spread

TEST(BinpackSpread, WorkedExampleLoad362BinpackTakesTheBusyGpuSpreadTheIdleOne) {
  PolicyHarness h(ClusterBuilder().Node("n", 32000, 65536).Gpus(2, "A100", 10000).Specs());
  h.Place("t", RequestBuilder("t").Share(500).GpuMemory(5000), 0, {0});
  const core::Request r = RequestBuilder().Share(250).GpuMemory(2000);
  BinpackPolicy binpack;
  SpreadPolicy spread;
  EXPECT_EQ(h.Score(binpack, r, 0), 362);
  EXPECT_EQ(h.ChooseGpus(binpack, r, 0), (std::vector<int>{0}));
  EXPECT_EQ(h.Score(spread, r, 0), 638);
  EXPECT_EQ(h.ChooseGpus(spread, r, 0), (std::vector<int>{1}));
}

TEST(BinpackSpread, BinpackPrefersTheFullerNodeAndSpreadTheEmptierOne) {
  PolicyHarness h(
      ClusterBuilder().Node("a", 32000, 65536).Gpus(1).Node("b", 32000, 65536).Gpus(1).Specs());
  h.Place("t", RequestBuilder("t").Share(500), 0, {0});
  const core::Request r = RequestBuilder().Share(250);
  BinpackPolicy binpack;
  SpreadPolicy spread;
  EXPECT_GT(h.Score(binpack, r, 0), h.Score(binpack, r, 1));
  EXPECT_GT(h.Score(spread, r, 1), h.Score(spread, r, 0));
}

// ---------------------------------------------------------------- dotprod

using DotProduct = TwoGpuNode;

TEST_F(DotProduct, WorkedExampleScores98) {
  DotProductPolicy p;
  const core::Request r = RequestBuilder().Cpu(8000).Share(500);
  EXPECT_EQ(h_.Score(p, r, 0), 98);
  EXPECT_EQ(h_.ChooseGpus(p, r, 0), (std::vector<int>{1}));
}

TEST(DotProductByHand, ACpuOnlyRequestOnlyMultipliesTheCpuTerm) {
  // node (0.25, 0.25), pod (0.0625, 0): dot 0.015625, d 0.0078125 -> floor(99.21875) = 99.
  PolicyHarness h(ClusterBuilder().Node("n", 32000, 65536).Gpus(2).Specs());
  DotProductPolicy p;
  EXPECT_EQ(h.Score(p, RequestBuilder().Cpu(8000), 0), 99);
}

TEST(DotProductByHand, AFullEightGpuNodeScoresLowerForABigRequest) {
  // node (0.5, 1.0), pod (0.125, 0.25): dot 0.3125, d 0.15625 -> floor(84.375) = 84.
  PolicyHarness h(ClusterBuilder().Node("n", 64000, 65536).Gpus(8).Specs());
  DotProductPolicy p;
  const core::Request r = RequestBuilder().Cpu(16000).Gpus(2);
  EXPECT_EQ(h.Score(p, r, 0), 84);
  EXPECT_EQ(h.ChooseGpus(p, r, 0), (std::vector<int>{0, 1}));
}

// ---------------------------------------------------------------- gpu-clustering

using GpuClustering = TwoGpuNode;

TEST_F(GpuClustering, WorkedExampleSharedRequestJoinsItsKindAt95) {
  GpuClusteringPolicy p;
  const core::Request r = RequestBuilder().Share(300);
  EXPECT_EQ(h_.Score(p, r, 0), 95);
  EXPECT_EQ(h_.ChooseGpus(p, r, 0), (std::vector<int>{1}));
}

TEST_F(GpuClustering, WorkedExampleWholeGpuRequestAmongOtherTagsScores20) {
  GpuClusteringPolicy p;
  const core::Request r = RequestBuilder().Gpus(1);
  EXPECT_EQ(h_.Score(p, r, 0), 20);
  EXPECT_EQ(h_.ChooseGpus(p, r, 0), (std::vector<int>{0}));
}

TEST(GpuClusteringByHand, TagsAndBases) {
  // Node "empty": 2 GPUs, nothing placed, R = 2000, base floor(25*6000/8000) = 18.
  // Node "mixed": 4 GPUs, a share-gpu tenant on GPU 0 (500) and a 1-gpu tenant on GPU 1:
  //   R = 2500, base floor(25*5500/8000) = 17.
  // Node "cpu": 2 GPUs and a CPU-only tenant, which carries no tag: base 18.
  PolicyHarness h(ClusterBuilder()
                      .Node("empty", 32000, 65536)
                      .Gpus(2)
                      .Node("mixed", 32000, 65536)
                      .Gpus(4)
                      .Node("cpu", 32000, 65536)
                      .Gpus(2)
                      .Specs());
  h.Place("s", RequestBuilder().Share(500), 1, {0});
  h.Place("w", RequestBuilder().Gpus(1), 1, {1});
  h.Place("c", RequestBuilder().Cpu(1000), 2, {});
  GpuClusteringPolicy p;
  EXPECT_EQ(h.Score(p, RequestBuilder().Share(300), 0), 18 + 25) << "no tag yet";
  EXPECT_EQ(h.Score(p, RequestBuilder().Share(300), 1), 17 + 50) << "own tag among others";
  EXPECT_EQ(h.Score(p, RequestBuilder().Gpus(2), 1), 17 + 0) << "only other tags";
  EXPECT_EQ(h.Score(p, RequestBuilder().Gpus(1), 1), 17 + 50) << "1-gpu is there too";
  EXPECT_EQ(h.Score(p, RequestBuilder().Share(300), 2), 18 + 25) << "CPU-only has no tag";
  EXPECT_EQ(h.Score(p, RequestBuilder().Cpu(500), 0), 0) << "CPU-only requests score 0";
}

// ---------------------------------------------------------------- gpu-packing

using GpuPacking = TwoGpuNode;

TEST_F(GpuPacking, WorkedExampleAPartlyUsedGpuFirstScores95) {
  GpuPackingPolicy p;
  const core::Request r = RequestBuilder().Share(300);
  EXPECT_EQ(h_.Score(p, r, 0), 95);
  EXPECT_EQ(h_.ChooseGpus(p, r, 0), (std::vector<int>{1}));
}

TEST_F(GpuPacking, WorkedExampleAFullyFreeGpuTakenScores49) {
  GpuPackingPolicy p;
  const core::Request r = RequestBuilder().Share(600);
  EXPECT_EQ(h_.Score(p, r, 0), 49);
  EXPECT_EQ(h_.ChooseGpus(p, r, 0), (std::vector<int>{0}));
}

TEST(GpuPackingByHand, WorkedExampleEmptyNodesScoreByStepOne) {
  PolicyHarness h(ClusterBuilder()
                      .Node("eight", 64000, 65536)
                      .Gpus(8)
                      .Node("two", 64000, 65536)
                      .Gpus(2)
                      .Node("four", 64000, 65536)
                      .Gpus(4)
                      .Node("one", 64000, 65536)
                      .Gpus(1)
                      .Specs());
  GpuPackingPolicy p;
  const core::Request r = RequestBuilder().Share(100);
  EXPECT_EQ(h.Score(p, r, 0), 25);  // max(33 - 8, 8)
  EXPECT_EQ(h.Score(p, r, 1), 31);  // max(33 - 2, 2)
  EXPECT_EQ(h.Score(p, r, 2), 29);  // max(33 - 4, 4)
  EXPECT_EQ(h.Score(p, r, 3), 32);  // max(33 - 1, 1)
  // Step 1 does not depend on the request's size.
  EXPECT_EQ(h.Score(p, RequestBuilder().Gpus(8), 0), 25);
  EXPECT_EQ(h.Score(p, RequestBuilder().Cpu(1000), 0), 0) << "CPU-only requests score 0";
}

TEST(GpuPackingByHand, StepThreeSumsThePercentFreeOfEveryTakenGpu) {
  // GPUs free {700, 700, 1000, 1000}; 2 x 500 takes GPUs 0 and 1 (70% + 70% free):
  // 100 - floor(140 / 10) = 86.
  PolicyHarness h(ClusterBuilder().Node("n", 64000, 65536).Gpus(4).Specs());
  h.Place("a", RequestBuilder().Share(300), 0, {0});
  h.Place("b", RequestBuilder().Share(300), 0, {1});
  GpuPackingPolicy p;
  EXPECT_EQ(h.Score(p, RequestBuilder().Gpus(2, 500), 0), 86);
}

TEST(GpuPackingByHand, StepTwoCountsEveryFullyFreeGpuTaken) {
  // GPUs free {700, 1000, 1000, 1000}; 3 whole GPUs skip GPU 0 and take three idle ones:
  // max(50 - 3, 33) = 47.
  PolicyHarness h(ClusterBuilder().Node("n", 64000, 65536).Gpus(4).Specs());
  h.Place("a", RequestBuilder().Share(300), 0, {0});
  GpuPackingPolicy p;
  EXPECT_EQ(h.Score(p, RequestBuilder().Gpus(3), 0), 47);
  EXPECT_EQ(h.ChooseGpus(p, RequestBuilder().Gpus(3), 0), (std::vector<int>{1, 2, 3}));
}

TEST(GpuPackingByHand, StepTwoNeverScoresBelow33) {
  // 20 GPUs, GPU 0 partly used (so step 1 does not apply); 18 whole GPUs take 18 idle ones:
  // max(50 - 18, 33) = 33.
  PolicyHarness h(ClusterBuilder().Node("n", 64000, 65536).Gpus(20).Specs());
  h.Place("a", RequestBuilder().Share(300), 0, {0});
  GpuPackingPolicy p;
  EXPECT_EQ(h.Score(p, RequestBuilder().Gpus(18), 0), 33);
  EXPECT_EQ(h.Score(p, RequestBuilder().Gpus(16), 0), 34);
}

TEST(GpuPackingByHand, StepThreeNeverScoresBelow50) {
  // Eight GPUs with 10 milli used each (99% free): 8 x 500 takes all, 100 - floor(792/10) = 21,
  // raised to 50.
  PolicyHarness h(ClusterBuilder().Node("n", 64000, 65536).Gpus(8).Specs());
  for (int g = 0; g < 8; ++g) h.Place(test::Numbered("t", g), RequestBuilder().Share(10), 0, {g});
  GpuPackingPolicy p;
  EXPECT_EQ(h.Score(p, RequestBuilder().Gpus(8, 500), 0), 50);
}

TEST(GpuPackingByHand, AnUnhealthyGpuMakesANodeNotEmpty) {
  // GPU 1 unhealthy (0 free, not idle): step 1 does not apply; the walk meets GPU 1 first, which
  // does not admit, then takes idle GPU 0: step 2, max(50 - 1, 33) = 49.
  PolicyHarness h(ClusterBuilder().Node("n", 64000, 65536).Gpus(2).Unhealthy(1).Specs());
  GpuPackingPolicy p;
  EXPECT_EQ(h.Score(p, RequestBuilder().Share(300), 0), 49);
  EXPECT_EQ(h.ChooseGpus(p, RequestBuilder().Share(300), 0), (std::vector<int>{0}));
}

// ---------------------------------------------------------------- exclusive

TEST(Exclusive, WorkedExampleScores75) {
  PolicyHarness h(ClusterBuilder().Node("n", 32000, 65536).Gpus(2).Specs());
  ExclusivePolicy p;
  const core::Request r = RequestBuilder().Cpu(8000).Memory(16384).Share(300);
  EXPECT_EQ(h.Score(p, r, 0), 75);
  EXPECT_EQ(h.ChooseGpus(p, r, 0), (std::vector<int>{0}));
}

TEST(Exclusive, AdaptMakesGpuRequestsExclusiveAndLeavesTheRestAlone) {
  ExclusivePolicy p;
  const core::Request shared = RequestBuilder("s").Cpu(1).Memory(2).Gpus(2, 300).GpuMemory(7);
  const core::Request a = p.Adapt(shared);
  EXPECT_EQ(a.sharing, core::GpuSharing::kExclusive);
  EXPECT_EQ(a.name, "s");
  EXPECT_EQ(a.cpu_milli, 1);
  EXPECT_EQ(a.memory_mib, 2);
  EXPECT_EQ(a.gpu_count, 2);
  EXPECT_EQ(a.gpu_milli, 300) << "the ledger counts what was asked";
  EXPECT_EQ(a.gpu_mib, 7);
  EXPECT_EQ(p.Adapt(RequestBuilder().Cpu(5)).sharing, core::GpuSharing::kShared);
}

TEST(Exclusive, ScoresInIntegerArithmeticAndSkipsSharedGpus) {
  // cpu (32000-10000)*100/32000 = 68 (68.75), memory (65536-10000)*100/65536 = 84 (84.74),
  // (68 + 84) / 2 = 76.
  PolicyHarness h(ClusterBuilder().Node("n", 32000, 65536).Gpus(2).Specs());
  h.Place("shared", RequestBuilder().Share(100), 0, {0});
  ExclusivePolicy p;
  const core::Request r = RequestBuilder().Cpu(10000).Memory(10000).Share(100);
  EXPECT_EQ(h.Score(p, r, 0), 76);
  EXPECT_EQ(h.ChooseGpus(p, r, 0), (std::vector<int>{1}));
}

// ---------------------------------------------------------------- random

// A seed whose first draw of Below(3) on the policy stream is 1.
std::uint64_t SeedDrawing(std::uint64_t value, std::uint64_t below) {
  for (std::uint64_t seed = 0;; ++seed) {
    core::Rng probe(seed, "policy");
    if (probe.Below(below) == value) return seed;
  }
}

TEST(Random, WorkedExampleTheDrawnFeasibleNodeScores100) {
  ClusterBuilder b;
  for (int i = 0; i < 10; ++i) b.Node(test::Numbered("n", i), 8000, 8192).Gpus(2);
  const core::Cluster cluster = b.Build();
  core::Ledger ledger(cluster);
  core::Rng rng(SeedDrawing(1, 3), "policy");
  RandomPolicy p;
  const core::Request r = RequestBuilder().Share(200);
  const std::vector<core::NodeIndex> feasible{3, 7, 9};
  Cycle cycle{r, core::kAnyModel, ledger, rng, feasible};
  p.BeginCycle(cycle);
  EXPECT_EQ(p.Score(cycle, ledger.Node(7)), 100);
  EXPECT_EQ(p.Score(cycle, ledger.Node(3)), 0);
  EXPECT_EQ(p.Score(cycle, ledger.Node(9)), 0);
  EXPECT_EQ(p.score_kind(), ScoreKind::kUsesFeasibleSet);
}

TEST(Random, EachFeasibleNodeIsDrawnAboutEquallyOften) {
  ClusterBuilder b;
  for (int i = 0; i < 4; ++i) b.Node(test::Numbered("n", i), 8000, 8192).Gpus(1);
  const core::Cluster cluster = b.Build();
  core::Ledger ledger(cluster);
  core::Rng rng(7, "policy");
  RandomPolicy p;
  const core::Request r = RequestBuilder().Share(200);
  const std::vector<core::NodeIndex> feasible{0, 1, 2, 3};
  std::vector<int> wins(4, 0);
  for (int round = 0; round < 4000; ++round) {
    Cycle cycle{r, core::kAnyModel, ledger, rng, feasible};
    p.BeginCycle(cycle);
    int winners = 0;
    for (core::NodeIndex n : feasible) {
      if (p.Score(cycle, ledger.Node(n)) == 100) {
        ++wins[static_cast<std::size_t>(n)];
        ++winners;
      }
    }
    ASSERT_EQ(winners, 1);
  }
  for (int w : wins) {
    EXPECT_GT(w, 850);
    EXPECT_LT(w, 1150);
  }
}

// ---------------------------------------------------------------- fgd

using test::Typical;

// 8 cores free, GPUs free {1000, 300} (a 700-milli tenant without CPU on GPU 1).
class FgdNode : public ::testing::Test {
 protected:
  FgdNode() : h_(ClusterBuilder().Node("n", 8000, 65536).Gpus(2, "T4").Specs()) {
    h_.Place("x", RequestBuilder().Share(700), 0, {1});
  }
  PolicyHarness h_;
  FgdPolicy fgd_{{Typical(4000, 700, 1, 1.0)}};
};

TEST_F(FgdNode, WorkedExampleScores37OnGpu0) {
  const core::Request r = RequestBuilder().Cpu(2000).Share(500);
  EXPECT_EQ(h_.Score(fgd_, r, 0), 37);
  EXPECT_EQ(h_.ChooseGpus(fgd_, r, 0), (std::vector<int>{0}));
  const auto [score, gpus] =
      fgd_.Evaluate(Cycle{r, core::kAnyModel, h_.ledger(), h_.rng(), {}}, h_.ledger().Node(0));
  EXPECT_EQ(score, 37);
  EXPECT_EQ(gpus, (std::vector<int>{0}));
}

TEST_F(FgdNode, ACpuOnlyRequestThatStarvesTheTypicalPodOfCpuScores26) {
  // After: 2 cores free < 4, so the typical pod no longer fits: F 300 -> 1300, Delta -1000.
  const core::Request r = RequestBuilder().Cpu(6000);
  EXPECT_EQ(h_.Score(fgd_, r, 0), 26);
  EXPECT_TRUE(h_.ChooseGpus(fgd_, r, 0).empty());
}

TEST_F(FgdNode, ACpuOnlyRequestThatLeavesEnoughCpuScores50) {
  EXPECT_EQ(h_.Score(fgd_, RequestBuilder().Cpu(2000), 0), 50);
}

TEST(FgdByHand, NoTypicalPodsMeansNoFragmentationAndScore50) {
  PolicyHarness h(ClusterBuilder().Node("n", 8000, 65536).Gpus(2).Specs());
  FgdPolicy fgd({});
  EXPECT_EQ(h.Score(fgd, RequestBuilder().Share(500), 0), 50);
  EXPECT_EQ(h.ChooseGpus(fgd, RequestBuilder().Share(500), 0), (std::vector<int>{0}));
}

TEST(FgdByHand, ATypicalPodThatCannotUseTheNodesModelCountsEverythingAsFragment) {
  // The typical pod accepts only V100M32; the node is T4 (NoAccess): F = R.
  // Before R = 1300, after placing 500 on GPU 0 R = 800: Delta +500 -> sigmoid(0.5) -> 62.
  PolicyHarness h(ClusterBuilder()
                      .Node("t4", 8000, 65536)
                      .Gpus(2, "T4")
                      .Node("v100", 8000, 65536)
                      .Gpus(1, "V100M32")
                      .Specs());
  h.Place("x", RequestBuilder().Share(700), 0, {1});
  const std::vector<std::string> v100{"V100M32"};
  FgdPolicy fgd({Typical(1000, 500, 1, 1.0, h.cluster().MaskOf(v100))});
  EXPECT_EQ(h.Score(fgd, RequestBuilder().Share(500), 0), 62);
  // On the V100 node the same typical pod has access: before 0 (500 fits), after 500 milli is
  // left, which still fits: 0 -> 0, score 50.
  EXPECT_EQ(h.Score(fgd, RequestBuilder().Share(500), 1), 50);
}

TEST(FgdByHand, AWholeTwoGpuRequestTakesTheLowestIndexedGpus) {
  // Typical a = (1 core, 2 x 1000, w 0.5), b = (1 core, 300, w 0.5). GPUs free
  // {1000, 1000, 1000, 300}: F_before = 0.5 * 300 (a fits; 300 is a remnant) + 0.5 * 0 = 150.
  // 2 whole GPUs go to GPUs 0 and 1: {0, 0, 1000, 300}, a no longer fits: 0.5 * 1300 = 650.
  // Delta -500 -> 37.
  PolicyHarness h(ClusterBuilder().Node("n", 16000, 65536).Gpus(4).Specs());
  h.Place("x", RequestBuilder().Share(700), 0, {3});
  FgdPolicy fgd({Typical(1000, 1000, 2, 0.5), Typical(1000, 300, 1, 0.5)});
  const core::Request two = RequestBuilder().Cpu(4000).Gpus(2);
  EXPECT_EQ(h.Score(fgd, two, 0), 37);
  EXPECT_EQ(h.ChooseGpus(fgd, two, 0), (std::vector<int>{0, 1}));
  // One whole GPU: {0, 1000, 1000, 300}, a still fits: F stays 150, score 50, GPU 0.
  const core::Request one = RequestBuilder().Cpu(4000).Gpus(1);
  EXPECT_EQ(h.Score(fgd, one, 0), 50);
  EXPECT_EQ(h.ChooseGpus(fgd, one, 0), (std::vector<int>{0}));
  // An exclusive 300-milli request is not "fractional": it takes idle GPU 0 whole.
  const core::Request excl = RequestBuilder().Cpu(4000).Share(300).Exclusive();
  EXPECT_EQ(h.Score(fgd, excl, 0), 50);
  EXPECT_EQ(h.ChooseGpus(fgd, excl, 0), (std::vector<int>{0}));
}

TEST(FgdByHand, AFractionalRequestGoesToTheGpuThatLowersFragmentationMost) {
  // Typical a = (1 core, 700, w 1). GPUs free {1000, 300, 1000}: F_before = 300.
  // 300 on GPU 0 or 2 leaves the 300 remnant (score 50); on GPU 1 it removes it:
  // F 300 -> 0, Delta +300 -> sigmoid(0.3) = 0.574 -> 57.
  PolicyHarness h(ClusterBuilder().Node("n", 16000, 65536).Gpus(3).Specs());
  h.Place("x", RequestBuilder().Share(700), 0, {1});
  FgdPolicy fgd({Typical(1000, 700, 1, 1.0)});
  const core::Request r = RequestBuilder().Share(300);
  EXPECT_EQ(h.Score(fgd, r, 0), 57);
  EXPECT_EQ(h.ChooseGpus(fgd, r, 0), (std::vector<int>{1}));
}

TEST(FgdByHand, AmongEquallyGoodGpusTheLowestIndexIsGranted) {
  PolicyHarness h(ClusterBuilder().Node("n", 16000, 65536).Gpus(3).Specs());
  h.Place("x", RequestBuilder().Share(100), 0, {0});  // free {900, 1000, 1000}
  FgdPolicy fgd({Typical(1000, 200, 1, 1.0)});
  // Every choice leaves all GPUs >= 200 free: F 0 -> 0 everywhere, score 50, GPU 0.
  EXPECT_EQ(h.Score(fgd, RequestBuilder().Share(300), 0), 50);
  EXPECT_EQ(h.ChooseGpus(fgd, RequestBuilder().Share(300), 0), (std::vector<int>{0}));
  // 800 on GPU 0 would leave a 100-milli remnant (F 0 -> 100, score 47); GPUs 1 and 2 tie at
  // 50: GPU 1.
  EXPECT_EQ(h.Score(fgd, RequestBuilder().Share(800), 0), 50);
  EXPECT_EQ(h.ChooseGpus(fgd, RequestBuilder().Share(800), 0), (std::vector<int>{1}));
}

TEST(FgdByHand, AModelConstrainedRequestOnlyTriesAcceptableGpus) {
  // A node of two models is scored with its first GPU's model, but the GPU choice obeys the
  // request's models: only GPU 1 (A10) admits.
  PolicyHarness h(ClusterBuilder().Node("n", 16000, 65536).Gpus(1, "T4").Gpus(1, "A10").Specs());
  FgdPolicy fgd({Typical(1000, 500, 1, 1.0)});
  const core::Request r = RequestBuilder().Share(300).Models({"A10"});
  EXPECT_EQ(h.ChooseGpus(fgd, r, 0), (std::vector<int>{1}));
}

TEST(FgdByHand, TheRegistryBuildsFgdWithTheContextsTypicalPods) {
  PolicyHarness h(ClusterBuilder().Node("n", 8000, 65536).Gpus(2).Specs());
  h.Place("x", RequestBuilder().Share(700), 0, {1});
  PolicyContext context;
  context.typical_pods = {Typical(4000, 700, 1, 1.0)};
  auto made = BuiltinPolicies().Make("fgd", context);
  ASSERT_TRUE(made.has_value());
  EXPECT_EQ((*made)->name(), "fgd");
  EXPECT_EQ(h.Score(**made, RequestBuilder().Cpu(2000).Share(500), 0), 37);
}

}  // namespace
}  // namespace gpumux::policy
