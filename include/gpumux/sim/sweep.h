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

struct SweepConfig {
  std::vector<std::string> policies;
  std::vector<std::uint64_t> seeds{42};
  double load = 1.3;
  std::optional<std::string> replay_dir;  // arrivals and ranks from a replay folder (one seed)
  int threads = 0;                        // 0 = hardware concurrency
  ExperimentOptions experiment;
};

// Called after each experiment finishes, from the thread that ran it, serialised by the sweep.
using ProgressFn = std::function<void(const ExperimentResult&, std::size_t done, std::size_t total)>;

core::Result<std::vector<ExperimentResult>> RunSweep(const Workload& workload,
                                                     const SweepConfig& config,
                                                     const ProgressFn& progress = {});

}  // namespace gpumux::sim
