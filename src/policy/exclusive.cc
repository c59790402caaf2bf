#include "gpumux/policy/exclusive.h"

namespace gpumux::policy {

core::Request ExclusivePolicy::Adapt(const core::Request& request) const {
  core::Request r = request;
  if (r.wants_gpu()) r.sharing = core::GpuSharing::kExclusive;
  return r;
}

std::int64_t ExclusivePolicy::Score(const Cycle& cycle, const core::NodeView& node) {
  const core::Request& r = cycle.request;
  const core::MilliCpu cpu_cap = node.spec->cpu_milli;
  const core::MiB mem_cap = node.spec->memory_mib;
  const std::int64_t cpu = cpu_cap > 0 ? (node.cpu_free - r.cpu_milli) * 100 / cpu_cap : 0;
  const std::int64_t mem = mem_cap > 0 ? (node.memory_free - r.memory_mib) * 100 / mem_cap : 0;
  return (cpu + mem) / 2;
}

}  // namespace gpumux::policy
