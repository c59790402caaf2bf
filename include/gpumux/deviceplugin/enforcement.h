// The device plugin's side of enforcement: what this node holds each GPU's sharing tenants to
// (isolation/discovery.h, found at start and again every `rediscover_every`), published per GPU
// in gpumux.io/gpus, and what Allocate adds to a shared container so that it is held:
//   memory-partitioning  a CDI device whose spec runs `gpumux enforce createRuntime` with the
//                        container's hard limit (its grant's gpu_mem_mib on each GPU) and soft
//                        limit (soft_limit_percent of it) before the container's code runs
//                        (isolation/cdi.h); a share without a memory ask gets none
//   hami-core            HAMi-core's library at /usr/local/vgpu/libvgpu.so and /etc/ld.so.preload
//                        naming it (read-only mounts), CUDA_DEVICE_MEMORY_LIMIT_<i>=<MiB>m per
//                        visible GPU, CUDA_DEVICE_SM_LIMIT=<percent> (with a gpu-milli ask),
//                        CUDA_DEVICE_MEMORY_SHARED_CACHE in a folder of the container's own
//                        (mounted at /tmp/gpumux-vgpu) and HAMi-core's lock folder /tmp/vgpulock
//   mps                  (the MPS daemons: mps.h, through InjectOptions::mps)
// Whole-GPU grants get nothing. Periodically (Maintain): the limit records of containers that
// are gone are reclaimed (isolation/limits.h), and the CDI specs and HAMi-core folders of pods
// no longer on the node are removed.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "gpumux/core/log.h"
#include "gpumux/core/result.h"
#include "gpumux/deviceplugin/container_env.h"
#include "gpumux/deviceplugin/handshake.h"
#include "gpumux/gpu/memory_limits.h"
#include "gpumux/isolation/cdi.h"
#include "gpumux/isolation/discovery.h"
#include "gpumux/kube/enforcement.h"
#include "gpumux/kube/grant.h"

namespace gpumux::deviceplugin {

// Where HAMi-core's library and its preload file appear inside a container: the library at the
// path HAMi-core itself loads (libvgpu.c opens /usr/local/vgpu/libvgpu.so).
inline constexpr const char* kHamiCoreLibraryInContainer = "/usr/local/vgpu/libvgpu.so";
inline constexpr const char* kHamiCoreCacheInContainer = "/tmp/gpumux-vgpu";
inline constexpr const char* kHamiCoreLockInContainer = "/tmp/vgpulock";

struct EnforcementOptions {
  // --enforcement: the backends that may be used; empty = none.
  std::set<std::string> allowed = {isolation::kMemoryPartitioning, isolation::kMps,
                                   isolation::kHamiCore};
  std::string nvml_library = "libnvidia-ml.so.1";  // for the memory limits (plugin and hook)
  std::string cgroup_root = isolation::kDefaultCgroupRoot;
  std::string state_dir = "/var/lib/gpumux";  // limit records; HAMi-core's files (host folder)
  // The CDI hook: its spec folder and how the runtime runs gpumux. nullopt: none configured.
  std::optional<isolation::HookSettings> hook;
  int soft_limit_percent = 0;     // of the hard limit; 0 = no soft limit
  std::string hami_core_library;  // host path of libvgpu.so; "" = not used
  bool mps = false;               // the plugin runs MPS daemons
  bool mps_namespaces = false;    // ... with a namespace per container (MPS v3)
  std::chrono::milliseconds rediscover_every{60000};
  core::Logger log;
};

class Enforcer {
 public:
  // `gpus`: the node's GPUs (index order). Opens NVML's limit calls when memory partitioning
  // may be used (a failure is a note, not an error: those GPUs enforce less), then discovers.
  static std::unique_ptr<Enforcer> Create(EnforcementOptions options, std::vector<NodeGpu> gpus);
  ~Enforcer();

  // Per GPU (index order) what is enforced now.
  std::vector<kube::GpuEnforcement> Current() const;
  // Discovers again; true when anything changed (then publish again).
  bool Rediscover();

  // The edits for one container's grant (nothing for an exclusive one). Error when what the
  // GPU promises cannot be prepared (a spec that cannot be written): the container is refused
  // rather than started unenforced.
  core::Result<EnforcementEdits> Edits(const GrantContext& context,
                                       const kube::ContainerGrant& grant) const;

  // Reclaims limit records of containers that are gone and, when `live_pods` is known, removes
  // the CDI specs and HAMi-core folders of pods not in it. Checks that the runtime ran the hook:
  // a running shared container whose CDI spec was written but that has no limit record was
  // started without it (a runtime that does not read CDI specs); memory partitioning is then
  // off on this node until the plugin restarts, and the note says why. Returns what it did, for
  // the log.
  std::vector<std::string> Maintain(const std::optional<std::set<std::string>>& live_pods,
                                    const std::vector<Handshake::RunningShare>& running = {});
  // Maintain() when rediscover_every has passed since the last time (health loop); true when
  // what is enforced changed.
  bool Tick(const std::optional<std::set<std::string>>& live_pods,
            const std::vector<Handshake::RunningShare>& running = {});

  std::int64_t reclaimed_total() const;
  std::int64_t recorded_limits() const;  // limit records on the node at the last Maintain

 private:
  Enforcer(EnforcementOptions options, std::vector<NodeGpu> gpus);
  isolation::DiscoveryInput Input() const;
  EnforcementOptions options_;
  std::vector<NodeGpu> gpus_;
  std::unique_ptr<gpu::MemoryLimits> nvml_;
  std::string nvml_error_;
  mutable std::mutex mu_;
  std::vector<kube::GpuEnforcement> current_;  // guarded by mu_
  std::chrono::steady_clock::time_point last_tick_{};
  std::int64_t reclaimed_ = 0;
  std::int64_t recorded_ = 0;
  std::string hook_missed_;  // "" or why the runtime is known not to run the hook
};

}  // namespace gpumux::deviceplugin
