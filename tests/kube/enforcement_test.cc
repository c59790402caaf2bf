// The per-GPU enforcement record in gpumux.io/gpus, as the extender and kubectl gpumux read it,
// and a pod's gpumux.io/require-enforcement and grant variables (kube/enforcement.h,
// kube/objects.h).
#include "gpumux/kube/enforcement.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "gpumux/kube/objects.h"
#include "tests/testing/kube_fixtures.h"

namespace gpumux::kube {
namespace {

using json = nlohmann::json;
using testing::NodeJson;
using testing::PodWithOne;

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// NodeJson whose GPU 0 carries `record` (no member when null).
json NodeWithRecord(const json& record) {
  json node = NodeJson("n1", 2);
  json gpus = json::parse(node["metadata"]["annotations"]["gpumux.io/gpus"].get<std::string>());
  if (!record.is_null()) gpus[0]["enforcement"] = record;
  node["metadata"]["annotations"]["gpumux.io/gpus"] = gpus.dump();
  return node;
}

TEST(EnforcementRecord, RoundTripsAndSetsTheCoreBits) {
  GpuEnforcement e{MemoryEnforcement::kHard,
                   ComputeEnforcement::kMpsNamespace,
                   {"memory-partitioning", "mps"},
                   ""};
  const json j = EnforcementToJson(e);
  EXPECT_EQ(j["version"], 1);
  EXPECT_EQ(j["memory"], "hard");
  EXPECT_EQ(j["compute"], "mps-namespace");
  EXPECT_EQ(EnforcementFromJson(&j), e);
  EXPECT_EQ(e.Bits(), core::kEnforcesMemory | core::kEnforcesCompute);
  auto n = DecodeNode(NodeWithRecord(j), {});
  ASSERT_TRUE(n.has_value()) << n.error().message;
  EXPECT_EQ(n->spec.gpus[0].enforces, core::kEnforcesMemory | core::kEnforcesCompute);
  EXPECT_EQ(n->spec.gpus[1].enforces, core::kEnforcesNothing);
  ASSERT_EQ(n->enforcement.size(), 2u);
  EXPECT_EQ(n->enforcement[0], e);
  EXPECT_TRUE(Contains(n->enforcement[1].note, "not reported")) << n->enforcement[1].note;
}

// What a reader cannot take at its word is none, with a note, never a guess.
TEST(EnforcementRecord, AnOlderPluginANewerRecordOrOneThatDoesNotReadIsNone) {
  const json cases[] = {
      nullptr,                                                      // an older plugin
      {{"version", 2}, {"memory", "hard"}, {"compute", "none"}},    // a newer one
      {{"memory", "hard"}},                                         // no version
      {{"version", 1}, {"memory", "harder"}, {"compute", "none"}},  // unknown word
      {{"version", 1}, {"memory", "hard"}, {"compute", 7}},         // wrong type
      "hard",                                                       // not an object
  };
  for (const json& c : cases) {
    auto n = DecodeNode(NodeWithRecord(c), {});
    ASSERT_TRUE(n.has_value()) << n.error().message;
    EXPECT_EQ(n->spec.gpus[0].enforces, core::kEnforcesNothing) << c.dump();
    EXPECT_EQ(n->enforcement[0].memory, MemoryEnforcement::kNone) << c.dump();
    EXPECT_FALSE(n->enforcement[0].note.empty()) << c.dump();
  }
  const json newer = {{"version", 2}, {"memory", "hard"}, {"compute", "none"}};
  EXPECT_TRUE(Contains(EnforcementFromJson(&newer).note, "version 2")) << "says which";
}

TEST(EnforcementRecord, SoftMemoryAndAServersComputeShareAreNotTheContainersOwnLimits) {
  const GpuEnforcement mps{MemoryEnforcement::kSoft, ComputeEnforcement::kMpsServer, {"mps"}, ""};
  EXPECT_EQ(mps.Bits(), core::kEnforcesNothing);
  const GpuEnforcement hami{
      MemoryEnforcement::kSoft, ComputeEnforcement::kHamiCore, {"hami-core"}, ""};
  EXPECT_EQ(hami.Bits(), core::kEnforcesCompute);
  EXPECT_EQ(StrongestOf({mps, hami}).compute, ComputeEnforcement::kHamiCore);
  EXPECT_EQ(StrongestOf({}).memory, MemoryEnforcement::kNone);
}

TEST(RequiredEnforcement, ReadsItsFourSpellings) {
  EXPECT_EQ(ParseRequiredEnforcement("none", "x").value(), core::kEnforcesNothing);
  EXPECT_EQ(ParseRequiredEnforcement("", "x").value(), core::kEnforcesNothing);
  EXPECT_EQ(ParseRequiredEnforcement("memory", "x").value(), core::kEnforcesMemory);
  EXPECT_EQ(ParseRequiredEnforcement(" compute , memory ", "x").value(),
            core::kEnforcesMemory | core::kEnforcesCompute);
  auto bad = ParseRequiredEnforcement("memory,disk", "--require-enforcement");
  ASSERT_FALSE(bad.has_value());
  EXPECT_TRUE(Contains(bad.error().message, "--require-enforcement")) << bad.error().message;
  EXPECT_EQ(RequiredEnforcementName(core::kEnforcesMemory | core::kEnforcesCompute),
            "memory,compute");
}

TEST(RequiredEnforcement, APodsAnnotationReachesEveryRequestAndABadOneIsNamed) {
  json pod = PodWithOne("p", 0, 8, 250);
  pod["metadata"]["annotations"]["gpumux.io/require-enforcement"] = "memory";
  auto p = DecodePod(pod, 1024);
  ASSERT_TRUE(p.has_value());
  ASSERT_EQ(p->containers.size(), 1u);
  EXPECT_EQ(p->containers[0].request.required_enforcement, core::kEnforcesMemory);
  pod["metadata"]["annotations"]["gpumux.io/require-enforcement"] = "everything";
  p = DecodePod(pod, 1024);
  ASSERT_TRUE(p.has_value());
  EXPECT_TRUE(p->containers.empty());
  EXPECT_TRUE(Contains(p->request_error, "gpumux.io/require-enforcement")) << p->request_error;
}

// The variables through which the device plugin hands over a grant and its limits: a pod that
// set one would override the plugin's (the kubelet puts the pod's env last).
TEST(GrantVariables, APodThatSetsOneIsRefusedNamingIt) {
  for (const char* name :
       {"NVIDIA_VISIBLE_DEVICES", "CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
        "CUDA_DEVICE_MEMORY_LIMIT_0", "CUDA_DEVICE_SM_LIMIT", "CUDA_DEVICE_MEMORY_SHARED_CACHE",
        "CUDA_DISABLE_CONTROL"}) {
    json pod = PodWithOne("p", 0, 8, 250);
    pod["spec"]["containers"][0]["env"] = {{{"name", name}, {"value", "x"}}};
    auto p = DecodePod(pod, 1024);
    ASSERT_TRUE(p.has_value());
    EXPECT_TRUE(p->containers.empty()) << name;
    EXPECT_TRUE(Contains(p->request_error, std::string("sets ") + name + " itself"))
        << p->request_error;
  }
  json pod = PodWithOne("p", 0, 8, 250);
  pod["spec"]["containers"][0]["env"] = {{{"name", "CUDA_DEVICE_MEMORY_LIMITS"}, {"value", "x"}},
                                         {{"name", "CUDA_VISIBLE_DEVICES"}, {"value", "0"}}};
  auto p = DecodePod(pod, 1024);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->containers.size(), 1u) << p->request_error;
}

}  // namespace
}  // namespace gpumux::kube
