#include "gpumux/core/ledger.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <ostream>
#include <string>
#include <vector>

#include "tests/testing/builders.h"

namespace gpumux::core {
namespace {

using test::ClusterBuilder;
using test::LedgerSnapshot;
using test::RequestBuilder;

// node 0 "big":   32 cores, 64 GiB, 4 x T4 (16 GiB)
// node 1 "v100":   8 cores, 16 GiB, 2 x V100M32 (32 GiB), GPU 1 unhealthy
// node 2 "small":  4 cores,  4 GiB, no GPU, at most 2 pods
Cluster LedgerCluster() {
  return ClusterBuilder()
      .Node("big", 32000, 65536)
      .Gpus(4, "T4", 16384)
      .Node("v100", 8000, 16384)
      .Gpus(2, "V100M32", 32768)
      .Unhealthy(1)
      .Node("small", 4000, 4096)
      .MaxPods(2)
      .Build();
}

struct Step {
  std::string key;
  Request request;
  Placement placement;
};

struct RefusedCase {
  const char* name;
  std::vector<Step> setup;
  Step attempt;
  ErrorCode code;
  const char* message;  // part of the error message
};
void PrintTo(const RefusedCase& c, std::ostream* os) { *os << c.name; }

class LedgerRefuses : public ::testing::TestWithParam<RefusedCase> {};

// A refused Assign returns the error and changes nothing at all: every node view, the totals
// and even the generations are as before.
TEST_P(LedgerRefuses, AndChangesNothing) {
  const RefusedCase& c = GetParam();
  const Cluster cluster = LedgerCluster();
  Ledger ledger(cluster);
  for (const Step& s : c.setup) {
    auto ok = ledger.Assign(s.key, s.request, s.placement);
    ASSERT_TRUE(ok.has_value()) << "setup " << s.key << ": " << ok.error().message;
  }
  const LedgerSnapshot before = LedgerSnapshot::Of(ledger);
  auto r = ledger.Assign(c.attempt.key, c.attempt.request, c.attempt.placement);
  ASSERT_FALSE(r.has_value()) << "assigned as tenant #" << *r;
  EXPECT_EQ(r.error().code, c.code) << r.error().message;
  EXPECT_NE(r.error().message.find(c.message), std::string::npos) << r.error().message;
  EXPECT_EQ(LedgerSnapshot::Of(ledger), before);
  ledger.CheckInvariants();
  // The key that failed stays free for a valid placement (unless it was the duplicate).
  if (c.code != ErrorCode::kAlreadyExists) {
    EXPECT_EQ(ledger.FindTenant(c.attempt.key), nullptr);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Table, LedgerRefuses,
    ::testing::Values(RefusedCase{"a_key_that_is_already_placed",
                                  {{"a", RequestBuilder().Cpu(1000).Share(300), {0, {0}}}},
                                  {"a", RequestBuilder().Cpu(1000).Share(300), {0, {1}}},
                                  ErrorCode::kAlreadyExists,
                                  "tenant a is already placed"},
                      RefusedCase{"fewer_gpus_than_the_request_asks",
                                  {},
                                  {"t", RequestBuilder().Gpus(2), {0, {0}}},
                                  ErrorCode::kInvalidArgument,
                                  "placement names 1 GPUs, request asks 2"},
                      RefusedCase{"more_gpus_than_the_request_asks",
                                  {},
                                  {"t", RequestBuilder().Share(300), {0, {0, 1}}},
                                  ErrorCode::kInvalidArgument,
                                  "placement names 2 GPUs, request asks 1"},
                      RefusedCase{"a_gpu_for_a_cpu_only_request",
                                  {},
                                  {"t", RequestBuilder().Cpu(100), {0, {2}}},
                                  ErrorCode::kInvalidArgument,
                                  "placement names 1 GPUs, request asks 0"},
                      RefusedCase{"gpu_indices_in_descending_order",
                                  {},
                                  {"t", RequestBuilder().Gpus(2), {0, {1, 0}}},
                                  ErrorCode::kInvalidArgument,
                                  "ascending and distinct"},
                      RefusedCase{"the_same_gpu_listed_twice",
                                  {},
                                  {"t", RequestBuilder().Gpus(2, 400), {0, {2, 2}}},
                                  ErrorCode::kInvalidArgument,
                                  "ascending and distinct"},
                      RefusedCase{"a_gpu_past_the_nodes_last",
                                  {},
                                  {"t", RequestBuilder().Share(100), {0, {4}}},
                                  ErrorCode::kNotFound,
                                  "no GPU 4"},
                      RefusedCase{"a_negative_gpu_index",
                                  {},
                                  {"t", RequestBuilder().Share(100), {0, {-1}}},
                                  ErrorCode::kNotFound,
                                  "no GPU -1"},
                      RefusedCase{"a_node_past_the_last",
                                  {},
                                  {"t", RequestBuilder().Cpu(1), {3, {}}},
                                  ErrorCode::kNotFound,
                                  "no node #3"},
                      RefusedCase{"no_node_at_all",
                                  {},
                                  {"t", RequestBuilder().Cpu(1), {-1, {}}},
                                  ErrorCode::kNotFound,
                                  "no node #-1"},
                      RefusedCase{"more_cpu_than_is_free",
                                  {{"a", RequestBuilder().Cpu(30000), {0, {}}}},
                                  {"t", RequestBuilder().Cpu(2001), {0, {}}},
                                  ErrorCode::kFailedPrecondition,
                                  "needs 2001m CPU, 2000m free"},
                      RefusedCase{"more_memory_than_is_free",
                                  {{"a", RequestBuilder().Memory(16000), {1, {}}}},
                                  {"t", RequestBuilder().Memory(385), {1, {}}},
                                  ErrorCode::kFailedPrecondition,
                                  "needs 385 MiB memory, 384 MiB free"},
                      RefusedCase{"more_gpu_milli_than_the_gpu_has_free",
                                  {{"a", RequestBuilder().Share(600), {0, {0}}}},
                                  {"t", RequestBuilder().Share(401), {0, {0}}},
                                  ErrorCode::kFailedPrecondition,
                                  "GPU 0 cannot take it (400 milli-GPU"},
                      RefusedCase{"a_whole_gpu_onto_a_gpu_with_one_milli_in_use",
                                  {{"a", RequestBuilder().Share(1), {0, {3}}}},
                                  {"t", RequestBuilder().Gpus(1), {0, {3}}},
                                  ErrorCode::kFailedPrecondition,
                                  "GPU 3 cannot take it"},
                      RefusedCase{"more_gpu_memory_than_the_gpu_has_free",
                                  {{"a", RequestBuilder().Share(100).GpuMemory(16000), {0, {1}}}},
                                  {"t", RequestBuilder().Share(100).GpuMemory(385), {0, {1}}},
                                  ErrorCode::kFailedPrecondition,
                                  "384 MiB free"},
                      RefusedCase{"more_gpu_memory_than_an_empty_gpu_has",
                                  {},
                                  {"t", RequestBuilder().Share(100).GpuMemory(16385), {0, {0}}},
                                  ErrorCode::kFailedPrecondition,
                                  "GPU 0 cannot take it"},
                      RefusedCase{"an_exclusive_tenant_onto_a_gpu_in_use",
                                  {{"a", RequestBuilder().Share(100), {0, {0}}}},
                                  {"t", RequestBuilder().Share(100).Exclusive(), {0, {0}}},
                                  ErrorCode::kFailedPrecondition,
                                  "GPU 0 cannot take it"},
                      RefusedCase{"a_shared_tenant_onto_an_exclusively_held_gpu",
                                  {{"a", RequestBuilder().Share(100).Exclusive(), {0, {0}}}},
                                  {"t", RequestBuilder().Share(1), {0, {0}}},
                                  ErrorCode::kFailedPrecondition,
                                  "(0 milli-GPU and 0 MiB free, 1 tenants"},
                      RefusedCase{"a_second_exclusive_tenant_onto_an_exclusively_held_gpu",
                                  {{"a", RequestBuilder().Gpus(1).Exclusive(), {0, {2}}}},
                                  {"t", RequestBuilder().Gpus(1).Exclusive(), {0, {2}}},
                                  ErrorCode::kFailedPrecondition,
                                  "GPU 2 cannot take it"},
                      RefusedCase{"a_shared_tenant_onto_an_unhealthy_gpu",
                                  {},
                                  {"t", RequestBuilder().Share(1), {1, {1}}},
                                  ErrorCode::kFailedPrecondition,
                                  "GPU 1 cannot take it (0 milli-GPU"},
                      RefusedCase{"an_exclusive_tenant_onto_an_unhealthy_gpu",
                                  {},
                                  {"t", RequestBuilder().Share(1).Exclusive(), {1, {1}}},
                                  ErrorCode::kFailedPrecondition,
                                  "GPU 1 cannot take it"},
                      RefusedCase{"a_pod_beyond_the_nodes_pod_limit",
                                  {{"a", RequestBuilder().Cpu(1), {2, {}}},
                                   {"b", RequestBuilder().Cpu(1), {2, {}}}},
                                  {"t", RequestBuilder().Cpu(1), {2, {}}},
                                  ErrorCode::kFailedPrecondition,
                                  "pod limit reached"},
                      RefusedCase{"an_invalid_request",
                                  {},
                                  {"t", RequestBuilder().Share(1001), {0, {0}}},
                                  ErrorCode::kInvalidArgument,
                                  "outside 1..1000"},
                      RefusedCase{"a_gpu_of_a_model_the_request_does_not_accept",
                                  {},
                                  {"t", RequestBuilder().Share(100).Models({"V100M32"}), {0, {0}}},
                                  ErrorCode::kFailedPrecondition,
                                  "model T4"},
                      RefusedCase{"a_request_naming_only_unknown_models",
                                  {},
                                  {"t", RequestBuilder().Share(100).Models({"H100"}), {1, {0}}},
                                  ErrorCode::kFailedPrecondition,
                                  "model V100M32"},
                      RefusedCase{"a_multi_gpu_request_whose_second_gpu_is_too_full",
                                  {{"a", RequestBuilder().Share(600), {0, {1}}}},
                                  {"t", RequestBuilder().Gpus(2, 500), {0, {0, 1}}},
                                  ErrorCode::kFailedPrecondition,
                                  "GPU 1 cannot take it"},
                      RefusedCase{"an_exclusive_multi_gpu_request_whose_last_gpu_is_in_use",
                                  {{"a", RequestBuilder().Share(1), {0, {3}}}},
                                  {"t", RequestBuilder().Gpus(3).Exclusive(), {0, {1, 2, 3}}},
                                  ErrorCode::kFailedPrecondition,
                                  "GPU 3 cannot take it"}),
    test::CaseName());

TEST(Ledger, SharedTenantsFillAGpuToExactlyItsCapacity) {
  const Cluster cluster = LedgerCluster();
  Ledger ledger(cluster);
  ASSERT_TRUE(ledger.Assign("a", RequestBuilder().Share(300).GpuMemory(4096), {0, {0}}));
  ASSERT_TRUE(ledger.Assign("b", RequestBuilder().Share(300).GpuMemory(4096), {0, {0}}));
  ASSERT_TRUE(ledger.Assign("c", RequestBuilder().Share(400).GpuMemory(8192), {0, {0}}));
  const NodeView v = ledger.Node(0);
  EXPECT_EQ(v.gpu_free_milli[0], 0);
  EXPECT_EQ(v.gpu_free_mib[0], 0);
  EXPECT_EQ(v.gpu_tenants[0], 3);
  EXPECT_EQ(v.gpu_free_milli_total(), 3000);
  EXPECT_FALSE(v.GpuIsIdle(0));
  EXPECT_TRUE(v.GpuIsIdle(1));
  EXPECT_EQ(ledger.used_gpu_milli(), 1000);
  EXPECT_EQ(ledger.busy_gpus(), 1);
  EXPECT_EQ(ledger.tenant_count(), 3U);
  EXPECT_FALSE(ledger.Assign("d", RequestBuilder().Share(1), {0, {0}}));
  ledger.CheckInvariants();
}

TEST(Ledger, AssignRecordsTheTenantAndItsTotals) {
  const Cluster cluster = LedgerCluster();
  Ledger ledger(cluster);
  const Request r = RequestBuilder("job").Cpu(4000).Memory(8192).Gpus(2, 700);
  auto t = ledger.Assign("key-1", r, {0, {1, 3}});
  ASSERT_TRUE(t.has_value()) << t.error().message;
  const Tenant* found = ledger.FindTenant("key-1");
  ASSERT_NE(found, nullptr);
  EXPECT_EQ(found, &ledger.tenant(*t));
  EXPECT_EQ(found->key, "key-1");
  EXPECT_EQ(found->request.name, "job");
  EXPECT_EQ(found->placement.node, 0);
  EXPECT_EQ(found->placement.gpus, (std::vector<int>{1, 3}));
  const NodeView v = ledger.Node(0);
  EXPECT_EQ(v.cpu_free, 28000);
  EXPECT_EQ(v.memory_free, 65536 - 8192);
  EXPECT_EQ(v.pods_free, 109);
  EXPECT_EQ(std::vector<MilliGpu>(v.gpu_free_milli.begin(), v.gpu_free_milli.end()),
            (std::vector<MilliGpu>{1000, 300, 1000, 300}));
  EXPECT_EQ(std::vector<TenantIndex>(v.tenants.begin(), v.tenants.end()),
            (std::vector<TenantIndex>{*t}));
  EXPECT_EQ(ledger.used_gpu_milli(), 1400);
  EXPECT_EQ(ledger.used_cpu_milli(), 4000);
  EXPECT_EQ(ledger.busy_gpus(), 2);
  EXPECT_EQ(ledger.Node(1).generation, 0U);
  EXPECT_EQ(v.generation, 1U);
}

TEST(Ledger, AnExclusiveTenantCountsWhatItAskedAndClosesTheWholeGpu) {
  const Cluster cluster = LedgerCluster();
  Ledger ledger(cluster);
  ASSERT_TRUE(
      ledger.Assign("x", RequestBuilder().Share(300).GpuMemory(1024).Exclusive(), {1, {0}}));
  const NodeView v = ledger.Node(1);
  EXPECT_EQ(v.gpu_free_milli[0], 0);
  EXPECT_EQ(v.gpu_free_mib[0], 0);
  EXPECT_EQ(ledger.used_gpu_milli(), 300);
  EXPECT_EQ(ledger.busy_gpus(), 1);
  ledger.CheckInvariants();
}

TEST(Ledger, AnUnhealthyGpuShowsNothingFree) {
  const Cluster cluster = LedgerCluster();
  Ledger ledger(cluster);
  const NodeView v = ledger.Node(1);
  EXPECT_EQ(v.gpu_free_milli[1], 0);
  EXPECT_EQ(v.gpu_free_mib[1], 0);
  EXPECT_FALSE(v.GpuIsIdle(1));
  EXPECT_TRUE(v.GpuIsIdle(0));
  EXPECT_EQ(v.gpu_free_milli_total(), 1000);
}

TEST(Ledger, ReleaseRestoresExactlyAndASecondReleaseErrors) {
  const Cluster cluster = LedgerCluster();
  Ledger ledger(cluster);
  ASSERT_TRUE(ledger.Assign("a", RequestBuilder().Cpu(1000).Memory(10).Share(250), {0, {2}}));
  const LedgerSnapshot before = LedgerSnapshot::Of(ledger);
  const std::vector<Step> steps{
      {"multi", RequestBuilder().Cpu(3000).Memory(2048).Gpus(2, 600).GpuMemory(100), {0, {1, 2}}},
      {"excl", RequestBuilder().Cpu(500).Gpus(2).Exclusive(), {0, {0, 3}}},
      {"cpu", RequestBuilder().Cpu(700).Memory(7), {0, {}}},
  };
  for (const Step& s : steps) {
    SCOPED_TRACE(s.key);
    ASSERT_TRUE(ledger.Assign(s.key, s.request, s.placement));
    ledger.CheckInvariants();
    ASSERT_TRUE(ledger.Release(s.key));
    ledger.CheckInvariants();
    const LedgerSnapshot after = LedgerSnapshot::Of(ledger);
    EXPECT_TRUE(after.SameResources(before)) << ::testing::PrintToString(after) << "\nvs\n"
                                             << ::testing::PrintToString(before);
    EXPECT_GT(after.generations[0], before.generations[0]);
    EXPECT_EQ(ledger.FindTenant(s.key), nullptr);

    auto again = ledger.Release(s.key);
    ASSERT_FALSE(again.has_value());
    EXPECT_EQ(again.error().code, ErrorCode::kNotFound);
    EXPECT_NE(again.error().message.find("tenant " + s.key + " is not placed"), std::string::npos);
    EXPECT_EQ(LedgerSnapshot::Of(ledger), after);
  }
}

TEST(Ledger, ReleaseInAnyOrderLeavesTheOthersAsTheyWere) {
  const Cluster cluster = LedgerCluster();
  Ledger ledger(cluster);
  ASSERT_TRUE(ledger.Assign("a", RequestBuilder().Cpu(100).Share(200), {0, {0}}));
  ASSERT_TRUE(ledger.Assign("b", RequestBuilder().Cpu(200).Share(300), {0, {0}}));
  ASSERT_TRUE(ledger.Assign("c", RequestBuilder().Cpu(400).Share(400), {0, {0}}));
  ASSERT_TRUE(ledger.Release("b"));
  NodeView v = ledger.Node(0);
  EXPECT_EQ(v.gpu_free_milli[0], 400);
  EXPECT_EQ(v.gpu_tenants[0], 2);
  EXPECT_EQ(v.cpu_free, 32000 - 500);
  // Tenants keep arrival order.
  ASSERT_EQ(v.tenants.size(), 2U);
  EXPECT_EQ(ledger.tenant(v.tenants[0]).key, "a");
  EXPECT_EQ(ledger.tenant(v.tenants[1]).key, "c");
  ASSERT_TRUE(ledger.Release("a"));
  ASSERT_TRUE(ledger.Release("c"));
  v = ledger.Node(0);
  EXPECT_TRUE(v.GpuIsIdle(0));
  EXPECT_EQ(ledger.busy_gpus(), 0);
  EXPECT_EQ(ledger.used_gpu_milli(), 0);
  EXPECT_EQ(ledger.tenant_count(), 0U);
  ledger.CheckInvariants();
}

TEST(Ledger, GenerationMovesOnEveryChangeOfItsNodeOnly) {
  const Cluster cluster = LedgerCluster();
  Ledger ledger(cluster);
  for (NodeIndex n = 0; n < cluster.size(); ++n) EXPECT_EQ(ledger.Generation(n), 0U);
  ASSERT_TRUE(ledger.Assign("a", RequestBuilder().Cpu(1), {0, {}}));
  EXPECT_EQ(ledger.Generation(0), 1U);
  EXPECT_EQ(ledger.Generation(1), 0U);
  EXPECT_FALSE(ledger.Assign("b", RequestBuilder().Cpu(1000000), {0, {}}));
  EXPECT_EQ(ledger.Generation(0), 1U) << "a refused Assign changes nothing";
  ASSERT_TRUE(ledger.Release("a"));
  EXPECT_EQ(ledger.Generation(0), 2U);
  for (NodeIndex n = 0; n < cluster.size(); ++n) {
    EXPECT_EQ(ledger.Generation(n), ledger.Node(n).generation);
  }
}

TEST(Ledger, AReleasedKeyCanBeAssignedAgain) {
  const Cluster cluster = LedgerCluster();
  Ledger ledger(cluster);
  ASSERT_TRUE(ledger.Assign("k", RequestBuilder().Gpus(1).Exclusive(), {0, {0}}));
  ASSERT_TRUE(ledger.Release("k"));
  EXPECT_TRUE(ledger.Node(0).GpuIsIdle(0));
  auto again = ledger.Assign("k", RequestBuilder().Share(500), {0, {0}});
  ASSERT_TRUE(again.has_value()) << again.error().message;
  EXPECT_EQ(ledger.FindTenant("k")->request.gpu_milli, 500);
  EXPECT_EQ(ledger.tenant_count(), 1U);
  ledger.CheckInvariants();
}

// A filter trial places a pod's containers under fixed keys and releases them, on every node,
// on every call: the ledger must give a released tenant's slot to the next Assign, or it grows
// by one tenant per trial forever (453 MB after 200 filters of a 2-container pod on 5,000 nodes).
TEST(Ledger, ReleasedTenantSlotsAreReusedSoTrialsDoNotGrowTheLedger) {
  const Cluster cluster = LedgerCluster();
  Ledger ledger(cluster);
  ASSERT_TRUE(ledger.Assign("resident", RequestBuilder().Share(100), {0, {0}}));
  TenantIndex highest = 0;
  for (int trial = 0; trial < 10000; ++trial) {
    for (const char* key : {"trial/0", "trial/1"}) {
      auto t = ledger.Assign(key, RequestBuilder().Share(200), {0, {1}});
      ASSERT_TRUE(t.has_value()) << t.error().message;
      highest = std::max(highest, *t);
    }
    ASSERT_TRUE(ledger.Release("trial/0"));
    ASSERT_TRUE(ledger.Release("trial/1"));
  }
  EXPECT_LE(highest, 2) << "three tenants at most were ever live at once";
  EXPECT_EQ(ledger.tenant_count(), 1U);
  ledger.CheckInvariants();
}

// Slot reuse must not leak into the order the ledger promises: a node's tenants are listed in
// arrival order, whatever indices they were given.
TEST(Ledger, ANodesTenantsStayInArrivalOrderWhenSlotsAreReused) {
  const Cluster cluster = LedgerCluster();
  Ledger ledger(cluster);
  ASSERT_TRUE(ledger.Assign("a", RequestBuilder().Share(100), {0, {0}}));
  ASSERT_TRUE(ledger.Assign("b", RequestBuilder().Share(100), {0, {1}}));
  ASSERT_TRUE(ledger.Assign("c", RequestBuilder().Share(100), {0, {0}}));
  ASSERT_TRUE(ledger.Release("a"));
  auto d = ledger.Assign("d", RequestBuilder().Share(300), {0, {2}});
  ASSERT_TRUE(d.has_value()) << d.error().message;
  const NodeView v = ledger.Node(0);
  std::vector<std::string> keys;
  for (TenantIndex t : v.tenants) keys.push_back(ledger.tenant(t).key);
  EXPECT_EQ(keys, (std::vector<std::string>{"b", "c", "d"}));
  EXPECT_EQ(&ledger.tenant(*d), ledger.FindTenant("d"));
  EXPECT_EQ(ledger.tenant(*d).request.gpu_milli, 300);
  ledger.CheckInvariants();
}

TEST(Ledger, ReleaseOfAKeyNeverAssignedErrors) {
  const Cluster cluster = LedgerCluster();
  Ledger ledger(cluster);
  auto r = ledger.Release("ghost");
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::kNotFound);
}

// The ledger's contract: no GPU's memory is ever over capacity. GpuAdmits checks free MiB for
// shared requests only; for an exclusive request it asks only that the GPU be idle, so an
// exclusive tenant asking more GPU memory than the GPU has is admitted.
TEST(Ledger, AnExclusiveTenantAskingMoreGpuMemoryThanTheGpuHasIsRefused) {
  const Cluster cluster = ClusterBuilder()
                              .Node("n", 8000, 8192)
                              .Gpus(1, "T4", 16384)
                              .Node("g2", 8000, 8192)
                              .Gpus(1, "G2", 0)
                              .Build();
  Ledger ledger(cluster);
  const Request big = RequestBuilder("big").Gpus(1).GpuMemory(20000).Exclusive();
  const LedgerSnapshot before = LedgerSnapshot::Of(ledger);
  const NodeView view = ledger.Node(0);
  const bool admits = GpuAdmits(view, 0, big, kAnyModel);
  auto r = ledger.Assign("big", big, {0, {0}});
  EXPECT_FALSE(admits);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::kFailedPrecondition);
  EXPECT_EQ(LedgerSnapshot::Of(ledger), before);
  const Request tiny = RequestBuilder("tiny").Gpus(1).GpuMemory(1).Exclusive();
  EXPECT_FALSE(GpuAdmits(ledger.Node(1), 0, tiny, kAnyModel));
  EXPECT_FALSE(ledger.Assign("tiny", tiny, {1, {0}}).has_value());
  ledger.CheckInvariants();
}

struct FitCase {
  const char* name;
  std::vector<Step> setup;
  NodeIndex node;
  Request request;
  std::vector<std::string> models;  // acceptable models, empty = any
  bool fits;
};
void PrintTo(const FitCase& c, std::ostream* os) { *os << c.name; }

class NodeFitsTable : public ::testing::TestWithParam<FitCase> {};

TEST_P(NodeFitsTable, AgreesWithAssign) {
  const FitCase& c = GetParam();
  const Cluster cluster = LedgerCluster();
  Ledger ledger(cluster);
  for (const Step& s : c.setup) ASSERT_TRUE(ledger.Assign(s.key, s.request, s.placement));
  Request r = c.request;
  r.gpu_models = c.models;
  const ModelMask mask = cluster.MaskOf(r.gpu_models);
  const NodeView v = ledger.Node(c.node);
  EXPECT_EQ(NodeFits(v, r, mask), c.fits);
  // NodeFits holds exactly when the lowest-indexed admitting GPUs can be assigned.
  Placement p{c.node, {}};
  for (int g = 0; g < v.gpu_count() && static_cast<int>(p.gpus.size()) < r.gpu_count; ++g) {
    if (GpuAdmits(v, g, r, mask)) p.gpus.push_back(g);
  }
  if (static_cast<int>(p.gpus.size()) == r.gpu_count) {
    EXPECT_EQ(ledger.Assign("probe", r, p).has_value(), c.fits);
  } else {
    EXPECT_FALSE(c.fits);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Table, NodeFitsTable,
    ::testing::Values(
        FitCase{"a_cpu_only_request_fits_a_gpu_node", {}, 0, RequestBuilder().Cpu(32000), {}, true},
        FitCase{
            "one_milli_cpu_too_many_does_not_fit", {}, 0, RequestBuilder().Cpu(32001), {}, false},
        FitCase{"memory_too_large_does_not_fit", {}, 2, RequestBuilder().Memory(4097), {}, false},
        FitCase{"a_full_pod_list_does_not_fit",
                {{"a", RequestBuilder(), {2, {}}}, {"b", RequestBuilder(), {2, {}}}},
                2,
                RequestBuilder(),
                {},
                false},
        FitCase{"a_gpu_request_does_not_fit_a_cpu_only_node",
                {},
                2,
                RequestBuilder().Share(1),
                {},
                false},
        FitCase{"four_whole_gpus_fit_four_idle_gpus", {}, 0, RequestBuilder().Gpus(4), {}, true},
        FitCase{"five_gpus_do_not_fit_four", {}, 0, RequestBuilder().Gpus(5, 10), {}, false},
        FitCase{"an_unhealthy_gpu_does_not_count", {}, 1, RequestBuilder().Gpus(2, 10), {}, false},
        FitCase{"an_acceptable_model_fits",
                {},
                1,
                RequestBuilder().Share(10),
                {"V100M32", "A10"},
                true},
        FitCase{"an_unacceptable_model_does_not_fit",
                {},
                0,
                RequestBuilder().Share(10),
                {"V100M32"},
                false},
        FitCase{"exclusive_needs_idle_gpus",
                {{"a", RequestBuilder().Share(1), {0, {0}}},
                 {"b", RequestBuilder().Share(1), {0, {2}}}},
                0,
                RequestBuilder().Gpus(3, 1).Exclusive(),
                {},
                false},
        FitCase{"exclusive_takes_the_idle_gpus_around_used_ones",
                {{"a", RequestBuilder().Share(1), {0, {0}}}},
                0,
                RequestBuilder().Gpus(3, 1).Exclusive(),
                {},
                true},
        FitCase{"shared_fits_beside_other_shares",
                {{"a", RequestBuilder().Share(600), {0, {0}}},
                 {"b", RequestBuilder().Share(600), {0, {1}}},
                 {"c", RequestBuilder().Share(600), {0, {2}}},
                 {"d", RequestBuilder().Share(600), {0, {3}}}},
                0,
                RequestBuilder().Gpus(4, 400),
                {},
                true},
        FitCase{"shared_gpu_memory_must_fit_too",
                {},
                0,
                RequestBuilder().Share(10).GpuMemory(16385),
                {},
                false}),
    test::CaseName());

}  // namespace
}  // namespace gpumux::core
