// How much GPU any policy could allocate on the FGD study's protocol: an upper bound from a
// linear program, and a packing found with hindsight, so that the gap between a policy and the
// best possible is known from both sides.
//
// Pods arrive and never leave; a policy places each or lets it fail, and may also decline one
// (fgd-sat-reserve does). So after any prefix of the arrivals, the GPU milli it has allocated is
// that of some subset of the prefix that fits the cluster. The best such subset is the offline
// optimum OPT(prefix), and no policy, online or not, allocates more. Two numbers bracket it:
//
// - LpAllocationBound: the optimum of a relaxation of that packing, so >= OPT. Nodes of one
//   shape (CPU, memory, GPU count, model, GPU memory) are pooled and pods of one shape are
//   counted; x[p][t] >= 0 pods of shape p go on nodes of shape t (only where one such pod fits
//   one such node and the node's model is one the pod accepts), at most as many as arrived:
//     per node shape t, summed over its nodes:  CPU, host memory, GPU milli and GPU memory;
//     per node shape t:  whole-GPU pods' GPUs + shares above 500 milli <= its GPUs (a GPU that
//                        holds a share above half holds no other such share and no whole pod);
//   maximise the GPU milli placed. Pooling relaxes the per-node limits (a pod is never split in
//   a real packing), so the bound is valid and may be loose, never tight by luck. Solved by
//   GLPK's simplex (Debian's libglpk).
// - HindsightPacking, LpGuidedPacking: real packings of the prefix (so <= OPT), placed through
//   the one placement engine: the pods in arrival order (what the policy does online) or sorted
//   largest first, or where the LP's solution puts them. Knowing every arrival in advance is
//   what no scheduler can; the best of them shows how much of the LP's gap is real.
// - LpAllocationBoundAbove: the same LP for a policy held to a floor under its allocation curve
//   (issue 32: "at least FGD at every 5 % step"): the most any policy, online or not, could
//   allocate while its curve stays at or above another policy's at the given columns. A column X
//   of the curve is the mean, over the arrivals whose rounded arrived demand is X %, of the GPU
//   milli allocated after each (sim/experiment.h); a pod placed counts fully in the columns after
//   its own and, in its own column, in the share of that column's arrivals from it on. The LP's
//   pods are then counted per shape and per those weights (the pods of a floor's column one by
//   one), with a row per floor: the placed milli, so weighted, is at least the floor's. A pod is
//   placed when it arrives or never, so its milli counts in every later column: the rows are
//   exact for the policy's mean, and every policy that meets the floors is a solution.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "gpumux/core/cluster.h"
#include "gpumux/core/request.h"
#include "gpumux/core/result.h"
#include "gpumux/sim/experiment.h"
#include "gpumux/sim/protocol.h"

namespace gpumux::sim {

struct LpBound {
  double alloc_pct = 0;            // the LP optimum: GPU milli placed, % of the cluster's
  std::size_t pod_shapes = 0;      // distinct GPU pod shapes in the prefix (the LP's rows; with
                                   // curve floors, pod classes: shape and floor weights)
  std::size_t node_shapes = 0;     // distinct node shapes
  std::size_t variables = 0;       // (pod shape, node shape) pairs that fit
  std::size_t configurations = 0;  // ways to fill one GPU counted (0: too many, left out)
  double solve_ms = 0;
};

// The LP bound for placing any subset of `pods` on `cluster` (CPU-only pods are left out: they
// allocate no GPU). Errors: the solver's failure (kFailedPrecondition), with GLPK's status.
core::Result<LpBound> LpAllocationBound(const core::Cluster& cluster,
                                        std::span<const core::Request> pods);

// A floor under the allocation curve: the mean allocation over column `column`'s arrivals is at
// least `alloc_pct` % of the cluster's GPU milli.
struct CurveFloor {
  int column = 0;
  double alloc_pct = 0;
};

// The LP bound (above) on `arrivals` (every arrival in arrival order, CPU-only pods too: each is
// an event of the curve) for a policy whose curve meets every floor. A floor whose column holds
// none of the arrivals is left out (the bound stays valid). Errors: as LpAllocationBound, and
// kFailedPrecondition when no packing meets the floors.
core::Result<LpBound> LpAllocationBoundAbove(const core::Cluster& cluster,
                                             std::span<const core::Request> arrivals,
                                             std::span<const CurveFloor> floors);

// The arrivals of `plan` whose running GPU demand stays within `demand_pct` % of the cluster's
// GPU milli (+ half a percent: the study's curve column X holds the events whose rounded arrived
// % is X), in arrival order.
std::vector<Arrival> DemandPrefix(const Workload& workload, const ArrivalPlan& plan,
                                  double demand_pct);

struct HindsightResult {
  double alloc_pct = 0;  // GPU milli placed, % of the cluster's
  std::string policy;    // how it was packed: "fgd, largest first", "LP-guided fgd", ...
};

// The prefix's pods placed by each of `policies`, in arrival order and sorted by GPU milli
// (total, then per GPU) largest first, ties in arrival order; the best of them.
core::Result<HindsightResult> HindsightPacking(const Workload& workload, const ArrivalPlan& plan,
                                               std::span<const Arrival> prefix,
                                               std::span<const std::string> policies,
                                               std::uint64_t seed);

// A real packing guided by the LP's solution: each pod shape's whole pods (the LP's x rounded
// down) are placed on the node shapes the LP chose, largest pods first, each on the node of that
// shape that fgd scores best; pods that find no room there go anywhere fgd finds. <= OPT.
core::Result<HindsightResult> LpGuidedPacking(const Workload& workload, const ArrivalPlan& plan,
                                              std::span<const Arrival> prefix, std::uint64_t seed);

// One seed at one demand point.
struct BoundRow {
  std::uint64_t seed = 0;
  double demand_pct = 0;     // the curve column: arrived GPU demand, % of the cluster's
  std::size_t arrivals = 0;  // in the prefix
  LpBound lp;
  HindsightResult hindsight;
  // With a policy to stay above (BoundOptions::at_least): its curve's column here, and the LP
  // bound for a policy at or above its curve at every `floor_step` % from 50 % to this column.
  std::optional<double> at_least_pct;
  std::optional<LpBound> lp_above;
};

struct BoundOptions {
  std::vector<std::string> hindsight_policies;
  int threads = 0;  // seeds in parallel (0 = all cores)
  // A policy whose curve the bound's second LP stays above, at columns 50, 50 + step, ... up to
  // the demand point; empty: none.
  std::string at_least;
  int floor_step = 5;
};

// Every (seed, demand) of the study's plans (made at load max(demands) / 100: at 130 % the plans
// of `gpumux simulate`'s default load), seeds on options.threads threads; rows in seed order,
// then demand order. `progress`, when set, is called after each seed (under a lock) with the
// seeds done. With options.at_least, the floors are that policy's curve on the same plan, each
// column less 0.01 % (a column is rounded twice to 2 decimals: a curve whose rounded column is at
// least the floor policy's has a mean at most 0.01 below it).
core::Result<std::vector<BoundRow>> ComputeBounds(
    const Workload& workload, std::span<const std::uint64_t> seeds, std::span<const double> demands,
    const BoundOptions& options, const std::function<void(std::size_t done)>& progress = {});

}  // namespace gpumux::sim
