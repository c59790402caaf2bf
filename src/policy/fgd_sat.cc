#include "gpumux/policy/fgd_sat.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "gpumux/core/check.h"

namespace gpumux::policy {
namespace {

constexpr std::size_t kMaxGpusPerNode = static_cast<std::size_t>(core::kMaxGpusPerNode);

std::int64_t SigmoidScore(double before, double after) {
  return static_cast<std::int64_t>(
      std::floor(100.0 / (1.0 + std::exp(-(before - after) / 1000.0))));
}

}  // namespace

double NodeSaturationFragmentation(core::MilliCpu cpu_free,
                                   std::span<const core::MilliGpu> gpu_free, core::ModelId model,
                                   std::span<const TypicalPod> typical) {
  core::MilliGpu all_free = 0;
  for (core::MilliGpu g : gpu_free) all_free += g;
  double s = 0;
  for (const TypicalPod& p : typical) {
    if (p.gpu_milli == 0 || ((p.model_mask >> model) & 1U) == 0) {
      s += p.weight * static_cast<double>(all_free);
      continue;
    }
    std::int64_t copies = 0;
    if (p.gpu_count == 1) {
      for (core::MilliGpu g : gpu_free) copies += g / p.gpu_milli;
    } else {
      std::int64_t fitting = 0;
      for (core::MilliGpu g : gpu_free) fitting += g >= p.gpu_milli ? 1 : 0;
      copies = fitting / p.gpu_count;
    }
    if (p.cpu_milli > 0)
      copies = std::min(copies, std::max<core::MilliCpu>(cpu_free, 0) / p.cpu_milli);
    s += p.weight * static_cast<double>(all_free - copies * p.gpu_milli * p.gpu_count);
  }
  return s;
}

double FgdSatPolicy::Mixed(core::MilliCpu cpu_free, std::span<const core::MilliGpu> gpu_free,
                           core::ModelId model) const {
  // F and S in one pass over the typical pods and GPUs (the hot path: called once per GPU tried).
  // The same floating-point operations in the same order as NodeFragmentation and
  // NodeSaturationFragmentation, so M equals F + 0.1 * S computed by those two bit for bit
  // (fgd_sat_test checks it).
  enum Bucket {
    kQ1LackBoth,
    kQ2LackGpu,
    kQ3Satisfied,
    kQ4LackCpu,
    kXlSatisfied,
    kXrLackCpu,
    kNoAccess,
    kBuckets
  };
  core::MilliGpu all_free = 0;
  for (core::MilliGpu g : gpu_free) all_free += g;
  const auto all = static_cast<double>(all_free);
  double bucket[kBuckets] = {};
  double s = 0;
  for (const TypicalPod& p : typical_) {
    const bool cpu_ok = cpu_free >= p.cpu_milli;
    if (p.gpu_milli == 0) {
      bucket[cpu_ok ? kXlSatisfied : kXrLackCpu] += p.weight * all;
      s += p.weight * all;
      continue;
    }
    if (((p.model_mask >> model) & 1U) == 0) {
      bucket[kNoAccess] += p.weight * all;
      s += p.weight * all;
      continue;
    }
    int fitting = 0;
    core::MilliGpu remnant = 0;
    std::int64_t share_copies = 0;
    for (core::MilliGpu g : gpu_free) {
      if (g >= p.gpu_milli) {
        ++fitting;
        share_copies += g / p.gpu_milli;
      } else {
        remnant += g;
      }
    }
    const bool gpu_ok = fitting >= p.gpu_count;
    if (gpu_ok && cpu_ok) {
      bucket[kQ2LackGpu] += p.weight * static_cast<double>(remnant);
      bucket[kQ3Satisfied] += p.weight * static_cast<double>(all_free - remnant);
    } else {
      const Bucket b = gpu_ok ? kQ4LackCpu : (cpu_ok ? kQ2LackGpu : kQ1LackBoth);
      bucket[b] += p.weight * all;
    }
    std::int64_t copies = p.gpu_count == 1 ? share_copies : fitting / p.gpu_count;
    if (p.cpu_milli > 0) {
      copies = std::min(copies, std::max<core::MilliCpu>(cpu_free, 0) / p.cpu_milli);
    }
    s += p.weight * static_cast<double>(all_free - copies * p.gpu_milli * p.gpu_count);
  }
  double f = 0;
  for (int b = 0; b < kBuckets; ++b) {
    if (b != kQ3Satisfied) f += bucket[b];
  }
  return f + kSaturationWeight * s;
}

double FgdSatPolicy::MixedBefore(const core::NodeView& node) {
  const auto n = static_cast<std::size_t>(node.index);
  if (before_cache_.size() <= n) before_cache_.resize(n + 1, {~std::uint64_t{0}, 0.0});
  auto& [generation, value] = before_cache_[n];
  if (generation != node.generation) {
    const core::ModelId model = node.gpu_count() > 0 ? node.gpu_model[0] : 0;
    value = Mixed(node.cpu_free, node.gpu_free_milli, model);
    generation = node.generation;
  }
  return value;
}

std::pair<std::int64_t, std::vector<int>> FgdSatPolicy::Evaluate(const Cycle& cycle,
                                                                 const core::NodeView& node) {
  const core::Request& r = cycle.request;
  const double before = MixedBefore(node);
  const std::size_t gpus = node.gpu_free_milli.size();
  GPUMUX_CHECK(gpus <= kMaxGpusPerNode, "too many GPUs on one node");
  std::array<core::MilliGpu, kMaxGpusPerNode> after{};
  std::copy(node.gpu_free_milli.begin(), node.gpu_free_milli.end(), after.begin());
  const std::span<const core::MilliGpu> after_span(after.data(), gpus);
  const core::MilliCpu cpu_after = node.cpu_free - r.cpu_milli;
  const core::ModelId model = gpus > 0 ? node.gpu_model[0] : 0;

  const bool fractional = r.gpu_count == 1 && r.gpu_milli < core::kMilliPerGpu &&
                          r.sharing == core::GpuSharing::kShared;
  if (fractional) {
    std::int64_t best = -1;
    int best_gpu = -1;
    for (std::size_t i = 0; i < gpus; ++i) {
      if (!core::GpuAdmits(node, static_cast<int>(i), r, cycle.models)) continue;
      after[i] -= r.gpu_milli;
      const std::int64_t s = SigmoidScore(before, Mixed(cpu_after, after_span, model));
      after[i] += r.gpu_milli;
      if (s > best) {
        best = s;
        best_gpu = static_cast<int>(i);
      }
    }
    GPUMUX_CHECK(best_gpu >= 0, "node does not fit");
    return {best, {best_gpu}};
  }
  std::vector<int> chosen;
  if (r.wants_gpu()) {
    chosen = LowestIndexGpus(cycle, node);
    for (int g : chosen) {
      auto& free = after[static_cast<std::size_t>(g)];
      free = r.sharing == core::GpuSharing::kExclusive ? 0 : free - r.gpu_milli;
    }
  }
  return {SigmoidScore(before, Mixed(cpu_after, after_span, model)), std::move(chosen)};
}

std::int64_t FgdSatPolicy::Score(const Cycle& cycle, const core::NodeView& node) {
  return Evaluate(cycle, node).first;
}

std::vector<int> FgdSatPolicy::ChooseGpus(const Cycle& cycle, const core::NodeView& node) {
  return Evaluate(cycle, node).second;
}

}  // namespace gpumux::policy
