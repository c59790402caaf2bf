// Per-container GPU memory limits and their records on the node.
//
// The CDI hook (`gpumux enforce createRuntime`, run by the container runtime before the
// container's first process runs user code) sets each granted GPU's hard limit, and the soft
// limit, on the container's own cgroup through NVML; `poststop` clears them. Each container
// that has (or may have) limits has a record, written before any limit is set and removed after
// they are cleared, so that whoever set them can be killed at any point and the next reconcile
// (the device plugin's, at start and then periodically) finds what is left:
//
//   <state_dir>/limits/<container id>.json
//     {"version":1,"container_id":"..","pod":"ns/name","pod_uid":"..","container":"train",
//      "cgroup":"/sys/fs/cgroup/kubepods/.../<id>","state":"applying"|"applied",
//      "gpus":[{"uuid":"GPU-..","hard_mib":8192,"soft_mib":0}],"at":"2026-12-01T10:00:00Z"}
//
// Reconcile: a record whose cgroup folder is gone belonged to a container that no longer
// exists. The driver cleared its limits with the cgroup; the record is removed. A record whose
// cgroup is still there is kept (its container runs, or is still being created).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "gpumux/core/result.h"
#include "gpumux/gpu/memory_limits.h"

namespace gpumux::isolation {

struct GpuLimit {
  std::string uuid;
  std::int64_t hard_mib = 0;  // > 0
  std::int64_t soft_mib = 0;  // 0..hard_mib; 0 = no soft limit
  bool operator==(const GpuLimit&) const = default;
};

struct LimitRecord {
  std::string container_id;
  std::string pod;  // "namespace/name"; "" when unknown
  std::string pod_uid;
  std::string container;
  std::string cgroup;  // full path of the container's cgroup folder
  std::string state;   // "applying" (limits being set) or "applied"
  std::vector<GpuLimit> gpus;
  std::int64_t at_unix_s = 0;
  bool operator==(const LimitRecord&) const = default;
};

// Bounds: a container's limits name at most this many GPUs; a record file is at most this big.
inline constexpr std::size_t kMaxLimitGpus = 64;
inline constexpr std::size_t kMaxRecordBytes = 64 * 1024;

// The records under <state_dir>/limits/. Every write is atomic (io::WriteFileAtomically).
// Thread safety: none; each process (one hook run, the plugin's reconcile) uses its own.
class LimitRecords {
 public:
  explicit LimitRecords(std::string state_dir);
  const std::string& folder() const { return folder_; }
  // Makes the folder (0700) when needed.
  core::Result<void> Put(const LimitRecord& record);
  // nullopt when there is none; an error when the file does not read (naming it).
  core::Result<std::optional<LimitRecord>> Get(const std::string& container_id) const;
  core::Result<void> Remove(const std::string& container_id);
  // Every record, by container id; a file that does not read is named in `unreadable` (and
  // left for a person) rather than failing the listing.
  std::vector<LimitRecord> List(std::vector<std::string>* unreadable = nullptr) const;

 private:
  std::string Path(const std::string& container_id) const;
  std::string folder_;
};

// What createRuntime applies: the container (from the runtime's state), its pod, its GPUs.
struct ApplyRequest {
  std::string container_id;
  std::int64_t pid = 0;  // the container's first process (in its cgroup at createRuntime)
  std::string pod, pod_uid, container;
  std::vector<GpuLimit> gpus;
  std::string proc_root = "/proc";
  std::string cgroup_root = "/sys/fs/cgroup";
  std::int64_t now_unix_s = 0;
};

// Finds the container's own cgroup, records the intent, sets every GPU's limits, reads each
// back (its hard limit must be what was asked), and records them as applied. On any failure
// the limits already set are cleared, the record removed, and the error returned (the hook then
// fails, and the runtime does not start the container). Error messages name the container, the
// GPU and the cgroup.
core::Result<LimitRecord> ApplyLimits(const ApplyRequest& request, const gpu::MemoryLimits& nvml,
                                      LimitRecords& records);

// poststop: clears the container's limits where its cgroup still exists, then removes its
// record. Ok when there is none. `nvml` may be null (nothing to clear with: only the record).
core::Result<void> ReleaseLimits(const std::string& container_id, const gpu::MemoryLimits* nvml,
                                 LimitRecords& records);

struct ReconcileResult {
  int kept = 0;                              // records whose cgroup still exists
  int reclaimed = 0;                         // records of containers that are gone, removed
  std::vector<std::string> reclaimed_names;  // "ns/pod/container (container id)"
  std::vector<std::string> unreadable;       // record files that do not read
};

// Removes the records whose cgroup folder is gone (their limits went with it; where `nvml` is
// given they are cleared once more, and a "not found" is the expected answer).
ReconcileResult ReconcileLimits(LimitRecords& records, const gpu::MemoryLimits* nvml,
                                const std::function<bool(const std::string&)>& cgroup_exists);

}  // namespace gpumux::isolation
