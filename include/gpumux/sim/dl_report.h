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
  std::uint64_t seed = 42;  // the run's seed (DlSimOptions::seed)
  std::vector<JobSpec> jobs;
};

struct DlSweepConfig {
  std::vector<std::string> policies;
  std::vector<DlWorkloadInput> inputs;             // one per (seed, load)
  DlSimOptions options;                            // policy and seed are overwritten per run
  const policy::WorkloadProfile* truth = nullptr;  // what the GPUs do (nullptr: the profile)
  int threads = 0;                                 // 0 = all cores
};

// Runs every (input, policy) pair; results in input-major, then policy order, whatever the
// thread count. `progress` (may be empty) is called after each run, from the calling thread.
core::Result<std::vector<DlResult>> RunDlSweep(
    const policy::WorkloadProfile& profile, const DlSweepConfig& config,
    const std::function<void(const DlResult&, std::size_t done, std::size_t total)>& progress);

// What the report says about its inputs.
// gpumux's own training-job policy, whose margins over the others the reports give.
inline constexpr const char* kOwnDlPolicy = "least-delay";

struct DlReportContext {
  std::string workload;                    // e.g. "embedded iadeep-like (seed 42)" or the job file
  std::string mix;                         // class mix name or spec
  std::string profile;                     // profile name and source (what the policies believe)
  std::string truth = "the same profile";  // what the simulated GPUs do
  int gpus = 0;
  std::uint64_t seed = 0;            // the first seed (the HTML report's)
  std::vector<std::uint64_t> seeds;  // every seed run (empty: just `seed`)
  DlSimOptions options;
  std::vector<std::string> policies;
  std::vector<double> loads;
  std::string baseline = "iadeep";  // the margin line compares kOwnDlPolicy with this policy
  // Runs measured on a cluster (gpumux report --from-cluster): the report says so, leaves out
  // what only a simulation has (tuner, seed, profile error) and shows `notes` instead (the
  // records, their time scales, jobs that did not finish).
  bool measured = false;
  std::vector<std::string> notes;
};

// Per load: a row per policy (average, median, p95 JCT, makespan, queueing, utilisation; the
// mean over the seeds when there are several) and the margins of gpumux over every other
// policy on average and p95 JCT (with, over several seeds, how many seeds gpumux won).
void WriteDlTable(std::ostream& out, const std::vector<DlResult>& results,
                  const DlReportContext& ctx);
void WriteDlJson(std::ostream& out, const std::vector<DlResult>& results,
                 const DlReportContext& ctx);
// One row per (load, policy, job): load,policy,job,class,submit_s,start_s,finish_s,jct_s,...
void WriteDlJobsCsv(std::ostream& out, const std::vector<DlResult>& results);
// index.html (self-contained, inline SVG; the first seed's runs), results.json and jobs.csv
// (every run); files written atomically.
core::Result<void> WriteDlReportDir(const std::string& dir, const std::vector<DlResult>& results,
                                    const DlReportContext& ctx);
// The HTML page alone.
void WriteDlHtml(std::ostream& out, const std::vector<DlResult>& results,
                 const DlReportContext& ctx);

// (baseline - gpumux) / baseline of a metric (default the average JCT) in percent, for the
// results at `load`, each side summed over its seeds; nullopt when either is missing.
std::optional<double> DlMargin(const std::vector<DlResult>& results, double load,
                               const std::string& baseline,
                               double DlMetrics::*metric = &DlMetrics::avg_jct_s);

}  // namespace gpumux::sim
