// kube-scheduler's HTTP extender protocol (filter, prioritize, bind, preempt) on top of
// ClusterState, independent of the HTTP server: a body in, a status and body out.
//
// Wire facts (PROTOCOLS.md): JSON keys are Go field names; with nodeCacheCapable the request
// has NodeNames and "Nodes":null, otherwise a full v1.NodeList in Nodes (and the reply returns
// Nodes). Scores are 0..10. A bad body is HTTP 400 with a message naming the field: a body that
// is not one JSON object, a repeated key, a missing or wrongly typed field, both NodeNames and
// Nodes (or neither), a node named twice, more than kMaxNodesPerRequest nodes or
// kMaxVictimsPerNode victims on a node, and at bind names that are not Kubernetes names (they
// become API paths).
// bind: books the GPUs (ClusterState::Assume), takes the node lock (node_lock.h) on nodes whose
// device plugin announces the handshake, near a hand-over of kube-scheduler's lease reads the
// node's pods fresh (bind.cc's fence), and creates the Binding with the grant annotation in it
// (its uid as precondition; the API server merges the annotation into the pod in the same
// write). When the fence's read or the Binding fails,
// the pod is read back: bound with this grant is success; not bound releases the lock (if this
// bind took it) and the booking, and the reply carries the reason; an outcome that cannot be
// read back after an answer that may have been applied (no answer, 408, 5xx) keeps both, and
// the watch settles it (never release GPUs a pod may hold). While another pod holds the
// node's lock, or the node's device plugin is starting or stopping (gpumux.io/device-plugin),
// bind keeps its booking and waits (up to `bind_wait`, for at most
// `max_waiting_binds` binds at once) for the node watch to show the lock released, then tries
// again; only past that is it refused ("node_busy") and kube-scheduler retries the pod later.
// Besides that bounded wait nothing blocks on anything slow but these API calls (GET + PATCH of
// the node on handshake nodes only, the Lease and the fence's LIST there, the Binding), each
// bounded by the client's
// request timeout.
// filter: a pod for which no node passes is reported to the requeuer (requeue.h), which asks
// kube-scheduler to retry it once the watch shows room may have been made.
// Thread safety: all methods may be called concurrently.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gpumux/core/log.h"
#include "gpumux/extender/requeue.h"
#include "gpumux/kube/api_client.h"
#include "gpumux/kube/node_lock.h"
#include "gpumux/sched/cluster_state.h"

namespace gpumux::extender {

// Bounds on what one verb body may list (a body beyond them is a 400 naming the field and the
// limit). kube-scheduler passes an extender only the nodes that passed its own filters, at most
// the cluster's 5,000 (the largest cluster Kubernetes supports); a node runs at most a few
// hundred pods (kubelet's maxPods is 110 by default).
inline constexpr std::size_t kMaxNodesPerRequest = 100'000;  // NodeNames, Nodes.items, victims
inline constexpr std::size_t kMaxVictimsPerNode = 10'000;    // Pods of one node's victims

enum class Verb : std::uint8_t { kFilter, kPrioritize, kBind, kPreempt };
std::string_view VerbName(Verb verb);

struct VerbReply {
  int http_status = 200;
  std::string body;  // JSON
  // For metrics: "" on success, else a short label ("bad_request", "no_fit", "conflict",
  // "api_error", "unknown_node", ...).
  std::string failure;
  int placements = 0;  // bind: 1 when a pod was bound
};

struct ExtenderOptions {
  // A node lock older than this is stale: its holder never got its devices (pod deleted before
  // the kubelet admitted it, kubelet or device plugin down), and bind may take it over.
  std::int64_t node_lock_ttl_seconds = 120;
  int node_lock_attempts = 4;  // tries of the lock's patch on 409 Conflict
  // How long a bind waits for another pod's node lock to be released, and how many binds may
  // wait at once (each holds an HTTP worker thread: keep some free for other verbs and probes).
  // kube-scheduler's extender timeout (httpTimeout, 5 s by default) must cover the wait plus
  // the bind's API calls.
  std::chrono::milliseconds bind_wait{3000};
  int max_waiting_binds = 4;
  // Optional: the node watch's view of the locks (waits are woken by it; without it a waiting
  // bind re-reads the node every `bind_poll`), and the requeuer (filter reports pods it turned
  // away). Both must outlive the extender.
  kube::NodeLockBoard* lock_board = nullptr;
  std::chrono::milliseconds bind_poll{250};
  Requeuer* requeuer = nullptr;
  // kube-scheduler's leader-election lease (scheduler-config.yaml). Two replicas may bind at
  // once only around a hand-over, so a bind on a handshake node is fenced (the node's pods read
  // fresh after its lock, bind.cc) while the lease was acquired less than `handover_window`
  // ago, or cannot be read; outside it the one leader's watch holds every grant, and the read
  // (a consistent LIST, O(the cluster's pods) on the API server) is saved. An empty name fences
  // every bind.
  std::string leader_lease_namespace = "gpumux-system";
  std::string leader_lease_name = "gpumux-scheduler";
  std::chrono::seconds handover_window{20};
  // One line per notable event (a stale or unreadable node lock taken over, a lock that could
  // not be released); may be empty.
  core::Logger log;
};

// prioritize's scores (0..10, kube-scheduler's MaxExtenderPriority) for the verdicts of one
// pod: 10 for the one node the policy would choose (the highest score, ties to the smaller
// rank, as policy::Engine::Decide), the other fitting nodes 0..9 by score, 0 for the rest.
std::vector<int> ExtenderScores(std::span<const sched::NodeVerdict> verdicts);

class VerbParserPool;  // the JSON parsers of the filter and prioritize bodies (extender.cc)

class Extender {
 public:
  // `api` may be null (no API server: bind answers an error); both must outlive the extender.
  Extender(sched::ClusterState& state, kube::KubeApi* api, ExtenderOptions options = {});
  ~Extender();
  Extender(const Extender&) = delete;
  Extender& operator=(const Extender&) = delete;
  VerbReply Handle(Verb verb, std::string_view body);
  int waiting_binds() const { return waiting_binds_.load(); }

 private:
  VerbReply Filter(std::string_view body);
  VerbReply Prioritize(std::string_view body);
  VerbReply Bind(std::string_view body);
  VerbReply Preempt(std::string_view body);
  // Bind's steps (bind.cc): which pod to which node, the pod itself, the node lock, the fence
  // (the node's pods read fresh), then the Binding with the grant annotation; a step that fails
  // answers bind's reply.
  struct BindTarget;
  tl::expected<BindTarget, VerbReply> BindTargetOf(std::string_view body) const;
  tl::expected<kube::PodInfo, VerbReply> PodToBind(const BindTarget& target);
  tl::expected<kube::AcquireResult, VerbReply> TakeNodeLock(const BindTarget& target,
                                                            const kube::Grant& grant);
  // Whether this bind may overlap another replica's (see ExtenderOptions::handover_window).
  bool NearAHandOver();
  std::optional<VerbReply> FenceNode(const BindTarget& target, const kube::Grant& grant,
                                     bool release_lock);
  VerbReply WriteGrantAndBind(const BindTarget& target, const kube::Grant& grant,
                              bool release_lock_on_failure);
  // Gives the booking back (and the node lock, when this bind took it).
  void Undo(const BindTarget& target, const kube::Grant& grant, bool release_lock);
  // The pods seen in the latest filter calls (bind carries only the pod's name and uid).
  void Remember(const kube::PodInfo& pod);
  std::optional<kube::PodInfo> Recall(const std::string& uid);
  // Hands a pod the filter found no node for to the requeuer (when there is one); one a policy
  // `held` (declined a node it fits) with the time until it is overdue, to be retried then.
  void TurnedAway(const kube::PodInfo& pod, bool held);
  sched::ClusterState* state_;
  kube::KubeApi* api_;
  ExtenderOptions options_;
  std::mutex recent_mu_;
  std::unordered_map<std::string, kube::PodInfo> recent_;
  std::deque<std::string> recent_order_;
  std::atomic<int> waiting_binds_{0};
  std::unique_ptr<VerbParserPool> parsers_;
};

}  // namespace gpumux::extender
