// Workload profiles for deep-learning training jobs: how a workload class behaves alone on a
// GPU at each batch size, and (optionally) measured slowdowns when classes share a GPU.
//
// Model of one class c (the contract every consumer relies on):
//   * solo step time t_c(b) seconds per minibatch, GPU memory m_c(b) MiB and the fraction of
//     the step during which the GPU runs kernels, busy_c(b) in (0, 1], tabulated at a few batch
//     sizes and interpolated linearly in b between them (extrapolated linearly from the end
//     segments, clamped to stay positive);
//   * statistical efficiency (Pollux, OSDI'21) relative to the default batch b0:
//       E_c(b) = (phi + b0) / (phi + b)       phi = the gradient noise scale, in samples
//     so one sample processed at batch b is worth E_c(b) samples at b0;
//   * work to reach the target: target_epochs * dataset_samples samples at b0, i.e. "useful"
//     (efficiency-weighted) samples. A job's progress rate is (b / step time) * E_c(b).
// Worked example (vgg16 in the default profile): b0 = 512, t(512) = 0.1652 s, phi = 2182.7:
//   E(768) = (2182.7 + 512) / (2182.7 + 768) = 0.9132; goodput(512) = 512/0.1652 = 3099/s.
// Profiles are immutable values; share them freely across threads.
//
// Ranges (Validate refuses anything outside them, naming the class or set and the field), so
// that every derived quantity (rates, the solo time in microseconds, interpolated memory)
// stays finite and far inside int64:
//   gpu memory_mib    1..core::kMaxGpuMemoryMib     companion_overhead  [0, 1)
//   classes           1..kMaxProfileClasses, distinct non-empty names
//   default_batch     1..kMaxProfileBatch           noise_scale         (0, kMaxNoiseScale]
//   dataset_samples   1..kMaxDatasetSamples         target_epochs       (0, kMaxTargetEpochs]
//   solo points       1..kMaxSoloPoints, ascending batch, each with
//     batch 1..kMaxProfileBatch, step_s [kMinStepSeconds, kMaxStepSeconds],
//     memory_mib 1..core::kMaxGpuMemoryMib, gpu_busy (0, 1]
//   a class's own companion_overhead: negative (none) or [0, 1)
//   derived: SoloSeconds() (target at b0, alone) at most kMaxSoloSeconds
//   measured sets     at most kMaxMeasuredSets; 2..kMaxMeasuredMembers classes each, batches
//                     1..kMaxProfileBatch, slowdowns [1, kMaxMeasuredSlowdown]
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gpumux/core/quantity.h"
#include "gpumux/core/result.h"

namespace gpumux::policy {

inline constexpr std::size_t kMaxProfileClasses = 1000;
inline constexpr int kMaxProfileBatch = 1 << 20;
inline constexpr std::size_t kMaxSoloPoints = 1000;
inline constexpr double kMinStepSeconds = 1e-6;   // the simulators' clock tick
inline constexpr double kMaxStepSeconds = 86400;  // a day per minibatch
inline constexpr double kMaxNoiseScale = 1e12;
inline constexpr std::int64_t kMaxDatasetSamples = 1'000'000'000'000;
inline constexpr double kMaxTargetEpochs = 1e6;
inline constexpr double kMaxSoloSeconds = 1e9;  // about 32 years alone on a GPU
inline constexpr std::size_t kMaxMeasuredSets = 10'000;
inline constexpr std::size_t kMaxMeasuredMembers = 16;
inline constexpr double kMaxMeasuredSlowdown = 1000;

struct SoloPoint {
  int batch = 0;
  double step_s = 0;         // seconds per minibatch, alone on the GPU
  core::MiB memory_mib = 0;  // GPU memory the job needs at this batch size
  double gpu_busy = 1;       // fraction of the step the GPU runs this job's kernels
};

struct ClassProfile {
  std::string name;
  std::vector<SoloPoint> solo;       // ascending batch, at least one point
  int default_batch = 0;             // b0: the best solo batch size
  double noise_scale = 0;            // phi, the gradient noise scale in samples (> 0)
  std::int64_t dataset_samples = 0;  // samples per epoch
  double target_epochs = 0;          // epochs at b0 to reach the target accuracy
  // This class's own companion overhead (interference.h: the extra slowdown it suffers per
  // companion), in [0, 1); negative = none of its own, the profile's companion_overhead.
  double companion_overhead = -1;

  double StepSeconds(int batch) const;
  // Interpolated and rounded up; at least 1, and saturates at core::kMaxGpuMemoryMib * 2^20
  // for batch sizes far beyond the table (never a GPU's worth: it does not fit).
  core::MiB MemoryMib(int batch) const;
  double GpuBusy(int batch) const;
  double Efficiency(int batch) const;
  // Useful samples per second alone on a GPU at `batch`: batch / t(batch) * E(batch).
  double SoloGoodput(int batch) const;
  // The same with another noise scale than the class's: one job's own (the simulator's hidden
  // truth) or an estimate from its observed gradients. phi <= 0 means the class's.
  double Efficiency(int batch, double phi) const;
  double SoloGoodput(int batch, double phi) const;
  // Useful samples to reach the target.
  double WorkSamples() const { return target_epochs * static_cast<double>(dataset_samples); }
  // Seconds to reach the target alone at b0.
  double SoloSeconds() const { return WorkSamples() / SoloGoodput(default_batch); }
};

// A measured co-location: classes (any order, repeats allowed) at given batch sizes, and the
// measured slowdown (co-located step time / solo step time) of each member, in the same order.
struct MeasuredSet {
  std::vector<std::string> classes;
  std::vector<int> batches;
  std::vector<double> slowdown;
  std::string source;  // where the numbers come from
};

struct WorkloadProfile {
  std::string name;
  std::string gpu_model;  // the GPU the numbers describe
  core::MiB gpu_memory_mib = 0;
  // Extra slowdown factor per companion for overheads the busy-time model ignores (context
  // switches, cache and memory-bandwidth contention): see interference.h.
  double companion_overhead = 0.05;
  std::vector<ClassProfile> classes;
  std::vector<MeasuredSet> measured;

  const ClassProfile* Find(std::string_view class_name) const;
  // The companion overhead a member of class `c` suffers: the class's own if it has one, else
  // the profile's (also for an unknown class, c == nullptr).
  double CompanionOverhead(const ClassProfile* c) const {
    return c != nullptr && c->companion_overhead >= 0 ? c->companion_overhead : companion_overhead;
  }
  // Checks every number against the ranges above, and every cross-reference; the error names
  // the class or set and the field at fault.
  core::Result<void> Validate() const;
};

// Batch sizes a tuner may choose for a class: `count` values spaced geometrically from
// lo * b0 to hi * b0 (IADeep: 33 values from 0.67 b0 to 2 b0), deduplicated, ascending, and
// only those whose memory fits `memory_limit` (0 = no limit). b0 is always included if it fits.
std::vector<int> BatchCandidates(const ClassProfile& c, core::MiB memory_limit, int count = 33,
                                 double lo = 0.67, double hi = 2.0);

}  // namespace gpumux::policy
