// The extender's picture of the cluster: nodes and their GPUs, and every pod's grant, kept in
// one core::Ledger and judged by the one policy::Engine (the same code the simulator runs).
//
// Fed by the API server's list + watch (Set*/Upsert*/Remove*), read by the extender's verbs.
// A grant is "assumed" from the moment bind picks its GPUs until the pod is seen bound to that
// node (then "bound"); an assumed grant whose pod never gets bound expires after `grant_ttl`.
// After a restart the ledger is rebuilt from the pods' gpumux.io/grant annotations, so nothing
// is granted twice: a grant that does not fit any more (e.g. the node shrank) is reported, not
// dropped silently, and is kept out of the ledger.
//
// Thread safety: every public method takes one internal mutex; verbs hold it for the
// computation only (microseconds to a few milliseconds), never across I/O.
// Cost: Evaluate is O(names) plus policy scores, memoised per node until the node changes;
// a change to the node set or to a node's spec rebuilds the ledger (O(nodes + grants)).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "gpumux/core/result.h"
#include "gpumux/k8s/grant.h"
#include "gpumux/k8s/objects.h"
#include "gpumux/policy/registry.h"

namespace gpumux::k8s {

using Clock = std::function<std::int64_t()>;  // unix seconds

struct ClusterStateOptions {
  std::string policy = "fgd";
  policy::PolicyContext context;  // typical pods for fgd, interference model, ...
  NodeDefaults defaults;
  std::int64_t grant_ttl_seconds = 60;
  // MiB per unit of gpumux.io/gpu-mem in pods (1..kMaxGpuMemUnitMib). A node whose device
  // plugin publishes another unit (gpumux.io/gpu-mem-unit-mib) is unresolvable for pods that
  // ask for gpu-mem.
  std::int64_t gpu_mem_unit_mib = 1;
  std::function<void(std::string_view)> log;  // one line per notable event; may be empty
};

// One node's answer for one pod.
struct NodeVerdict {
  enum class Kind : std::uint8_t {
    kFits,
    kDoesNotFit,   // resources are taken now; preemption could help
    kUnresolvable, // never on this node as it is (too few GPUs, wrong model, unknown node)
    kDeclined,     // fits, but the policy would rather wait
  };
  Kind kind = Kind::kFits;
  std::int64_t score = 0;  // the policy's raw score, when kFits
  std::string reason;      // for humans, when not kFits
};

struct StateCounters {
  std::int64_t nodes = 0, gpus = 0, grants_bound = 0, grants_assumed = 0;
  std::int64_t grants_expired = 0, grant_conflicts = 0, rebuilds = 0;
  std::int64_t unreadable_grants = 0;  // gpumux.io/grant annotations that did not decode
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
  std::optional<PodInfo> FindPod(const std::string& uid) const;
  // Whether the pod with this uid may still be waiting for the kubelet to allocate its devices:
  // it is known (FindPod), not finished, not being deleted, and not Running (a Running pod's
  // containers were created, so its devices were allocated). The node lock's holder_alive.
  bool PodAwaitsDevices(const std::string& uid) const;

  // --- the verbs ---
  // One verdict per name, in order. Names the state does not know are unresolvable.
  // With Reasons::kSkip, failing nodes get no reason text (prioritize does not need it).
  enum class Reasons : std::uint8_t { kExplain, kSkip };
  std::vector<NodeVerdict> Evaluate(const PodInfo& pod, std::span<const std::string_view> names,
                                    Reasons reasons = Reasons::kExplain);
  std::vector<NodeVerdict> Evaluate(const PodInfo& pod, std::span<const std::string> names);
  // Picks the GPUs on `node` for every container and books them as an assumed grant (replacing
  // an earlier assumed grant of the same pod). Error, changing nothing, if it does not fit.
  core::Result<Grant> Assume(const PodInfo& pod, const std::string& node);
  // The grant was written and the binding created: the pod is bound.
  void ConfirmBound(const std::string& uid);
  // Bind failed after Assume: give the GPUs back (if `uid` still holds `grant`).
  void Forget(const std::string& uid, const Grant& grant);
  // Whether `pod` fits on `node` once the pods with UIDs `victims` are gone.
  bool FitsWithout(const PodInfo& pod, const std::string& node,
                   std::span<const std::string> victims);
  // Releases assumed grants older than the TTL; returns how many.
  int ExpireAssumed();

  // JSON of every node's GPUs and their tenants (GET /inspect).
  nlohmann::json Inspect() const;
  StateCounters counters() const;
  const std::string& policy_name() const;
  std::int64_t gpu_mem_unit_mib() const;
  // The state's clock (unix seconds): bind stamps grants and node locks with it.
  std::int64_t Now() const;

 private:
  struct Impl;
  explicit ClusterState(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpumux::k8s
