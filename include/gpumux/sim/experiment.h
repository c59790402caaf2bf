// One experiment of the FGD study: pods arrive one at a time (never leave), each is placed by
// the policy through the placement engine or counted as failed, and the allocation ratio is
// recorded after every arrival (shared/FGD-PROTOCOL.md §5).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "gpumux/core/cluster.h"
#include "gpumux/core/request.h"
#include "gpumux/core/result.h"
#include "gpumux/policy/fragmentation.h"
#include "gpumux/sim/protocol.h"

namespace gpumux::sim {

// The inputs every experiment on a trace shares.
struct Workload {
  std::string name;  // pod list stem, e.g. "openb_pod_list_default"
  core::Cluster cluster;
  std::vector<core::Request> pods;          // the original, un-tuned pod list
  std::vector<policy::TypicalPod> typical;  // from `pods` (fragmentation.h)
};

// Builds the cluster and checks the pods (ranges; names ending in "-tuned-<digits>" after the
// name of another pod of the list are refused: the protocol gives its copies those names).
core::Result<Workload> MakeWorkload(std::string name, std::vector<core::NodeSpec> nodes,
                                    std::vector<core::Request> pods);

struct PlacementRecord {
  std::size_t seq = 0;
  std::string pod;
  std::string source_pod;
  core::NodeIndex node = -1;  // -1 = failed
  std::vector<int> gpus;
};

// The study's discretised curve: column X (0..max) = mean of alloc% over the events whose
// rounded arrived% is X, or over X-1..X+1 when there are none; empty when still none.
using Curve = std::vector<std::optional<double>>;

// Column `x` of a curve; none outside it.
std::optional<double> CurveColumn(const Curve& curve, int x);

// The curve column an event belongs to: `arrived` GPU milli, in whole % of the GPU milli of
// `total_gpus` GPUs, rounded as the study rounds (RoundHalfEven, below).
int ArrivedColumn(core::MilliGpu arrived, std::int64_t total_gpus);

struct ExperimentResult {
  std::string workload;
  std::string policy;
  std::uint64_t seed = 0;
  double load = 0;
  std::string origin;  // how arrivals were made: "seed 42" or "replay DIR"
  std::int64_t pods = 0;
  std::int64_t placed = 0;
  std::int64_t failed_pods = 0;
  Curve alloc_curve;       // allocated GPU milli, % of the cluster's
  Curve frag_ratio_curve;  // fragmented / idle GPU milli, %
  std::optional<double> alloc_pct_at_100;
  std::optional<double> alloc_pct_at_130;
  double unallocated_gpus_at_100 = 0;  // idle GPU capacity (GPUs) when arrived demand reached 100%
  double unallocated_gpus_at_130 = 0;
  double frag_pct_at_100 = 0;  // fragmentation ratio at the same points
  double frag_pct_at_130 = 0;
  core::MilliGpu used_gpu_milli = 0;  // at the end
  std::int64_t busy_gpus = 0;         // GPUs with any tenant, at the end
  core::MilliCpu used_cpu_milli = 0;
  double wall_ms = 0;
  // Replay only: placements that differ from the study's.
  std::int64_t replay_mismatches = -1;
  std::string first_mismatch;
  std::vector<PlacementRecord> placements;  // when requested
};

// Where a running experiment is, for progress lines.
struct ExperimentProgress {
  const std::string& policy;
  std::uint64_t seed = 0;
  std::size_t done = 0;   // arrivals handled
  std::size_t total = 0;  // arrivals in the plan
  double elapsed_s = 0;
};

struct ExperimentOptions {
  bool record_placements = false;
  bool check_invariants = false;  // ledger invariants after every arrival (slow; for tests)
  // The policies' knobs by name (policy::PolicyContext::knobs); a policy's own default for
  // those not given.
  std::map<std::string, double, std::less<>> knobs;
  // kube-scheduler's percentageOfNodesToScore: 100 (the study's protocol) decides among every
  // node; below 100, each arrival sees only the first NumFeasibleNodesToFind feasible nodes
  // from a start that moves on by the nodes examined, as kube-scheduler samples, and the policy
  // picks among those; 0 is kube-scheduler's adaptive default.
  int percentage_of_nodes_to_score = 100;
  // Called (when set) from the experiment's own thread, once `progress_interval` of wall time
  // has passed since the start or the last call, between two arrivals: an experiment shorter
  // than that says nothing. Experiments of a sweep run in parallel: it must be thread-safe.
  std::function<void(const ExperimentProgress&)> progress;
  std::chrono::milliseconds progress_interval{2000};
};

// Runs `policy_name` over `plan`. `seed` seeds the policy's own random stream. Errors: an
// unknown policy name; a plan that does not fit the workload (a pod index outside the pod
// list, node ranks not one per node, an arrival name that arrives twice).
core::Result<ExperimentResult> RunExperiment(const Workload& workload, const ArrivalPlan& plan,
                                             const std::string& policy_name, std::uint64_t seed,
                                             double load, const ExperimentOptions& options = {});

// How many feasible nodes kube-scheduler looks for before it stops filtering (v1.32,
// numFeasibleNodesToFind): every node below 100 nodes or at 100 %; else `percentage` of them
// (0: the adaptive 50 - nodes/125, at least 5), never fewer than 100.
std::size_t NumFeasibleNodesToFind(std::size_t nodes, int percentage);

// The study's rounding, as Python's round() does it: to nearest, ties to even, on the exact
// binary value of x.
double RoundHalfEven(double x, int decimals);

}  // namespace gpumux::sim
