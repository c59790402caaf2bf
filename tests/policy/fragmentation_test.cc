#include "gpumux/policy/fragmentation.h"

#include <gtest/gtest.h>

#include <numeric>
#include <ostream>
#include <string>
#include <vector>

#include "tests/testing/builders.h"

namespace gpumux::policy {
namespace {

using test::ClusterBuilder;
using test::RequestBuilder;

using test::Typical;

TEST(NodeFragmentation, WorkedExampleIs800) {
  const std::vector<core::MilliGpu> free{1000, 300, 0};
  const std::vector<TypicalPod> typical{Typical(4000, 500, 1, 0.5), Typical(16000, 1000, 1, 0.3),
                                        Typical(2000, 0, 0, 0.2)};
  EXPECT_DOUBLE_EQ(NodeFragmentation(8000, free, 0, typical), 800.0);
  // Each typical pod alone, weight 1: frag_a = 300, frag_b = 1300, frag_c = 1300.
  const double expected[] = {300, 1300, 1300};
  for (std::size_t i = 0; i < typical.size(); ++i) {
    std::vector<TypicalPod> alone{typical[i]};
    alone[0].weight = 1;
    EXPECT_DOUBLE_EQ(NodeFragmentation(8000, free, 0, alone), expected[i]) << "pod " << i;
  }
}

struct FragCase {
  const char* name;
  core::MilliCpu cpu_free;
  std::vector<core::MilliGpu> gpu_free;
  core::ModelId model;
  TypicalPod pod;  // weight 1
  double expected;
};
void PrintTo(const FragCase& c, std::ostream* os) { *os << c.name; }

class OneTypicalPod : public ::testing::TestWithParam<FragCase> {};

TEST_P(OneTypicalPod, Fragmentation) {
  const FragCase& c = GetParam();
  const std::vector<TypicalPod> typical{c.pod};
  EXPECT_DOUBLE_EQ(NodeFragmentation(c.cpu_free, c.gpu_free, c.model, typical), c.expected);
}

INSTANTIATE_TEST_SUITE_P(
    Table, OneTypicalPod,
    ::testing::Values(
        FragCase{"a_fitting_pod_counts_only_the_too_small_remnants",
                 8000,
                 {1000, 300, 499, 500},
                 0,
                 Typical(1000, 500, 1, 1),
                 799},
        FragCase{"a_pod_lacking_cpu_counts_everything",
                 999,
                 {1000, 300},
                 0,
                 Typical(1000, 500, 1, 1),
                 1300},
        FragCase{"a_pod_lacking_gpu_counts_everything",
                 8000,
                 {400, 300},
                 0,
                 Typical(1000, 500, 1, 1),
                 700},
        FragCase{"a_cpu_only_pod_counts_everything_even_when_it_fits",
                 8000,
                 {1000, 250},
                 0,
                 Typical(1000, 0, 0, 1),
                 1250},
        FragCase{"a_pod_without_access_to_the_model_counts_everything",
                 8000,
                 {1000, 1000},
                 1,
                 Typical(1000, 500, 1, 1, core::ModelMask{1}),
                 2000},
        FragCase{"a_pod_with_access_to_the_model_is_judged_normally",
                 8000,
                 {1000, 1000},
                 0,
                 Typical(1000, 500, 1, 1, core::ModelMask{1}),
                 0},
        FragCase{"a_multi_gpu_pod_fits_when_enough_gpus_are_big_enough",
                 8000,
                 {1000, 600, 1000},
                 0,
                 Typical(1000, 1000, 2, 1),
                 600},
        FragCase{"a_multi_gpu_pod_short_of_one_gpu_counts_everything",
                 8000,
                 {1000, 600, 900},
                 0,
                 Typical(1000, 1000, 2, 1),
                 2500},
        FragCase{
            "a_node_without_gpus_has_no_fragmentation", 8000, {}, 0, Typical(1000, 500, 1, 1), 0},
        FragCase{
            "a_fully_used_node_has_no_fragmentation", 0, {0, 0}, 0, Typical(1000, 0, 0, 1), 0}),
    test::CaseName());

// ---------------------------------------------------------------- typical pods

core::Cluster ModelCluster() {
  return ClusterBuilder().Node("a", 1, 1).Gpus(1, "T4").Node("b", 1, 1).Gpus(1, "V100M32").Build();
}

std::vector<core::Request> Repeat(const core::Request& r, int n) {
  return std::vector<core::Request>(static_cast<std::size_t>(n), r);
}

void Append(std::vector<core::Request>& to, const std::vector<core::Request>& more) {
  to.insert(to.end(), more.begin(), more.end());
}

TEST(ComputeTypicalPods, GroupsByCpuMilliCountAndModelsButNotMemory) {
  const core::Cluster cluster = ModelCluster();
  std::vector<core::Request> pods;
  Append(pods, Repeat(RequestBuilder().Cpu(1000).Memory(1).Share(500), 3));
  Append(pods, Repeat(RequestBuilder().Cpu(1000).Memory(999).Share(500), 2));  // same group
  Append(pods, Repeat(RequestBuilder().Cpu(1000).Share(500).Models({"T4"}), 2));
  Append(pods, Repeat(RequestBuilder().Cpu(1000).Gpus(2, 500), 2));
  Append(pods, Repeat(RequestBuilder().Cpu(2000).Share(500), 1));
  const auto typical = ComputeTypicalPods(pods, cluster, {100});
  ASSERT_EQ(typical.size(), 4U);
  EXPECT_EQ(typical[0].count, 5);
  EXPECT_EQ(typical[0].cpu_milli, 1000);
  EXPECT_EQ(typical[0].gpu_milli, 500);
  EXPECT_EQ(typical[0].gpu_count, 1);
  EXPECT_EQ(typical[0].models, "");
  EXPECT_EQ(typical[0].model_mask, core::kAnyModel);
  // Ties at count 2: the larger key first; same cpu and milli, so the larger GPU count (2) wins
  // over the model-constrained single GPU.
  EXPECT_EQ(typical[1].count, 2);
  EXPECT_EQ(typical[1].gpu_count, 2);
  EXPECT_EQ(typical[2].count, 2);
  EXPECT_EQ(typical[2].models, "T4");
  EXPECT_EQ(typical[2].model_mask, core::ModelMask{1});
  EXPECT_EQ(typical[3].count, 1);
  EXPECT_EQ(typical[3].cpu_milli, 2000);
}

TEST(ComputeTypicalPods, CpuOnlyPodsFormTheirOwnGroupWithMilliZero) {
  const core::Cluster cluster = ModelCluster();
  std::vector<core::Request> pods = Repeat(RequestBuilder().Cpu(500), 4);
  Append(pods, Repeat(RequestBuilder().Cpu(500).Share(100), 1));
  const auto typical = ComputeTypicalPods(pods, cluster, {100});
  ASSERT_EQ(typical.size(), 2U);
  EXPECT_EQ(typical[0].gpu_milli, 0);
  EXPECT_EQ(typical[0].gpu_count, 0);
  EXPECT_EQ(typical[0].count, 4);
}

struct TieCase {
  const char* name;
  core::Request first;  // expected first among two shapes of equal count
  core::Request second;
};
void PrintTo(const TieCase& c, std::ostream* os) { *os << c.name; }

class TypicalPodTies : public ::testing::TestWithParam<TieCase> {};

TEST_P(TypicalPodTies, PutTheLargerKeyFirst) {
  const core::Cluster cluster = ModelCluster();
  // Listed in the "wrong" order on purpose.
  std::vector<core::Request> pods = Repeat(GetParam().second, 3);
  Append(pods, Repeat(GetParam().first, 3));
  const auto typical = ComputeTypicalPods(pods, cluster, {100});
  ASSERT_EQ(typical.size(), 2U);
  EXPECT_EQ(typical[0].cpu_milli, GetParam().first.cpu_milli);
  EXPECT_EQ(typical[0].gpu_milli, GetParam().first.gpu_milli);
  EXPECT_EQ(typical[0].gpu_count, GetParam().first.gpu_count);
  EXPECT_EQ(typical[1].cpu_milli, GetParam().second.cpu_milli);
  EXPECT_EQ(typical[1].gpu_milli, GetParam().second.gpu_milli);
  EXPECT_EQ(typical[1].gpu_count, GetParam().second.gpu_count);
  auto models = [](const core::Request& r) {
    return r.gpu_models.empty() ? std::string() : r.gpu_models[0];
  };
  EXPECT_EQ(typical[0].models, models(GetParam().first));
  EXPECT_EQ(typical[1].models, models(GetParam().second));
}

INSTANTIATE_TEST_SUITE_P(
    Table, TypicalPodTies,
    ::testing::Values(TieCase{"larger_cpu_first", RequestBuilder().Cpu(2000).Share(100),
                              RequestBuilder().Cpu(1000).Share(900)},
                      TieCase{"then_larger_milli", RequestBuilder().Cpu(1000).Share(900),
                              RequestBuilder().Cpu(1000).Share(100)},
                      TieCase{"then_larger_gpu_count", RequestBuilder().Cpu(1000).Gpus(4),
                              RequestBuilder().Cpu(1000).Gpus(2)},
                      TieCase{"then_the_larger_model_string",
                              RequestBuilder().Cpu(1000).Share(500).Models({"V100M32"}),
                              RequestBuilder().Cpu(1000).Share(500).Models({"T4"})}),
    test::CaseName());

TEST(ComputeTypicalPods, KeepsTheSmallestPrefixReachingTheThreshold) {
  const core::Cluster cluster = ModelCluster();
  // 100 pods: 50 + 30 + 15 + 5.
  std::vector<core::Request> pods = Repeat(RequestBuilder().Cpu(1000).Share(100), 50);
  Append(pods, Repeat(RequestBuilder().Cpu(1000).Share(200), 30));
  Append(pods, Repeat(RequestBuilder().Cpu(1000).Share(300), 15));
  Append(pods, Repeat(RequestBuilder().Cpu(1000).Share(400), 5));
  struct Cut {
    int threshold;
    std::size_t kept;
  };
  for (const Cut c :
       {Cut{95, 3}, Cut{96, 4}, Cut{80, 2}, Cut{79, 2}, Cut{50, 1}, Cut{1, 1}, Cut{100, 4}}) {
    const auto typical = ComputeTypicalPods(pods, cluster, {c.threshold});
    EXPECT_EQ(typical.size(), c.kept) << "threshold " << c.threshold;
  }
  // The default is 95%.
  EXPECT_EQ(ComputeTypicalPods(pods, cluster).size(), 3U);
}

TEST(ComputeTypicalPods, WeightsAreCountOverCoveredAndSumToOne) {
  const core::Cluster cluster = ModelCluster();
  std::vector<core::Request> pods = Repeat(RequestBuilder().Cpu(1000).Share(100), 50);
  Append(pods, Repeat(RequestBuilder().Cpu(1000).Share(200), 30));
  Append(pods, Repeat(RequestBuilder().Cpu(1000).Share(300), 15));
  Append(pods, Repeat(RequestBuilder().Cpu(1000).Share(400), 5));
  const auto typical = ComputeTypicalPods(pods, cluster);
  ASSERT_EQ(typical.size(), 3U);
  EXPECT_DOUBLE_EQ(typical[0].weight, 50.0 / 95.0);
  EXPECT_DOUBLE_EQ(typical[1].weight, 30.0 / 95.0);
  EXPECT_DOUBLE_EQ(typical[2].weight, 15.0 / 95.0);
  const double sum = std::accumulate(typical.begin(), typical.end(), 0.0,
                                     [](double s, const TypicalPod& p) { return s + p.weight; });
  EXPECT_NEAR(sum, 1.0, 1e-12);
}

TEST(ComputeTypicalPods, AnEmptyPodListHasNoTypicalPods) {
  const core::Cluster cluster = ModelCluster();
  EXPECT_TRUE(ComputeTypicalPods({}, cluster).empty());
}

TEST(ComputeTypicalPods, ModelsJoinWithABarAndResolveAgainstTheCluster) {
  const core::Cluster cluster = ModelCluster();
  const std::vector<core::Request> pods{
      RequestBuilder().Cpu(1).Share(100).Models({"T4", "V100M32"}),
      RequestBuilder().Cpu(1).Share(100).Models({"H100"})};
  const auto typical = ComputeTypicalPods(pods, cluster, {100});
  ASSERT_EQ(typical.size(), 2U);
  EXPECT_EQ(typical[0].models, "T4|V100M32");
  EXPECT_EQ(typical[0].model_mask, core::ModelMask{3});
  EXPECT_EQ(typical[1].models, "H100");
  EXPECT_EQ(typical[1].model_mask, core::ModelMask{0});
}

}  // namespace
}  // namespace gpumux::policy
