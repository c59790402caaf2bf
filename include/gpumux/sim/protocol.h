// The FGD study's simulation protocol (shared/FGD-PROTOCOL.md §2): which pods arrive, in which
// order, and the node ranks that break score ties.
//
// MakeStudyArrivals, for a seed:
//  1. shuffle the pod list (sorted by name first);
//  2. resample to the load factor: target T = load x cluster GPU milli. If the list's total
//     milli is below T, repeatedly draw a pod uniformly from the name-sorted list; stop at the
//     first draw whose per-GPU milli would push the running total above T (the study compares
//     per-GPU milli, an upstream quirk kept here), else append a copy "<name>-tuned-<i>" and add
//     its total milli. If the total is above T, remove uniformly drawn pods until it is <= T;
//  3. rank nodes: a uniform permutation of the nodes sorted by name (smaller rank wins ties).
// Each step draws from its own named random stream of the seed, so the study's structure is
// reproduced exactly while the generator is gpumux's own (not Go's math/rand): per-seed results
// differ from the study's, means over seeds agree (see README).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "gpumux/core/cluster.h"
#include "gpumux/core/request.h"
#include "gpumux/core/result.h"

namespace gpumux::sim {

struct Arrival {
  std::size_t pod = 0;  // index into the original pod list
  std::string name;     // the pod's own name, or "<name>-tuned-<i>" for a resampled copy
  // Replay only: where the study placed it ("" = failed) and on which GPUs.
  std::string expected_node;
  std::vector<int> expected_gpus;
};

struct ArrivalPlan {
  std::vector<Arrival> arrivals;
  std::vector<std::int64_t> node_rank;  // per cluster node index
  bool has_expected = false;            // replay with the study's placements
  std::string origin;                   // "seed 42" or "replay <dir>"
};

ArrivalPlan MakeStudyArrivals(std::span<const core::Request> pods, const core::Cluster& cluster,
                              std::uint64_t seed, double load);

// Reads <dir>/arrival.csv (seq,pod,source_pod,node,gpu_index) and <dir>/nodes.csv
// (node_prefixed,node,prefix). Every source_pod must be in `pods` and every node in `cluster`.
core::Result<ArrivalPlan> LoadReplay(const std::string& dir, std::span<const core::Request> pods,
                                     const core::Cluster& cluster);

// Total milli-GPU asked by a list of arrivals.
core::MilliGpu TotalGpuMilli(std::span<const core::Request> pods);

}  // namespace gpumux::sim
