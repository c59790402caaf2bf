// Runs many experiments (policies x seeds) on one workload, in parallel threads. Each
// experiment owns its ledger, policy and random streams, so results do not depend on the
// thread count or on scheduling; they come back ordered by (policy order, seed order).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "gpumux/sim/experiment.h"

namespace gpumux::sim {

// The most seeds one sweep may run (each seed is an experiment per policy, and every result is
// kept for the report).
inline constexpr std::size_t kMaxSweepSeeds = 10'000;

struct SweepConfig {
  std::vector<std::string> policies;
  std::vector<std::uint64_t> seeds{42};
  double load = 1.3;                      // finite and > 0
  std::optional<std::string> replay_dir;  // arrivals and ranks from a replay folder (one seed)
  int threads = 0;                        // 0 = hardware concurrency
  ArrivalLimit limit;                     // arrivals per experiment (protocol.h)
  ExperimentOptions experiment;
};

// Called after each experiment finishes, from the thread that ran it, serialised by the sweep.
using ProgressFn =
    std::function<void(const ExperimentResult&, std::size_t done, std::size_t total)>;

// Checks everything before the first experiment starts: the policies, the seeds (1 to
// kMaxSweepSeeds), the load, and the size of every seed's arrival plan against `limit`
// (CheckStudyArrivals), or the replay folder. Then runs policies x seeds (x 1 for a replay),
// seed by seed: a seed's plan is built once, shared by its policies and dropped after the
// last, so memory stays at about one plan per thread whatever the number of seeds.
core::Result<std::vector<ExperimentResult>> RunSweep(const Workload& workload,
                                                     const SweepConfig& config,
                                                     const ProgressFn& progress = {});

}  // namespace gpumux::sim
