#include "tests/testing/policy_harness.h"

#include <gtest/gtest.h>

#include <utility>

#include "tests/testing/builders.h"

namespace gpumux::test {
namespace {

core::Cluster BuildOrFail(std::vector<core::NodeSpec> nodes) {
  auto cluster = core::Cluster::Build(std::move(nodes));
  if (!cluster) {
    ADD_FAILURE() << "PolicyHarness: " << cluster.error().message;
    return *core::Cluster::Build({});
  }
  return std::move(*cluster);
}

}  // namespace

PolicyHarness::PolicyHarness(std::vector<core::NodeSpec> nodes, std::uint64_t seed)
    : cluster_(BuildOrFail(std::move(nodes))), ledger_(cluster_), rng_(seed, "policy") {}

void PolicyHarness::Place(const std::string& key, const core::Request& request,
                          core::NodeIndex node, std::vector<int> gpus) {
  auto r = ledger_.Assign(key, request, core::Placement{node, std::move(gpus)});
  if (!r) ADD_FAILURE() << "PolicyHarness::Place(" << key << "): " << r.error().message;
}

core::NodeIndex PolicyHarness::NodeNamed(std::string_view name) const {
  const core::NodeIndex n = cluster_.FindNode(name);
  if (n < 0) ADD_FAILURE() << "PolicyHarness: no node " << name;
  return n;
}

std::int64_t PolicyHarness::Score(policy::Policy& policy, const core::Request& request,
                                  core::NodeIndex node, std::vector<core::NodeIndex> feasible) {
  const core::Request r = policy.Adapt(request);
  const core::ModelMask models = cluster_.MaskOf(r.gpu_models);
  const core::NodeView view = ledger_.Node(node);
  if (!core::NodeFits(view, r, models)) {
    ADD_FAILURE() << "PolicyHarness::Score: request does not fit node " << node;
    return -1;
  }
  policy::Cycle cycle{r, models, ledger_, rng_, feasible};
  policy.BeginCycle(cycle);
  return policy.Score(cycle, view);
}

std::vector<int> PolicyHarness::ChooseGpus(policy::Policy& policy, const core::Request& request,
                                           core::NodeIndex node,
                                           std::vector<core::NodeIndex> feasible) {
  const core::Request r = policy.Adapt(request);
  const core::ModelMask models = cluster_.MaskOf(r.gpu_models);
  const core::NodeView view = ledger_.Node(node);
  if (!core::NodeFits(view, r, models)) {
    ADD_FAILURE() << "PolicyHarness::ChooseGpus: request does not fit node " << node;
    return {};
  }
  policy::Cycle cycle{r, models, ledger_, rng_, feasible};
  policy.BeginCycle(cycle);
  return policy.ChooseGpus(cycle, view);
}

void ScriptedPolicy::BeginCycle(const policy::Cycle& cycle) {
  ++begin_calls_;
  last_feasible_.assign(cycle.feasible.begin(), cycle.feasible.end());
}

std::int64_t ScriptedPolicy::Score(const policy::Cycle& cycle, const core::NodeView& node) {
  ++score_calls_;
  scored_.push_back(node.index);
  return score_(cycle, node);
}

std::vector<int> ScriptedPolicy::ChooseGpus(const policy::Cycle& cycle,
                                            const core::NodeView& node) {
  return policy::LowestIndexGpus(cycle, node);
}

}  // namespace gpumux::test
