// The CDI spec that makes the container runtime run gpumux's enforcement hook for one container.
//
// Allocate (the device plugin) writes, for a container with a share of a GPU that enforces
// memory by partitioning, one spec file in the runtime's CDI folder and names its device in
// the answer's cdi_devices; the kubelet passes the name to the runtime (CRI CDIDevices, GA in
// Kubernetes 1.31), which adds the spec's hooks to the container's OCI config. So the hook comes
// from the node, never from the pod: a tenant cannot leave it out or change its limits.
//
//   <spec_dir>/gpumux.io-enforce-<pod uid>-<container>.json
//   {"cdiVersion":"0.5.0","kind":"gpumux.io/enforce",
//    "devices":[{"name":"<pod uid>-<container>","containerEdits":{
//      "env":["GPUMUX_ENFORCED=memory-partitioning"],
//      "hooks":[{"hookName":"createRuntime","path":"<hook>","args":[... "enforce",
//                 "createRuntime","--gpu","GPU-..=8192:0",...]},
//               {"hookName":"poststop","path":"<hook>","args":[... "enforce","poststop",...]}]}}]}
//
// createRuntime runs in the runtime's namespace once the container's first process exists and
// is in its cgroup, before any of its own code runs; a failing hook stops the container's start.
// The spec lives as long as the pod may start or restart the container (the kubelet reuses an
// allocation): RemoveStaleSpecs drops those of pods no longer on the node.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "gpumux/core/result.h"
#include "gpumux/isolation/limits.h"

namespace gpumux::isolation {

inline constexpr const char* kCdiKind = "gpumux.io/enforce";
inline constexpr const char* kDefaultCdiSpecDir = "/var/run/cdi";

struct HookSettings {
  std::string spec_dir = kDefaultCdiSpecDir;
  // How the runtime runs gpumux on the host: the program and the arguments before "enforce"
  // (e.g. {"/opt/gpumux/gpumux"}, or a loader and its library path for a copied binary).
  std::vector<std::string> command;
  // Passed on to the hook (its --flags).
  std::string nvml_library = "libnvidia-ml.so.1";
  std::string cgroup_root = "/sys/fs/cgroup";
  std::string state_dir = "/var/lib/gpumux";
  int hook_timeout_s = 30;  // the runtime kills a hook that runs longer
};

struct ContainerHookRequest {
  std::string pod_ns, pod_name, pod_uid, container;
  std::vector<GpuLimit> gpus;
};

// "gpumux.io/enforce=<pod uid>-<container>": the CDI device of that container.
std::string CdiDeviceName(const std::string& pod_uid, const std::string& container);

// The spec as JSON text (pure).
core::Result<std::string> EnforcementSpec(const HookSettings& settings,
                                          const ContainerHookRequest& request);

// Writes the spec atomically (replacing an earlier one of the same container) and returns its
// CDI device name. Error naming the file when it cannot be written, or when the pod uid or
// container name cannot be a CDI device name.
core::Result<std::string> WriteEnforcementSpec(const HookSettings& settings,
                                               const ContainerHookRequest& request);

// Whether the container's spec file is in `spec_dir` (Allocate wrote it).
bool SpecExists(const std::string& spec_dir, const std::string& pod_uid,
                const std::string& container);

// Removes gpumux's spec files in `spec_dir` whose pod uid `live` does not know and that are
// older than `min_age_s` (a spec written for a pod the caller's cache has not seen yet stays).
// Returns the removed files' names.
std::vector<std::string> RemoveStaleSpecs(const std::string& spec_dir,
                                          const std::function<bool(const std::string&)>& live,
                                          std::int64_t min_age_s);

}  // namespace gpumux::isolation

namespace gpumux::isolation {

// Copies the running gpumux (/proc/self/exe) and the shared libraries it was started with
// (/proc/self/maps: the dynamic loader included; nothing loaded later, so not NVML) into `dir`
// on the host (dir/gpumux, dir/lib/), each file replaced atomically, and returns the command
// that runs it there whatever the host has installed: {dir/lib/<loader>, "--library-path",
// dir/lib, dir/gpumux}; {dir/gpumux} for a static binary. Call it before opening NVML. Error
// naming the file that could not be read or written.
core::Result<std::vector<std::string>> InstallSelf(const std::string& dir);

}  // namespace gpumux::isolation
