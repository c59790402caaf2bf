#include "gpumux/core/cluster.h"

#include <algorithm>
#include <string>

namespace gpumux::core {

Result<Cluster> Cluster::Build(std::vector<NodeSpec> nodes) {
  Cluster c;
  c.gpu_offset_.reserve(nodes.size() + 1);
  std::int32_t offset = 0;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const NodeSpec& n = nodes[i];
    if (n.name.empty()) {
      return MakeError(ErrorCode::kInvalidArgument, "node #" + std::to_string(i) + " has no name");
    }
    if (n.cpu_milli < 0 || n.memory_mib < 0 || n.max_pods < 0) {
      return MakeError(ErrorCode::kInvalidArgument,
                       "node " + n.name + ": negative cpu, memory or pod capacity");
    }
    if (n.cpu_milli > kMaxNodeCpuMilli) {
      return MakeError(ErrorCode::kInvalidArgument,
                       "node " + n.name + ": " + std::to_string(n.cpu_milli) +
                           " milli-CPU, more than the " + std::to_string(kMaxNodeCpuMilli) +
                           " a node may have");
    }
    if (n.gpus.size() > static_cast<std::size_t>(kMaxGpusPerNode)) {
      return MakeError(ErrorCode::kInvalidArgument,
                       "node " + n.name + " has " + std::to_string(n.gpus.size()) +
                           " GPUs, more than the " + std::to_string(kMaxGpusPerNode) +
                           " a node may have");
    }
    if (!c.by_name_.emplace(n.name, static_cast<NodeIndex>(i)).second) {
      return MakeError(ErrorCode::kAlreadyExists, "node " + n.name + " appears twice");
    }
    c.gpu_offset_.push_back(offset);
    for (std::size_t g = 0; g < n.gpus.size(); ++g) {
      const GpuSpec& gpu = n.gpus[g];
      if (gpu.index != static_cast<int>(g)) {
        return MakeError(ErrorCode::kInvalidArgument,
                         "node " + n.name + ": GPU #" + std::to_string(g) + " has index " +
                             std::to_string(gpu.index) + " (GPUs must be listed 0..n-1)");
      }
      if (gpu.memory_mib < 0) {
        return MakeError(ErrorCode::kInvalidArgument,
                         "node " + n.name + ": GPU " + std::to_string(g) + " has negative memory");
      }
      if (gpu.memory_mib > kMaxGpuMemoryMib) {
        return MakeError(ErrorCode::kInvalidArgument,
                         "node " + n.name + ": GPU " + std::to_string(g) + " has " +
                             std::to_string(gpu.memory_mib) + " MiB, more than the " +
                             std::to_string(kMaxGpuMemoryMib) + " a GPU may have");
      }
      auto it = std::find(c.models_.begin(), c.models_.end(), gpu.model);
      if (it == c.models_.end()) {
        if (c.models_.size() == kMaxModels) {
          return MakeError(ErrorCode::kInvalidArgument,
                           "more than " + std::to_string(kMaxModels) + " distinct GPU models");
        }
        c.models_.push_back(gpu.model);
        it = c.models_.end() - 1;
      }
      c.gpu_model_.push_back(static_cast<ModelId>(it - c.models_.begin()));
      ++offset;
    }
    if (__builtin_add_overflow(c.total_cpu_milli_, n.cpu_milli, &c.total_cpu_milli_)) {
      // Only past 2^23 nodes at the per-node limit.
      return MakeError(ErrorCode::kInvalidArgument,
                       "node " + n.name + ": the cluster's total CPU exceeds int64");
    }
  }
  c.gpu_offset_.push_back(offset);
  c.total_gpus_ = offset;
  c.nodes_ = std::move(nodes);
  return c;
}

NodeIndex Cluster::FindNode(std::string_view name) const {
  auto it = by_name_.find(std::string(name));
  return it == by_name_.end() ? -1 : it->second;
}

ModelMask Cluster::MaskOf(std::span<const std::string> model_names) const {
  if (model_names.empty()) return kAnyModel;
  ModelMask mask = 0;
  for (const std::string& name : model_names) {
    for (std::size_t m = 0; m < models_.size(); ++m) {
      if (models_[m] == name) mask |= ModelMask{1} << m;
    }
  }
  return mask;
}

}  // namespace gpumux::core
