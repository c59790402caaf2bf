#include "gpumux/policy/workload_profile.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include "gpumux/core/cluster.h"

namespace gpumux::policy {
namespace {

// Linear interpolation of field f over the tabulated points, extrapolated from the end
// segments; a single point is constant.
template <typename F>
double Interpolate(const std::vector<SoloPoint>& pts, int batch, F f) {
  if (pts.size() == 1) return f(pts.front());
  std::size_t i = 1;
  while (i + 1 < pts.size() && pts[i].batch < batch) ++i;
  const SoloPoint& a = pts[i - 1];
  const SoloPoint& b = pts[i];
  const double w = static_cast<double>(batch - a.batch) / static_cast<double>(b.batch - a.batch);
  return f(a) + w * (f(b) - f(a));
}

std::string Where(const ClassProfile& c) { return "workload class '" + c.name + "'"; }

}  // namespace

double ClassProfile::StepSeconds(int batch) const {
  const double v = Interpolate(solo, batch, [](const SoloPoint& p) { return p.step_s; });
  return std::max(v, 1e-6);
}

core::MiB ClassProfile::MemoryMib(int batch) const {
  const double v = Interpolate(
      solo, batch, [](const SoloPoint& p) { return static_cast<double>(p.memory_mib); });
  // Validated tables extrapolate to at most about 2^53 MiB for any int batch; the bound keeps
  // the conversion defined for any table.
  constexpr double kCeiling = static_cast<double>(core::kMaxGpuMemoryMib) * 1048576.0;
  return static_cast<core::MiB>(std::clamp(std::ceil(v), 1.0, kCeiling));
}

double ClassProfile::GpuBusy(int batch) const {
  const double v = Interpolate(solo, batch, [](const SoloPoint& p) { return p.gpu_busy; });
  return std::clamp(v, 0.01, 1.0);
}

double ClassProfile::Efficiency(int batch) const { return Efficiency(batch, noise_scale); }

double ClassProfile::Efficiency(int batch, double phi) const {
  if (!(phi > 0)) phi = noise_scale;
  return (phi + default_batch) / (phi + batch);
}

double ClassProfile::SoloGoodput(int batch) const { return SoloGoodput(batch, noise_scale); }

double ClassProfile::SoloGoodput(int batch, double phi) const {
  return static_cast<double>(batch) / StepSeconds(batch) * Efficiency(batch, phi);
}

const ClassProfile* WorkloadProfile::Find(std::string_view class_name) const {
  for (const auto& c : classes) {
    if (c.name == class_name) return &c;
  }
  return nullptr;
}

namespace {

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

core::Result<void> Outside(const std::string& where, const std::string& field,
                           const std::string& value, const std::string& range) {
  return core::MakeError(core::ErrorCode::kInvalidArgument,
                         where + field + " " + value + " is outside " + range);
}

// `where` ends with ": " (or is empty).
core::Result<void> IntIn(const std::string& where, const std::string& field, std::int64_t v,
                         std::int64_t lo, std::int64_t hi) {
  if (v >= lo && v <= hi) return {};
  return Outside(where, field, std::to_string(v), std::to_string(lo) + ".." + std::to_string(hi));
}

enum class Low : std::uint8_t { kOpen, kClosed };

// (lo, hi] or [lo, hi]; NaN and infinities are outside.
core::Result<void> RealIn(const std::string& where, const std::string& field, double v, double lo,
                          Low low, double hi) {
  const bool above_low = low == Low::kOpen ? v > lo : v >= lo;
  if (above_low && v <= hi) return {};
  return Outside(where, field, Num(v),
                 std::string(low == Low::kOpen ? "(" : "[") + Num(lo) + ", " + Num(hi) + "]");
}

core::Result<void> ValidateClass(const ClassProfile& c) {
  const std::string where = Where(c) + ": ";
  if (c.solo.empty()) {
    return core::MakeError(core::ErrorCode::kInvalidArgument, Where(c) + " has no solo points");
  }
  if (c.solo.size() > kMaxSoloPoints) {
    return core::MakeError(core::ErrorCode::kInvalidArgument,
                           where + std::to_string(c.solo.size()) + " solo points, more than " +
                               std::to_string(kMaxSoloPoints));
  }
  for (std::size_t i = 0; i < c.solo.size(); ++i) {
    const SoloPoint& p = c.solo[i];
    const std::string at = where + "solo point " + std::to_string(i) + ": ";
    for (auto ok : {IntIn(at, "batch", p.batch, 1, kMaxProfileBatch),
                    RealIn(at, "step_s", p.step_s, kMinStepSeconds, Low::kClosed, kMaxStepSeconds),
                    IntIn(at, "memory_mib", p.memory_mib, 1, core::kMaxGpuMemoryMib),
                    RealIn(at, "gpu_busy", p.gpu_busy, 0, Low::kOpen, 1)}) {
      if (!ok) return ok;
    }
    if (i > 0 && p.batch <= c.solo[i - 1].batch) {
      return core::MakeError(core::ErrorCode::kInvalidArgument,
                             where + "solo points must have ascending batch sizes");
    }
  }
  for (auto ok :
       {IntIn(where, "default_batch", c.default_batch, 1, kMaxProfileBatch),
        RealIn(where, "noise_scale", c.noise_scale, 0, Low::kOpen, kMaxNoiseScale),
        IntIn(where, "dataset_samples", c.dataset_samples, 1, kMaxDatasetSamples),
        RealIn(where, "target_epochs", c.target_epochs, 0, Low::kOpen, kMaxTargetEpochs)}) {
    if (!ok) return ok;
  }
  // Negative: the class has none of its own (NaN is neither negative nor in range).
  if (!(c.companion_overhead < 0) && !(c.companion_overhead >= 0 && c.companion_overhead < 1)) {
    return core::MakeError(
        core::ErrorCode::kInvalidArgument,
        where + "companion_overhead " + Num(c.companion_overhead) + " is outside [0, 1)");
  }
  if (!(c.SoloSeconds() <= kMaxSoloSeconds)) {
    return core::MakeError(
        core::ErrorCode::kInvalidArgument,
        where + "reaching the target alone at the default batch takes " + Num(c.SoloSeconds()) +
            " s, more than " + Num(kMaxSoloSeconds) +
            " s (target_epochs x dataset_samples is too much work for its solo step time)");
  }
  return {};
}

}  // namespace

core::Result<void> WorkloadProfile::Validate() const {
  auto bad = [](std::string m) { return core::MakeError(core::ErrorCode::kInvalidArgument, m); };
  if (auto ok = IntIn("gpu ", "memory_mib", gpu_memory_mib, 1, core::kMaxGpuMemoryMib); !ok) {
    return ok;
  }
  if (!(companion_overhead >= 0 && companion_overhead < 1)) {
    return bad("companion_overhead " + Num(companion_overhead) + " is outside [0, 1)");
  }
  if (classes.empty()) return bad("a profile needs at least one workload class");
  if (classes.size() > kMaxProfileClasses) {
    return bad(std::to_string(classes.size()) + " workload classes, more than " +
               std::to_string(kMaxProfileClasses));
  }
  std::set<std::string> names;
  for (const auto& c : classes) {
    if (c.name.empty()) return bad("a workload class has an empty name");
    if (!names.insert(c.name).second) return bad("duplicate " + Where(c));
    if (auto ok = ValidateClass(c); !ok) return ok;
  }
  if (measured.size() > kMaxMeasuredSets) {
    return bad(std::to_string(measured.size()) + " measured sets, more than " +
               std::to_string(kMaxMeasuredSets));
  }
  for (std::size_t i = 0; i < measured.size(); ++i) {
    const MeasuredSet& m = measured[i];
    const std::string where = "measured set " + std::to_string(i);
    if (m.classes.size() < 2) return bad(where + " needs at least two classes");
    if (m.classes.size() > kMaxMeasuredMembers) {
      return bad(where + " has " + std::to_string(m.classes.size()) + " classes, more than " +
                 std::to_string(kMaxMeasuredMembers));
    }
    if (m.batches.size() != m.classes.size() || m.slowdown.size() != m.classes.size()) {
      return bad(where + ": classes, batches and slowdown must have the same length");
    }
    for (std::size_t k = 0; k < m.classes.size(); ++k) {
      if (Find(m.classes[k]) == nullptr) {
        return bad(where + " names unknown workload class '" + m.classes[k] + "'");
      }
      if (auto ok = IntIn(where + ": ", "batch", m.batches[k], 1, kMaxProfileBatch); !ok) {
        return ok;
      }
      if (!(m.slowdown[k] >= 1)) return bad(where + ": slowdowns must be >= 1");
      if (auto ok = RealIn(where + ": ", "slowdown", m.slowdown[k], 1, Low::kClosed,
                           kMaxMeasuredSlowdown);
          !ok) {
        return ok;
      }
    }
  }
  return {};
}

std::vector<int> BatchCandidates(const ClassProfile& c, core::MiB memory_limit, int count,
                                 double lo, double hi) {
  std::vector<int> out;
  const double b0 = c.default_batch;
  for (int i = 0; i < count; ++i) {
    const double f = count == 1 ? 1.0 : lo * std::pow(hi / lo, i / static_cast<double>(count - 1));
    out.push_back(std::max(1, static_cast<int>(std::lround(b0 * f))));
  }
  out.push_back(c.default_batch);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  if (memory_limit > 0) {
    std::erase_if(out, [&](int b) { return c.MemoryMib(b) > memory_limit; });
  }
  return out;
}

}  // namespace gpumux::policy
