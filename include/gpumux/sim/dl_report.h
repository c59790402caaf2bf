// Sweeps and reports of the JCT simulator: policies x loads, a table, JSON, CSV of every job
// and an HTML report (a JCT CDF per policy and load, and a per-GPU timeline of who shared
// which GPU when).
#pragma once

#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "gpumux/core/result.h"
#include "gpumux/sim/dl_sim.h"

namespace gpumux::sim {

struct DlWorkloadInput {
  double load = 1;
  std::vector<JobSpec> jobs;
};

struct DlSweepConfig {
  std::vector<std::string> policies;
  std::vector<DlWorkloadInput> inputs;  // one per load
  DlSimOptions options;                 // policy is overwritten per run
  int threads = 0;                      // 0 = all cores
};

// Runs every (load, policy) pair; results in load-major, then policy order, whatever the
// thread count. `progress` (may be empty) is called after each run, from the calling thread.
core::Result<std::vector<DlResult>> RunDlSweep(
    const policy::WorkloadProfile& profile, const DlSweepConfig& config,
    const std::function<void(const DlResult&, std::size_t done, std::size_t total)>& progress);

// What the report says about its inputs.
struct DlReportContext {
  std::string workload;     // e.g. "embedded iadeep-like (seed 42)" or the job file
  std::string mix;          // class mix name or spec
  std::string profile;      // profile name and source
  int gpus = 0;
  std::uint64_t seed = 0;
  DlSimOptions options;
  std::vector<std::string> policies;
  std::vector<double> loads;
  std::string baseline = "iadeep";  // the margin line compares "gpumux" with this policy
};

// Per load: a row per policy (average, median, p95 JCT, makespan, queueing, utilisation) and
// the margin of gpumux over the baseline on average JCT.
void WriteDlTable(std::ostream& out, const std::vector<DlResult>& results,
                  const DlReportContext& ctx);
void WriteDlJson(std::ostream& out, const std::vector<DlResult>& results,
                 const DlReportContext& ctx);
// One row per (load, policy, job): load,policy,job,class,submit_s,start_s,finish_s,jct_s,...
void WriteDlJobsCsv(std::ostream& out, const std::vector<DlResult>& results);
// index.html (self-contained, inline SVG), results.json, jobs.csv; files written atomically.
core::Result<void> WriteDlReportDir(const std::string& dir, const std::vector<DlResult>& results,
                                    const DlReportContext& ctx);
// The HTML page alone.
void WriteDlHtml(std::ostream& out, const std::vector<DlResult>& results,
                 const DlReportContext& ctx);

// (baseline - gpumux) / baseline average JCT in percent, for the results at `load`; nullopt
// when either is missing.
std::optional<double> DlMargin(const std::vector<DlResult>& results, double load,
                               const std::string& baseline);

}  // namespace gpumux::sim
