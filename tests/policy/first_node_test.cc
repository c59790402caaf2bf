#include "gpumux/policy/first_node.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "gpumux/policy/engine.h"
#include "gpumux/policy/registry.h"
#include "tests/testing/builders.h"
#include "tests/testing/policy_harness.h"

namespace gpumux::policy {
namespace {

using test::ClusterBuilder;
using test::PolicyHarness;
using test::RequestBuilder;

TEST(FirstNode, TakesTheFirstNodeInRankOrderThatFitsOnItsLowestGpus) {
  PolicyHarness h(ClusterBuilder()
                      .Node("a", 8000, 16384)
                      .Gpus(1)
                      .Node("b", 8000, 16384)
                      .Gpus(2)
                      .Node("c", 8000, 16384)
                      .Gpus(2)
                      .Specs());
  FirstNodePolicy p;
  // Rank order c, b, a: c is first.
  Engine engine(h.ledger(), p, {2, 1, 0}, h.rng());
  const Decision share = engine.Decide(RequestBuilder().Cpu(1000).Gpus(1, 300));
  ASSERT_TRUE(share.placement.has_value());
  EXPECT_EQ(share.placement->node, 2);
  EXPECT_EQ(share.placement->gpus, std::vector<int>{0});
  // Two whole GPUs: a has one, so the first node that fits in rank order is still c.
  const Decision two = engine.Decide(RequestBuilder().Cpu(1000).Gpus(2, 1000));
  ASSERT_TRUE(two.placement.has_value());
  EXPECT_EQ(two.placement->node, 2);
  EXPECT_EQ(two.placement->gpus, (std::vector<int>{0, 1}));
}

TEST(FirstNode, IsRegisteredOutsideTheDefaultComparison) {
  const PolicyEntry* e = BuiltinPolicies().Find("first-node");
  ASSERT_NE(e, nullptr);
  EXPECT_FALSE(e->compared);
  const auto all = BuiltinPolicies().names(Workload::kPods);
  const auto compared = BuiltinPolicies().compared(Workload::kPods);
  EXPECT_NE(std::find(all.begin(), all.end(), "first-node"), all.end());
  EXPECT_EQ(std::find(compared.begin(), compared.end(), "first-node"), compared.end());
}

}  // namespace
}  // namespace gpumux::policy
