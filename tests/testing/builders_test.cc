// The builders and fakes are tested too: a wrong builder would make every test that uses it
// prove the wrong thing.
#include "tests/testing/builders.h"

#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/testing/policy_harness.h"
#include "tests/testing/subprocess.h"

namespace gpumux::test {
namespace {

TEST(ClusterBuilder, BuildsNodesWithIndexedGpusOfTheGivenModel) {
  const auto specs = ClusterBuilder()
                         .Node("a", 32000, 65536)
                         .Gpus(2, "T4", 16384)
                         .Gpus(1, "A10", 24576)
                         .Unhealthy(1)
                         .MaxPods(7)
                         .Node("b", 8000, 1024)
                         .Specs();
  ASSERT_EQ(specs.size(), 2U);
  EXPECT_EQ(specs[0].name, "a");
  EXPECT_EQ(specs[0].cpu_milli, 32000);
  EXPECT_EQ(specs[0].memory_mib, 65536);
  EXPECT_EQ(specs[0].max_pods, 7);
  ASSERT_EQ(specs[0].gpus.size(), 3U);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(specs[0].gpus[static_cast<std::size_t>(i)].index, i);
  EXPECT_EQ(specs[0].gpus[0].model, "T4");
  EXPECT_EQ(specs[0].gpus[2].model, "A10");
  EXPECT_EQ(specs[0].gpus[2].memory_mib, 24576);
  EXPECT_EQ(specs[0].gpus[0].health, core::GpuHealth::kHealthy);
  EXPECT_EQ(specs[0].gpus[1].health, core::GpuHealth::kUnhealthy);
  EXPECT_TRUE(specs[1].gpus.empty());
  EXPECT_EQ(specs[1].max_pods, 110);

  const core::Cluster c = ClusterBuilder().Node("a", 1000, 1).Gpus(4).Node("b", 1, 1).Build();
  EXPECT_EQ(c.size(), 2);
  EXPECT_EQ(c.total_gpus(), 4);
}

TEST(ClusterBuilder, ReportsAnInvalidClusterAsATestFailure) {
  EXPECT_NONFATAL_FAILURE(ClusterBuilder().Node("x", 1, 1).Node("x", 1, 1).Build(), "twice");
  EXPECT_NONFATAL_FAILURE(ClusterBuilder().Node("x", 1, 1).Unhealthy(0), "no such GPU");
}

TEST(RequestBuilder, SetsEachFieldByName) {
  const core::Request r =
      RequestBuilder("p").Cpu(4000).Memory(1024).Gpus(2, 700).GpuMemory(512).Exclusive().Models(
          {"T4", "A10"});
  EXPECT_EQ(r.name, "p");
  EXPECT_EQ(r.cpu_milli, 4000);
  EXPECT_EQ(r.memory_mib, 1024);
  EXPECT_EQ(r.gpu_count, 2);
  EXPECT_EQ(r.gpu_milli, 700);
  EXPECT_EQ(r.gpu_mib, 512);
  EXPECT_EQ(r.sharing, core::GpuSharing::kExclusive);
  EXPECT_EQ(r.gpu_models, (std::vector<std::string>{"T4", "A10"}));

  const core::Request s = RequestBuilder().Share(300);
  EXPECT_EQ(s.gpu_count, 1);
  EXPECT_EQ(s.gpu_milli, 300);
  EXPECT_EQ(s.sharing, core::GpuSharing::kShared);
  const core::Request w = RequestBuilder().Gpus(3);
  EXPECT_EQ(w.gpu_milli, core::kMilliPerGpu);
}

TEST(LedgerSnapshot, SeesEveryChangeAndIgnoresOnlyGenerations) {
  const core::Cluster c = ClusterBuilder().Node("a", 8000, 1024).Gpus(2).Build();
  core::Ledger ledger(c);
  const LedgerSnapshot empty = LedgerSnapshot::Of(ledger);
  EXPECT_EQ(empty.nodes[0].gpu_free_milli, (std::vector<core::MilliGpu>{1000, 1000}));
  ASSERT_TRUE(ledger.Assign("t", RequestBuilder().Cpu(1000).Share(300), {0, {1}}));
  const LedgerSnapshot used = LedgerSnapshot::Of(ledger);
  EXPECT_FALSE(used.SameResources(empty));
  EXPECT_EQ(used.nodes[0].gpu_free_milli, (std::vector<core::MilliGpu>{1000, 700}));
  EXPECT_EQ(used.nodes[0].cpu_free, 7000);
  EXPECT_EQ(used.used_gpu_milli, 300);
  ASSERT_TRUE(ledger.Release("t"));
  const LedgerSnapshot released = LedgerSnapshot::Of(ledger);
  EXPECT_TRUE(released.SameResources(empty));
  EXPECT_NE(released, empty);  // the generation moved on
}

TEST(ScratchDir, WritesFilesAndRemovesItsFolder) {
  std::filesystem::path where;
  {
    ScratchDir dir;
    where = dir.path();
    const std::string file = dir.Write("x.csv", "a,b\n1,2\n");
    std::ifstream in(file);
    std::stringstream content;
    content << in.rdbuf();
    EXPECT_EQ(content.str(), "a,b\n1,2\n");
  }
  EXPECT_FALSE(std::filesystem::exists(where));
}

TEST(PolicyHarness, PlacesTenantsAndFailsTheTestWhenTheLedgerRefuses) {
  PolicyHarness h(ClusterBuilder().Node("n", 4000, 1024).Gpus(1).Specs());
  h.Place("a", RequestBuilder().Cpu(1000).Share(600), 0, {0});
  EXPECT_EQ(h.ledger().Node(0).gpu_free_milli[0], 400);
  EXPECT_NONFATAL_FAILURE(h.Place("b", RequestBuilder().Share(600), 0, {0}), "cannot take it");
  EXPECT_EQ(h.NodeNamed("n"), 0);
  EXPECT_NONFATAL_FAILURE(h.NodeNamed("zz"), "no node zz");
}

TEST(ScriptedPolicy, ScoresWithTheGivenFunctionAndCountsCalls) {
  PolicyHarness h(ClusterBuilder().Node("a", 4000, 1024).Gpus(2).Node("b", 4000, 1024).Specs());
  ScriptedPolicy p([](const policy::Cycle&, const core::NodeView& n) { return 10 * n.index + 1; });
  EXPECT_EQ(h.Score(p, RequestBuilder().Cpu(1), 1), 11);
  EXPECT_EQ(h.Score(p, RequestBuilder().Cpu(1), 0), 1);
  EXPECT_EQ(p.score_calls(), 2);
  EXPECT_EQ(p.scored(), (std::vector<core::NodeIndex>{1, 0}));
  EXPECT_EQ(h.ChooseGpus(p, RequestBuilder().Share(100), 0), (std::vector<int>{0}));
  EXPECT_EQ(p.last_feasible(), (std::vector<core::NodeIndex>{}));
  h.Score(p, RequestBuilder().Cpu(1), 0, {0, 1});
  EXPECT_EQ(p.last_feasible(), (std::vector<core::NodeIndex>{0, 1}));
  EXPECT_EQ(p.begin_calls(), 4);
}

TEST(FinishesInChild, TellsAReturningCallFromAHangOrACrash) {
  EXPECT_TRUE(FinishesInChild([] {}, 5));
  EXPECT_FALSE(FinishesInChild([] { std::abort(); }, 5));
  EXPECT_FALSE(FinishesInChild(
      [] {
        volatile bool forever = true;
        while (forever) {
        }
      },
      1));
}

}  // namespace
}  // namespace gpumux::test
