#include "gpumux/policy/gpu_clustering.h"

#include "gpumux/policy/study_constants.h"

namespace gpumux::policy {
namespace {

// 0 = no tag (CPU-only); -1 = share-gpu; k = k whole GPUs.
int Tag(const core::Request& r) {
  if (!r.wants_gpu()) return 0;
  if (r.gpu_count == 1 && r.gpu_milli < core::kMilliPerGpu) return -1;
  return r.gpu_count;
}

}  // namespace

std::int64_t GpuClusteringPolicy::Score(const Cycle& cycle, const core::NodeView& node) {
  const int tag = Tag(cycle.request);
  if (tag == 0) return 0;
  const std::int64_t base = 25 * (kStudyGpuMax - node.gpu_free_milli_total()) / kStudyGpuMax;
  bool has_own = false;
  bool has_other = false;
  for (core::TenantIndex t : node.tenants) {
    const int other = Tag(cycle.ledger.tenant(t).request);
    if (other == 0) continue;
    (other == tag ? has_own : has_other) = true;
  }
  if (has_own && !has_other) return base + 75;
  if (has_own) return base + 50;
  if (!has_other) return base + 25;
  return base;
}

}  // namespace gpumux::policy
