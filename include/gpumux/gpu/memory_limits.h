// NVML's per-cgroup GPU memory limits: MPS v3 memory partitioning (driver r615 / CUDA 13.4,
// cgroup v2 at /sys/fs/cgroup, non-MIG). nvmlDeviceSetMemoryLimits_v1 sets a soft and a hard
// limit in bytes for one cgroup on one GPU (root only); nvmlDeviceGetMemoryLimits_v1 reads them
// back with what the cgroup uses now. The cgroup is named by the full path of its directory
// ("/sys/fs/cgroup/kubepods/.../<container>"). A hard limit is enforced at allocation time (the
// kernel's dmem controller on Linux >= 6.14, else the driver's own accounting); removing the
// cgroup clears its limits. MIG handles are not supported.
//
// Loaded with dlopen like the NVML backend (backend.h), separately from it, so that a node whose
// GPUs come from a fake file can still be given a stand-in NVML for its limits (tests, the e2e
// rig). Thread safety: every call may come from any thread (NVML is thread-safe).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "gpumux/core/result.h"

namespace gpumux::gpu {

struct CgroupMemoryLimits {
  std::uint64_t soft_bytes = 0;
  std::uint64_t hard_bytes = 0;  // kNoHardLimit: none
  std::uint64_t used_bytes = 0;
};

// NVML_DEVICE_MEMORY_LIMIT_MAX: "no hard limit". NVIDIA's API reference names it without giving
// its value; gpumux assumes UINT64_MAX (not yet checked against a real driver: the GPU check,
// scripts/gpu-check/isolation.sh, reads a cleared limit back to see).
inline constexpr std::uint64_t kNoHardLimit = ~std::uint64_t{0};

class MemoryLimits {
 public:
  virtual ~MemoryLimits() = default;
  // The driver's version ("615.71.09"); "" when NVML cannot say.
  virtual std::string DriverVersion() const = 0;
  // Whether this NVML exports nvmlDeviceSetMemoryLimits_v1 and nvmlDeviceGetMemoryLimits_v1
  // (drivers before r615 do not).
  virtual bool HasLimitCalls() const = 0;
  // Whether the GPU runs in MIG mode (current mode; a GPU without MIG is not). Error when NVML
  // does not know the UUID.
  virtual core::Result<bool> MigEnabled(const std::string& uuid) const = 0;
  // Error kNotFound when NVML does not know the UUID; kFailedPrecondition when the calls are
  // missing or NVML says NOT_SUPPORTED (a MIG handle, a driver without partitioning);
  // kPermissionDenied without root; kInvalidArgument when soft > hard or a limit exceeds the
  // GPU's memory; kIo when the cgroup cannot be opened. Messages name the call, the GPU and
  // the cgroup.
  virtual core::Result<void> Set(const std::string& uuid, const std::string& cgroup,
                                 std::uint64_t soft_bytes, std::uint64_t hard_bytes) const = 0;
  // kNotFound when no limit is set for that GPU and cgroup (or the GPU is unknown); errors as Set.
  virtual core::Result<CgroupMemoryLimits> Get(const std::string& uuid,
                                               const std::string& cgroup) const = 0;
  // Set(uuid, cgroup, 0, kNoHardLimit): NVIDIA's way to clear a cgroup's limits.
  core::Result<void> Clear(const std::string& uuid, const std::string& cgroup) const {
    return Set(uuid, cgroup, 0, kNoHardLimit);
  }
};

// Loads `library` (a soname or a path), initialises NVML. Error kNotFound when it cannot be
// opened ("is the NVIDIA driver installed?"), kFailedPrecondition when it is not NVML or
// nvmlInit_v2 fails. A library without the limit calls opens fine (HasLimitCalls() false).
core::Result<std::unique_ptr<MemoryLimits>> OpenMemoryLimits(
    const std::string& library = "libnvidia-ml.so.1");

}  // namespace gpumux::gpu
