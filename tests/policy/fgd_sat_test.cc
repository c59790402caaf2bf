// fgd-sat (policy/fgd_sat.h): the saturation fragmentation S on hand-computed node states, and
// the policy's score and GPU choice. The first test is the header's worked example.
#include "gpumux/policy/fgd_sat.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gpumux/policy/engine.h"
#include "gpumux/policy/fgd.h"
#include "tests/testing/builders.h"
#include "tests/testing/policy_harness.h"

namespace gpumux::policy {
namespace {

using test::ClusterBuilder;
using test::PolicyHarness;
using test::RequestBuilder;
using test::Typical;

TEST(FgdSat, WorkedExampleSendsTheCpuPodToTheNodeWhoseGpusKeepTheirCpu) {
  // X: 16 cores, Y: 64 cores, four idle GPUs each; typical a = (4 cores, 1 whole GPU).
  PolicyHarness h(
      ClusterBuilder().Node("x", 16000, 65536).Gpus(4).Node("y", 64000, 65536).Gpus(4).Specs());
  FgdSatPolicy sat({Typical(4000, 1000, 1, 1.0)});
  const core::Request cpu_pod = RequestBuilder().Cpu(4000);
  // X: S 0 -> 1000 (three a's left CPU for), M 0 -> 100, Delta -100 -> sigmoid(-0.1) -> 47.
  EXPECT_EQ(h.Score(sat, cpu_pod, 0), 47);
  EXPECT_EQ(h.Score(sat, cpu_pod, 1), 50);
  EXPECT_TRUE(h.ChooseGpus(sat, cpu_pod, 0).empty());
  // FGD sees no difference: a still fits on both.
  FgdPolicy fgd({Typical(4000, 1000, 1, 1.0)});
  EXPECT_EQ(h.Score(fgd, cpu_pod, 0), 50);
  EXPECT_EQ(h.Score(fgd, cpu_pod, 1), 50);
}

struct SatCase {
  std::string name;
  core::MilliCpu cpu_free;
  std::vector<core::MilliGpu> gpu_free;
  TypicalPod typical;
  double expected;
};

class SaturationFragmentation : public ::testing::TestWithParam<SatCase> {};

TEST_P(SaturationFragmentation, IsTheComputeThatRepeatedTypicalPodsLeaveFree) {
  const SatCase& c = GetParam();
  const std::vector<TypicalPod> typical{c.typical};
  EXPECT_DOUBLE_EQ(NodeSaturationFragmentation(c.cpu_free, c.gpu_free, 0, typical), c.expected);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, SaturationFragmentation,
    ::testing::Values(
        // Two 470s fit on an idle GPU and 60 is left, where FGD counts nothing.
        SatCase{"TwoSharesOnAnIdleGpuLeaveTheirRemainder",
                64000,
                {1000},
                Typical(8000, 470, 1, 1.0),
                60},
        // Four idle GPUs but CPU for two a's: two GPUs are stranded.
        SatCase{"CpuBoundsTheCopies",
                8000,
                {1000, 1000, 1000, 1000},
                Typical(4000, 1000, 1, 1.0),
                2000},
        // 2-GPU pods on {1000, 1000, 1000, 300}: one copy, 1300 left.
        SatCase{"MultiGpuPodsCountWholeGroupsOfFittingGpus",
                64000,
                {1000, 1000, 1000, 300},
                Typical(1000, 1000, 2, 1.0),
                1300},
        // A typical pod asking no CPU is not bounded by CPU.
        SatCase{"NoCpuRequestMeansNoCpuBound", 0, {1000, 500}, Typical(0, 250, 1, 1.0), 0},
        // CPU-only typical pods use no GPU: everything free is left (as in FGD).
        SatCase{"ACpuOnlyTypicalPodLeavesAllFreeCompute",
                64000,
                {1000, 500},
                Typical(2000, 0, 0, 1.0),
                1500},
        // The node's model (0) is not in the pod's mask: everything free is left.
        SatCase{"AModelTheTypicalPodCannotUseLeavesAllFreeCompute",
                64000,
                {1000, 500},
                Typical(1000, 500, 1, 1.0, core::ModelMask{0b10}),
                1500},
        // 1 core free, the pod asks 2: no copy fits, all 1700 is left.
        SatCase{"NoCpuLeftLeavesEverything", 1000, {1000, 700}, Typical(2000, 300, 1, 1.0), 1700}),
    [](const ::testing::TestParamInfo<SatCase>& param_info) { return param_info.param.name; });

TEST(FgdSat, WeightsAddUpOverTypicalPods) {
  const std::vector<TypicalPod> typical{Typical(8000, 470, 1, 0.5), Typical(8000, 1000, 1, 0.5)};
  const std::vector<core::MilliGpu> gpus{1000};
  // 470: 60 left; 1000: 0 left.
  EXPECT_DOUBLE_EQ(NodeSaturationFragmentation(64000, gpus, 0, typical), 30);
}

TEST(FgdSat, AFractionalRequestTakesTheLowestIndexedGpuWithTheBestScore) {
  // Typical (1 core, 470). GPUs free {1000, 530}: before F = 0, S = 1530 - 3 * 470 = 120,
  // M = 12. 470 on GPU 1 leaves {1000, 60}: F = 60, S = 1060 - 940 = 120, M = 72, Delta -60
  // -> 48. On GPU 0: {530, 530}: F = 0, S = 120, M = 12, Delta 0 -> 50: GPU 0.
  PolicyHarness h(ClusterBuilder().Node("n", 16000, 65536).Gpus(2).Specs());
  h.Place("x", RequestBuilder().Share(470), 0, {1});
  FgdSatPolicy sat({Typical(1000, 470, 1, 1.0)});
  const core::Request r = RequestBuilder().Share(470);
  EXPECT_EQ(h.Score(sat, r, 0), 50);
  EXPECT_EQ(h.ChooseGpus(sat, r, 0), (std::vector<int>{0}));
  const auto [score, gpus] =
      sat.Evaluate(Cycle{r, core::kAnyModel, h.ledger(), h.rng(), {}}, h.ledger().Node(0));
  EXPECT_EQ(score, 50);
  EXPECT_EQ(gpus, (std::vector<int>{0}));
}

TEST(FgdSat, WholeGpuRequestsTakeTheLowestIndexedIdleGpus) {
  PolicyHarness h(ClusterBuilder().Node("n", 64000, 65536).Gpus(4).Specs());
  h.Place("x", RequestBuilder().Share(300), 0, {0});
  FgdSatPolicy sat({Typical(4000, 1000, 1, 1.0)});
  EXPECT_EQ(h.ChooseGpus(sat, RequestBuilder().Cpu(4000).Gpus(2), 0), (std::vector<int>{1, 2}));
}

TEST(FgdSat, TheOnePassMixEqualsFPlusATenthOfSBitForBit) {
  // Mixed() fuses the two sums for speed; it must not change a single placement.
  const std::vector<TypicalPod> typical{
      Typical(4000, 1000, 1, 0.31), Typical(8000, 470, 1, 0.17),
      Typical(2000, 0, 0, 0.13),    Typical(1000, 1000, 2, 0.11),
      Typical(12000, 810, 1, 0.19), Typical(3000, 230, 1, 0.09, core::ModelMask{0b10})};
  FgdSatPolicy sat(typical);
  const std::vector<std::vector<core::MilliGpu>> states{
      {1000, 1000, 1000, 1000}, {190, 530, 1000, 0}, {60, 60, 300, 770, 1000, 1000, 0, 1000}, {}};
  for (const auto& gpus : states) {
    for (const core::MilliCpu cpu :
         {core::MilliCpu{0}, core::MilliCpu{1500}, core::MilliCpu{7000}, core::MilliCpu{64000}}) {
      for (const core::ModelId model : {core::ModelId{0}, core::ModelId{1}}) {
        EXPECT_EQ(sat.Mixed(cpu, gpus, model),
                  NodeFragmentation(cpu, gpus, model, typical) +
                      FgdSatPolicy::kSaturationWeight *
                          NodeSaturationFragmentation(cpu, gpus, model, typical));
      }
    }
  }
}

TEST(FgdSat, NoTypicalPodsMeansNoFragmentationAndScore50) {
  PolicyHarness h(ClusterBuilder().Node("n", 8000, 65536).Gpus(2).Specs());
  FgdSatPolicy sat({});
  EXPECT_EQ(h.Score(sat, RequestBuilder().Share(500), 0), 50);
  EXPECT_EQ(h.ChooseGpus(sat, RequestBuilder().Share(500), 0), (std::vector<int>{0}));
}

// fgd-sat-reserve (fgd_sat.h): the header's worked example, then each condition of the rule.
// Typical pods: whole GPU (12 cores) 0.5, 810 milli 0.36, 470 milli 0.1, 160 milli 0.04. A
// remainder of 190 fits only the 160 (0.04 < kStrandedShare of the GPU pods): stranded; 530
// fits 470 and 160 (0.14): not stranded.
std::vector<TypicalPod> ReserveTypical() {
  return {Typical(12000, 1000, 1, 0.5), Typical(3000, 810, 1, 0.36), Typical(3000, 470, 1, 0.1),
          Typical(4000, 160, 1, 0.04)};
}

// a: one idle GPU and `a_cpu` free; b: one GPU holding a 160; c: `c_gpus` GPUs of which 9 are
// busy with whole-GPU pods. With c_gpus = 9, 1 of 11 GPUs is idle: scarce (< 10 %).
void BuildReserveCluster(PolicyHarness& h) {
  h.Place("small", RequestBuilder().Cpu(4000).Share(160), 1, {0});
  for (int i = 0; i < 9; ++i) {
    h.Place("whole-" + std::to_string(i), RequestBuilder().Cpu(1000).Gpus(1), 2, {i});
  }
}

std::vector<core::NodeSpec> ReserveNodes(core::MilliCpu a_cpu, int c_gpus) {
  return ClusterBuilder()
      .Node("a", a_cpu, 262144)
      .Gpus(1)
      .Node("b", 16000, 262144)
      .Gpus(1)
      .Node("c", 128000, 262144)
      .Gpus(c_gpus)
      .Specs();
}

TEST(FgdSatReserve, WorkedExampleSendsThe810ToTheSharedGpuAndKeepsTheIdleOne) {
  PolicyHarness h(ReserveNodes(40000, 9));
  BuildReserveCluster(h);
  FgdSatPolicy reserve(ReserveTypical(), FgdSatPolicy::kDefaultReserveIdleFraction);
  EXPECT_EQ(reserve.name(), "fgd-sat-reserve");
  EXPECT_TRUE(reserve.IdleGpusScarce(h.ledger()));
  const core::Request pod = RequestBuilder().Cpu(3000).Share(810);
  EXPECT_EQ(h.Score(reserve, pod, 0), Policy::kDecline);
  EXPECT_NE(h.Score(reserve, pod, 1), Policy::kDecline);
  Engine engine(h.ledger(), reserve, {0, 1, 2}, h.rng());
  const Decision d = engine.Decide(pod);
  ASSERT_TRUE(d.placement.has_value());
  EXPECT_EQ(d.placement->node, 1);
  // Once b's GPU is taken too, the 810 fits only the idle GPU and waits.
  h.Place("other-810", pod, 1, {0});
  const Decision again = engine.Decide(pod);
  EXPECT_FALSE(again.placement.has_value());
  EXPECT_TRUE(again.declined);
  // A whole-GPU pod still takes the kept GPU.
  EXPECT_EQ(engine.Decide(RequestBuilder().Cpu(12000).Gpus(1)).placement->node, 0);
}

TEST(FgdSatReserve, DeclinesOnlyWhenEveryConditionHolds) {
  const core::Request pod = RequestBuilder().Cpu(3000).Share(810);
  {  // Plain fgd-sat never declines.
    PolicyHarness h(ReserveNodes(40000, 9));
    BuildReserveCluster(h);
    FgdSatPolicy sat(ReserveTypical());
    EXPECT_EQ(sat.name(), "fgd-sat");
    EXPECT_FALSE(sat.IdleGpusScarce(h.ledger()));
    EXPECT_NE(h.Score(sat, pod, 0), Policy::kDecline);
  }
  {  // (4) 3 of 13 GPUs idle (23 %): not scarce.
    PolicyHarness h(ReserveNodes(40000, 11));
    BuildReserveCluster(h);
    FgdSatPolicy reserve(ReserveTypical(), FgdSatPolicy::kDefaultReserveIdleFraction);
    EXPECT_FALSE(reserve.IdleGpusScarce(h.ledger()));
    EXPECT_NE(h.Score(reserve, pod, 0), Policy::kDecline);
    // The threshold is the caller's: at a quarter, 23 % idle is scarce.
    FgdSatPolicy quarter(ReserveTypical(), 0.25);
    EXPECT_EQ(h.Score(quarter, pod, 0), Policy::kDecline);
  }
  {  // (3) a has 8 cores: the 12-core whole-GPU pod could not use its GPU anyway.
    PolicyHarness h(ReserveNodes(8000, 9));
    BuildReserveCluster(h);
    FgdSatPolicy reserve(ReserveTypical(), FgdSatPolicy::kDefaultReserveIdleFraction);
    EXPECT_EQ(reserve.WholeGpuPodCpu(0), 12000);
    EXPECT_NE(h.Score(reserve, pod, 0), Policy::kDecline);
  }
  {  // (2) a 470 leaves 530, where 470s and 160s fit; (1) whole-GPU and CPU pods are never held.
    PolicyHarness h(ReserveNodes(40000, 9));
    BuildReserveCluster(h);
    FgdSatPolicy reserve(ReserveTypical(), FgdSatPolicy::kDefaultReserveIdleFraction);
    EXPECT_TRUE(reserve.Stranded(0, 190));
    EXPECT_FALSE(reserve.Stranded(0, 530));
    EXPECT_NE(h.Score(reserve, RequestBuilder().Cpu(3000).Share(470), 0), Policy::kDecline);
    EXPECT_NE(h.Score(reserve, RequestBuilder().Cpu(3000).Gpus(1), 0), Policy::kDecline);
    EXPECT_NE(h.Score(reserve, RequestBuilder().Cpu(3000), 0), Policy::kDecline);
  }
}

TEST(FgdSatReserve, TheRuleFollowsTheClusterThroughTheEngineMemo) {
  // Not scarce at first: the 810 takes a's idle GPU's score like fgd-sat. When c's last idle
  // GPUs are taken (a's node unchanged), the memoised score of a must not be reused.
  PolicyHarness h(ReserveNodes(40000, 11));
  BuildReserveCluster(h);
  FgdSatPolicy reserve(ReserveTypical(), FgdSatPolicy::kDefaultReserveIdleFraction);
  Engine engine(h.ledger(), reserve, {0, 1, 2}, h.rng());
  const core::Request pod = RequestBuilder().Cpu(3000).Share(810);
  const std::vector<core::NodeIndex> all{0, 1, 2};
  EXPECT_NE(engine.ScoreNodes(pod, all)[0], Policy::kDecline);
  h.Place("whole-9", RequestBuilder().Cpu(1000).Gpus(1), 2, {9});
  h.Place("whole-10", RequestBuilder().Cpu(1000).Gpus(1), 2, {10});
  EXPECT_EQ(engine.ScoreNodes(pod, all)[0], Policy::kDecline);
}

// fgd-sat-keep: among ten 2-GPU nodes, the one with 64 cores (above the 90th percentile of
// 16, ..., 16, 64) stays whole for pods that need both its GPUs while another node fits; a
// smaller pod takes it once nothing else fits, and a 2-GPU pod takes it at once.
TEST(FgdSatKeep, KeepsTheNodeWithTheMostCpuForItsGpuCountForPodsThatNeedItAll) {
  ClusterBuilder cluster;
  for (int i = 0; i < 9; ++i) cluster.Node("small-" + std::to_string(i), 16000, 65536).Gpus(2);
  cluster.Node("big", 64000, 262144).Gpus(2);
  PolicyHarness h(cluster.Specs());
  FgdSatPolicy keep({}, 0, 0, /*keep_rare_nodes=*/true);
  EXPECT_EQ(keep.name(), "fgd-sat-keep");
  std::vector<std::int64_t> rank(10);
  for (std::int64_t i = 0; i < 10; ++i) rank[static_cast<std::size_t>(i)] = 9 - i;  // big first
  Engine engine(h.ledger(), keep, rank, h.rng());
  const core::Request one = RequestBuilder().Cpu(12000).Gpus(1);
  EXPECT_TRUE(keep.Kept(h.ledger().cluster(), h.ledger().Node(9), one));
  EXPECT_FALSE(
      keep.Kept(h.ledger().cluster(), h.ledger().Node(9), RequestBuilder().Cpu(1).Gpus(2)));
  EXPECT_FALSE(keep.Kept(h.ledger().cluster(), h.ledger().Node(0), one)) << "not above the 90th";
  const Decision d = engine.Decide(one);
  ASSERT_TRUE(d.placement.has_value());
  EXPECT_NE(d.placement->node, 9) << "big is kept while a small node fits";
  EXPECT_EQ(engine.Decide(RequestBuilder().Cpu(40000).Gpus(2)).placement->node, 9)
      << "only big fits a 40-core 2-GPU pod";
  // With every small node full, a 1-GPU pod takes big.
  for (int i = 0; i < 9; ++i) {
    h.Place("fill-" + std::to_string(i), RequestBuilder().Cpu(16000).Gpus(2), i, {0, 1});
  }
  EXPECT_EQ(engine.Decide(one).placement->node, 9);
}

}  // namespace
}  // namespace gpumux::policy
