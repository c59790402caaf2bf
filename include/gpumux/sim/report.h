// Reports of simulation sweeps: a terminal table, JSON, CSV, an HTML page with charts, the
// pod-by-pod placement file, and the comparison with the FGD study's published results.
#pragma once

#include <cstdint>
#include <istream>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "gpumux/core/result.h"
#include "gpumux/sim/experiment.h"

namespace gpumux::sim {

// The study's analysis_allo_discrete.csv: workload,sc_policy,tune,seed,total_gpus,0..130.
struct ExpectedRow {
  std::string workload;
  std::string policy;  // the study's name, e.g. "06-FGD"
  std::string tune;    // e.g. "1.3"
  std::uint64_t seed = 0;
  Curve curve;
};
struct ExpectedTable {
  std::string source;
  std::vector<ExpectedRow> rows;
  // The row for (workload, gpumux policy name, load, seed), or null.
  const ExpectedRow* Find(const std::string& workload, const std::string& policy, double load,
                          std::uint64_t seed) const;
};
core::Result<ExpectedTable> ParseExpected(std::istream& in, const std::string& source);
core::Result<ExpectedTable> LoadExpected(const std::string& path);

// "fgd" -> "06-FGD"; "" for policies the study did not run.
std::string StudyPolicyName(const std::string& policy);

struct ReportContext {
  std::string nodes_source;
  std::string pods_source;
  std::string workload;
  std::int64_t nodes = 0;
  std::int64_t gpus = 0;
  double load = 1.3;
  std::vector<std::string> policies;
  std::vector<std::uint64_t> seeds;
  std::optional<std::string> replay_dir;
  const ExpectedTable* expected = nullptr;  // optional
  bool timing = true;                       // false: wall times written as 0 (byte-stable output)
  int percentage_of_nodes_to_score = 100;   // ExperimentOptions; named in the output when < 100
};

// Per-policy aggregate over seeds.
struct PolicySummary {
  std::string policy;
  int runs = 0;
  double alloc_100_mean = 0, alloc_100_std = 0;
  double alloc_130_mean = 0, alloc_130_std = 0;
  std::optional<double> study_100_mean, study_130_mean;  // over the same seeds, when all present
  std::optional<double> study_100_std, study_130_std;
  double unallocated_gpus_130_mean = 0;
  double failed_pods_mean = 0;
  double frag_pct_130_mean = 0;
  double wall_ms_median = 0;
  Curve mean_curve;
  Curve study_mean_curve;
};
std::vector<PolicySummary> Summarise(const std::vector<ExperimentResult>& results,
                                     const ReportContext& context);

void WriteTable(std::ostream& out, const std::vector<ExperimentResult>& results,
                const ReportContext& context);
void WriteJson(std::ostream& out, const std::vector<ExperimentResult>& results,
               const ReportContext& context);
void WriteCsv(std::ostream& out, const std::vector<ExperimentResult>& results,
              const ReportContext& context);
// Writes <dir>/index.html (charts + tables), <dir>/results.json, <dir>/curves.csv.
core::Result<void> WriteReportDir(const std::string& dir,
                                  const std::vector<ExperimentResult>& results,
                                  const ReportContext& context);
// seq,pod,source_pod,node,gpu_index with node written as "%04d-<name>" from its rank, the format
// of the study's replay arrival.csv. Needs results run with record_placements.
core::Result<void> WritePlacements(const std::string& path, const ExperimentResult& result,
                                   const Workload& workload, const ArrivalPlan& plan);

}  // namespace gpumux::sim
