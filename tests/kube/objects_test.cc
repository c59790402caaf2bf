#include "gpumux/kube/objects.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <ostream>
#include <string>

#include "gpumux/core/time.h"
#include "gpumux/kube/coordinator_status.h"
#include "gpumux/kube/grant.h"
#include "gpumux/kube/node_lock.h"
#include "tests/testing/kube_fixtures.h"

namespace gpumux::kube {
namespace {

using kube::testing::ContainerOf;
using kube::testing::NodeJson;
using kube::testing::PodJson;
using kube::testing::PodWithOne;
using nlohmann::json;

TEST(ParseQuantity, ReadsKubernetesSuffixesAndRoundsUp) {
  struct Case {
    const char* text;
    std::int64_t scale;
    std::int64_t want;
  };
  const Case cases[] = {{"2", 1000, 2000},      {"100m", 1000, 100},
                        {"1.5", 1000, 1500},    {"64Mi", 1, 67108864},
                        {"1Gi", 1, 1073741824}, {"1k", 1, 1000},
                        {"1e3", 1, 1000},       {"0.0001", 1000, 1},
                        {"8192", 1, 8192},      {"32879476Ki", 1, 33668583424}};
  for (const Case& c : cases) {
    auto q = ParseQuantity(c.text, c.scale);
    ASSERT_TRUE(q.has_value()) << c.text << ": " << q.error().message;
    EXPECT_EQ(*q, c.want) << c.text;
  }
}

TEST(ParseQuantity, RejectsGarbageWithTheText) {
  for (const char* bad : {"", "abc", "1..2", "5Qi", "1e"}) {
    auto q = ParseQuantity(bad);
    ASSERT_FALSE(q.has_value()) << bad;
    EXPECT_NE(q.error().message.find(std::string("\"") + bad + "\""), std::string::npos);
  }
}

TEST(DecodePod, WholeGpusAreExclusive) {
  auto p = DecodePod(PodWithOne("p", 2, 0, 0));
  ASSERT_TRUE(p.has_value());
  ASSERT_EQ(p->containers.size(), 1u);
  const core::Request& r = p->containers[0].request;
  EXPECT_EQ(r.gpu_count, 2);
  EXPECT_EQ(r.gpu_milli, 1000);
  EXPECT_EQ(r.sharing, core::GpuSharing::kExclusive);
  EXPECT_EQ(r.cpu_milli, 0) << "kube-scheduler accounts CPU, not the extender";
}

TEST(DecodePod, MemoryOnlyShareReservesNoCompute) {
  auto p = DecodePod(PodWithOne("p", 0, 8192, 0));
  ASSERT_TRUE(p.has_value());
  const ContainerRequest& c = p->containers[0];
  EXPECT_EQ(c.request.gpu_count, 1);
  EXPECT_EQ(c.request.gpu_mib, 8192);
  EXPECT_EQ(c.request.gpu_milli, 1);
  EXPECT_FALSE(c.milli_requested);
  EXPECT_EQ(c.request.sharing, core::GpuSharing::kShared);
}

TEST(DecodePod, CountWithShareMeansThatShareOnEachOfNGpus) {
  auto p = DecodePod(PodWithOne("p", 2, 4096, 250));
  ASSERT_TRUE(p.has_value());
  const core::Request& r = p->containers[0].request;
  EXPECT_EQ(r.gpu_count, 2);
  EXPECT_EQ(r.gpu_mib, 4096);
  EXPECT_EQ(r.gpu_milli, 250);
  EXPECT_EQ(r.sharing, core::GpuSharing::kShared);
}

TEST(DecodePod, OnlyContainersAskingForGpusAreKept) {
  auto p = DecodePod(PodJson("p", {ContainerOf{"sidecar"}, ContainerOf{"train", 0, 1024, 100}}));
  ASSERT_TRUE(p.has_value());
  ASSERT_EQ(p->containers.size(), 1u);
  EXPECT_EQ(p->containers[0].container, "train");
}

// Issue 34: a pod asking gpumux for a GPU cannot name its own (its env would come after the
// device plugin's and widen the grant to every GPU through the toolkit's environment path).
TEST(DecodePod, AGpuPodThatSetsNvidiaVisibleDevicesItselfIsARequestError) {
  nlohmann::json pod = PodJson("p", {ContainerOf{"sidecar"}, ContainerOf{"train", 1, 0, 0}});
  pod["spec"]["containers"][0]["env"] = {{{"name", "NVIDIA_VISIBLE_DEVICES"}, {"value", "all"}}};
  auto p = DecodePod(pod);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->request_error,
            "container \"sidecar\" sets NVIDIA_VISIBLE_DEVICES itself; gpumux sets it from the "
            "pod's grant (remove it from the pod's env)");
  EXPECT_TRUE(p->containers.empty());
  // A pod that asks gpumux for nothing is not gpumux's to judge.
  pod["spec"]["containers"][1]["resources"] = nlohmann::json::object();
  p = DecodePod(pod);
  ASSERT_TRUE(p.has_value());
  EXPECT_TRUE(p->request_error.empty()) << p->request_error;
}

TEST(DecodePod, MilliAboveOneGpuIsARequestErrorNotACrash) {
  auto p = DecodePod(PodWithOne("p", 0, 0, 1500));
  ASSERT_TRUE(p.has_value());
  EXPECT_TRUE(p->wants_gpu());
  EXPECT_NE(p->request_error.find("above one GPU"), std::string::npos);
}

TEST(DecodePod, ModelAnnotationAndBadGrantAreRead) {
  json pod = PodWithOne("p", 1, 0, 0);
  pod["metadata"]["annotations"]["gpumux.io/gpu-model"] = "A100, H100";
  pod["metadata"]["annotations"]["gpumux.io/grant"] = "{\"version\":1}";
  auto p = DecodePod(pod);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->containers[0].request.gpu_models, (std::vector<std::string>{"A100", "H100"}));
  EXPECT_FALSE(p->grant.has_value());
  EXPECT_NE(p->grant_error.find("node"), std::string::npos) << p->grant_error;
}

TEST(DecodePod, TheCreationTimeIsReadWhenPresentAndReadable) {
  json pod = PodWithOne("p", 1, 0, 0);
  EXPECT_EQ(DecodePod(pod)->created_unix_s, 0) << "absent";
  pod["metadata"]["creationTimestamp"] = "2026-11-27T06:00:00Z";
  EXPECT_EQ(DecodePod(pod)->created_unix_s, *core::ParseRfc3339("2026-11-27T06:00:00Z"));
  pod["metadata"]["creationTimestamp"] = "yesterday";
  EXPECT_EQ(DecodePod(pod)->created_unix_s, 0) << "unreadable: as if absent";
}

TEST(DecodePod, MissingUidIsAnError) {
  json pod = PodWithOne("p", 1, 0, 0);
  pod["metadata"].erase("uid");
  EXPECT_FALSE(DecodePod(pod).has_value());
}

TEST(DecodeNode, GpusComeFromTheAnnotation) {
  auto n = DecodeNode(NodeJson("n1", 2), {});
  ASSERT_TRUE(n.has_value());
  ASSERT_EQ(n->spec.gpus.size(), 2u);
  EXPECT_EQ(n->spec.gpus[1].uuid, "GPU-n1-1");
  EXPECT_EQ(n->spec.gpus[1].memory_mib, 40960);
  EXPECT_EQ(n->spec.cpu_milli, 64000);
  EXPECT_TRUE(n->gpus_from_annotation);
}

// Every reader of text the API server hands over (annotations that anyone who may edit a pod or
// a node writes) goes through core::ParseJson: a value nested 100,000 deep is refused before it
// is parsed (tests/repros/webhook-extender-deep-json-crash: such a value crashed two daemons).
TEST(DeepJson, EveryAnnotationReaderRefusesAValueNested100000Deep) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const auto refused = [](const std::string& what, const core::Error& e) {
    EXPECT_NE(e.message.find("nested deeper than 128 levels"), std::string::npos)
        << what << ": " << e.message;
  };
  auto grant = DecodeGrant(R"({"version":1,"node":"n1","containers":)" + deep + "}");
  ASSERT_FALSE(grant.has_value());
  refused("gpumux.io/grant", grant.error());
  auto lock = DecodeNodeLock(R"({"version":1,"pod":)" + deep + "}");
  ASSERT_FALSE(lock.has_value());
  refused("gpumux.io/allocating", lock.error());
  auto status = DecodeNodeStatus(R"({"version":1,"gpus":)" + deep + "}");
  ASSERT_FALSE(status.has_value());
  refused("the coordinator's status", status.error());
  json node = NodeJson("n1", 2);
  node["metadata"]["annotations"][std::string(kAnnotationGpus)] = deep;
  auto n = DecodeNode(node, {});
  ASSERT_TRUE(n.has_value()) << "a malformed list is not the node's error";
  EXPECT_TRUE(n->spec.gpus.empty());
  EXPECT_NE(n->gpus_error.find("nested deeper than 128 levels"), std::string::npos)
      << n->gpus_error;
}

TEST(DecodeNode, WithoutTheAnnotationTheConfiguredDefaultIsUsed) {
  json node = NodeJson("n1", 4);
  node["metadata"]["annotations"] = json::object();
  auto n = DecodeNode(node, NodeDefaults{"T4", 15360});
  ASSERT_TRUE(n.has_value());
  ASSERT_EQ(n->spec.gpus.size(), 4u);
  EXPECT_EQ(n->spec.gpus[3].model, "T4");
  EXPECT_EQ(n->spec.gpus[3].memory_mib, 15360);
  EXPECT_TRUE(n->spec.gpus[3].uuid.empty());
}

TEST(DecodeNode, AMalformedAnnotationGivesNoGpusAndSaysWhy) {
  json node = NodeJson("n1", 2);
  node["metadata"]["annotations"]["gpumux.io/gpus"] =
      R"([{"index":0,"memory_mib":100},{"index":2,"memory_mib":100}])";
  auto n = DecodeNode(node, {});
  ASSERT_TRUE(n.has_value());
  EXPECT_TRUE(n->spec.gpus.empty());
  EXPECT_NE(n->gpus_error.find("without gaps"), std::string::npos) << n->gpus_error;
}

TEST(DecodePod, GpuMemIsCountedInUnitsOfTheGivenSize) {
  auto gib = DecodePod(PodWithOne("p", 0, 8, 250), kDefaultGpuMemUnitMib);
  ASSERT_TRUE(gib.has_value());
  ASSERT_TRUE(gib->request_error.empty()) << gib->request_error;
  EXPECT_EQ(gib->containers[0].request.gpu_mib, 8 * 1024);
  EXPECT_EQ(gib->containers[0].request.gpu_milli, 250) << "only gpu-mem has a unit";
  auto mib = DecodePod(PodWithOne("p", 0, 8, 0));
  ASSERT_TRUE(mib.has_value());
  EXPECT_EQ(mib->containers[0].request.gpu_mib, 8) << "the library default is 1 MiB";
  auto whole = DecodePod(PodWithOne("p", 2, 0, 0), 1024);
  ASSERT_TRUE(whole.has_value());
  EXPECT_EQ(whole->containers[0].request.gpu_count, 2);
  EXPECT_EQ(whole->containers[0].request.gpu_mib, 0);
}

TEST(DecodePod, AGpuMemAmountThatOverflowsInMiBIsARequestError) {
  json pod = PodWithOne("p", 0, 1, 0);
  pod["spec"]["containers"][0]["resources"]["limits"]["gpumux.io/gpu-mem"] = "8Pi";
  auto p = DecodePod(pod, 1024);
  ASSERT_TRUE(p.has_value());
  EXPECT_TRUE(p->containers.empty());
  EXPECT_TRUE(p->wants_gpu()) << "a bad request still belongs to gpumux (it fits nowhere)";
  EXPECT_NE(p->request_error.find("container \"main\" limits[gpumux.io/gpu-mem]: "
                                  "9007199254740992 units of 1024 MiB is too large"),
            std::string::npos)
      << p->request_error;
  p = DecodePod(pod, 1);
  ASSERT_TRUE(p.has_value());
  EXPECT_TRUE(p->request_error.empty()) << "the same number is fine in MiB: " << p->request_error;
}

TEST(DecodePod, AUnitOutsideItsRangeIsAnError) {
  for (std::int64_t unit : {std::int64_t{0}, std::int64_t{-1}, kMaxGpuMemUnitMib + 1}) {
    auto p = DecodePod(PodWithOne("p", 0, 8, 0), unit);
    ASSERT_FALSE(p.has_value()) << unit;
    EXPECT_NE(p.error().message.find("gpu-mem unit must be 1..1048576"), std::string::npos)
        << p.error().message;
  }
}

TEST(DecodeNode, ThePublishedGpuMemUnitIsRead) {
  json node = NodeJson("n1", 2);
  auto n = DecodeNode(node, {});
  ASSERT_TRUE(n.has_value());
  EXPECT_EQ(n->gpu_mem_unit_mib, 0) << "not published";
  node["metadata"]["annotations"]["gpumux.io/gpu-mem-unit-mib"] = "1024";
  n = DecodeNode(node, {});
  ASSERT_TRUE(n.has_value());
  EXPECT_EQ(n->gpu_mem_unit_mib, 1024);
  EXPECT_TRUE(n->gpu_mem_unit_error.empty());
}

TEST(DecodeNode, AMalformedGpuMemUnitIsNamedAndKeepsTheGpus) {
  for (const json& bad :
       {json("1GiB"), json("0"), json(""), json("-4"), json("2097152"), json(1024)}) {
    json node = NodeJson("n1", 2);
    node["metadata"]["annotations"]["gpumux.io/gpu-mem-unit-mib"] = bad;
    auto n = DecodeNode(node, {});
    ASSERT_TRUE(n.has_value());
    EXPECT_EQ(n->gpu_mem_unit_mib, 0) << bad;
    EXPECT_NE(n->gpu_mem_unit_error.find("annotation gpumux.io/gpu-mem-unit-mib"),
              std::string::npos)
        << n->gpu_mem_unit_error;
    EXPECT_EQ(n->spec.gpus.size(), 2u) << "whole-GPU pods can still go there";
  }
}

TEST(ParseQuantity, RejectsADotWithoutDigitsAndASpacedExponent) {
  for (const char* bad : {".", "+.", "1e 3", "1e+", "-."}) {
    auto q = ParseQuantity(bad);
    EXPECT_FALSE(q.has_value()) << bad << " read as " << (q ? *q : 0);
  }
}

// FGD keeps per-GPU scratch arrays of core::kMaxGpusPerNode slots: a node announcing more GPUs
// passed decoding and then aborted the extender in FGD, taking every node down with it.
TEST(DecodeNode, ANodeAnnouncingMoreGpusThanANodeMayHaveIsAnErrorNamingIt) {
  auto n = DecodeNode(NodeJson("gpu-7", core::kMaxGpusPerNode + 1), {});
  ASSERT_FALSE(n.has_value());
  EXPECT_EQ(n.error().message,
            "node gpu-7: gpumux.io/gpus lists 65 GPUs, more than the 64 a node may have");
  EXPECT_TRUE(DecodeNode(NodeJson("gpu-8", core::kMaxGpusPerNode), {}).has_value());
}

TEST(DecodeNode, AnAllocatableGpuCountAboveTheLimitIsAnErrorNamingIt) {
  json node = NodeJson("gpu-7", 2);
  node["metadata"]["annotations"] = json::object();
  node["status"]["allocatable"]["gpumux.io/gpu"] = "65";
  auto n = DecodeNode(node, {});
  ASSERT_FALSE(n.has_value());
  EXPECT_EQ(n.error().message,
            "node gpu-7: status.allocatable[\"gpumux.io/gpu\"] is \"65\", more than the 64 GPUs "
            "a node may have");
}

struct BadNodeQuantity {
  const char* name;
  const char* field;  // under status.allocatable
  json value;
  const char* message;  // expected after "node n1: "
};
void PrintTo(const BadNodeQuantity& c, std::ostream* os) { *os << c.name; }

class DecodeNodeRefuses : public ::testing::TestWithParam<BadNodeQuantity> {};

// One bad node made core::Cluster::Build fail (negative CPU), so every node became "not known";
// unreadable quantities silently became 0, and a JSON integer near INT64_MAX overflowed when
// scaled to milli-CPU (reliability-repros/extender-nodelist-cpu-overflow). Each is now an error
// that names the node and the field, for kube-scheduler's FailedScheduling event.
TEST_P(DecodeNodeRefuses, AQuantityWithAnErrorNamingTheNodeAndField) {
  const BadNodeQuantity& c = GetParam();
  json node = NodeJson("n1", 2);
  node["status"]["allocatable"][c.field] = c.value;
  auto n = DecodeNode(node, {});
  ASSERT_FALSE(n.has_value()) << c.name;
  EXPECT_EQ(n.error().code, core::ErrorCode::kInvalidArgument);
  EXPECT_EQ(n.error().message, std::string("node n1: ") + c.message);
}

INSTANTIATE_TEST_SUITE_P(
    Table, DecodeNodeRefuses,
    ::testing::Values(
        BadNodeQuantity{"a_negative_cpu", "cpu", "-1",
                        "status.allocatable.cpu is \"-1\", a negative quantity"},
        BadNodeQuantity{"a_negative_memory", "memory", "-5Gi",
                        "status.allocatable.memory is \"-5Gi\", a negative quantity"},
        BadNodeQuantity{"a_negative_pod_count", "pods", -3,
                        "status.allocatable.pods is -3, a negative quantity"},
        BadNodeQuantity{"a_negative_gpu_count", "gpumux.io/gpu", "-1",
                        "status.allocatable[\"gpumux.io/gpu\"] is \"-1\", a negative quantity"},
        BadNodeQuantity{"an_unknown_suffix", "cpu", "12XB",
                        "status.allocatable.cpu: bad quantity \"12XB\": unknown suffix"},
        BadNodeQuantity{"a_value_that_is_not_a_quantity", "memory", true,
                        "status.allocatable.memory: not a quantity: true"},
        BadNodeQuantity{"cpu_cores_near_int64_max", "cpu", json(std::int64_t{9223372036854775807}),
                        "status.allocatable.cpu: bad quantity 9223372036854775807: too large"},
        BadNodeQuantity{"an_integer_beyond_int64", "memory",
                        json(std::uint64_t{18446744073709551615U}),
                        "status.allocatable.memory: bad quantity 18446744073709551615: too large"},
        BadNodeQuantity{"cpu_beyond_what_a_node_may_have", "cpu", "2e9",
                        "status.allocatable.cpu is \"2e9\", more than the 1099511627776 "
                        "milli-CPU a node may have"}),
    ::testing::PrintToStringParamName());

TEST(DecodeNode, TheCapacityIsReadWhenAllocatableIsAbsentAndNamedInErrors) {
  json node = NodeJson("n1", 2);
  node["status"]["capacity"] = node["status"]["allocatable"];
  node["status"].erase("allocatable");
  node["status"]["capacity"]["cpu"] = "-2";
  auto n = DecodeNode(node, {});
  ASSERT_FALSE(n.has_value());
  EXPECT_EQ(n.error().message, "node n1: status.capacity.cpu is \"-2\", a negative quantity");
}

TEST(DecodeNode, AGpuOfTheAnnotationWithMoreMemoryThanAGpuMayHaveGivesNoGpus) {
  auto n = DecodeNode(NodeJson("n1", 2, {.memory_mib = core::kMaxGpuMemoryMib + 1}), {});
  ASSERT_TRUE(n.has_value()) << n.error().message;
  EXPECT_TRUE(n->spec.gpus.empty());
  EXPECT_NE(n->gpus_error.find("\"memory_mib\" must be an integer 0..4294967296"),
            std::string::npos)
      << n->gpus_error;
}

TEST(DecodeNode, ADefaultGpuMemoryBeyondTheLimitIsAnError) {
  json node = NodeJson("n1", 2);
  node["metadata"]["annotations"] = json::object();
  auto n = DecodeNode(node, NodeDefaults{"T4", core::kMaxGpuMemoryMib + 1});
  ASSERT_FALSE(n.has_value());
  EXPECT_NE(n.error().message.find("node n1: the default GPU memory"), std::string::npos)
      << n.error().message;
}

// The decoded node always builds: what DecodeNode accepts, core::Cluster::Build accepts.
TEST(DecodeNode, WhatItAcceptsAtTheLimitsTheClusterBuilds) {
  json node = NodeJson("n1", core::kMaxGpusPerNode, {.memory_mib = core::kMaxGpuMemoryMib});
  node["status"]["allocatable"]["cpu"] = "1099511627776m";
  node["status"]["allocatable"]["memory"] = "7Ei";
  json other = node;
  other["metadata"]["name"] = "n2";
  auto a = DecodeNode(node, {});
  auto b = DecodeNode(other, {});
  ASSERT_TRUE(a.has_value()) << a.error().message;
  ASSERT_TRUE(b.has_value()) << b.error().message;
  auto cluster = core::Cluster::Build({a->spec, b->spec});
  ASSERT_TRUE(cluster.has_value()) << cluster.error().message;
}

TEST(DecodePod, AGpuAmountBeyondInt64IsARequestErrorNamingTheField) {
  json pod = PodWithOne("p", 0, 1, 0);
  pod["spec"]["containers"][0]["resources"]["limits"]["gpumux.io/gpu-mem"] =
      json(std::uint64_t{18446744073709551615U});
  auto p = DecodePod(pod, 1);
  ASSERT_TRUE(p.has_value());
  EXPECT_TRUE(p->containers.empty());
  EXPECT_EQ(p->request_error,
            "container \"main\" limits[gpumux.io/gpu-mem]: bad quantity 18446744073709551615: "
            "too large");
}

}  // namespace
}  // namespace gpumux::kube
