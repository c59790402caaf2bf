// `exclusive`: whole GPUs only, the stock Kubernetes behaviour with `nvidia.com/gpu`.
// Adapt() makes every GPU request exclusive: a pod asking 300 milli still gets a whole GPU that
// nobody else may share (the ledger counts the 300 milli it asked as used and the GPU as taken).
// Nodes are scored like kube-scheduler's default NodeResourcesFit "LeastAllocated" on CPU and
// memory, in integer arithmetic:
//   score = ( (c_n - c_P)*100/C + (m_n - m_P)*100/M ) / 2     (C, M: node capacities)
// GPUs: the lowest-indexed idle GPUs (LowestIndexGpus).
//
// Worked example: node 32 cores / 64 GiB, all free; request 8 cores, 16 GiB:
// cpu term 24000*100/32000 = 75, memory term 49152*100/65536 = 75, score = 75.
#pragma once

#include "gpumux/policy/policy.h"

namespace gpumux::policy {

class ExclusivePolicy final : public Policy {
 public:
  std::string_view name() const override { return "exclusive"; }
  core::Request Adapt(const core::Request& request) const override;
  std::int64_t Score(const Cycle& cycle, const core::NodeView& node) override;
  std::vector<int> ChooseGpus(const Cycle& cycle, const core::NodeView& node) override {
    return LowestIndexGpus(cycle, node);
  }
};

}  // namespace gpumux::policy
