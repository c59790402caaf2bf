// Runs measured on a cluster, in the JCT simulator's terms, so that `gpumux report
// --from-cluster` writes the very tables and HTML report of `gpumux simulate --workload dl`
// (dl_report.h) and simulated and real runs read side by side.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "gpumux/core/quantity.h"
#include "gpumux/sim/dl_sim.h"

namespace gpumux::sim {

// One job as a cluster ran it; times in microseconds after the run's start (submit's clock).
struct MeasuredJob {
  std::string id;
  std::string cls;                        // "" when the job had no workload class
  core::Micros submit_us = 0;             // its create was sent
  std::optional<core::Micros> start_us;   // its pod started running
  std::optional<core::Micros> finish_us;  // its pod finished
  bool succeeded = false;                 // finished with phase Succeeded
  std::vector<std::string> gpus;          // "node/index" of the GPUs it held (from its grant)
};

// A DlResult (measured = true) named `label` at `load` (the report's grouping; a cluster run
// shows as load 1 / its time scale). Jobs that succeeded make the JCT statistics (average,
// median, p95, makespan from the first submit to the last finish, queueing from submit to
// start, a job seen only once it had finished starting at its finish); every job that started
// makes the per-GPU timeline, one lane per GPU in `gpus` (sorted by node, then index as a
// number; extra names from `gpu_names` first, so that idle GPUs show), a job still running at
// the end drawn to the run's end. gpu_busy is the time-mean share of those GPUs holding a job
// over [first submit, last finish]; gpu_util is not measured (NaN: shown as "-"). A job with
// several GPUs is on each of their lanes.
DlResult MeasuredRun(const std::string& label, double load, const std::vector<MeasuredJob>& jobs,
                     const std::vector<std::string>& gpu_names = {});

}  // namespace gpumux::sim
