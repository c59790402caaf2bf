// What one pod or job asks for.
#pragma once

#include <string>
#include <vector>

#include "gpumux/core/quantity.h"
#include "gpumux/core/result.h"

namespace gpumux::core {

enum class GpuSharing : std::uint8_t {
  kShared,     // other tenants may use the same GPU, within its capacity
  kExclusive,  // the tenant is alone on each of its GPUs
};

struct Request {
  std::string name;  // for messages; the ledger keys tenants separately
  MilliCpu cpu_milli = 0;
  MiB memory_mib = 0;
  int gpu_count = 0;       // number of GPUs; 0 = CPU-only
  MilliGpu gpu_milli = 0;  // compute per GPU, 1..1000 when gpu_count > 0
  MiB gpu_mib = 0;         // GPU memory per GPU, 0 = no memory request
  GpuSharing sharing = GpuSharing::kShared;
  std::vector<std::string> gpu_models;  // acceptable GPU models; empty = any
  std::string workload_class;           // e.g. "resnet50"; used by interference models
  // The pod has waited past the limit its adapter sets (the extender's
  // --reserve-max-wait-seconds): a policy that holds pods back (fgd-sat-reserve) places it
  // wherever it fits instead.
  bool overdue = false;
  // A shared request goes only to GPUs whose `enforces` has every one of these bits
  // (cluster.h); exclusive requests ignore it (a whole GPU needs no limit against co-tenants).
  std::uint8_t required_enforcement = 0;

  bool wants_gpu() const { return gpu_count > 0; }
  MilliGpu total_gpu_milli() const { return gpu_milli * gpu_count; }
  // Checks ranges: non-negative amounts, gpu_milli in 1..1000 when gpu_count > 0, and no
  // GPU amounts when gpu_count == 0.
  Result<void> Validate() const;
};

}  // namespace gpumux::core
