// fgd-sat (policy/fgd_sat.h): the saturation fragmentation S on hand-computed node states, and
// the policy's score and GPU choice. The first test is the header's worked example.
#include "gpumux/policy/fgd_sat.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

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

}  // namespace
}  // namespace gpumux::policy
