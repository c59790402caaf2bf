// What the cluster state holds, as plain values (ClusterState::Snapshot), and its JSON: the body
// of the extender's GET /inspect and what `kubectl gpumux nodes` reads. Kept apart from the state
// so that rendering is not the state's business.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "gpumux/core/quantity.h"
#include "gpumux/kube/enforcement.h"
#include "gpumux/sched/bookings.h"

namespace gpumux::sched {

struct TenantSnapshot {
  std::string pod;  // namespace/name ("uid" when the pod is not known)
  std::string uid, container;
  core::MilliGpu gpu_milli = 0;
  core::MiB gpu_mem_mib = 0;
  bool exclusive = false;
  std::string state;  // BookingStateName, or "unknown"
};

struct GpuSnapshot {
  int index = 0;
  std::string uuid, model;
  core::MiB memory_mib = 0;
  bool healthy = true;
  core::MilliGpu free_milli = 0;
  core::MiB free_mib = 0;
  std::vector<TenantSnapshot> tenants;
  kube::GpuEnforcement enforcement;  // what the node holds its sharing tenants to
};

struct NodeSnapshot {
  std::string name;
  std::vector<GpuSnapshot> gpus;
  bool gpus_from_annotation = true;  // false: the defaults (no gpumux.io/gpus annotation)
  std::string gpus_error;
  bool unschedulable = false;
  std::int64_t gpu_mem_unit_mib = 0;  // 0: not published
  std::string gpu_mem_unit_error;
};

struct Unusable {
  std::string name, reason;
};

struct GrantProblem {
  std::string pod, uid, state, problem;
};

struct ProfileSnapshot {
  std::string name;
  std::size_t classes = 0, measured_sets = 0;
};

// StateCounters, as cluster_state.h defines it, is part of the snapshot.
struct StateCounters {
  // Gauges (now): usable nodes and their GPUs, bookings by state, unusable nodes.
  std::int64_t nodes = 0, gpus = 0, grants_bound = 0, grants_assumed = 0;
  std::int64_t grants_binding = 0, grants_in_conflict = 0;
  // Totals since start: assumed grants that expired, conflicts seen (a bound grant overlapping
  // another, an assumption evicted by a bound pod, a pod bound elsewhere than its grant names),
  // ledger rebuilds.
  std::int64_t grants_expired = 0, grant_conflicts = 0, rebuilds = 0;
  std::int64_t unreadable_grants = 0;  // gpumux.io/grant annotations that did not decode
  std::int64_t unusable_nodes = 0;     // nodes known by name that gpumux cannot use (now)
  std::int64_t unreadable_nodes = 0;   // node objects without a name (total seen)
  // Learned interference (SetProfile): observed sets in the profile in use (now), profiles
  // swapped in and failed reads of the observations (totals).
  std::int64_t observed_sets = 0, profile_swaps = 0, observation_read_failures = 0;
};

struct StateSnapshot {
  std::string policy;
  bool synced = false;
  std::int64_t gpu_mem_unit_mib = 0;
  StateCounters counters;
  std::vector<NodeSnapshot> nodes;                 // the usable nodes, in name order
  std::vector<Unusable> unusable_nodes;            // by name
  std::vector<GrantProblem> grants_not_in_ledger;  // by uid
  std::optional<ProfileSnapshot> profile;          // co-location policies only
};

// The JSON of a snapshot (GET /inspect).
nlohmann::json StateJson(const StateSnapshot& snapshot);

}  // namespace gpumux::sched
