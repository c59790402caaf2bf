// Internal to gpumux_policy: the parts `fgd` and `fgd-sat` share. Both score a node by how much a
// node measure M grows when the request is placed there hypothetically (FGD's step); they differ
// only in M (fgd: F, fragmentation.h; fgd-sat: F + 0.1 S, fgd_sat.h).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <utility>
#include <vector>

#include "gpumux/core/check.h"
#include "gpumux/policy/fragmentation.h"
#include "gpumux/policy/policy.h"

namespace gpumux::policy::detail {

// F and, when kWithSaturation, S of one node state in a single pass over the typical pods and
// GPUs (the hot path: called once per GPU tried). F is accumulated into a bucket per class and
// the buckets (all but Q3) are added in class order, as the study does: the sum equals one
// running total but its rounding does not, and ties between nodes at score 50 (Delta F = +-1e-13)
// depend on it, so keep the study's order for placements to match pod by pod.
struct FragmentationTerms {
  double f = 0;  // F(n)
  double s = 0;  // S(n); 0 unless asked for
};

template <bool kWithSaturation>
FragmentationTerms MeasureFragmentation(core::MilliCpu cpu_free,
                                        std::span<const core::MilliGpu> gpu_free,
                                        core::ModelId model, std::span<const TypicalPod> typical) {
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
  FragmentationTerms t;
  for (const TypicalPod& p : typical) {
    const bool cpu_ok = cpu_free >= p.cpu_milli;
    if (p.gpu_milli == 0) {
      bucket[cpu_ok ? kXlSatisfied : kXrLackCpu] += p.weight * all;
      if constexpr (kWithSaturation) t.s += p.weight * all;
      continue;
    }
    if (((p.model_mask >> model) & 1U) == 0) {
      bucket[kNoAccess] += p.weight * all;
      if constexpr (kWithSaturation) t.s += p.weight * all;
      continue;
    }
    int fitting = 0;
    core::MilliGpu remnant = 0;
    std::int64_t share_copies = 0;
    for (core::MilliGpu g : gpu_free) {
      if (g >= p.gpu_milli) {
        ++fitting;
        if constexpr (kWithSaturation) share_copies += g / p.gpu_milli;
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
    if constexpr (kWithSaturation) {
      std::int64_t copies = p.gpu_count == 1 ? share_copies : fitting / p.gpu_count;
      if (p.cpu_milli > 0) {
        copies = std::min(copies, std::max<core::MilliCpu>(cpu_free, 0) / p.cpu_milli);
      }
      t.s += p.weight * static_cast<double>(all_free - copies * p.gpu_milli * p.gpu_count);
    }
  }
  for (int b = 0; b < kBuckets; ++b) {
    if (b != kQ3Satisfied) t.f += bucket[b];
  }
  return t;
}

// FGD's step for a node measure M (a callable double(MilliCpu, span<const MilliGpu>, ModelId)):
//     score = floor(100 * sigmoid((M_before - M_after) / 1000))
// Fractional single-GPU requests try every admitting GPU in index order (the node's score is the
// best, the GPU the lowest-indexed one reaching it); other requests take the lowest-indexed
// admitting GPUs. M_before is cached per node while its generation is unchanged.
class FragmentationGradient {
 public:
  // Subtracted from a fractional request's score on one GPU, given the GPU's free milli before,
  // the request's milli and the node's free CPU before and after (fgd-sat-pair's loss).
  struct NoGpuPenalty {
    std::int64_t operator()(core::MilliGpu /*free*/, core::MilliGpu /*request*/,
                            core::MilliCpu /*cpu_before*/, core::MilliCpu /*cpu_after*/) const {
      return 0;
    }
  };

  template <class Measure, class GpuPenalty = NoGpuPenalty>
  std::pair<std::int64_t, std::vector<int>> Evaluate(const Cycle& cycle, const core::NodeView& node,
                                                     const Measure& measure,
                                                     const GpuPenalty& penalty = {}) {
    const core::Request& r = cycle.request;
    const std::size_t gpus = node.gpu_free_milli.size();
    GPUMUX_CHECK(gpus <= kMaxGpus, "too many GPUs on one node");
    const core::ModelId model = gpus > 0 ? node.gpu_model[0] : 0;
    const double before = Before(node, model, measure);
    std::array<core::MilliGpu, kMaxGpus> after{};
    std::copy(node.gpu_free_milli.begin(), node.gpu_free_milli.end(), after.begin());
    const std::span<const core::MilliGpu> after_span(after.data(), gpus);
    const core::MilliCpu cpu_after = node.cpu_free - r.cpu_milli;

    const bool fractional = r.gpu_count == 1 && r.gpu_milli < core::kMilliPerGpu &&
                            r.sharing == core::GpuSharing::kShared;
    if (fractional) {
      std::int64_t best = std::numeric_limits<std::int64_t>::min();
      int best_gpu = -1;
      for (std::size_t i = 0; i < gpus; ++i) {
        if (!core::GpuAdmits(node, static_cast<int>(i), r, cycle.models)) continue;
        after[i] -= r.gpu_milli;
        const std::int64_t s =
            SigmoidScore(before, measure(cpu_after, after_span, model)) -
            penalty(after[i] + r.gpu_milli, r.gpu_milli, node.cpu_free, cpu_after);
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
    return {SigmoidScore(before, measure(cpu_after, after_span, model)), std::move(chosen)};
  }

 private:
  static constexpr std::size_t kMaxGpus = static_cast<std::size_t>(core::kMaxGpusPerNode);

  static std::int64_t SigmoidScore(double before, double after) {
    const double x = (before - after) / 1000.0;
    return static_cast<std::int64_t>(std::floor(100.0 * (1.0 / (1.0 + std::exp(-x)))));
  }

  template <class Measure>
  double Before(const core::NodeView& node, core::ModelId model, const Measure& measure) {
    const auto n = static_cast<std::size_t>(node.index);
    if (cache_.size() <= n) cache_.resize(n + 1, {~std::uint64_t{0}, 0.0});
    auto& [generation, value] = cache_[n];
    if (generation != node.generation) {
      value = measure(node.cpu_free, node.gpu_free_milli, model);
      generation = node.generation;
    }
    return value;
  }

  // M(n) per node and the generation it was computed at.
  std::vector<std::pair<std::uint64_t, double>> cache_;
};

}  // namespace gpumux::policy::detail
