// What a node holds each sharing tenant of a GPU to, as its device plugin publishes it per GPU
// inside the gpumux.io/gpus annotation (so that a plugin that does not know this field, older
// or downgraded, rewrites the list without it and the GPU reads as enforcing nothing):
//
//   {"index":0,"uuid":"GPU-..",...,
//    "enforcement":{"version":1,"memory":"hard","compute":"mps-namespace",
//                   "backends":["memory-partitioning","mps"],"note":"..."}}
//
// memory:  hard  the container's grant is a hard limit it cannot lift from inside the container:
//                allocations past it fail with out-of-memory (MPS v3 memory partitioning, set per
//                container cgroup by the driver or the kernel's dmem controller)
//          soft  a CUDA process is held to a limit, but a tenant can step around it from inside
//                (MPS: a client that does not connect to the MPS server, or one that clears its
//                environment under legacy MPS and is held only to the largest co-tenant's share;
//                HAMi-core: a process that does not load the interposer)
//          none  nothing holds it (the share is booked, not enforced)
// compute: mps-namespace  the container's own active-thread percentage (an MPS namespace)
//          hami-core      HAMi-core's SM limit for the container
//          mps-server     legacy MPS's per-server percentage: the largest co-tenant's share
//          none
// `backends` names what is in use on the GPU; `note` says why nothing stronger is (for humans).
// A record of a newer version than kEnforcementVersion, or one that does not read, is taken as
// enforcing nothing (with a note), never guessed at.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "gpumux/core/cluster.h"
#include "gpumux/core/result.h"

namespace gpumux::kube {

inline constexpr int kEnforcementVersion = 1;
// A pod asks for more than the extender's --require-enforcement (never less) with this
// annotation: "memory", "compute", "memory,compute" or "none".
inline constexpr std::string_view kAnnotationRequireEnforcement = "gpumux.io/require-enforcement";

// The node's strongest enforcement over its GPUs, also as labels (written by the device plugin
// beside gpumux.io/gpus), so that a label selector finds nodes that enforce: the webhook's
// warning asks for one, and a pod's node affinity may require one:
//   enforcement.gpumux.io/memory: hard | soft | none
//   enforcement.gpumux.io/compute: mps-namespace | hami-core | mps-server | none
inline constexpr std::string_view kLabelMemoryEnforcement = "enforcement.gpumux.io/memory";
inline constexpr std::string_view kLabelComputeEnforcement = "enforcement.gpumux.io/compute";

enum class MemoryEnforcement : std::uint8_t { kNone, kSoft, kHard };
enum class ComputeEnforcement : std::uint8_t { kNone, kMpsServer, kHamiCore, kMpsNamespace };

std::string_view MemoryEnforcementName(MemoryEnforcement m);    // "hard", "soft", "none"
std::string_view ComputeEnforcementName(ComputeEnforcement c);  // "mps-namespace", ...

struct GpuEnforcement {
  MemoryEnforcement memory = MemoryEnforcement::kNone;
  ComputeEnforcement compute = ComputeEnforcement::kNone;
  std::vector<std::string> backends;  // "memory-partitioning", "mps", "hami-core"; sorted
  std::string note;
  bool operator==(const GpuEnforcement&) const = default;

  // The core's bits: memory hard -> kEnforcesMemory; compute limited to the container's own
  // share (mps-namespace, hami-core) -> kEnforcesCompute.
  core::Enforcement Bits() const;
  // "memory hard, compute mps-namespace" (for tables and logs).
  std::string Summary() const;
};

nlohmann::json EnforcementToJson(const GpuEnforcement& e);
// The strongest memory and compute enforcement among `gpus` (none when empty), as the labels'
// values.
GpuEnforcement StrongestOf(const std::vector<GpuEnforcement>& gpus);
// `record` is the "enforcement" member of a gpumux.io/gpus entry, or null when it has none.
// Never fails: what does not read is "none" with the reason in `note`.
GpuEnforcement EnforcementFromJson(const nlohmann::json* record);

// "memory", "compute", "memory,compute" (either order, spaces around commas allowed), "none" or
// "" (nothing) into core bits. Error naming `where` and the text otherwise.
core::Result<core::Enforcement> ParseRequiredEnforcement(std::string_view text,
                                                         const std::string& where);
// The inverse: "none", "memory", "compute", "memory,compute".
std::string RequiredEnforcementName(core::Enforcement bits);

}  // namespace gpumux::kube
