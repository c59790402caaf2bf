#include "gpumux/core/explain.h"

#include <gtest/gtest.h>

#include "tests/testing/builders.h"
#include "tests/testing/policy_harness.h"

namespace gpumux::core {
namespace {

using test::ClusterBuilder;
using test::PolicyHarness;
using test::RequestBuilder;

Misfit Explain(PolicyHarness& h, const Request& r) {
  const NodeView node = h.ledger().Node(0);
  EXPECT_FALSE(NodeFits(node, r, h.cluster().MaskOf(r.gpu_models)));
  return ExplainMisfit(node, r, h.cluster().MaskOf(r.gpu_models));
}

TEST(ExplainMisfit, TheHeadersExampleNamesTheClosestGpuAndTheShortfall) {
  PolicyHarness h(ClusterBuilder().Node("n", 8000, 16384).Gpus(2, "A100", 10000).Specs());
  h.Place("a", RequestBuilder("a").Share(1).GpuMemory(4000), 0, {0});
  h.Place("b", RequestBuilder("b").Share(1).GpuMemory(3856), 0, {1});
  // GPU 0: 6000 MiB free; GPU 1: 6144 MiB free.
  const Misfit m = Explain(h, RequestBuilder().Share(250).GpuMemory(8192));
  EXPECT_TRUE(m.resolvable);
  EXPECT_EQ(m.reason,
            "needs 1 GPU with 8192 MiB and 250 milli-GPU free; closest is GPU 1 (6144 MiB, "
            "999 milli free): 2048 MiB short");
}

TEST(ExplainMisfit, TooFewGpusCannotBeFixedByPreemption) {
  PolicyHarness h(ClusterBuilder().Node("n", 8000, 16384).Gpus(8).Specs());
  const Misfit m = Explain(h, RequestBuilder().Gpus(64).Exclusive());
  EXPECT_FALSE(m.resolvable);
  EXPECT_EQ(m.reason, "needs 64 GPUs, node has 8");
}

TEST(ExplainMisfit, AWrongModelIsNamed) {
  PolicyHarness h(ClusterBuilder().Node("n", 8000, 16384).Gpus(2, "T4").Specs());
  const Misfit m = Explain(h, RequestBuilder().Share(100).Models({"A100"}));
  EXPECT_FALSE(m.resolvable);
  EXPECT_EQ(m.reason, "needs 1 GPU of model A100, node has 0 (its GPUs are T4)");
}

TEST(ExplainMisfit, AGpuTooSmallForTheRequestIsUnresolvable) {
  PolicyHarness h(ClusterBuilder().Node("n", 8000, 16384).Gpus(1, "T4", 16384).Specs());
  const Misfit m = Explain(h, RequestBuilder().Share(100).GpuMemory(20000));
  EXPECT_FALSE(m.resolvable);
  EXPECT_EQ(m.reason, "needs 20000 MiB on one GPU, the largest here has 16384 MiB");
}

TEST(ExplainMisfit, WholeGpusTakenByTenantsCountTheTenants) {
  PolicyHarness h(ClusterBuilder().Node("n", 8000, 16384).Gpus(1).Specs());
  h.Place("a", RequestBuilder("a").Share(100), 0, {0});
  const Misfit m = Explain(h, RequestBuilder().Gpus(1).Exclusive());
  EXPECT_TRUE(m.resolvable);
  EXPECT_EQ(m.reason, "needs 1 GPU to itself; closest is GPU 0 (1 tenant)");
}

TEST(ExplainMisfit, UnhealthyGpusAreSaidToBeSo) {
  PolicyHarness h(
      ClusterBuilder().Node("n", 8000, 16384).Gpus(2).Unhealthy(0).Unhealthy(1).Specs());
  const Misfit m = Explain(h, RequestBuilder().Share(100));
  EXPECT_FALSE(m.resolvable);
  EXPECT_EQ(m.reason, "needs 1 GPU, 0 of 2 are healthy");
}

// Enforcement (cluster.h): a share that requires limits goes only to GPUs that enforce them;
// whole GPUs need none. The simulator's GPUs enforce nothing and its requests require nothing.
std::vector<NodeSpec> TwoGpusOneEnforcing() {
  std::vector<NodeSpec> specs =
      ClusterBuilder().Node("n", 8000, 16384).Gpus(2, "A100", 40960).Specs();
  specs[0].gpus[1].enforces = kEnforcesMemory;
  return specs;
}

TEST(Enforcement, AShareRequiringMemoryLimitsGoesOnlyToAGpuThatEnforcesThem) {
  PolicyHarness h(TwoGpusOneEnforcing());
  Request r = RequestBuilder().Share(250).GpuMemory(8192);
  r.required_enforcement = kEnforcesMemory;
  const NodeView node = h.ledger().Node(0);
  EXPECT_FALSE(GpuAdmits(node, 0, r, kAnyModel));
  EXPECT_TRUE(GpuAdmits(node, 1, r, kAnyModel));
  EXPECT_TRUE(NodeFits(node, r, kAnyModel));
  r.required_enforcement = kEnforcesMemory | kEnforcesCompute;
  EXPECT_FALSE(NodeFits(node, r, kAnyModel)) << "no GPU enforces compute";
  Request whole = RequestBuilder().Gpus(2).Exclusive();
  whole.required_enforcement = kEnforcesMemory | kEnforcesCompute;
  EXPECT_TRUE(NodeFits(node, whole, kAnyModel)) << "whole GPUs are not affected";
}

TEST(Enforcement, ANodeWithoutEnforcingGpusIsUnresolvableAndSaysWhatIsMissing) {
  PolicyHarness h(TwoGpusOneEnforcing());
  Request r = RequestBuilder().Share(250).GpuMemory(8192);
  r.required_enforcement = kEnforcesCompute;
  Misfit m = Explain(h, r);
  EXPECT_FALSE(m.resolvable);
  EXPECT_EQ(m.reason, "needs 1 GPU that enforces compute limits, 0 of 2 here do");
  r.required_enforcement = kEnforcesMemory;
  r.gpu_count = 2;
  m = Explain(h, r);
  EXPECT_FALSE(m.resolvable);
  EXPECT_EQ(m.reason, "needs 2 GPUs that enforce memory limits, 1 of 2 here does");
}

TEST(Enforcement, ABusyEnforcingGpuIsResolvableAndTheOthersAreNotItsClosest) {
  PolicyHarness h(TwoGpusOneEnforcing());
  h.Place("a", RequestBuilder("a").Share(900).GpuMemory(1024), 0, {1});
  Request r = RequestBuilder().Share(250).GpuMemory(8192);
  r.required_enforcement = kEnforcesMemory;
  const Misfit m = Explain(h, r);
  EXPECT_TRUE(m.resolvable);
  EXPECT_NE(m.reason.find("closest is GPU 1"), std::string::npos) << m.reason;
}

}  // namespace
}  // namespace gpumux::core
