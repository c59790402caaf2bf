// `gpu-packing`: fill partly used GPUs first, then used nodes, then small empty nodes
// (the FGD study's GpuPacking baseline). Integer arithmetic. CPU-only requests score 0.
// With f = fully free GPUs on the node and G its GPU count:
//   1. f == G (all GPUs free):                  score = max(33 - f, f)
//   2. walk GPUs by ascending free milli (stable), take the first k admitting ones; if any taken
//      GPU is fully free:                        score = max(50 - (fully free GPUs taken), 33)
//   3. otherwise (only partly used GPUs taken):  score = max(100 - floor(sum_taken
//   floor(g*100/1000) / 10), 50)
// GPUs: best fit (BestFitGpus).
//
// Worked example: node GPUs free {1000, 500}. Request 300 milli: the walk meets GPU 1 (500)
// first, not fully free -> step 3: 100 - floor(floor(500*100/1000)/10) = 100 - 5 = 95.
// Request 600 milli: GPU 1 is too small, GPU 0 (fully free) is taken -> step 2: max(49, 33) = 49.
// An empty 8-GPU node scores max(25, 8) = 25, an empty 2-GPU node max(31, 2) = 31.
#pragma once

#include "gpumux/policy/policy.h"

namespace gpumux::policy {

class GpuPackingPolicy final : public BestFitGpuPolicy {
 public:
  std::string_view name() const override { return "gpu-packing"; }
  std::int64_t Score(const Cycle& cycle, const core::NodeView& node) override;
};

}  // namespace gpumux::policy
