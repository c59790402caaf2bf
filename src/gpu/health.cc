#include "gpumux/gpu/health.h"

#include <algorithm>
#include <ctime>
#include <utility>

#include "gpumux/core/time.h"

namespace gpumux::gpu {
namespace {

// The XIDs gpumux knows by name, after NVIDIA's Xid catalogue (docs.nvidia.com/deploy/xid-errors)
// and the application errors NVIDIA's k8s-device-plugin skips. Not listed: transient.
struct XidInfo {
  std::uint64_t xid;
  XidClass cls;
  std::string_view what;
};
constexpr XidInfo kXids[] = {
    {8, XidClass::kTransient, "GPU stopped processing"},
    {13, XidClass::kApplication, "graphics engine exception"},
    {31, XidClass::kApplication, "GPU memory page fault"},
    {32, XidClass::kTransient, "invalid or corrupted push buffer stream"},
    {43, XidClass::kApplication, "GPU stopped processing"},
    {45, XidClass::kApplication, "preemptive cleanup, due to previous errors"},
    {48, XidClass::kFatal, "double-bit ECC error"},
    {61, XidClass::kFatal, "internal micro-controller breakpoint/warning"},
    {62, XidClass::kFatal, "internal micro-controller halt"},
    {63, XidClass::kTransient, "ECC page retirement or row remapping recorded"},
    {64, XidClass::kFatal, "ECC page retirement or row remapping failure"},
    {68, XidClass::kApplication, "video processor exception"},
    {69, XidClass::kTransient, "graphics engine class error"},
    {74, XidClass::kFatal, "NVLink error"},
    {79, XidClass::kFatal, "GPU has fallen off the bus"},
    {92, XidClass::kTransient, "high single-bit ECC error rate"},
    {94, XidClass::kTransient, "contained ECC error"},
    {95, XidClass::kFatal, "uncontained ECC error"},
    {109, XidClass::kApplication, "context switch timeout"},
    {119, XidClass::kFatal, "GSP RPC timeout"},
    {120, XidClass::kFatal, "GSP error"},
    {140, XidClass::kFatal, "unrecovered ECC error"},
    {999, XidClass::kTransient, "unknown XID reported by NVML"},
};

const XidInfo* Find(std::uint64_t xid) {
  for (const XidInfo& info : kXids) {
    if (info.xid == xid) return &info;
  }
  return nullptr;
}

// 1714557600123 -> "2024-05-01T10:00:00.123Z".
std::string UtcStamp(std::int64_t ms) { return core::FormatRfc3339Millis(ms); }

// "XID 79 (fatal: GPU has fallen off the bus)"
std::string XidText(std::uint64_t xid, XidClass c) {
  std::string s = "XID ";
  s += std::to_string(xid);
  s += " (";
  s += XidClassName(c);
  const std::string_view what = XidDescription(xid);
  if (!what.empty()) {
    s += ": ";
    s += what;
  }
  s += ')';
  return s;
}

void Append(std::string& reasons, const std::string& reason) {
  if (!reasons.empty()) reasons += "; ";
  reasons += reason;
}

}  // namespace

XidClass ClassifyXid(std::uint64_t xid) {
  const XidInfo* info = Find(xid);
  return info != nullptr ? info->cls : XidClass::kTransient;
}

std::string_view XidClassName(XidClass c) {
  switch (c) {
    case XidClass::kApplication:
      return "application";
    case XidClass::kTransient:
      return "transient";
    case XidClass::kFatal:
      return "fatal";
  }
  return "unknown";
}

std::string_view XidDescription(std::uint64_t xid) {
  const XidInfo* info = Find(xid);
  return info != nullptr ? info->what : std::string_view();
}

HealthTracker::HealthTracker(HealthPolicy policy) : policy_(std::move(policy)) {}

void HealthTracker::OnSnapshot(const std::vector<Gpu>& gpus, std::int64_t now_ms) {
  (void)now_ms;  // a disappearance has no time of its own in the reason
  for (auto& [uuid, s] : gpus_) s.present = false;
  for (const Gpu& g : gpus) {
    State& s = gpus_[g.uuid];
    s.listed = true;
    s.present = true;
    s.backend = g.health;
    s.backend_reason = g.health == Health::kHealthy ? "" : g.health_reason;
    if (s.backend == Health::kUnhealthy && s.backend_reason.empty()) {
      s.backend_reason = "reported unhealthy";
    }
  }
}

void HealthTracker::Record(State& s, std::uint64_t xid, std::int64_t now_ms) const {
  const bool ignored = std::find(policy_.ignored_xids.begin(), policy_.ignored_xids.end(), xid) !=
                       policy_.ignored_xids.end();
  const XidClass c = ignored ? XidClass::kApplication : ClassifyXid(xid);
  if (c == XidClass::kApplication) return;
  if (c == XidClass::kFatal) {
    if (!s.fatal) s.fatal = XidRecord{xid, now_ms};
    return;
  }
  // The window restarts at the latest transient XID (a clock stepped back keeps the later time).
  if (!s.transient || now_ms >= s.transient->at_ms) s.transient = XidRecord{xid, now_ms};
}

void HealthTracker::OnXid(const XidEvent& e, std::int64_t now_ms) {
  if (e.uuid.empty()) {
    for (auto& [uuid, s] : gpus_) Record(s, e.xid, now_ms);
    return;
  }
  Record(gpus_[e.uuid], e.xid, now_ms);
}

GpuHealth HealthTracker::Of(const std::string& uuid, std::int64_t now_ms) const {
  const auto it = gpus_.find(uuid);
  if (it == gpus_.end() || !it->second.listed) return {Health::kUnhealthy, "unknown GPU"};
  const State& s = it->second;
  std::string reasons;
  if (!s.present) Append(reasons, "GPU " + uuid + " disappeared");
  if (s.present && s.backend == Health::kUnhealthy) Append(reasons, s.backend_reason);
  if (s.fatal) {
    Append(reasons, XidText(s.fatal->xid, XidClass::kFatal) + " at " + UtcStamp(s.fatal->at_ms) +
                        "; unhealthy until gpumux restarts");
  }
  if (s.transient && now_ms - s.transient->at_ms < policy_.transient_recovery_ms) {
    Append(reasons, XidText(s.transient->xid, XidClass::kTransient) + " at " +
                        UtcStamp(s.transient->at_ms) + "; healthy again at " +
                        UtcStamp(s.transient->at_ms + policy_.transient_recovery_ms) +
                        " without another XID");
  }
  if (reasons.empty()) return {};
  return {Health::kUnhealthy, std::move(reasons)};
}

std::vector<std::string> HealthTracker::TakeChanges(std::int64_t now_ms) {
  std::vector<std::string> changed;
  for (auto& [uuid, s] : gpus_) {
    if (!s.listed) continue;
    const Health now = Of(uuid, now_ms).health;
    if (!s.reported || *s.reported != now) {
      s.reported = now;
      changed.push_back(uuid);
    }
  }
  return changed;
}

}  // namespace gpumux::gpu
