// The shared GPU selection rules (policy.h): BestFitGpus, LowestIndexGpus, RandomFitGpus.
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "gpumux/policy/policy.h"
#include "tests/testing/builders.h"
#include "tests/testing/policy_harness.h"

namespace gpumux::policy {
namespace {

using test::ClusterBuilder;
using test::PolicyHarness;
using test::RequestBuilder;

// Four T4s on one node with free milli {1000, 400, 600, 400}.
class FourGpus : public ::testing::Test {
 protected:
  FourGpus() : h_(ClusterBuilder().Node("n", 64000, 65536).Gpus(4).Specs()) {
    h_.Place("a", RequestBuilder().Share(600), 0, {1});
    h_.Place("b", RequestBuilder().Share(400), 0, {2});
    h_.Place("c", RequestBuilder().Share(600), 0, {3});
  }
  std::vector<int> Choose(std::vector<int> (*rule)(const Cycle&, const core::NodeView&),
                          const core::Request& r) {
    const core::ModelMask models = h_.cluster().MaskOf(r.gpu_models);
    Cycle cycle{r, models, h_.ledger(), h_.rng(), {}};
    return rule(cycle, h_.ledger().Node(0));
  }
  PolicyHarness h_;
};

TEST_F(FourGpus, BestFitGivesAFractionalRequestTheLeastFreeAdmittingGpu) {
  EXPECT_EQ(Choose(BestFitGpus, RequestBuilder().Share(300)), (std::vector<int>{1}))
      << "400 on GPUs 1 and 3: the lower index";
  EXPECT_EQ(Choose(BestFitGpus, RequestBuilder().Share(500)), (std::vector<int>{2}));
  EXPECT_EQ(Choose(BestFitGpus, RequestBuilder().Share(700)), (std::vector<int>{0}));
}

TEST_F(FourGpus, BestFitGivesOtherRequestsTheLowestIndexedAdmittingGpus) {
  EXPECT_EQ(Choose(BestFitGpus, RequestBuilder().Gpus(1)), (std::vector<int>{0}));
  EXPECT_EQ(Choose(BestFitGpus, RequestBuilder().Gpus(2, 300)), (std::vector<int>{0, 1}));
  EXPECT_EQ(Choose(BestFitGpus, RequestBuilder().Gpus(2, 500)), (std::vector<int>{0, 2}));
  EXPECT_EQ(Choose(BestFitGpus, RequestBuilder().Share(300).Exclusive()), (std::vector<int>{0}));
}

TEST_F(FourGpus, LowestIndexSkipsGpusThatDoNotAdmit) {
  EXPECT_EQ(Choose(LowestIndexGpus, RequestBuilder().Share(500)), (std::vector<int>{0}));
  EXPECT_EQ(Choose(LowestIndexGpus, RequestBuilder().Gpus(2, 500)), (std::vector<int>{0, 2}));
  EXPECT_EQ(Choose(LowestIndexGpus, RequestBuilder().Gpus(3, 400)), (std::vector<int>{0, 1, 2}));
  EXPECT_TRUE(Choose(LowestIndexGpus, RequestBuilder().Cpu(1)).empty());
}

TEST(GpuChoice, ModelConstraintsAndUnhealthyGpusAreRespected) {
  PolicyHarness h(ClusterBuilder()
                      .Node("n", 64000, 65536)
                      .Gpus(1, "T4")
                      .Gpus(1, "A10", 24576)
                      .Gpus(1, "T4")
                      .Gpus(1, "A10", 24576)
                      .Unhealthy(1)
                      .Specs());
  const core::Request r = RequestBuilder().Share(300).Models({"A10"});
  const core::ModelMask models = h.cluster().MaskOf(r.gpu_models);
  Cycle cycle{r, models, h.ledger(), h.rng(), {}};
  const core::NodeView v = h.ledger().Node(0);
  EXPECT_EQ(BestFitGpus(cycle, v), (std::vector<int>{3}));
  EXPECT_EQ(LowestIndexGpus(cycle, v), (std::vector<int>{3}));
  for (int i = 0; i < 20; ++i) EXPECT_EQ(RandomFitGpus(cycle, v), (std::vector<int>{3}));
}

TEST_F(FourGpus, RandomFitDrawsEachAdmittingGpuAboutEquallyOften) {
  const core::Request r = RequestBuilder().Share(400);  // all four admit
  std::map<int, int> seen;
  for (int i = 0; i < 4000; ++i) {
    const auto g = Choose(RandomFitGpus, r);
    ASSERT_EQ(g.size(), 1U);
    ++seen[g[0]];
  }
  ASSERT_EQ(seen.size(), 4U);
  for (const auto& [gpu, count] : seen) {
    EXPECT_GT(count, 850) << "GPU " << gpu;
    EXPECT_LT(count, 1150) << "GPU " << gpu;
  }
  // 500 milli: only GPUs 0 and 2 admit.
  for (int i = 0; i < 50; ++i) {
    const auto g = Choose(RandomFitGpus, RequestBuilder().Share(500));
    ASSERT_EQ(g.size(), 1U);
    EXPECT_TRUE(g[0] == 0 || g[0] == 2) << g[0];
  }
}

TEST_F(FourGpus, RandomFitGivesSeveralGpusAsASortedSubsetOfTheAdmittingOnes) {
  std::map<std::vector<int>, int> seen;
  for (int i = 0; i < 3000; ++i) {
    const auto g = Choose(RandomFitGpus, RequestBuilder().Gpus(2, 400));
    ASSERT_EQ(g.size(), 2U);
    ASSERT_LT(g[0], g[1]);
    ++seen[g];
  }
  EXPECT_EQ(seen.size(), 6U) << "every pair of the four GPUs";
  for (const auto& [pair, count] : seen) EXPECT_GT(count, 350);
}

TEST(GpuChoice, RandomFitIsDeterministicForAStream) {
  auto draws = [](std::uint64_t seed) {
    PolicyHarness h(ClusterBuilder().Node("n", 64000, 65536).Gpus(8).Specs(), seed);
    const core::Request r = RequestBuilder().Gpus(3, 100);
    Cycle cycle{r, core::kAnyModel, h.ledger(), h.rng(), {}};
    std::vector<std::vector<int>> out;
    for (int i = 0; i < 20; ++i) out.push_back(RandomFitGpus(cycle, h.ledger().Node(0)));
    return out;
  };
  EXPECT_EQ(draws(5), draws(5));
  EXPECT_NE(draws(5), draws(6));
}

}  // namespace
}  // namespace gpumux::policy
