// The FGD study's pods with departures: an option beside the study's protocol (which has none
// and stays the default, byte for byte). Where a reservation's price is paid: a pod that does
// not fit, or that the policy holds back, waits and is retried, and the waiting is measured.
//
// Protocol, per seed: the study's arrivals (MakeStudyArrivals at load `rounds`: the list
// resampled to `rounds` times the cluster's GPU capacity, in the study's order), arrival times a
// Poisson process, and each placed pod leaves after its duration. Durations: the pod's own run
// time from the trace (deletion - scheduled, else deletion - creation; TracePod::RunSeconds)
// where it has one above zero, else one drawn uniformly from those of the list, capped at
// `max_duration_s` (the trace's run times reach 145 days: uncapped, no run of a few hundred
// thousand arrivals gets near a steady state; 6 h caps 3.7 % of the default list's pods); a
// resampled copy has its original's. The arrival rate makes
// the offered GPU load `load` (Little's law: rate x mean(GPU milli x duration) over the arrivals
// = load x the cluster's GPU milli). A pod that does not fit, or that the policy declines, joins
// a FIFO queue; the queue is retried, in order, after every departure and when a held pod
// becomes overdue (its wait reaches the policy's hold limit: HoldLimitSeconds). The run ends at
// the last arrival; pods still queued then are counted as never placed.
//
// Measured: the time-weighted mean GPU allocation from the end of the warm-up (the first
// max_duration_s after the first arrival) to the last arrival (and at `kTimeColumns` even points
// of the whole span), and the waits of the placed GPU pods (placement -
// arrival), by kind: shares (one GPU, < 1000 milli), whole GPUs (one), several GPUs.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "gpumux/core/result.h"
#include "gpumux/sim/experiment.h"
#include "gpumux/sim/protocol.h"
#include "gpumux/sim/trace.h"

namespace gpumux::sim {

inline constexpr int kTimeColumns = 100;

enum class PodKind : std::uint8_t { kShare, kWhole, kMulti };
inline constexpr std::array<PodKind, 3> kPodKinds = {PodKind::kShare, PodKind::kWhole,
                                                     PodKind::kMulti};
std::string_view PodKindName(PodKind kind);    // "share", "whole", "multi"
PodKind KindOf(const core::Request& request);  // GPU pods only

struct KindWaits {
  std::int64_t arrived = 0;
  std::int64_t placed = 0;
  std::int64_t waited = 0;  // placed after waiting (not at arrival)
  std::int64_t never_placed = 0;
  double mean_wait_s = 0;  // over the placed
  double p95_wait_s = 0;
};

struct DepartureOptions {
  double load = 1.0;                 // offered GPU load
  double rounds = 30;                // arrived GPU demand, in cluster capacities
  double max_duration_s = 6 * 3600;  // durations are capped here; also the warm-up
};

struct DepartureResult {
  std::string workload;
  std::string policy;
  std::uint64_t seed = 0;
  double load = 0;        // offered GPU load
  double span_s = 0;      // first arrival to last
  double warmup_s = 0;    // left out of mean_alloc_pct
  std::int64_t pods = 0;  // arrivals (CPU-only included)
  double mean_alloc_pct = 0;
  std::vector<double> alloc_over_time;  // kTimeColumns + 1 points: 0 %, 1 %, ... of the span
  std::array<KindWaits, 3> waits{};     // by PodKind
  double wall_ms = 0;
};

// Per pod of `timed` (the pod list with its times, in the workload's order): its duration in
// seconds, in (0, max_duration_s]; an error when no pod has a run time.
core::Result<std::vector<double>> PodDurations(std::span<const TracePod> timed, std::uint64_t seed,
                                               double max_duration_s);

// One run. Errors: an unknown policy; a load or rounds outside (0, kMaxLoad]; more arrivals
// than kDefaultMaxArrivals; durations not one per pod.
core::Result<DepartureResult> RunWithDepartures(const Workload& workload,
                                                std::span<const double> durations,
                                                const std::string& policy, std::uint64_t seed,
                                                const DepartureOptions& departure,
                                                const ExperimentOptions& options = {});

}  // namespace gpumux::sim
