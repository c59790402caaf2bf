// What a container gets from Allocate, built from its grant (pure; no I/O).
//
// Environment:
//   NVIDIA_VISIBLE_DEVICES=GPU-a,GPU-b        the granted GPUs' UUIDs (the NVIDIA runtime hook
//                                             or CDI exposes exactly these)
//   CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25      shared GPU with gpu-milli: ceil(milli / 10)
//   CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=8192M,1=8192M
//                                             shared GPU with gpu-mem: per visible GPU ordinal
//   GPUMUX_POD=ns/name GPUMUX_POD_UID GPUMUX_CONTAINER GPUMUX_NODE GPUMUX_POLICY
//   GPUMUX_GPU_UUIDS GPUMUX_GPU_INDICES (host indices) GPUMUX_GPU_MILLI GPUMUX_GPU_MEM_MIB
//   GPUMUX_EXCLUSIVE=true|false
// The node coordinator (only with `coordinator_dir`): the host folder of its socket mounted
// read-only at /run/gpumux and GPUMUX_COORDINATOR=unix:///run/gpumux/coordinator.sock, so
// that a training job's task SDK reaches it without a hostPath in the pod's spec (which Pod
// Security "baseline" refuses). A read-only mount still lets a process connect to the socket.
// MPS (only with `mps`, mps.h): a shared grant of one GPU whose control daemon runs gets that
// daemon's pipe folder at /tmp/nvidia-mps (CUDA_MPS_PIPE_DIRECTORY) and its /dev/shm, both
// read-write; whole GPUs and grants of several GPUs do not.
// Device nodes (only with `inject_devices`, for runtimes without the NVIDIA hook):
//   the control devices found (nvidiactl, nvidia-uvm, nvidia-uvm-tools) and /dev/nvidia<minor>
//   of every granted GPU, "rwm"; plus the configured read-only driver mounts.
// CDI (only with `cdi_kind`, e.g. "nvidia.com/gpu"): one CDI device "<kind>=<uuid>" per GPU.
// Device list strategy (as NVIDIA's device plugin names them):
//   envvar         NVIDIA_VISIBLE_DEVICES lists the UUIDs. A pod's own NVIDIA_VISIBLE_DEVICES
//                  comes after the plugin's in the container (the kubelet's order) and wins.
//   volume-mounts  NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices and one read-only
//                  mount of /dev/null at /var/run/nvidia-container-devices/<uuid> per GPU: with
//                  the toolkit's accept-nvidia-visible-devices-as-volume-mounts = true and
//                  accept-nvidia-visible-devices-envvar-when-unprivileged = false, the mounts,
//                  which a pod cannot add in its spec, decide, whatever its env says.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "gpumux/core/result.h"
#include "gpumux/kube/grant.h"

namespace gpumux::deviceplugin {

struct MountSpec {
  std::string host_path, container_path;
  bool read_only = true;
};

struct DeviceNodeSpec {
  std::string host_path, container_path;
  std::string permissions = "rwm";
};

inline constexpr const char* kContainerDevicesDir = "/var/run/nvidia-container-devices";

enum class DeviceListStrategy : std::uint8_t { kEnvvar, kVolumeMounts };

// One GPU's MPS folders on the host (mps.h).
struct MpsFolders {
  std::string pipe, shm;
};
inline constexpr const char* kMpsPipeInContainer = "/tmp/nvidia-mps";

// What enforcement adds to one shared container beyond BuildContainerEnv's (enforcement.h).
struct EnforcementEdits {
  std::vector<std::string> cdi_devices;
  std::vector<MountSpec> mounts;
  std::map<std::string, std::string> envs;
  std::string summary;  // "memory-partitioning (hard 8192 MiB)" for the log; "" = nothing
};
struct GrantContext;
using EnforceFn =
    std::function<core::Result<EnforcementEdits>(const GrantContext&, const kube::ContainerGrant&)>;

struct InjectOptions {
  DeviceListStrategy device_list = DeviceListStrategy::kEnvvar;
  bool inject_devices = false;
  std::string dev_dir = "/dev";
  std::vector<MountSpec> mounts;
  std::string cdi_kind;         // "" = no CDI devices
  std::string coordinator_dir;  // host folder of the coordinator's socket; "" = not mounted
  // MPS: the folders of a GPU's control daemon while it runs (nullopt: none); empty = no MPS.
  std::function<std::optional<MpsFolders>(const std::string& uuid)> mps;
  // Told (in Allocate, before answering) each MPS grant: GPU, MiB and thread percentage (0: not
  // limited), the pod's uid and the container. It may return the pipe folder of the container's
  // own MPS namespace (MPS v3), which then replaces the GPU's at /tmp/nvidia-mps. An error refuses
  // the container: its limits would not be enforced.
  std::function<core::Result<std::optional<std::string>>(
      const std::string& uuid, std::int64_t mem_mib, int thread_percent, const std::string& pod_uid,
      const std::string& container)>
      mps_admit;
  // Told (in Allocate, after BuildContainerEnv) each shared container's grant; what it returns
  // is added to the container. An error refuses the container: its grant would not be held.
  // Empty: nothing is enforced beyond the environment and MPS.
  EnforceFn enforce;
};

// Where a container finds the coordinator's socket folder (the task SDK's default).
inline constexpr const char* kCoordinatorDirInContainer = "/run/gpumux";

// A GPU of this node as Allocate needs it.
struct NodeGpu {
  int index = 0;
  std::string uuid;
  int minor = -1;
};

struct ContainerEnv {
  std::map<std::string, std::string> envs;
  std::vector<MountSpec> mounts;
  std::vector<DeviceNodeSpec> devices;
  std::vector<std::string> cdi_devices;
};

struct GrantContext {
  std::string pod_ns, pod_name, pod_uid, node, policy;
};

// Error (the pod is not started) when the grant names a GPU this node does not have, or a
// UUID that does not match the node's GPU at that index.
core::Result<ContainerEnv> BuildContainerEnv(const kube::ContainerGrant& grant,
                                             const GrantContext& context,
                                             const std::vector<NodeGpu>& gpus,
                                             const InjectOptions& inject);

// The control device nodes (nvidiactl, nvidia-uvm, nvidia-uvm-tools) present in `dev_dir`.
std::vector<DeviceNodeSpec> ControlDevices(const std::string& dev_dir);

}  // namespace gpumux::deviceplugin
