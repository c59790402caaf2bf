#include "gpumux/policy/workload_profile.h"

#include <algorithm>
#include <cmath>
#include <set>

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
  const double v = Interpolate(solo, batch, [](const SoloPoint& p) {
    return static_cast<double>(p.memory_mib);
  });
  return std::max<core::MiB>(1, static_cast<core::MiB>(std::ceil(v)));
}

double ClassProfile::GpuBusy(int batch) const {
  const double v = Interpolate(solo, batch, [](const SoloPoint& p) { return p.gpu_busy; });
  return std::clamp(v, 0.01, 1.0);
}

double ClassProfile::Efficiency(int batch) const {
  return (noise_scale + default_batch) / (noise_scale + batch);
}

double ClassProfile::SoloGoodput(int batch) const {
  return static_cast<double>(batch) / StepSeconds(batch) * Efficiency(batch);
}

const ClassProfile* WorkloadProfile::Find(std::string_view class_name) const {
  for (const auto& c : classes) {
    if (c.name == class_name) return &c;
  }
  return nullptr;
}

core::Result<void> WorkloadProfile::Validate() const {
  auto bad = [](std::string m) { return core::MakeError(core::ErrorCode::kInvalidArgument, m); };
  if (gpu_memory_mib <= 0) return bad("gpu_memory_mib must be positive");
  if (!(companion_overhead >= 0 && companion_overhead < 1)) {
    return bad("companion_overhead must be in [0, 1)");
  }
  if (classes.empty()) return bad("a profile needs at least one workload class");
  std::set<std::string> names;
  for (const auto& c : classes) {
    if (c.name.empty()) return bad("a workload class has an empty name");
    if (!names.insert(c.name).second) return bad("duplicate " + Where(c));
    if (c.solo.empty()) return bad(Where(c) + " has no solo points");
    for (std::size_t i = 0; i < c.solo.size(); ++i) {
      const SoloPoint& p = c.solo[i];
      if (p.batch <= 0 || !(p.step_s > 0) || p.memory_mib <= 0 || !(p.gpu_busy > 0) ||
          p.gpu_busy > 1) {
        return bad(Where(c) + ": solo point " + std::to_string(i) +
                   " needs batch > 0, step_s > 0, memory_mib > 0 and 0 < gpu_busy <= 1");
      }
      if (i > 0 && p.batch <= c.solo[i - 1].batch) {
        return bad(Where(c) + ": solo points must have ascending batch sizes");
      }
    }
    if (c.default_batch <= 0) return bad(Where(c) + ": default_batch must be positive");
    if (!(c.noise_scale > 0)) return bad(Where(c) + ": noise_scale must be positive");
    if (c.dataset_samples <= 0) return bad(Where(c) + ": dataset_samples must be positive");
    if (!(c.target_epochs > 0)) return bad(Where(c) + ": target_epochs must be positive");
  }
  for (std::size_t i = 0; i < measured.size(); ++i) {
    const MeasuredSet& m = measured[i];
    const std::string where = "measured set " + std::to_string(i);
    if (m.classes.size() < 2) return bad(where + " needs at least two classes");
    if (m.batches.size() != m.classes.size() || m.slowdown.size() != m.classes.size()) {
      return bad(where + ": classes, batches and slowdown must have the same length");
    }
    for (std::size_t k = 0; k < m.classes.size(); ++k) {
      if (Find(m.classes[k]) == nullptr) {
        return bad(where + " names unknown workload class '" + m.classes[k] + "'");
      }
      if (m.batches[k] <= 0) return bad(where + ": batch sizes must be positive");
      if (!(m.slowdown[k] >= 1)) return bad(where + ": slowdowns must be >= 1");
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
