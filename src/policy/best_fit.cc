#include "gpumux/policy/best_fit.h"

#include <cmath>

#include "gpumux/policy/study_constants.h"

namespace gpumux::policy {

std::int64_t BestFitPolicy::Score(const Cycle& cycle, const core::NodeView& node) {
  const core::Request& r = cycle.request;
  const double cpu_left =
      static_cast<double>(node.cpu_free - r.cpu_milli) / static_cast<double>(kStudyCpuMax);
  const double gpu_left = static_cast<double>(node.gpu_free_milli_total() - r.total_gpu_milli()) /
                          static_cast<double>(kStudyGpuMax);
  return static_cast<std::int64_t>(std::floor(100.0 * (1.0 - (0.5 * cpu_left + 0.5 * gpu_left))));
}

}  // namespace gpumux::policy
