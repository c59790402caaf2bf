// The host's GPUs as a device plugin or the CLI sees them: discovery (index, UUID, name, memory,
// device minor, utilisation, processes) and the backend's own word on health, plus the XID
// events the driver reports.
//
// Two backends:
//  - nvml: NVIDIA's management library, loaded at run time with dlopen (Debian ships no NVML
//    header; the few declarations used live in src/gpu/nvml_backend.cc).
//  - fake: GPUs described in a CSV file (the runtime hook's GPU file, with optional columns),
//    re-read whenever it changes, for machines without GPUs and for tests.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "gpumux/core/result.h"

namespace gpumux::gpu {

enum class Health : std::uint8_t { kHealthy, kUnhealthy };
// "Healthy" / "Unhealthy": the kubelet's words (device plugin API v1beta1).
std::string_view HealthName(Health h);

struct GpuProcess {
  std::uint32_t pid = 0;
  std::int64_t used_mib = -1;  // -1 unknown
};

struct Gpu {
  int index = 0;                                            // 0..n-1 (NVML index)
  std::string uuid;                                         // "GPU-8f0c..." (never empty)
  std::string name;                                         // "NVIDIA H100 80GB HBM3"
  std::int64_t memory_total_mib = 0, memory_used_mib = -1;  // -1 unknown
  int minor = -1;                                           // /dev/nvidia<minor>; -1 unknown
  int utilization_gpu = -1, utilization_memory = -1;        // percent, -1 unknown
  std::vector<GpuProcess> processes;
  // What the backend itself reports (NVML says the GPU is lost, or the fake file says
  // unhealthy). XIDs are not folded in here: see gpu::HealthTracker.
  Health health = Health::kHealthy;
  std::string health_reason;  // "" when healthy
};

struct XidEvent {
  std::string uuid;  // "" when the backend could not tell which GPU (applies to every GPU)
  std::uint64_t xid = 0;
};

// Thread safety: List() and WaitXid() may be called from two different threads at the same
// time (one each); neither blocks the other for longer than a backend query.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view Name() const = 0;  // "nvml" or "fake"
  // A full snapshot, sorted by index. An error when the GPUs cannot be listed at all (NVML
  // fails to count them, the fake file became malformed); a GPU the backend can still name but
  // not query is listed as Unhealthy with a reason instead.
  virtual core::Result<std::vector<Gpu>> List() = 0;
  // Waits up to `timeout` for XID events and returns those seen (maybe none). Returns within
  // about `timeout` (a few ms more), also when the backend cannot deliver events at all (then it
  // just sleeps). On an error it too waits out the timeout first, so a caller's loop never spins.
  virtual core::Result<std::vector<XidEvent>> WaitXid(std::chrono::milliseconds timeout) = 0;
};

// Loads NVML from `library` (a soname looked up by the dynamic linker, or a path), initialises
// it and registers for XID events on every GPU that supports them. Error kNotFound when the
// library cannot be opened ("libnvidia-ml.so.1: cannot open (...): is the NVIDIA driver
// installed? ..."), kFailedPrecondition when it lacks an entry point or nvmlInit_v2 fails.
core::Result<std::unique_ptr<Backend>> OpenNvml(const std::string& library = "libnvidia-ml.so.1");

// A GPU file has one short line per GPU (at most core::kMaxGpusPerNode of them).
inline constexpr std::size_t kMaxGpuFileBytes = std::size_t{1} << 20;  // 1 MiB

// GPUs described in a CSV file: the runtime hook's GPU file (header with at least
// index,uuid,model,memory_mib; a `device` column is ignored here) plus optional columns
//   minor            default: the index
//   health           healthy | unhealthy (default healthy; reason "marked unhealthy in <file>")
//   memory_used_mib  default: unknown (-1)
//   xids             ';'-separated XIDs that have happened on that GPU, cumulative: entries past
//                    the number already delivered for that UUID are delivered by WaitXid, once
//                    (on the first read, all of them). Shrinking the list delivers nothing.
// UUIDs must be unique and non-empty, indices 0..n-1 without gaps (n <= core::kMaxGpusPerNode),
// memory_mib in 1..core::kMaxGpuMemoryMib. Errors name the file and line; a file that is a
// folder, not regular or larger than kMaxGpuFileBytes is refused by name (io::ReadInputFile). The
// file is read again when its size, mtime, ctime or inode changes (List and WaitXid both look;
// WaitXid every ~20 ms); write it atomically (rename) so that no reader sees half a file: a
// malformed re-read is an error and is retried at the next call.
core::Result<std::unique_ptr<Backend>> OpenFake(const std::string& path);

}  // namespace gpumux::gpu
