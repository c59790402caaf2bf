// Kubernetes objects as the extender sees them: the names gpumux uses on the wire, and the
// decoding of pods and nodes (JSON from the API server or from kube-scheduler) into the core's
// requests and node specs. Pure functions; no I/O.
//
// Resources (container `limits`, copied into `requests` by the API server):
//   gpumux.io/gpu: N          N whole GPUs, exclusive (like nvidia.com/gpu)
//   gpumux.io/gpu-mem: M      M units of GPU memory on one shared GPU (per GPU with gpu: N);
//                             a unit is gpu_mem_unit_mib MiB (the device plugin advertises
//                             gpu-mem as devices of one unit each, so the kubelet counts units)
//   gpumux.io/gpu-milli: K    K thousandths (1..1000) of one GPU's compute (per GPU with gpu: N)
// gpu-mem without gpu-milli reserves memory only: compute is time-sliced and unguarded (the
// ledger books 1 milli-GPU so that the tenant is counted on the GPU). With gpu: N plus a share,
// the container gets N different GPUs, each shared with that share.
// Pod annotations read: gpumux.io/gpu-model (comma-separated acceptable GPU models),
// gpumux.io/workload-class (for interference-aware policies).
// Node annotation read: gpumux.io/gpus, the node's GPUs as published by the device plugin:
//   [{"index":0,"uuid":"GPU-...","model":"NVIDIA H100 80GB HBM3","memory_mib":81559,
//     "health":"Healthy","enforcement":{...}}, ...]
// ("enforcement": what the node holds a GPU's sharing tenants to, enforcement.h; it sets the
// GPU's core::GpuSpec::enforces.) Pod annotation gpumux.io/require-enforcement (enforcement.h)
// sets every container request's required_enforcement.
// (at most core::kMaxGpusPerNode entries, each with at most core::kMaxGpuMemoryMib)
// A node without it has status.allocatable["gpumux.io/gpu"] GPUs of the configured default
// model and memory (NodeDefaults), with no UUIDs.
// Node annotation gpumux.io/gpu-mem-unit-mib: "1024", the unit in which the node's device
// plugin counts gpumux.io/gpu-mem (a positive decimal integer; absent: not published).
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gpumux/core/cluster.h"
#include "gpumux/core/request.h"
#include "gpumux/core/result.h"
#include "gpumux/kube/enforcement.h"
#include "gpumux/kube/grant.h"

namespace gpumux::kube {

inline constexpr std::string_view kResourceGpu = "gpumux.io/gpu";
inline constexpr std::string_view kResourceGpuMem = "gpumux.io/gpu-mem";
inline constexpr std::string_view kResourceGpuMilli = "gpumux.io/gpu-milli";
inline constexpr std::string_view kAnnotationGpus = "gpumux.io/gpus";
inline constexpr std::string_view kAnnotationGpuModel = "gpumux.io/gpu-model";
inline constexpr std::string_view kAnnotationWorkloadClass = "gpumux.io/workload-class";
inline constexpr std::string_view kAnnotationGpuMemUnit = "gpumux.io/gpu-mem-unit-mib";

// The unit of gpumux.io/gpu-mem that the daemons use unless told otherwise: 1 GiB. The kubelet
// counts a device-plugin resource as devices, so in MiB an 8 x 80 GiB node would advertise
// 655,360 devices (over gRPC's 4 MB message limit); in GiB, 640. The library default of
// DecodePod and ClusterStateOptions stays 1 (MiB).
inline constexpr std::int64_t kDefaultGpuMemUnitMib = 1024;
// The largest unit accepted (1 TiB).
inline constexpr std::int64_t kMaxGpuMemUnitMib = std::int64_t{1} << 20;

// One container's GPU request. `request` has no CPU or memory: kube-scheduler accounts those.
struct ContainerRequest {
  std::string container;
  core::Request request;
  bool milli_requested = false;  // gpu-milli was given (else compute is unguarded)
};

struct PodInfo {
  std::string uid, ns, name;
  std::string node_name;                     // spec.nodeName; empty while pending
  std::string phase;                         // status.phase
  bool deleting = false;                     // metadata.deletionTimestamp is set
  std::int64_t created_unix_s = 0;           // metadata.creationTimestamp; 0 = absent/unreadable
  std::vector<ContainerRequest> containers;  // only containers asking for gpumux resources
  std::optional<Grant> grant;                // decoded gpumux.io/grant
  std::string grant_error;    // the annotation is present but unreadable (named field)
  std::string request_error;  // a gpumux resource value is malformed (pod cannot be placed)

  bool wants_gpu() const { return !containers.empty() || !request_error.empty(); }
  // Succeeded/Failed: its GPUs are free again.
  bool finished() const { return phase == "Succeeded" || phase == "Failed"; }
  std::string Key() const { return ns + "/" + name; }
};

// The gpumux amounts one container asks for: from `limits`, else `requests` (as the kubelet
// counts them). gpu-mem is read in units of `gpu_mem_unit_mib` MiB and returned in MiB, so with
// 1 it is the raw count. Error names `where`, the section and the resource.
struct ContainerAmounts {
  std::int64_t gpu = 0, mem = 0, milli = 0;
  bool any = false;  // some gpumux resource is named (maybe with 0)
};
core::Result<ContainerAmounts> ReadContainerAmounts(const nlohmann::json& container,
                                                    const std::string& where,
                                                    std::int64_t gpu_mem_unit_mib = 1);

// Errors only when the object is not a pod at all (no metadata.name/namespace/uid) or when
// gpu_mem_unit_mib is not in 1..kMaxGpuMemUnitMib; a bad resource value or grant is recorded in
// request_error / grant_error. gpumux.io/gpu-mem: N becomes N x gpu_mem_unit_mib MiB in the
// request (a product beyond int64 is a request_error).
core::Result<PodInfo> DecodePod(const nlohmann::json& pod, std::int64_t gpu_mem_unit_mib = 1);

struct NodeDefaults {
  std::string gpu_model = "unknown";
  core::MiB gpu_memory_mib = 0;  // 0: such nodes can take whole-GPU requests only
};

struct NodeInfo {
  core::NodeSpec spec;
  bool unschedulable = false;
  bool gpus_from_annotation = false;
  std::string gpus_error;  // the annotation is present but malformed: the node gets no GPUs
  // Per GPU (index order) what the node enforces on it, from gpumux.io/gpus (enforcement.h);
  // empty when the GPUs do not come from the annotation (they then enforce nothing).
  std::vector<GpuEnforcement> enforcement;
  // gpumux.io/gpu-mem-unit-mib as published by the node's device plugin; 0: not published.
  std::int64_t gpu_mem_unit_mib = 0;
  std::string gpu_mem_unit_error;  // present but malformed (then gpu_mem_unit_mib is 0)
  // gpumux.io/device-plugin (node_lock.h): "starting", "ready", "stopping"; "" when absent.
  std::string device_plugin_state;
};

// Errors, naming the node and the field (for humans: it reaches kube-scheduler's events), when
// the object has no metadata.name; when a quantity of status.allocatable (else
// status.capacity) that gpumux reads - cpu, memory, pods, gpumux.io/gpu - is unreadable,
// negative or beyond int64; when the node has more CPU or GPUs than a node may have
// (core::kMaxNodeCpuMilli, core::kMaxGpusPerNode, e.g. "node gpu-7: gpumux.io/gpus lists 65
// GPUs, more than the 64 a node may have"); or when its GPUs come from `defaults` with a GPU
// memory beyond core::kMaxGpuMemoryMib. A node it returns always passes core::Cluster::Build.
// A malformed gpumux.io/gpus list (or a GPU in it) is not an error: see gpus_error.
core::Result<NodeInfo> DecodeNode(const nlohmann::json& node, const NodeDefaults& defaults);

// The member `key` of a JSON object, or null when `object` is not an object or the member is
// absent or null.
const nlohmann::json* JsonChild(const nlohmann::json& object, const char* key);
// The string member `key`, or "" when absent, null or not a string.
std::string JsonString(const nlohmann::json& object, const char* key);

// A Kubernetes resource quantity ("100m", "2", "64Mi", "1.5Gi", "1e3") scaled by `scale`
// (1000 for milli-units) and rounded up, as Kubernetes does. Error names the text.
core::Result<std::int64_t> ParseQuantity(std::string_view text, std::int64_t scale = 1);

}  // namespace gpumux::kube
