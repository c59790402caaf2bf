#include "gpumux/policy/gpu_packing.h"

#include <algorithm>
#include <numeric>

namespace gpumux::policy {

std::int64_t GpuPackingPolicy::Score(const Cycle& cycle, const core::NodeView& node) {
  const core::Request& r = cycle.request;
  if (!r.wants_gpu()) return 0;
  const int gpus = node.gpu_count();
  std::int64_t fully_free = 0;
  for (int i = 0; i < gpus; ++i) fully_free += node.GpuIsIdle(i) ? 1 : 0;
  if (fully_free == gpus) return std::max<std::int64_t>(33 - fully_free, fully_free);

  std::vector<int> order(static_cast<std::size_t>(gpus));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return node.gpu_free_milli[static_cast<std::size_t>(a)] <
           node.gpu_free_milli[static_cast<std::size_t>(b)];
  });
  int taken = 0;
  std::int64_t taken_idle = 0;
  std::int64_t taken_free_pct = 0;
  for (int i : order) {
    if (taken == r.gpu_count) break;
    if (!core::GpuAdmits(node, i, r, cycle.models)) continue;
    ++taken;
    if (node.GpuIsIdle(i)) ++taken_idle;
    taken_free_pct += node.gpu_free_milli[static_cast<std::size_t>(i)] * 100 / core::kMilliPerGpu;
  }
  if (taken_idle > 0) return std::max<std::int64_t>(50 - taken_idle, 33);
  return std::max<std::int64_t>(100 - taken_free_pct / 10, 50);
}

}  // namespace gpumux::policy
