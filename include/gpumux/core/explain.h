// Why a request does not fit on a node, in words for humans (the scheduler extender's filter
// reasons end up in the pod's FailedScheduling event). Mirrors core::NodeFits / GpuAdmits
// rule by rule, and names the GPU that came closest and by how much.
//
// Example: a request for 8192 MiB and 250 milli-GPU on a node whose GPUs all have 6144 MiB
// free gives "needs 1 GPU with 8192 MiB and 250 milli-GPU free; closest is GPU 0
// (6144 MiB, 1000 milli free): 2048 MiB short".
#pragma once

#include <string>

#include "gpumux/core/ledger.h"

namespace gpumux::core {

struct Misfit {
  // False when no eviction could ever make room (too few GPUs of an acceptable model, a GPU
  // too small, unhealthy GPUs): kube-scheduler then does not try preemption on the node.
  bool resolvable = true;
  std::string reason;
};

// Call only when NodeFits(node, request, models) is false. O(GPUs on the node).
Misfit ExplainMisfit(const NodeView& node, const Request& request, ModelMask models);

}  // namespace gpumux::core
