// The extender's state with --require-enforcement (ClusterStateOptions::required_enforcement)
// and the pods' gpumux.io/require-enforcement: a share goes only where its limits are enforced;
// whole GPUs are not affected; a share that asks for nothing to be held to is refused with why.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "gpumux/sched/cluster_state.h"
#include "tests/testing/kube_fixtures.h"

namespace gpumux::sched {
namespace {

using kube::testing::NodeJson;
using kube::testing::PodWithOne;
using nlohmann::json;
using Kind = NodeVerdict::Kind;

// A node whose every GPU enforces `memory` (hard, soft, none).
json EnforcingNode(const std::string& name, const std::string& memory) {
  json node = NodeJson(name, 2);
  json gpus = json::parse(node["metadata"]["annotations"]["gpumux.io/gpus"].get<std::string>());
  for (json& g : gpus) {
    g["enforcement"] = {{"version", 1}, {"memory", memory}, {"compute", "none"}, {"backends", {}}};
  }
  node["metadata"]["annotations"]["gpumux.io/gpus"] = gpus.dump();
  return node;
}

std::unique_ptr<ClusterState> Make(core::Enforcement required) {
  ClusterStateOptions options;
  options.policy = "best-fit";
  options.gpu_mem_unit_mib = 1024;
  options.required_enforcement = required;
  auto state = ClusterState::Create(std::move(options), [] { return 1'800'000'000; });
  EXPECT_TRUE(state.has_value());
  const json nodes[] = {EnforcingNode("hard", "hard"), EnforcingNode("soft", "soft"),
                        NodeJson("old", 2)};
  (*state)->SetNodes(nodes);
  return std::move(*state);
}

kube::PodInfo Pod(const json& pod) {
  auto p = kube::DecodePod(pod, 1024);
  EXPECT_TRUE(p.has_value());
  return *p;
}

const std::vector<std::string> kNodes = {"hard", "soft", "old"};

TEST(RequireEnforcement, AShareGoesOnlyWhereItsMemoryLimitIsHard) {
  auto state = Make(core::kEnforcesMemory);
  auto v = state->Evaluate(Pod(PodWithOne("share", 0, 8, 250)), kNodes);
  EXPECT_EQ(v[0].kind, Kind::kFits);
  for (std::size_t i : {std::size_t{1}, std::size_t{2}}) {
    EXPECT_EQ(v[i].kind, Kind::kUnresolvable) << kNodes[i];
    EXPECT_EQ(v[i].reason, "needs 1 GPU that enforces memory limits, 0 of 2 here do");
  }
  // A whole GPU needs no limit against co-tenants.
  v = state->Evaluate(Pod(PodWithOne("whole", 1, 0, 0)), kNodes);
  for (const NodeVerdict& n : v) EXPECT_EQ(n.kind, Kind::kFits) << n.reason;
}

TEST(RequireEnforcement, WithoutItNothingChangesAndAPodCanAskForMore) {
  auto state = Make(core::kEnforcesNothing);
  json pod = PodWithOne("share", 0, 8, 250);
  auto v = state->Evaluate(Pod(pod), kNodes);
  for (const NodeVerdict& n : v) EXPECT_EQ(n.kind, Kind::kFits) << n.reason;
  pod["metadata"]["annotations"]["gpumux.io/require-enforcement"] = "memory";
  v = state->Evaluate(Pod(pod), kNodes);
  EXPECT_EQ(v[0].kind, Kind::kFits);
  EXPECT_EQ(v[1].kind, Kind::kUnresolvable);
  // The grant it would get is on the enforcing node only.
  EXPECT_FALSE(state->Assume(Pod(pod), "old").has_value());
  EXPECT_TRUE(state->Assume(Pod(pod), "hard").has_value());
}

TEST(RequireEnforcement, AShareThatAsksForNoMemoryCannotBeHeldToALimitAndIsRefused) {
  auto state = Make(core::kEnforcesMemory);
  auto v = state->Evaluate(Pod(PodWithOne("milli-only", 0, 0, 250)), kNodes);
  for (const NodeVerdict& n : v) {
    EXPECT_EQ(n.kind, Kind::kUnresolvable);
    EXPECT_NE(n.reason.find("without asking for gpumux.io/gpu-mem"), std::string::npos) << n.reason;
  }
}

}  // namespace
}  // namespace gpumux::sched
