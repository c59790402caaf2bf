#include "gpumux/policy/iadeep.h"

#include <algorithm>

namespace gpumux::policy {

std::optional<double> IadeepPolicy::GpuScore(const Cycle& /*cycle*/, const GpuGroup& group,
                                             const Member& newcomer) {
  if (group.members.empty()) return 2.0;  // an idle GPU first
  if (group.tuning) return std::nullopt;  // locked while tuning
  double busy = 0;
  for (const Member& m : group.members) busy += m.cls != nullptr ? m.cls->GpuBusy(m.batch) : 1.0;
  if (std::min(busy, 1.0) >= 0.99) return std::nullopt;
  std::vector<Member> set = group.members;
  set.push_back(newcomer);
  std::vector<double> slowdown(set.size());
  model().Predict(set, slowdown);
  double interference = 0;
  for (double s : slowdown) interference += s - 1.0;
  return -interference;
}

}  // namespace gpumux::policy
