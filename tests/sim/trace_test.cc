#include "gpumux/sim/trace.h"

#include <gtest/gtest.h>

#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/testing/builders.h"

namespace gpumux::sim {
namespace {

constexpr const char* kPodHeader = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n";
constexpr const char* kNodeHeader = "sn,cpu_milli,memory_mib,gpu,model\n";

enum class List { kPods, kNodes };

struct TraceErrorCase {
  const char* name;
  List list;
  std::string content;
  int line;             // the line the message names; 0 = the message names no line
  const char* problem;  // part of the message
};
void PrintTo(const TraceErrorCase& c, std::ostream* os) { *os << c.name; }

class TraceParserRejects : public ::testing::TestWithParam<TraceErrorCase> {};

TEST_P(TraceParserRejects, NamingSourceLineAndProblem) {
  const TraceErrorCase& c = GetParam();
  std::istringstream in(c.content);
  const std::string source = c.list == List::kPods ? "pods.csv" : "nodes.csv";
  core::Error e;
  if (c.list == List::kPods) {
    auto pods = ParsePodList(in, source);
    ASSERT_FALSE(pods.has_value()) << "parsed " << pods->size() << " pods";
    e = pods.error();
  } else {
    auto nodes = ParseNodeList(in, source);
    ASSERT_FALSE(nodes.has_value()) << "parsed " << nodes->size() << " nodes";
    e = nodes.error();
  }
  EXPECT_EQ(e.code, core::ErrorCode::kInvalidArgument);
  if (c.line > 0) {
    EXPECT_EQ(e.message.rfind(source + ":" + std::to_string(c.line) + ": ", 0), 0U) << e.message;
  } else {
    EXPECT_EQ(e.message.rfind(source + ": ", 0), 0U) << e.message;
  }
  EXPECT_NE(e.message.find(c.problem), std::string::npos) << e.message;
}

std::string Pods(const std::string& rows) { return kPodHeader + rows; }
std::string Nodes(const std::string& rows) { return kNodeHeader + rows; }

INSTANTIATE_TEST_SUITE_P(
    Pods, TraceParserRejects,
    ::testing::Values(
        TraceErrorCase{"a_non_integer_cpu", List::kPods, Pods("p1,abc,0,0,0,\n"), 2,
                       "column 'cpu_milli': 'abc' is not an integer"},
        TraceErrorCase{"a_decimal_gpu_milli", List::kPods, Pods("p1,1000,0,1,0.5,\n"), 2,
                       "column 'gpu_milli': '0.5' is not an integer"},
        // The FGD study's converter clamped these; none of its pod lists has one (checked on
        // every CSV of ../shared/traces), so a value outside is a mistake to name, not clamp.
        TraceErrorCase{"gpu_milli_above_a_whole_gpu", List::kPods,
                       Pods("p0,1,1,1,500,\np1,4000,1024,1,1500,\n"), 3,
                       "pod 'p1': column 'gpu_milli': 1500 is outside 0..1000 (milli-GPU per "
                       "GPU: 1000 is a whole GPU)"},
        TraceErrorCase{"a_negative_gpu_milli", List::kPods, Pods("p1,4000,1024,1,-5,T4\n"), 2,
                       "pod 'p1': column 'gpu_milli': -5 is outside 0..1000"},
        TraceErrorCase{"an_empty_memory_field", List::kPods, Pods("p1,1000,,1,500,\n"), 2,
                       "column 'memory_mib': '' is not an integer"},
        TraceErrorCase{"too_few_fields", List::kPods, Pods("p1,1000,0,1,500,\np2,1000,0,1\n"), 3,
                       "expected 6 fields, found 4"},
        TraceErrorCase{"too_many_fields", List::kPods, Pods("p1,1000,0,1,500,T4,x\n"), 2,
                       "expected 6 fields, found 7"},
        TraceErrorCase{"a_missing_column", List::kPods,
                       "name,cpu_milli,memory_mib,num_gpu,gpu_spec\np1,1,1,1,\n", 1,
                       "missing column 'gpu_milli'"},
        TraceErrorCase{"an_empty_file", List::kPods, "", 0, "empty file"},
        TraceErrorCase{"a_file_of_blank_lines", List::kPods, "\n  \n\n", 0, "empty file"},
        TraceErrorCase{"a_header_and_no_pods", List::kPods, Pods(""), 0, "no pods"},
        TraceErrorCase{"a_duplicate_pod_name", List::kPods,
                       Pods("p1,1000,0,1,500,\np2,1000,0,0,0,\np1,2000,0,0,0,\n"), 4,
                       "pod 'p1' listed twice"},
        TraceErrorCase{"an_empty_pod_name", List::kPods, Pods(",1000,0,0,0,\n"), 2,
                       "empty pod name"},
        TraceErrorCase{"a_negative_cpu", List::kPods, Pods("p1,-5,0,0,0,\n"), 2,
                       "pod 'p1': column 'cpu_milli': -5 is outside 0..1099511627776"},
        TraceErrorCase{"a_negative_memory", List::kPods, Pods("p1,5,-1,0,0,\n"), 2,
                       "pod 'p1': column 'memory_mib': -1 is outside 0..1099511627776"},
        TraceErrorCase{"a_negative_gpu_count", List::kPods, Pods("p1,5,1,-1,100,\n"), 2,
                       "column 'num_gpu': -1 is outside 0..64"},
        TraceErrorCase{"too_many_gpus", List::kPods, Pods("p1,5,1,65,100,\n"), 2,
                       "column 'num_gpu': 65 is outside 0..64"},
        TraceErrorCase{"a_quoted_field", List::kPods, Pods("\"p1\",1000,0,0,0,\n"), 2,
                       "quoted fields are not supported"},
        TraceErrorCase{"a_bad_row_after_blank_lines", List::kPods,
                       Pods("p1,1000,0,0,0,\n\n\np2,x,0,0,0,\n"), 5, "'x' is not an integer"},
        // Upper bounds: sums of these over a cluster or a plan must not overflow int64.
        TraceErrorCase{"a_cpu_of_int64_max", List::kPods, Pods("p1,9223372036854775807,0,0,0,\n"),
                       2,
                       "pod 'p1': column 'cpu_milli': 9223372036854775807 is outside "
                       "0..1099511627776 (the milli-CPU a node may have)"},
        TraceErrorCase{"a_memory_past_an_exbibyte", List::kPods, Pods("p1,1,1099511627777,0,0,\n"),
                       2,
                       "pod 'p1': column 'memory_mib': 1099511627777 is outside 0..1099511627776"},
        TraceErrorCase{"a_cpu_past_int64", List::kPods, Pods("p1,9223372036854775808,0,0,0,\n"), 2,
                       "column 'cpu_milli': '9223372036854775808' is not an integer"}),
    test::CaseName());

INSTANTIATE_TEST_SUITE_P(
    Nodes, TraceParserRejects,
    ::testing::Values(
        TraceErrorCase{"a_duplicate_node_name", List::kNodes,
                       Nodes("n1,1000,1000,1,T4\nn1,1000,1000,1,T4\n"), 3,
                       "node 'n1' listed twice"},
        TraceErrorCase{"a_negative_cpu", List::kNodes, Nodes("n1,-1,1000,1,T4\n"), 2,
                       "node 'n1': column 'cpu_milli': -1 is outside 0..1099511627776"},
        TraceErrorCase{"a_negative_memory", List::kNodes, Nodes("n1,1,-1000,1,T4\n"), 2,
                       "node 'n1': column 'memory_mib': -1000 is outside 0..1099511627776"},
        TraceErrorCase{"a_non_integer_gpu_count", List::kNodes, Nodes("n1,1,1,two,T4\n"), 2,
                       "column 'gpu': 'two' is not an integer"},
        TraceErrorCase{"too_many_gpus", List::kNodes, Nodes("n1,1,1,65,T4\n"), 2,
                       "column 'gpu': 65 is outside 0..64"},
        TraceErrorCase{"gpus_without_a_model", List::kNodes, Nodes("n1,1,1,2,\n"), 2,
                       "node has GPUs but no model"},
        TraceErrorCase{"an_empty_node_name", List::kNodes, Nodes(",1,1,0,\n"), 2,
                       "empty node name"},
        TraceErrorCase{"a_missing_column", List::kNodes, "sn,cpu_milli,memory_mib,gpu\nn1,1,1,0\n",
                       1, "missing column 'model'"},
        TraceErrorCase{"wrong_field_count", List::kNodes, Nodes("n1,1,1,0\n"), 2,
                       "expected 5 fields, found 4"},
        TraceErrorCase{"a_quoted_field", List::kNodes, Nodes("n1,1,1,1,\"T4\"\n"), 2,
                       "quoted fields are not supported"},
        TraceErrorCase{"an_empty_file", List::kNodes, "", 0, "empty file"},
        TraceErrorCase{"a_header_and_no_nodes", List::kNodes, Nodes(""), 0, "no nodes"},
        // reliability-repros/simulate-node-cpu-overflow: two nodes of INT64_MAX milli-CPU
        // overflowed the cluster's total.
        TraceErrorCase{"a_cpu_of_int64_max", List::kNodes,
                       Nodes("n1,9223372036854775807,1000,1,T4\n"), 2,
                       "node 'n1': column 'cpu_milli': 9223372036854775807 is outside "
                       "0..1099511627776 (the milli-CPU a node may have)"},
        TraceErrorCase{"a_memory_of_int64_max", List::kNodes,
                       Nodes("n1,1000,9223372036854775807,1,T4\n"), 2,
                       "node 'n1': column 'memory_mib': 9223372036854775807 is outside "
                       "0..1099511627776 (the MiB a node may have)"},
        TraceErrorCase{"a_negative_gpu_count", List::kNodes, Nodes("n1,1,1,-1,T4\n"), 2,
                       "column 'gpu': -1 is outside 0..64"}),
    test::CaseName());

struct PodConversionCase {
  const char* name;
  std::string row;
  core::MilliCpu cpu;
  core::MiB memory;
  int gpu_count;
  core::MilliGpu gpu_milli;
  std::vector<std::string> models;
};
void PrintTo(const PodConversionCase& c, std::ostream* os) { *os << c.name; }

class PodConversion : public ::testing::TestWithParam<PodConversionCase> {};

TEST_P(PodConversion, FollowsTheFgdConverter) {
  const PodConversionCase& c = GetParam();
  std::istringstream in(Pods(c.row + "\n"));
  auto pods = ParsePodList(in, "pods.csv");
  ASSERT_TRUE(pods.has_value()) << pods.error().message;
  ASSERT_EQ(pods->size(), 1U);
  const core::Request& r = pods->front();
  EXPECT_EQ(r.name, "p");
  EXPECT_EQ(r.cpu_milli, c.cpu);
  EXPECT_EQ(r.memory_mib, c.memory);
  EXPECT_EQ(r.gpu_count, c.gpu_count);
  EXPECT_EQ(r.gpu_milli, c.gpu_milli);
  EXPECT_EQ(r.gpu_models, c.models);
  EXPECT_EQ(r.gpu_mib, 0);
  EXPECT_EQ(r.sharing, core::GpuSharing::kShared);
  EXPECT_TRUE(r.Validate().has_value());
}

INSTANTIATE_TEST_SUITE_P(
    Table, PodConversion,
    ::testing::Values(
        PodConversionCase{
            "a_plain_shared_gpu_pod", "p,4000,1024,1,500,V100M32", 4000, 1024, 1, 500, {"V100M32"}},
        PodConversionCase{
            "a_gpu_pod_with_milli_0_becomes_cpu_only", "p,4000,1024,2,0,T4", 4000, 1024, 0, 0, {}},
        PodConversionCase{
            "gpu_milli_without_gpus_is_cpu_only", "p,4000,1024,0,500,T4", 4000, 1024, 0, 0, {}},
        PodConversionCase{"cpu_0_becomes_100", "p,0,0,0,0,", 100, 0, 0, 0, {}},
        PodConversionCase{"gpu_spec_splits_on_bars",
                          "p,1,1,1,100,V100M16|V100M32",
                          1,
                          1,
                          1,
                          100,
                          {"V100M16", "V100M32"}},
        PodConversionCase{"empty_parts_of_gpu_spec_are_dropped",
                          "p,1,1,1,100,|A10||T4|",
                          1,
                          1,
                          1,
                          100,
                          {"A10", "T4"}},
        PodConversionCase{"several_whole_gpus", "p,32000,65536,8,1000,", 32000, 65536, 8, 1000, {}},
        PodConversionCase{
            "spaces_around_fields_are_trimmed", " p , 7 , 8 , 1 , 9 , T4 ", 7, 8, 1, 9, {"T4"}}),
    test::CaseName());

TEST(ParsePodList, IgnoresExtraColumnsAndAcceptsAMissingGpuSpec) {
  std::istringstream in(
      "qos,name,gpu_milli,num_gpu,memory_mib,cpu_milli,creation_time\n"
      "LS,a,300,1,10,2000,0\r\n"
      "BE,b,0,0,20,0,5\r\n");
  auto pods = ParsePodList(in, "x.csv");
  ASSERT_TRUE(pods.has_value()) << pods.error().message;
  ASSERT_EQ(pods->size(), 2U);
  EXPECT_EQ((*pods)[0].name, "a");
  EXPECT_EQ((*pods)[0].gpu_milli, 300);
  EXPECT_EQ((*pods)[0].cpu_milli, 2000);
  EXPECT_TRUE((*pods)[0].gpu_models.empty());
  EXPECT_EQ((*pods)[1].cpu_milli, 100);
  EXPECT_EQ((*pods)[1].memory_mib, 20);
}

TEST(ParsePodList, AcceptsGpuMilliAtBothEndsOfItsRange) {
  std::istringstream in(Pods("zero,1,1,1,0,\nwhole,1,1,2,1000,\n"));
  auto pods = ParsePodList(in, "pods.csv");
  ASSERT_TRUE(pods.has_value()) << pods.error().message;
  EXPECT_EQ((*pods)[0].gpu_count, 0) << "gpu_milli 0: CPU-only";
  EXPECT_EQ((*pods)[1].gpu_milli, 1000);
  EXPECT_EQ((*pods)[1].gpu_count, 2);
}

std::vector<core::Request> PodsOf(const std::string& rows) {
  std::istringstream in(Pods(rows));
  auto pods = ParsePodList(in, "pods.csv");
  EXPECT_TRUE(pods.has_value()) << pods.error().message;
  return pods ? *pods : std::vector<core::Request>{};
}

std::vector<core::NodeSpec> NodesOf(const std::string& rows) {
  std::istringstream in(Nodes(rows));
  auto nodes = ParseNodeList(in, "nodes.csv");
  EXPECT_TRUE(nodes.has_value()) << nodes.error().message;
  return nodes ? *nodes : std::vector<core::NodeSpec>{};
}

TEST(PodsAskingForAbsentModels, CountsThePodsThatNoNodeCanTakeAndNamesTheirModels) {
  const auto nodes = NodesOf("n1,1000,1000,2,T4\nn2,1000,1000,0,\n");
  const auto pods = PodsOf(
      "any,1,1,1,500,\n"             // no gpu_spec: any model
      "t4,1,1,1,500,T4\n"            // present
      "either,1,1,1,500,A100|T4\n"   // one of its models is present: placeable
      "a100,1,1,1,500,A100\n"        // never placed
      "h100,1,1,2,1000,H100|A100\n"  // never placed
      "cpu,1,1,0,0,H200\n");         // CPU-only: gpu_spec does not apply
  const AbsentModels absent = PodsAskingForAbsentModels(pods, nodes);
  EXPECT_EQ(absent.pods, 2U);
  EXPECT_EQ(absent.models, (std::vector<std::string>{"A100", "H100"}));
}

TEST(PodsAskingForAbsentModels, TheEmbeddedTraceHasNone) {
  std::istringstream nodes_in{std::string(EmbeddedNodeList())};
  std::istringstream pods_in{std::string(EmbeddedPodList())};
  const auto nodes = ParseNodeList(nodes_in, "nodes");
  const auto pods = ParsePodList(pods_in, "pods");
  ASSERT_TRUE(nodes.has_value() && pods.has_value());
  EXPECT_EQ(PodsAskingForAbsentModels(*pods, *nodes).pods, 0U);
}

TEST(ParseNodeList, MakesTraceNodesWithModelLabelsAndGpuMemory) {
  std::istringstream in(Nodes("n1,96000,786432,8,V100M32\nn2,32000,1024,0,\nn3,64000,1,1,G2\n"));
  auto nodes = ParseNodeList(in, "nodes.csv");
  ASSERT_TRUE(nodes.has_value()) << nodes.error().message;
  ASSERT_EQ(nodes->size(), 3U);
  const core::NodeSpec& n1 = (*nodes)[0];
  EXPECT_EQ(n1.name, "n1");
  EXPECT_EQ(n1.cpu_milli, 96000);
  EXPECT_EQ(n1.memory_mib, 786432);
  EXPECT_EQ(n1.max_pods, kTraceMaxPods);
  EXPECT_EQ(n1.max_pods, 1001);
  EXPECT_EQ(n1.labels.at("gpu-card-model"), "V100M32");
  ASSERT_EQ(n1.gpus.size(), 8U);
  for (std::size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(n1.gpus[i].index, static_cast<int>(i));
    EXPECT_EQ(n1.gpus[i].model, "V100M32");
    EXPECT_EQ(n1.gpus[i].memory_mib, 32768);
    EXPECT_EQ(n1.gpus[i].health, core::GpuHealth::kHealthy);
  }
  EXPECT_EQ(n1.gpus[3].uuid, "GPU-sim-n1-3");
  EXPECT_TRUE((*nodes)[1].gpus.empty());
  EXPECT_EQ((*nodes)[1].labels.count("gpu-card-model"), 0U);
  EXPECT_EQ((*nodes)[2].gpus[0].memory_mib, 0) << "G2's memory is unknown";
  EXPECT_TRUE(core::Cluster::Build(*nodes).has_value());
}

TEST(TraceGpuMemory, KnowsThePublishedModelsAndNotTheInternalOnes) {
  EXPECT_EQ(TraceGpuMemory("T4"), 16384);
  EXPECT_EQ(TraceGpuMemory("P100"), 16384);
  EXPECT_EQ(TraceGpuMemory("V100M16"), 16384);
  EXPECT_EQ(TraceGpuMemory("V100M32"), 32768);
  EXPECT_EQ(TraceGpuMemory("A10"), 24576);
  EXPECT_EQ(TraceGpuMemory("G2"), 0);
  EXPECT_EQ(TraceGpuMemory("G3"), 0);
  EXPECT_EQ(TraceGpuMemory(""), 0);
}

TEST(LoadPodList, NamesThePathAndLineOfABadRow) {
  test::ScratchDir dir;
  const std::string path =
      dir.Write("bad_pods.csv", Pods("p1,1000,0,1,500,\np2,1000,zero,1,500,\n"));
  auto pods = LoadPodList(path);
  ASSERT_FALSE(pods.has_value());
  EXPECT_EQ(pods.error().message, path + ":3: column 'memory_mib': 'zero' is not an integer");
}

TEST(LoadTraceFiles, AMissingFileIsAnIoErrorNamingThePath) {
  test::ScratchDir dir;
  const std::string path = (dir.path() / "absent.csv").string();
  auto pods = LoadPodList(path);
  ASSERT_FALSE(pods.has_value());
  EXPECT_EQ(pods.error().code, core::ErrorCode::kIo);
  EXPECT_NE(pods.error().message.find(path), std::string::npos);
  auto nodes = LoadNodeList(path);
  ASSERT_FALSE(nodes.has_value());
  EXPECT_EQ(nodes.error().code, core::ErrorCode::kIo);
}

TEST(LoadTraceFiles, AFolderIsRefusedByNameAsAFolder) {
  test::ScratchDir dir;
  const std::string path = dir.path().string();
  for (const auto& message :
       {LoadPodList(path).error().message, LoadNodeList(path).error().message}) {
    EXPECT_EQ(message, path + ": cannot open: is a directory (expected a file)");
  }
}

TEST(ParseNodeList, RefusesMoreNodesThanTheLimitAtTheFirstRowPastIt) {
  std::string text = kNodeHeader;
  text.reserve(kMaxTraceNodes * 16);
  for (std::size_t i = 0; i <= kMaxTraceNodes; ++i) {
    text += test::Numbered("n", static_cast<std::int64_t>(i));
    text += ",1,1,0,\n";
  }
  std::istringstream in(text);
  auto nodes = ParseNodeList(in, "nodes.csv");
  ASSERT_FALSE(nodes.has_value());
  EXPECT_EQ(nodes.error().message, "nodes.csv:" + std::to_string(kMaxTraceNodes + 2) +
                                       ": more than 100000 nodes (the most a node list may hold)");
}

TEST(LoadTraceFiles, ReadsAGoodFile) {
  test::ScratchDir dir;
  const std::string path = dir.Write("n.csv", Nodes("a,1000,1000,2,T4\n"));
  auto nodes = LoadNodeList(path);
  ASSERT_TRUE(nodes.has_value()) << nodes.error().message;
  EXPECT_EQ(nodes->size(), 1U);
}

TEST(EmbeddedTrace, HasThe1213NodesWith6212GpusAndThe8152Pods) {
  std::istringstream nodes_in{std::string(EmbeddedNodeList())};
  auto nodes = ParseNodeList(nodes_in, "<embedded nodes>");
  ASSERT_TRUE(nodes.has_value()) << nodes.error().message;
  EXPECT_EQ(nodes->size(), 1213U);
  auto cluster = core::Cluster::Build(*nodes);
  ASSERT_TRUE(cluster.has_value()) << cluster.error().message;
  EXPECT_EQ(cluster->total_gpus(), 6212);

  std::istringstream pods_in{std::string(EmbeddedPodList())};
  auto pods = ParsePodList(pods_in, "<embedded pods>");
  ASSERT_TRUE(pods.has_value()) << pods.error().message;
  EXPECT_EQ(pods->size(), 8152U);
  for (const auto& p : *pods) {
    ASSERT_TRUE(p.Validate().has_value()) << p.name;
  }
  EXPECT_EQ(kEmbeddedNodeListName, "openb_node_list_gpu_node");
  EXPECT_EQ(kEmbeddedPodListName, "openb_pod_list_default");
}

TEST(ParseTimedPodList, ReadsTheTimesAndHowLongEachPodRan) {
  std::istringstream in(
      "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
      "deletion_time,scheduled_time\n"
      "a,4000,15258,1,220,,BE,Running,100,400,150\n"
      "b,0,0,0,0,,LS,Pending,200,500,\n"
      "c,88000,327680,8,1000,V100M16|V100M32,LS,Running,300,,300\n");
  auto pods = ParseTimedPodList(in, "pods.csv");
  ASSERT_TRUE(pods.has_value()) << pods.error().message;
  ASSERT_EQ(pods->size(), 3U);
  const TracePod& a = (*pods)[0];
  EXPECT_EQ(a.request.name, "a");
  EXPECT_EQ(a.request.gpu_milli, 220);
  EXPECT_EQ(a.creation_s, 100);
  EXPECT_EQ(a.RunSeconds(), 250);  // deletion - scheduled
  const TracePod& b = (*pods)[1];
  EXPECT_EQ(b.request.cpu_milli, 100);  // the converter's non-zero default, as ParsePodList
  EXPECT_EQ(b.scheduled_s, -1);
  EXPECT_EQ(b.RunSeconds(), 300);  // never scheduled: deletion - creation
  const TracePod& c = (*pods)[2];
  EXPECT_EQ(c.request.gpu_count, 8);
  EXPECT_EQ(c.request.gpu_models, (std::vector<std::string>{"V100M16", "V100M32"}));
  EXPECT_EQ(c.RunSeconds(), -1);  // no deletion time
}

TEST(ParseTimedPodList, TheEmbeddedListHasTimesForEveryPod) {
  std::istringstream in{std::string(EmbeddedPodList())};
  auto pods = ParseTimedPodList(in, "<embedded pods>");
  ASSERT_TRUE(pods.has_value()) << pods.error().message;
  EXPECT_EQ(pods->size(), 8152U);
  EXPECT_EQ(pods->front().creation_s, 0);
  for (const TracePod& p : *pods) ASSERT_GE(p.RunSeconds(), 0) << p.request.name;
}

struct TimedPodErrorCase {
  std::string name;
  std::string rows;
  std::string problem;
};

class ParseTimedPodListRejects : public ::testing::TestWithParam<TimedPodErrorCase> {};

TEST_P(ParseTimedPodListRejects, NamingLinePodAndColumn) {
  std::istringstream in(
      "name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,deletion_time,scheduled_time\n" +
      GetParam().rows);
  auto pods = ParseTimedPodList(in, "pods.csv");
  ASSERT_FALSE(pods.has_value());
  EXPECT_NE(pods.error().message.find(GetParam().problem), std::string::npos)
      << pods.error().message;
}

INSTANTIATE_TEST_SUITE_P(
    Trace, ParseTimedPodListRejects,
    ::testing::Values(
        TimedPodErrorCase{"NoCreationTime", "a,1,1,1,100,,10,\n",
                          "pods.csv:2: pod 'a': column 'creation_time' is empty"},
        TimedPodErrorCase{"DeletedBeforeCreated", "a,1,1,1,100,50,10,\n",
                          "pods.csv:2: pod 'a': deleted at 10 s, before its creation at 50 s"},
        TimedPodErrorCase{"ScheduledBeforeCreated", "a,1,1,1,100,50,90,40\n",
                          "scheduled at 40 s, before its creation at 50 s"},
        TimedPodErrorCase{"ANegativeTime", "a,1,1,1,100,-5,10,\n",
                          "column 'creation_time': -5 is outside 0..1000000000000"},
        TimedPodErrorCase{"NotANumber", "a,1,1,1,100,soon,10,\n", "column 'creation_time'"}),
    [](const auto& test_case) { return test_case.param.name; });

TEST(ParseTimedPodList, AListWithoutCreationTimesIsRefusedByColumn) {
  std::istringstream in(std::string(kPodHeader) + "a,1,1,1,100,\n");
  auto pods = ParseTimedPodList(in, "pods.csv");
  ASSERT_FALSE(pods.has_value());
  EXPECT_NE(pods.error().message.find("creation_time"), std::string::npos) << pods.error().message;
}

TEST(EmbeddedTrace, ExpectedResultsStartWithTheStudyHeader) {
  const std::string_view expected = EmbeddedExpectedAlloc();
  EXPECT_EQ(expected.substr(0, 41), "workload,sc_policy,tune,seed,total_gpus,0");
}

struct StemCase {
  const char* name;
  const char* path;
  const char* stem;
};
void PrintTo(const StemCase& c, std::ostream* os) { *os << c.name; }

class TraceStemTable : public ::testing::TestWithParam<StemCase> {};

TEST_P(TraceStemTable, DropsFolderAndCsvSuffix) {
  EXPECT_EQ(TraceStem(GetParam().path), GetParam().stem);
}

INSTANTIATE_TEST_SUITE_P(Table, TraceStemTable,
                         ::testing::Values(StemCase{"a_path_with_folders",
                                                    "dir/openb_pod_list_gpushare40.csv",
                                                    "openb_pod_list_gpushare40"},
                                           StemCase{"a_bare_file", "x.csv", "x"},
                                           StemCase{"no_csv_suffix", "/a/b/pods.txt", "pods.txt"},
                                           StemCase{"only_the_suffix", ".csv", ".csv"},
                                           StemCase{"a_trailing_slash", "dir/", ""}),
                         test::CaseName());

}  // namespace
}  // namespace gpumux::sim
