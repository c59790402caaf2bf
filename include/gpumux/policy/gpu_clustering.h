// `gpu-clustering`: keep GPU requests of the same kind together (the FGD study's GpuClustering
// baseline). A request's tag is `share-gpu` (1 GPU, < 1000 milli) or `<k>-gpu` (k whole GPUs);
// CPU-only requests have none and score 0. A node's tags are those of the GPU tenants on it.
//   base  = floor(25 * (8000 - R) / 8000)          (integer arithmetic, R = free milli-GPU)
//   score = base + 75  if the node's only tag is the request's
//           base + 50  if the node has several tags including the request's
//           base + 25  if the node has no tag (no GPU tenant yet)
//           base + 0   if the node has only other tags
// GPUs: best fit (BestFitGpus).
//
// Worked example: node with GPUs free {1000, 500} (R = 1500) holding one 500-milli tenant
// (tag share-gpu). A 300-milli request: base = floor(25*6500/8000) = 20, score = 95.
// A 1-GPU whole request on the same node: 20 + 0 = 20.
#pragma once

#include "gpumux/policy/policy.h"

namespace gpumux::policy {

class GpuClusteringPolicy final : public BestFitGpuPolicy {
 public:
  std::string_view name() const override { return "gpu-clustering"; }
  std::int64_t Score(const Cycle& cycle, const core::NodeView& node) override;
};

}  // namespace gpumux::policy
