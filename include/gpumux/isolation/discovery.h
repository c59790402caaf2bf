// What a node can hold each GPU's sharing tenants to, strongest first (kube/enforcement.h has
// the vocabulary):
//   memory-partitioning  memory hard: each container's grant set as a hard limit on its own
//                        cgroup by the CDI hook (driver r615+ with nvmlDeviceSetMemoryLimits_v1,
//                        cgroup v2 at the cgroup root, a GPU not in MIG mode, and a CDI hook the
//                        runtime can run)
//   mps                  memory soft; compute mps-namespace with MPS v3 (a namespace per
//                        container), else mps-server (legacy MPS: per server) (--mps)
//   hami-core            memory soft, compute hami-core: HAMi-core's interposer where the
//                        operator installed libvgpu.so (--hami-core-library)
//   none
// Memory comes from the strongest memory backend available, compute from the strongest compute
// one; `backends` lists what the GPU uses. The note says why nothing stronger applies ("cgroup
// v1 or hybrid layout", "MIG mode", "driver 550.54 has no memory partitioning (r615+)").
// Pure apart from what the input's NVML answers; cheap enough to run every minute.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "gpumux/gpu/memory_limits.h"
#include "gpumux/isolation/cgroup.h"
#include "gpumux/kube/enforcement.h"

namespace gpumux::isolation {

// The backend names of --enforcement (besides "auto" and "none").
inline constexpr const char* kMemoryPartitioning = "memory-partitioning";
inline constexpr const char* kMps = "mps";
inline constexpr const char* kHamiCore = "hami-core";

struct DiscoveryInput {
  std::vector<std::string> uuids;  // the node's GPUs
  // Backends the operator allows (--enforcement); "auto" is every one of them.
  std::set<std::string> allowed = {kMemoryPartitioning, kMps, kHamiCore};
  CgroupHierarchy cgroup;
  const gpu::MemoryLimits* nvml = nullptr;  // null: NVML's limit calls cannot be reached
  std::string nvml_error;                   // why nvml is null
  // The CDI hook can run: a CDI spec folder and the hook's binary are configured. Without it,
  // memory partitioning has nothing to set limits with.
  bool cdi_hook = false;
  std::string cdi_hook_note;       // why not
  bool mps = false;                // the plugin runs MPS daemons (--mps)
  bool mps_namespaces = false;     // ... speaking MPS v3: a namespace per container
  std::string hami_core_library;   // "" = not configured
  bool hami_core_present = false;  // the library exists on the node
};

// The lowest driver branch with memory partitioning.
inline constexpr int kMemoryPartitioningDriver = 615;

// One record per input GPU, in input order.
std::vector<kube::GpuEnforcement> Discover(const DiscoveryInput& in);

// Whether memory partitioning is what `e` uses (the CDI hook must then run for a share).
bool UsesMemoryPartitioning(const kube::GpuEnforcement& e);

}  // namespace gpumux::isolation
