#include "gpumux/core/cluster.h"

#include <gtest/gtest.h>

#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "tests/testing/builders.h"

namespace gpumux::core {
namespace {

using test::ClusterBuilder;

TEST(Cluster, InternsModelsAndOffsetsGpusNodeByNode) {
  const Cluster c = ClusterBuilder()
                        .Node("a", 8000, 1024)
                        .Gpus(2, "T4")
                        .Node("cpu", 4000, 1024)
                        .Node("b", 8000, 1024)
                        .Gpus(1, "A10")
                        .Gpus(1, "T4")
                        .Build();
  EXPECT_EQ(c.size(), 3);
  EXPECT_EQ(c.total_gpus(), 4);
  EXPECT_EQ(c.total_gpu_milli(), 4000);
  EXPECT_EQ(c.total_cpu_milli(), 20000);
  ASSERT_EQ(c.models().size(), 2U);
  EXPECT_EQ(c.models()[0], "T4");
  EXPECT_EQ(c.models()[1], "A10");
  EXPECT_EQ(c.gpu_offset(0), 0);
  EXPECT_EQ(c.gpu_offset(1), 2);
  EXPECT_EQ(c.gpu_offset(2), 2);
  EXPECT_EQ(c.GpuModel(2, 0), 1);
  EXPECT_EQ(c.GpuModel(2, 1), 0);
  EXPECT_TRUE(c.GpuModels(1).empty());
  EXPECT_EQ(c.FindNode("b"), 2);
  EXPECT_EQ(c.FindNode("nope"), -1);
}

TEST(Cluster, MaskOfAnEmptyListIsAnyModelAndUnknownNamesAddNothing) {
  const Cluster c =
      ClusterBuilder().Node("a", 1, 1).Gpus(1, "T4").Node("b", 1, 1).Gpus(1, "A10").Build();
  EXPECT_EQ(c.MaskOf({}), kAnyModel);
  const std::vector<std::string> t4{"T4"};
  const std::vector<std::string> both{"A10", "T4"};
  const std::vector<std::string> unknown{"H100"};
  const std::vector<std::string> mixed{"H100", "A10"};
  EXPECT_EQ(c.MaskOf(t4), ModelMask{1});
  EXPECT_EQ(c.MaskOf(both), ModelMask{3});
  EXPECT_EQ(c.MaskOf(unknown), ModelMask{0});
  EXPECT_EQ(c.MaskOf(mixed), ModelMask{2});
}

struct BadClusterCase {
  const char* name;
  std::vector<NodeSpec> nodes;
  ErrorCode code;
  const char* message;
};
void PrintTo(const BadClusterCase& c, std::ostream* os) { *os << c.name; }

class ClusterRefuses : public ::testing::TestWithParam<BadClusterCase> {};

TEST_P(ClusterRefuses, Nodes) {
  auto c = Cluster::Build(GetParam().nodes);
  ASSERT_FALSE(c.has_value());
  EXPECT_EQ(c.error().code, GetParam().code);
  EXPECT_NE(c.error().message.find(GetParam().message), std::string::npos) << c.error().message;
}

std::vector<NodeSpec> WithGpuIndex(int index) {
  auto nodes = ClusterBuilder().Node("a", 1, 1).Gpus(2).Specs();
  nodes[0].gpus[1].index = index;
  return nodes;
}

// `models` GPUs of distinct models, eight to a node.
std::vector<NodeSpec> ManyModels(int models) {
  ClusterBuilder b;
  for (int m = 0; m < models; ++m) {
    if (m % 8 == 0) b.Node(test::Numbered("n", m / 8), 1, 1);
    b.Gpus(1, test::Numbered("M", m));
  }
  return b.Specs();
}

std::vector<NodeSpec> TwoNodesWithCpu(MilliCpu cpu) {
  return ClusterBuilder().Node("a", cpu, 1).Node("b", cpu, 1).Specs();
}

INSTANTIATE_TEST_SUITE_P(
    Table, ClusterRefuses,
    ::testing::Values(
        BadClusterCase{"a_node_without_a_name", ClusterBuilder().Node("", 1, 1).Specs(),
                       ErrorCode::kInvalidArgument, "has no name"},
        BadClusterCase{"two_nodes_with_the_same_name",
                       ClusterBuilder().Node("x", 1, 1).Node("x", 1, 1).Specs(),
                       ErrorCode::kAlreadyExists, "appears twice"},
        BadClusterCase{"negative_cpu", ClusterBuilder().Node("x", -1, 1).Specs(),
                       ErrorCode::kInvalidArgument, "negative"},
        BadClusterCase{"negative_memory", ClusterBuilder().Node("x", 1, -1).Specs(),
                       ErrorCode::kInvalidArgument, "negative"},
        BadClusterCase{"gpus_listed_out_of_order", WithGpuIndex(0), ErrorCode::kInvalidArgument,
                       "GPUs must be listed 0..n-1"},
        BadClusterCase{"gpu_with_negative_memory",
                       ClusterBuilder().Node("x", 1, 1).Gpus(1, "T4", -5).Specs(),
                       ErrorCode::kInvalidArgument, "negative memory"},
        BadClusterCase{"more_than_64_gpu_models", ManyModels(kMaxModels + 1),
                       ErrorCode::kInvalidArgument, "distinct GPU models"},
        // Policies keep fixed per-node scratch arrays of kMaxGpusPerNode slots
        // (FGD aborted on a 65-GPU node).
        BadClusterCase{"a_node_with_more_gpus_than_a_node_may_have",
                       ClusterBuilder().Node("big", 1, 1).Gpus(65).Specs(),
                       ErrorCode::kInvalidArgument,
                       "node big has 65 GPUs, more than the 64 a node may have"},
        // Two nodes of INT64_MAX milli-CPU: the cluster's total overflowed (UB).
        BadClusterCase{"cpu_beyond_the_node_limit_on_two_nodes",
                       TwoNodesWithCpu(std::numeric_limits<MilliCpu>::max()),
                       ErrorCode::kInvalidArgument,
                       "node a: 9223372036854775807 milli-CPU, more than the "
                       "1099511627776 a node may have"},
        BadClusterCase{"gpu_memory_beyond_the_limit",
                       ClusterBuilder().Node("x", 1, 1).Gpus(1, "T4", kMaxGpuMemoryMib + 1).Specs(),
                       ErrorCode::kInvalidArgument,
                       "node x: GPU 0 has 4294967297 MiB, more than the 4294967296 "
                       "a GPU may have"}),
    test::CaseName());

TEST(Cluster, AcceptsNodesAtTheLimits) {
  auto c = Cluster::Build(ClusterBuilder()
                              .Node("a", kMaxNodeCpuMilli, 1)
                              .Gpus(kMaxGpusPerNode, "T4", kMaxGpuMemoryMib)
                              .Node("b", kMaxNodeCpuMilli, 1)
                              .Specs());
  ASSERT_TRUE(c.has_value()) << c.error().message;
  EXPECT_EQ(c->total_cpu_milli(), 2 * kMaxNodeCpuMilli);
  EXPECT_EQ(c->total_gpus(), kMaxGpusPerNode);
}

TEST(Cluster, AcceptsExactly64Models) {
  auto c = Cluster::Build(ManyModels(kMaxModels));
  ASSERT_TRUE(c.has_value()) << c.error().message;
  const std::vector<std::string> last{"M63"};
  EXPECT_EQ(c->MaskOf(last), ModelMask{1} << 63);
}

}  // namespace
}  // namespace gpumux::core
