// `binpack` and `spread`: the two plain load-based policies of cluster schedulers (Kubernetes'
// MostAllocated / LeastAllocated, HAMi's node policies), on GPU compute and GPU memory.
//
//   load(node) = 500 * used_milli' / total_milli + 500 * used_mib' / total_mib   (0..1000)
// where ' means after placing the request, and totals are over the node's healthy GPUs
// (a node whose GPUs have no memory size counts compute only, scaled to 1000).
// binpack scores load (fill busy nodes first, keep whole nodes free for big jobs);
// spread scores 1000 - load (least loaded node first, for headroom and fewer co-tenants).
// GPUs: binpack takes the admitting GPUs with the least free share, spread the most, where a
// GPU's free share is free_milli/1000 + free_mib/memory_mib; ties: lowest index.
//
// Worked example: a node of 2 GPUs x 10000 MiB, GPU 0 holding a tenant of 500 milli and
// 5000 MiB; request 250 milli and 2000 MiB. used' = 750 of 2000 milli and 7000 of 20000 MiB:
// load = 500*0.375 + 500*0.35 = 187.5 + 175 = 362 (floored). binpack scores 362 and takes
// GPU 0 (free share 0.5+0.5 = 1.0 < 2.0); spread scores 638 and takes GPU 1.
#pragma once

#include "gpumux/policy/policy.h"

namespace gpumux::policy {

// The node's GPU load after placing cycle.request, 0..1000 (see above).
std::int64_t GpuLoadAfter(const Cycle& cycle, const core::NodeView& node);

class BinpackPolicy final : public Policy {
 public:
  std::string_view name() const override { return "binpack"; }
  std::int64_t Score(const Cycle& cycle, const core::NodeView& node) override;
  std::vector<int> ChooseGpus(const Cycle& cycle, const core::NodeView& node) override;
};

class SpreadPolicy final : public Policy {
 public:
  std::string_view name() const override { return "spread"; }
  std::int64_t Score(const Cycle& cycle, const core::NodeView& node) override;
  std::vector<int> ChooseGpus(const Cycle& cycle, const core::NodeView& node) override;
};

}  // namespace gpumux::policy
