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

#include <cstddef>
#include <cstdint>
#include <istream>
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

// The largest load factor (arrived GPU demand / cluster GPU capacity) an experiment takes: its
// curves have a column per percent of it.
inline constexpr double kMaxLoad = 100;

// The most arrivals one experiment may have unless its caller raises the limit
// (`gpumux simulate --max-arrivals`): a million arrivals take seconds to tens of seconds by
// policy and about 0.5 GB (the plan, the ledger's tenants and the per-arrival curves).
inline constexpr std::size_t kDefaultMaxArrivals = 1'000'000;

// A bound on the arrivals of one experiment, and how errors name it (the CLI names its flag).
struct ArrivalLimit {
  std::size_t max = kDefaultMaxArrivals;
  std::string name = "max_arrivals";
  // "more than 1000000 arrivals, the limit per experiment (max_arrivals)"
  std::string TooMany() const {
    return "more than " + std::to_string(max) + " arrivals, the limit per experiment (" + name +
           ")";
  }
};

// The plan for (seed, load), built in O(n log n + arrivals) for n pods, or an error
// (kFailedPrecondition, naming the seed, the load and the limit) when it would hold more than
// `limit.max` arrivals; nothing of that size is built before the limit is found out.
core::Result<ArrivalPlan> MakeStudyArrivals(std::span<const core::Request> pods,
                                            const core::Cluster& cluster, std::uint64_t seed,
                                            double load, const ArrivalLimit& limit);
// The same without a limit, for callers whose inputs are known (tests, benchmarks).
ArrivalPlan MakeStudyArrivals(std::span<const core::Request> pods, const core::Cluster& cluster,
                              std::uint64_t seed, double load);
// How many arrivals MakeStudyArrivals(pods, cluster, seed, load, limit) makes, or its error,
// with the same random draws but without building names or node ranks.
core::Result<std::size_t> CountStudyArrivals(std::span<const core::Request> pods,
                                             const core::Cluster& cluster, std::uint64_t seed,
                                             double load, const ArrivalLimit& limit);
// The first seed's error of CountStudyArrivals over `seeds`, or nothing: the check a sweep makes
// before it starts. The pods are sorted once; a seed whose plan can only thin the list (its GPU
// demand is at or above the load) costs nothing when the list itself fits the limit.
core::Result<void> CheckStudyArrivals(std::span<const core::Request> pods,
                                      const core::Cluster& cluster,
                                      std::span<const std::uint64_t> seeds, double load,
                                      const ArrivalLimit& limit);

// A replay folder: <dir>/arrival.csv (seq,pod,source_pod,node,gpu_index) and <dir>/nodes.csv
// (node_prefixed,node,prefix), read whole through io::ReadInputFile (arrival.csv first) and
// checked before anything runs; errors name the file and line:
//   nodes.csv:   every cluster node exactly once; `prefix` its rank, 0..nodes-1, distinct;
//                `node_prefixed` non-empty and distinct;
//   arrival.csv: `seq` 0, 1, 2, ... in row order; `pod` non-empty and distinct (a name
//                arrives once); `source_pod` in `pods`; `node` empty (the study failed it) or
//                a node_prefixed of nodes.csv; `gpu_index` empty when `node` is, or when the
//                pod asks no GPU, else exactly the pod's GPU count of distinct indices
//                ("0", "1-3") each below that node's GPU count; at least one and at most
//                `limit.max` rows.
core::Result<ArrivalPlan> LoadReplay(const std::string& dir, std::span<const core::Request> pods,
                                     const core::Cluster& cluster, const ArrivalLimit& limit = {});
// The same from the two files' contents, touching no file (what a fuzzer calls). `nodes_source`
// and `arrival_source` name them in errors; the plan's origin is "replay <arrival_source>".
core::Result<ArrivalPlan> ParseReplay(std::istream& nodes_csv, const std::string& nodes_source,
                                      std::istream& arrival_csv, const std::string& arrival_source,
                                      std::span<const core::Request> pods,
                                      const core::Cluster& cluster, const ArrivalLimit& limit = {});

// Total milli-GPU asked by a list of arrivals.
core::MilliGpu TotalGpuMilli(std::span<const core::Request> pods);

}  // namespace gpumux::sim
