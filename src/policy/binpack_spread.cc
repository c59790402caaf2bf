#include "gpumux/policy/binpack_spread.h"

#include <algorithm>
#include <cmath>

#include "gpumux/core/check.h"

namespace gpumux::policy {
namespace {

enum class Prefer : std::uint8_t { kLeastFree, kMostFree };

std::vector<int> ByFreeShare(const Cycle& cycle, const core::NodeView& node, Prefer prefer) {
  struct Candidate {
    double free_share;
    int index;
  };
  std::vector<Candidate> admitting;
  for (int i = 0; i < node.gpu_count(); ++i) {
    if (!core::GpuAdmits(node, i, cycle.request, cycle.models)) continue;
    const auto g = static_cast<std::size_t>(i);
    const core::MiB size = node.spec->gpus[g].memory_mib;
    double share = static_cast<double>(node.gpu_free_milli[g]) / 1000.0;
    if (size > 0) share += static_cast<double>(node.gpu_free_mib[g]) / static_cast<double>(size);
    admitting.push_back({share, i});
  }
  const auto k = static_cast<std::size_t>(cycle.request.gpu_count);
  GPUMUX_CHECK(admitting.size() >= k, "node does not fit");
  std::stable_sort(admitting.begin(), admitting.end(), [&](const Candidate& a, const Candidate& b) {
    return prefer == Prefer::kLeastFree ? a.free_share < b.free_share : a.free_share > b.free_share;
  });
  std::vector<int> out;
  for (std::size_t i = 0; i < k; ++i) out.push_back(admitting[i].index);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

std::int64_t GpuLoadAfter(const Cycle& cycle, const core::NodeView& node) {
  const core::Request& r = cycle.request;
  core::MilliGpu total_milli = 0, free_milli = 0;
  core::MiB total_mib = 0, free_mib = 0;
  for (int i = 0; i < node.gpu_count(); ++i) {
    const auto g = static_cast<std::size_t>(i);
    if (node.spec->gpus[g].health != core::GpuHealth::kHealthy) continue;
    total_milli += core::kMilliPerGpu;
    free_milli += node.gpu_free_milli[g];
    total_mib += node.spec->gpus[g].memory_mib;
    free_mib += node.gpu_free_mib[g];
  }
  if (total_milli == 0) return 0;  // CPU-only request on a node without GPUs
  const double milli_used = static_cast<double>(total_milli - free_milli + r.total_gpu_milli()) /
                            static_cast<double>(total_milli);
  if (total_mib == 0) return static_cast<std::int64_t>(std::floor(1000.0 * milli_used));
  const double mib_used = static_cast<double>(total_mib - free_mib + r.gpu_mib * r.gpu_count) /
                          static_cast<double>(total_mib);
  return static_cast<std::int64_t>(std::floor(500.0 * milli_used + 500.0 * mib_used));
}

std::int64_t BinpackPolicy::Score(const Cycle& cycle, const core::NodeView& node) {
  return GpuLoadAfter(cycle, node);
}

std::vector<int> BinpackPolicy::ChooseGpus(const Cycle& cycle, const core::NodeView& node) {
  return ByFreeShare(cycle, node, Prefer::kLeastFree);
}

std::int64_t SpreadPolicy::Score(const Cycle& cycle, const core::NodeView& node) {
  return 1000 - GpuLoadAfter(cycle, node);
}

std::vector<int> SpreadPolicy::ChooseGpus(const Cycle& cycle, const core::NodeView& node) {
  return ByFreeShare(cycle, node, Prefer::kMostFree);
}

}  // namespace gpumux::policy
