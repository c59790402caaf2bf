// Share pairing (policy/share_pairing.h): the prices of the cutting-stock LP's duals, the value of
// a GPU's free milli and the loss of a placement, on a mix whose duals are unique; and
// fgd-sat-pair, which sends a share where its loss is least.
#include "gpumux/policy/share_pairing.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "gpumux/policy/engine.h"
#include "gpumux/policy/fgd_sat.h"
#include "tests/testing/builders.h"
#include "tests/testing/policy_harness.h"

namespace gpumux::policy {
namespace {

using test::ClusterBuilder;
using test::PolicyHarness;
using test::RequestBuilder;
using test::Typical;

// 470s, 320s and 650s, 4 cores each, and a whole-GPU pod (not a share: not priced). The dual LP
// max 0.5 p470 + 0.3 p320 + 0.2 p650 over the ways to fill a GPU has one optimum: 470 + 470
// binds p470 = 1/2, 320 + 320 + 320 binds p320 = 1/3, 650 + 320 binds p650 = 2/3.
std::vector<TypicalPod> Mix() {
  return {Typical(4000, 470, 1, 0.4), Typical(4000, 320, 1, 0.24), Typical(4000, 650, 1, 0.16),
          Typical(8000, 1000, 1, 0.2)};
}
constexpr core::MilliCpu kRoomy = 64000;

TEST(SharePrices, AreTheDualsOfTheCuttingStockLp) {
  const SharePrices p = SharePrices::FromTypical(Mix());
  EXPECT_NEAR(p.GapValue(470), 0.5, 1e-9);
  EXPECT_NEAR(p.GapValue(320), 1.0 / 3, 1e-9);
  EXPECT_NEAR(p.GapValue(650), 2.0 / 3, 1e-9);
  EXPECT_NEAR(p.GapValue(1000), 1.0, 1e-9) << "no way to fill a GPU is worth more than one";
  EXPECT_NEAR(p.GapValue(680), 2.0 / 3, 1e-9) << "a 650, or two 320s";
  EXPECT_NEAR(p.GapValue(319), 0.0, 1e-9) << "no typical share fits";
}

TEST(SharePrices, ALossIsWhatAPlacementStrandsOfWhatCouldStillCome) {
  const SharePrices p = SharePrices::FromTypical(Mix());
  // Beside a 470 (530 free): another 470 loses nothing, a 320 strands the 1/2 a 470 was worth
  // for its 1/3 and leaves 210 that nothing fills.
  EXPECT_NEAR(p.Loss(530, 470, kRoomy, kRoomy), 0.0, 1e-9);
  EXPECT_NEAR(p.Loss(530, 320, kRoomy, kRoomy), 1.0 / 6, 1e-9);
  // Beside a 320 (680 free), a 650 or a 320 loses nothing; on an idle GPU neither does a 470.
  EXPECT_NEAR(p.Loss(680, 650, kRoomy, kRoomy), 0.0, 1e-9);
  EXPECT_NEAR(p.Loss(680, 320, kRoomy, kRoomy), 0.0, 1e-9);
  EXPECT_NEAR(p.Loss(1000, 470, kRoomy, kRoomy), 0.0, 1e-9);
  // A share that does not fit, or no share: nothing.
  EXPECT_EQ(p.Loss(300, 320, kRoomy, kRoomy), 0.0);
  EXPECT_EQ(p.Loss(1000, 0, kRoomy, kRoomy), 0.0);
}

TEST(SharePrices, ARemainderTheNodesCpuCannotServeIsWorthNothing) {
  const SharePrices p = SharePrices::FromTypical(Mix());
  // A 470 on an idle GPU that leaves the node 2 cores: the 530 left is dead (every typical share
  // asks 4), so the placement loses that 1/2.
  EXPECT_NEAR(p.Loss(1000, 470, 6000, 2000), 0.5, 1e-9);
  // On a GPU already dead (3 cores before), nothing is lost: the capacity was wasted anyway.
  EXPECT_NEAR(p.Loss(530, 470, 3000, 2000), 0.0, 1e-9);
}

TEST(SharePrices, StayDualFeasibleOnManySizes) {
  // 40 random sizes with random weights: every way to fill a GPU is worth at most 1 and no loss
  // is negative.
  std::mt19937 rng(7);
  std::uniform_int_distribution<core::MilliGpu> size(20, 990);
  std::uniform_real_distribution<double> weight(0.1, 1.0);
  std::vector<TypicalPod> typical;
  for (int i = 0; i < 40; ++i) typical.push_back(Typical(1000, size(rng), 1, weight(rng)));
  const SharePrices p = SharePrices::FromTypical(typical);
  EXPECT_LE(p.GapValue(1000), 1.0 + 1e-6);
  EXPECT_GE(p.GapValue(1000), 1.0 - 1e-6);
  for (core::MilliGpu f = 0; f <= 1000; f += 10) {
    for (core::MilliGpu s = 10; s <= f; s += 30) {
      EXPECT_GE(p.Loss(f, s, kRoomy, kRoomy), 0.0);
    }
  }
}

TEST(SharePrices, WithoutSharesEveryLossIsZero) {
  const std::vector<TypicalPod> whole_only{Typical(8000, 1000, 1, 1.0)};
  const SharePrices p = SharePrices::FromTypical(whole_only);
  EXPECT_EQ(p.GapValue(1000), 0.0);
  EXPECT_EQ(p.Loss(1000, 470, kRoomy, kRoomy), 0.0);
}

// Node a's GPU holds a 470, node b's a 320. A 320 goes beside the 320 under fgd-sat-pair (loss 0;
// beside the 470 it would strand 1/6 of a GPU), beside the 470 under fgd-sat-keep, whose
// fragmentation measure sees 210 left against 360.
TEST(FgdSatPair, SendsAShareWhereItStrandsTheLeast) {
  PolicyHarness h(
      ClusterBuilder().Node("a", 64000, 262144).Gpus(1).Node("b", 64000, 262144).Gpus(1).Specs());
  h.Place("470", RequestBuilder().Cpu(4000).Share(470), 0, {0});
  h.Place("320", RequestBuilder().Cpu(4000).Share(320), 1, {0});
  const core::Request pod = RequestBuilder().Cpu(4000).Share(320);
  const std::vector<std::int64_t> rank{1, 0};

  FgdSatPolicy pair(Mix(), 0, 0, /*keep_rare_nodes=*/true, /*pair_shares=*/true);
  EXPECT_EQ(pair.name(), "fgd-sat-pair");
  Engine with_pairing(h.ledger(), pair, rank, h.rng());
  const Decision d = with_pairing.Decide(pod);
  ASSERT_TRUE(d.placement.has_value());
  EXPECT_EQ(d.placement->node, 1);
  EXPECT_GT(h.Score(pair, pod, 1), h.Score(pair, pod, 0));

  FgdSatPolicy keep(Mix(), 0, 0, /*keep_rare_nodes=*/true);
  Engine without(h.ledger(), keep, rank, h.rng());
  EXPECT_EQ(without.Decide(pod).placement->node, 0);
}

}  // namespace
}  // namespace gpumux::policy
