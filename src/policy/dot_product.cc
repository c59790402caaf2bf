#include "gpumux/policy/dot_product.h"

#include <cmath>

#include "gpumux/policy/study_constants.h"

namespace gpumux::policy {

std::int64_t DotProductPolicy::Score(const Cycle& cycle, const core::NodeView& node) {
  const core::Request& r = cycle.request;
  if (node.cpu_free < r.cpu_milli) return 0;
  const auto cpu_max = static_cast<double>(kStudyCpuMax);
  const auto gpu_max = static_cast<double>(kStudyGpuMax);
  const double dot = (static_cast<double>(node.cpu_free) / cpu_max) *
                         (static_cast<double>(r.cpu_milli) / cpu_max) +
                     (static_cast<double>(node.gpu_free_milli_total()) / gpu_max) *
                         (static_cast<double>(r.total_gpu_milli()) / gpu_max);
  return static_cast<std::int64_t>(std::floor(100.0 * (1.0 - dot / 2.0)));
}

}  // namespace gpumux::policy
