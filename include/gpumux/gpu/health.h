// GPU health from XID events and backend snapshots: which XIDs matter, and for how long.
//
// XID classes (see ClassifyXid):
//  - application: caused by the program running on the GPU (13, 31, 43, 45, 68, 109: the set
//    NVIDIA's k8s-device-plugin skips by default; plus HealthPolicy::ignored_xids). The GPU
//    stays healthy.
//  - fatal: the GPU needs a reset or service (48 double-bit ECC, 61/62 internal
//    micro-controller, 64 row-remap/page-retirement failure, 74 NVLink, 79 fallen off the bus,
//    95 uncontained ECC, 119/120 GSP, 140 unrecovered ECC). Unhealthy until the process that
//    holds the tracker restarts.
//  - transient: every other XID (including 999, NVML's "unknown XID"). Unhealthy until
//    transient_recovery_ms pass without another non-application XID on that GPU.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gpumux/gpu/backend.h"

namespace gpumux::gpu {

enum class XidClass : std::uint8_t { kApplication, kTransient, kFatal };
// The built-in class (HealthPolicy::ignored_xids not applied).
XidClass ClassifyXid(std::uint64_t xid);
std::string_view XidClassName(XidClass c);  // "application", "transient", "fatal"
// A short description of well-known XIDs ("GPU has fallen off the bus"); "" for others.
std::string_view XidDescription(std::uint64_t xid);

struct HealthPolicy {
  std::int64_t transient_recovery_ms = 300000;
  std::vector<std::uint64_t> ignored_xids;  // extra XIDs treated as application errors
};

struct GpuHealth {
  Health health = Health::kHealthy;
  std::string reason;  // "" when healthy; reasons joined with "; " otherwise
};

// Combines backend snapshots and XID events into one verdict per GPU UUID.
// Times are milliseconds since the Unix epoch (system_clock): reasons print them as UTC
// ("2024-05-01T10:00:00.000Z"); a clock stepped back only delays a transient recovery.
// Not thread-safe: the caller serialises (one mutex around it is enough). Memory: one entry per
// UUID ever seen. Every call is O(GPUs) or better.
class HealthTracker {
 public:
  explicit HealthTracker(HealthPolicy policy);

  // Records the backend-reported health of every GPU in the snapshot. A GPU seen in an earlier
  // snapshot and missing from this one is Unhealthy ("GPU GPU-x disappeared") until it is
  // listed again.
  void OnSnapshot(const std::vector<Gpu>& gpus, std::int64_t now_ms);
  // Records an XID. An event with an empty UUID applies to every GPU known so far. An XID for a
  // UUID no snapshot has listed yet is kept and counts once the GPU appears.
  void OnXid(const XidEvent& e, std::int64_t now_ms);
  // The combined verdict: Unhealthy when the backend says so, the GPU disappeared, a fatal XID
  // happened, or a transient XID happened less than transient_recovery_ms ago. A UUID that no
  // snapshot has listed is Unhealthy with reason "unknown GPU" (never grant what we cannot see).
  GpuHealth Of(const std::string& uuid, std::int64_t now_ms) const;
  // UUIDs whose health (Healthy/Unhealthy, not the reason) changed since the last call,
  // recovery by time included, sorted; a UUID is also listed the first time a snapshot shows
  // it. Call with the current time.
  std::vector<std::string> TakeChanges(std::int64_t now_ms);

 private:
  struct XidRecord {
    std::uint64_t xid = 0;
    std::int64_t at_ms = 0;
  };
  struct State {
    bool listed = false;   // seen in a snapshot
    bool present = false;  // in the latest snapshot
    Health backend = Health::kHealthy;
    std::string backend_reason;
    std::optional<XidRecord> fatal;      // the first fatal XID
    std::optional<XidRecord> transient;  // the latest transient XID
    std::optional<Health> reported;      // what TakeChanges said last
  };
  void Record(State& s, std::uint64_t xid, std::int64_t now_ms) const;

  HealthPolicy policy_;
  std::map<std::string, State> gpus_;
};

}  // namespace gpumux::gpu
