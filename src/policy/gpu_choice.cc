#include <algorithm>
#include <numeric>

#include "gpumux/core/check.h"
#include "gpumux/policy/policy.h"

namespace gpumux::policy {

std::vector<int> LowestIndexGpus(const Cycle& cycle, const core::NodeView& node) {
  std::vector<int> out;
  for (int i = 0; i < node.gpu_count() && static_cast<int>(out.size()) < cycle.request.gpu_count;
       ++i) {
    if (core::GpuAdmits(node, i, cycle.request, cycle.models)) out.push_back(i);
  }
  GPUMUX_CHECK(static_cast<int>(out.size()) == cycle.request.gpu_count, "node does not fit");
  return out;
}

std::vector<int> BestFitGpus(const Cycle& cycle, const core::NodeView& node) {
  const core::Request& r = cycle.request;
  if (r.gpu_count != 1 || r.gpu_milli >= core::kMilliPerGpu ||
      r.sharing == core::GpuSharing::kExclusive) {
    return LowestIndexGpus(cycle, node);
  }
  int best = -1;
  for (int i = 0; i < node.gpu_count(); ++i) {
    if (!core::GpuAdmits(node, i, r, cycle.models)) continue;
    if (best < 0 || node.gpu_free_milli[static_cast<std::size_t>(i)] <
                        node.gpu_free_milli[static_cast<std::size_t>(best)]) {
      best = i;
    }
  }
  GPUMUX_CHECK(best >= 0, "node does not fit");
  return {best};
}

std::vector<int> RandomFitGpus(const Cycle& cycle, const core::NodeView& node) {
  std::vector<int> admitting;
  for (int i = 0; i < node.gpu_count(); ++i) {
    if (core::GpuAdmits(node, i, cycle.request, cycle.models)) admitting.push_back(i);
  }
  const auto k = static_cast<std::size_t>(cycle.request.gpu_count);
  GPUMUX_CHECK(admitting.size() >= k, "node does not fit");
  if (k == 1) {
    // Reservoir sampling in index order, as the study's random-fit GPU choice does.
    int chosen = -1;
    for (std::size_t seen = 0; seen < admitting.size(); ++seen) {
      if (cycle.rng.Below(seen + 1) == 0) chosen = admitting[seen];
    }
    return {chosen};
  }
  // Partial Fisher-Yates: a uniform k-subset.
  for (std::size_t i = 0; i < k; ++i) {
    const std::size_t j = i + static_cast<std::size_t>(cycle.rng.Below(admitting.size() - i));
    std::swap(admitting[i], admitting[j]);
  }
  admitting.resize(k);
  std::sort(admitting.begin(), admitting.end());
  return admitting;
}

}  // namespace gpumux::policy
