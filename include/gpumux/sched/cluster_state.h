// The extender's picture of the cluster: nodes and their GPUs, and every pod's grant, kept in
// one core::Ledger and judged by the one policy::Engine (the same code the simulator runs).
//
// Fed by the API server's list + watch (Set*/Upsert*/Remove*), read by the extender's verbs.
// After a restart the ledger is rebuilt from the pods' gpumux.io/grant annotations, so nothing
// is granted twice.
//
// Every pod's booking is a state machine of its own (bookings.h: the table of events and
// transitions, and the rule above all others: a pod the API server shows bound with its grant
// holds that grant, whatever this state believed). A released grant is remembered so that its
// annotation on a *pending* pod does not book it again; "conflict": the pod is bound with a
// grant that is not in the ledger because it overlaps another bound grant (counted in
// grant_conflicts and logged) or its node is unusable or not known (yet); shown by Inspect
// either way.
//
// Nodes: a node whose object does not decode (DecodeNode) or that the cluster model cannot
// take (a negative capacity, more than 64 GPUs, a GPU model beyond the 64th) is kept by name
// as unusable with that reason: unresolvable for every pod, counted and shown by Inspect. It
// never takes the other nodes with it. A name the state does not know at all is retriable
// (kUnknownNode): the node may be new and the watch a moment behind, or the state not synced.
//
// Thread safety: every public method takes one internal mutex; verbs hold it for the
// computation only (microseconds to a few milliseconds), never across I/O. Lines for
// `options.log` are collected under the mutex and written after it is released, so `log` may
// be called from several threads at once and may itself call into the state; it must not throw.
// Cost: Evaluate is O(names) plus policy scores, memoised per node until the node changes;
// a change to the node set or to a node's spec rebuilds the ledger (O(nodes + grants)).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gpumux/core/log.h"
#include "gpumux/core/result.h"
#include "gpumux/kube/grant.h"
#include "gpumux/kube/objects.h"
#include "gpumux/policy/registry.h"
#include "gpumux/sched/bookings.h"
#include "gpumux/sched/snapshot.h"

namespace gpumux::sched {

using Clock = std::function<std::int64_t()>;  // unix seconds

struct ClusterStateOptions {
  std::string policy = "fgd";
  policy::PolicyContext context;  // typical pods for fgd, interference model, ...
  // The co-location policies' workload profile (first-fit, iadeep, gpumux), replaceable with
  // SetProfile. When set, it overrides context.profile, context.interference (a
  // ProfileInterference over it) and context.jobs (a view of the ledger's tenants: each one's
  // class from its pod's gpumux.io/workload-class, at the class's default batch, no progress
  // or step-time report). nullptr: the context as given.
  std::shared_ptr<const policy::WorkloadProfile> profile;
  kube::NodeDefaults defaults;
  std::int64_t grant_ttl_seconds = 60;
  // MiB per unit of gpumux.io/gpu-mem in pods (1..kMaxGpuMemUnitMib). A node whose device
  // plugin publishes another unit (gpumux.io/gpu-mem-unit-mib) is unresolvable for pods that
  // ask for gpu-mem.
  std::int64_t gpu_mem_unit_mib = 1;
  // What every shared request requires of its GPUs' enforcement (core/cluster.h bits; the
  // extender's --require-enforcement), on top of the pod's own gpumux.io/require-enforcement.
  core::Enforcement required_enforcement = core::kEnforcesNothing;
  core::Logger log;  // one line per notable event; may be empty
};

// One node's answer for one pod.
struct NodeVerdict {
  enum class Kind : std::uint8_t {
    kFits,
    kDoesNotFit,    // resources are taken now; preemption could help
    kUnresolvable,  // never on this node as it is (too few GPUs, wrong model, unusable node)
    kDeclined,      // fits, but the policy would rather wait
    kUnknownNode,   // the state does not know the node (yet): retriable, not unresolvable
  };
  Kind kind = Kind::kFits;
  std::int64_t score = 0;  // the policy's raw score, when kFits
  std::string reason;      // for humans, when not kFits
  // The engine's tie-break rank of a known node: among equal scores the smaller wins, as in
  // policy::Engine::Decide (the simulator's choice).
  std::int64_t rank = 0;
};

struct BookingView {
  BookingState state = BookingState::kNone;
  std::optional<kube::Grant> grant;  // what the pod holds or claims; empty when kNone
  bool in_ledger = false;
  std::string problem;  // kConflict: why it is not in the ledger; kNone: why it was dropped
};

class ClusterState {
 public:
  // Error if the policy is unknown.
  static core::Result<std::unique_ptr<ClusterState>> Create(ClusterStateOptions options,
                                                            Clock clock);
  ~ClusterState();

  // --- fed by the watch (objects as JSON from the API server) ---
  void SetNodes(std::span<const nlohmann::json> nodes);  // a full list: replaces all nodes
  void UpsertNode(const nlohmann::json& node);
  void RemoveNode(std::string_view name);
  void SetPods(std::span<const nlohmann::json> pods);  // a full list: replaces all pods
  void UpsertPod(const nlohmann::json& pod);
  void RemovePod(const nlohmann::json& pod);
  // Marks the state as synced with the API server (readyz).
  void MarkSynced();
  bool synced() const;

  // The pod as last seen from the API server, if it asks gpumux for anything.
  std::optional<kube::PodInfo> FindPod(const std::string& uid) const;
  // Whether the pod with this uid may still be waiting for the kubelet to allocate its devices:
  // it is known (FindPod), not finished, not being deleted, and not Running (a Running pod's
  // containers were created, so its devices were allocated). Bind classifies the node lock's
  // holder with it (HolderState).
  bool PodAwaitsDevices(const std::string& uid) const;

  // Replaces the co-location policies' profile (ClusterStateOptions::profile) with `profile`,
  // e.g. the shipped one with learned observations added; `observed_sets` is reported in the
  // counters. The policy and engine are rebuilt under the state's lock, so a verb sees either
  // the old profile or the new one, never a mix; the old profile is released once no verb
  // uses it. The ledger is not rebuilt. O(policy construction).
  void SetProfile(std::shared_ptr<const policy::WorkloadProfile> profile,
                  std::size_t observed_sets);
  void CountObservationReadFailure();

  // --- the verbs ---
  // One verdict per name, in order. Names the state does not know are kUnknownNode; unusable
  // nodes are unresolvable with their reason.
  // With Reasons::kSkip, failing nodes get no reason text (prioritize does not need it).
  enum class Reasons : std::uint8_t { kExplain, kSkip };
  std::vector<NodeVerdict> Evaluate(const kube::PodInfo& pod,
                                    std::span<const std::string_view> names,
                                    Reasons reasons = Reasons::kExplain);
  std::vector<NodeVerdict> Evaluate(const kube::PodInfo& pod, std::span<const std::string> names);
  // Picks the GPUs on `node` for every container and books them as an assumed grant (replacing
  // an earlier assumed grant of the same pod). Error, changing nothing, if it does not fit, if
  // the pod is bound, or if an earlier bind of it has an unknown outcome (binding).
  core::Result<kube::Grant> Assume(const kube::PodInfo& pod, const std::string& node);
  // The grant is written and the Binding is about to be created: assumed -> binding. False when
  // the pod no longer holds `grant` (evicted by a pod seen bound on its GPUs, expired,
  // deleted): then the Binding must not be created.
  bool BeginBinding(const std::string& uid, const kube::Grant& grant);
  // The API server bound the pod with `grant` (the Binding succeeded, or the pod was read back
  // bound with it): as if the watch had shown it bound.
  void ConfirmBound(const std::string& uid, const kube::Grant& grant);
  // Bind failed and the pod is known not to be bound with `grant`: give the GPUs back (if `uid`
  // still holds `grant` assumed or binding; a bound grant is never released here).
  void Forget(const std::string& uid, const kube::Grant& grant);
  // Where the pod's booking stands; nullopt when the pod is not known.
  std::optional<BookingView> Booking(const std::string& uid) const;
  // Whether `pod` fits on `node` once the pods with UIDs `victims` are gone.
  bool FitsWithout(const kube::PodInfo& pod, const std::string& node,
                   std::span<const std::string> victims);
  // Releases assumed and binding grants older than the TTL; returns how many.
  int ExpireAssumed();

  // Every node's GPUs and their tenants, unusable nodes with their reasons, grants not in the
  // ledger with theirs, and the counters, as values (StateJson renders them for GET /inspect).
  StateSnapshot Snapshot() const;
  StateCounters counters() const;
  const std::string& policy_name() const;
  std::int64_t gpu_mem_unit_mib() const;
  // The state's clock (unix seconds): bind stamps grants and node locks with it.
  std::int64_t Now() const;
  // Seconds until `pod` is overdue (the policy's HoldLimitSeconds after its creation; <= 0: it
  // is), or nullopt when no wait limit applies to it.
  std::optional<std::int64_t> OverdueInSeconds(const kube::PodInfo& pod) const;

 private:
  struct Impl;
  explicit ClusterState(std::unique_ptr<Impl> impl);
  // `pod`, or `copy` made of it with every request marked overdue when the pod is older than
  // the policy's HoldLimitSeconds, and with options.required_enforcement added to what each
  // request requires (and a request_error for a share that asks for no memory, or no compute,
  // where that is required: nothing would hold it, and so its co-tenants, to a limit).
  const kube::PodInfo& Adjusted(const kube::PodInfo& pod, kube::PodInfo& copy) const;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpumux::sched
