// The cluster model: nodes with CPU, memory, labels and GPUs. Immutable once built;
// what is in use lives in the Ledger.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gpumux/core/quantity.h"
#include "gpumux/core/result.h"

namespace gpumux::core {

using NodeIndex = std::int32_t;
using ModelId = std::uint8_t;
// A set of GPU models as a bit mask over a Cluster's model ids (at most kMaxModels models).
using ModelMask = std::uint64_t;
inline constexpr int kMaxModels = 64;
inline constexpr ModelMask kAnyModel = ~ModelMask{0};

// Limits on one node, checked by Cluster::Build (and by every adapter that decodes nodes, so
// that it can name the offending field). They keep per-node scratch arrays fixed-size (the
// policies keep one slot per GPU of a node) and cluster-wide sums of int64 quantities exact.
inline constexpr int kMaxGpusPerNode = 64;
inline constexpr MilliCpu kMaxNodeCpuMilli = std::int64_t{1} << 40;  // about 1.1 billion cores
inline constexpr MiB kMaxGpuMemoryMib = std::int64_t{1} << 32;       // 4 PiB on one GPU

enum class GpuHealth : std::uint8_t { kHealthy, kUnhealthy };

// What a GPU's node holds a sharing tenant to, as bits: kEnforcesMemory when a container cannot
// allocate more GPU memory than its grant (a hard limit it cannot lift from inside), and
// kEnforcesCompute when its compute is limited to its own grant. Set by adapters from what the
// node reports (the device plugin's gpumux.io/gpus); the simulator's GPUs enforce nothing and
// its requests require nothing, so it is unaffected.
using Enforcement = std::uint8_t;
inline constexpr Enforcement kEnforcesNothing = 0;
inline constexpr Enforcement kEnforcesMemory = 1;
inline constexpr Enforcement kEnforcesCompute = 2;

struct GpuSpec {
  int index = 0;      // position on its node, 0-based (nvidia-smi index)
  std::string uuid;   // e.g. "GPU-6f1c..."; may be synthetic in simulation
  std::string model;  // e.g. "T4", "V100M32", "NVIDIA H100 80GB HBM3"
  MiB memory_mib = 0;
  GpuHealth health = GpuHealth::kHealthy;
  Enforcement enforces = kEnforcesNothing;
};

struct NodeSpec {
  std::string name;
  MilliCpu cpu_milli = 0;  // allocatable CPU
  MiB memory_mib = 0;      // allocatable host memory
  int max_pods = 110;      // Kubernetes' default; the FGD study uses 1001
  std::map<std::string, std::string> labels;
  std::vector<GpuSpec> gpus;
};

// An immutable set of nodes with GPU models interned to small ids.
// Thread safety: const after Build(); safe to share between threads.
class Cluster {
 public:
  // Validates the nodes (unique names, non-negative capacities within the per-node limits
  // above, GPU indices 0..n-1 in order, at most kMaxModels distinct GPU models) and interns GPU
  // models. The error names the node and what is wrong.
  static Result<Cluster> Build(std::vector<NodeSpec> nodes);

  std::span<const NodeSpec> nodes() const { return nodes_; }
  const NodeSpec& node(NodeIndex i) const { return nodes_[static_cast<std::size_t>(i)]; }
  NodeIndex size() const { return static_cast<NodeIndex>(nodes_.size()); }
  // -1 when absent. O(1) average.
  NodeIndex FindNode(std::string_view name) const;

  std::span<const std::string> models() const { return models_; }
  // Model id of GPU `gpu` on node `node`.
  ModelId GpuModel(NodeIndex node, int gpu) const {
    return gpu_model_[static_cast<std::size_t>(gpu_offset_[static_cast<std::size_t>(node)] + gpu)];
  }
  // Model ids of all GPUs of a node, in index order.
  std::span<const ModelId> GpuModels(NodeIndex node) const {
    const auto n = static_cast<std::size_t>(node);
    return std::span<const ModelId>(gpu_model_)
        .subspan(static_cast<std::size_t>(gpu_offset_[n]),
                 static_cast<std::size_t>(gpu_offset_[n + 1] - gpu_offset_[n]));
  }
  // Mask of acceptable models for a list of model names; empty list = any model.
  // Names that no GPU of the cluster has contribute nothing (so a request naming only
  // unknown models fits nowhere, as in Kubernetes).
  ModelMask MaskOf(std::span<const std::string> model_names) const;

  std::int64_t total_gpus() const { return total_gpus_; }
  MilliGpu total_gpu_milli() const { return total_gpus_ * kMilliPerGpu; }
  MilliCpu total_cpu_milli() const { return total_cpu_milli_; }
  // Offset of node i's first GPU in a cluster-wide flat GPU array.
  std::int32_t gpu_offset(NodeIndex i) const { return gpu_offset_[static_cast<std::size_t>(i)]; }

 private:
  std::vector<NodeSpec> nodes_;
  std::unordered_map<std::string, NodeIndex> by_name_;
  std::vector<std::string> models_;
  std::vector<ModelId> gpu_model_;        // flat, per GPU
  std::vector<std::int32_t> gpu_offset_;  // per node, size()+1 entries
  std::int64_t total_gpus_ = 0;
  MilliCpu total_cpu_milli_ = 0;
};

}  // namespace gpumux::core
