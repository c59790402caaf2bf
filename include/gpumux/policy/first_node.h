// `first-node`: First-Fit over nodes, the bin-packing baseline. The request goes to the first
// node in rank order that fits it (the engine's tie-break: every feasible node scores the same),
// on the lowest-indexed GPUs that admit it. It looks at nothing else, so it is the cheapest
// policy there is and the floor any packing policy should beat.
//
// It is also the example of how a policy is added (docs/ARCHITECTURE.md, "Described once"):
// this header and first_node.cc, one entry in BuiltinPolicies() (registry.cc), its test
// (tests/policy/first_node_test.cc; the contract suite takes every registered policy by
// itself), and its rows in the golden output of `--policy all`. It stays out of the default
// comparison (PolicyEntry::compared), so the README's tables do not change.
//
// Worked example: nodes a, b, c in rank order, a full, b and c with room: b (score 0 like c, and
// b's rank is smaller); a 300-milli share there takes GPU 0 if GPU 0 admits it.
// Cost: O(1) per node; pure (memoised by the engine).
#pragma once

#include "gpumux/policy/policy.h"

namespace gpumux::policy {

class FirstNodePolicy final : public Policy {
 public:
  std::string_view name() const override { return "first-node"; }
  std::int64_t Score(const Cycle& /*cycle*/, const core::NodeView& /*node*/) override { return 0; }
  std::vector<int> ChooseGpus(const Cycle& cycle, const core::NodeView& node) override {
    return LowestIndexGpus(cycle, node);
  }
};

}  // namespace gpumux::policy
