#include "gpumux/policy/random_policy.h"

namespace gpumux::policy {

void RandomPolicy::BeginCycle(const Cycle& cycle) {
  chosen_ = cycle.feasible.empty()
                ? -1
                : cycle.feasible[static_cast<std::size_t>(cycle.rng.Below(cycle.feasible.size()))];
}

std::int64_t RandomPolicy::Score(const Cycle& /*cycle*/, const core::NodeView& node) {
  return node.index == chosen_ ? 100 : 0;
}

}  // namespace gpumux::policy
