// The extender's bind verb as named steps (extender.h): which pod to which node, the pod, the
// booking, the node lock, the fence (the node's pods as the API server has them), then the
// Binding, which carries the grant annotation.
//
// Two replicas of the extender (kube-scheduler's leader election picks which one is called) may
// bind for a while at once: the old leader's verbs in flight finish after the new one has begun.
// Three rules keep them from granting one GPU twice, each enforced by the API server, not by
// timing (docs/decisions.md, "A second scheduler replica"):
//  - the grant is written in the Binding itself, so a pod's grant is always that of the binder
//    whose Binding won (a pod already bound refuses the next one);
//  - on a node with the handshake, binds take turns through the node lock (a resourceVersion
//    compare-and-swap), and near a hand-over of kube-scheduler's lease the turn's winner reads
//    the node's pods fresh before it binds: one bound there with a grant this replica's watch
//    has not yet seen means its booking was made on a stale view, and it is given back
//    (kube-scheduler retries once the watch caught up);
//  - a lock held by a pod this replica has not seen is asked about, never taken for gone.
#include <algorithm>
#include <thread>

#include "gpumux/core/time.h"
#include "gpumux/extender/extender.h"
#include "src/extender/verb_args.h"

namespace gpumux::extender {
namespace {

using detail::BadRequest;
using detail::BindField;
using detail::NameKind;
using detail::ParseObject;
using nlohmann::json;

// The least time between two reads of a busy node's lock by one bind.
constexpr std::chrono::milliseconds kMinLockRetry{20};

// Whether a failed call may still have been applied by the API server: no answer (timeout,
// connection reset), a server-side timeout, or a server error that may come after the commit.
// Other 4xx answers (400, 403, 404, 409, 422, 429, ...) are refusals.
bool MayHaveBeenApplied(const kube::ApiError& error) {
  return error.http_status == 0 || error.http_status == 408 || error.http_status >= 500;
}

enum class BindOutcome : std::uint8_t { kBound, kNotBound, kUnknown };

struct PodReadBack {
  BindOutcome outcome = BindOutcome::kUnknown;
  std::string detail;  // what was seen, for humans
};

// Reads the pod back after an ambiguous answer: bound to `node` with `grant`, not (pending,
// bound elsewhere or with another grant, replaced, gone), or unknown (the read failed).
PodReadBack ReadPodBack(kube::KubeApi& api, const std::string& ns, const std::string& name,
                        const std::string& uid, const std::string& node, const kube::Grant& grant,
                        std::int64_t gpu_mem_unit_mib) {
  auto got = api.Get("/api/v1/namespaces/" + ns + "/pods/" + name);
  if (!got) {
    if (got.error().http_status == 404) return {BindOutcome::kNotBound, "the pod is gone"};
    return {BindOutcome::kUnknown, "reading the pod back failed: " + got.error().ToString()};
  }
  auto pod = kube::DecodePod(*got, gpu_mem_unit_mib);
  if (!pod) {
    return {BindOutcome::kUnknown, "the pod read back does not decode: " + pod.error().message};
  }
  if (pod->uid != uid) {
    return {BindOutcome::kNotBound, "the pod was replaced (uid " + pod->uid + ")"};
  }
  const bool written = pod->grant.has_value() && *pod->grant == grant;
  if (pod->node_name.empty()) {
    return {BindOutcome::kNotBound,
            written ? "the pod carries the grant but is not bound" : "the pod is not bound"};
  }
  if (pod->node_name == node && written) {
    return {BindOutcome::kBound, "the pod is bound to " + node + " with this grant"};
  }
  return {BindOutcome::kNotBound, "the pod is bound to " + pod->node_name +
                                      (written ? "" : " with another grant (or none)")};
}

// The lock's holder as the API server has it; nullopt when it is gone or was replaced (another
// uid under its name), or cannot be read (then the lock's age decides, as for a gone holder:
// node_lock.h's stale_after).
std::optional<kube::PodInfo> HolderFromApi(kube::KubeApi& api, const kube::NodeLock& held,
                                           std::int64_t gpu_mem_unit_mib) {
  auto got = api.Get("/api/v1/namespaces/" + kube::QueryEscape(held.ns) + "/pods/" +
                     kube::QueryEscape(held.name));
  if (!got) return std::nullopt;
  auto pod = kube::DecodePod(*got, gpu_mem_unit_mib);
  if (!pod || pod->uid != held.uid) return std::nullopt;
  return std::move(*pod);
}

// How the node lock's holder stands, for AcquireNodeLock (node_lock.h).
std::function<kube::HolderState(const kube::NodeLock&)> HolderStateOf(sched::ClusterState& state,
                                                                      kube::KubeApi& api,
                                                                      const std::string& node) {
  return [state = &state, api = &api, node](const kube::NodeLock& held) {
    // From the extender's own watch of pods (synced before any bind). A holder asks for GPUs,
    // so the state follows it until it is deleted; but a pod another replica of the extender
    // has just bound may not have reached this watch yet: one it does not know is read from
    // the API server, never taken for gone (its live lock would be taken over).
    std::optional<kube::PodInfo> holder = state->FindPod(held.uid);
    if (!holder) {
      holder = HolderFromApi(*api, held, state->gpu_mem_unit_mib());
      if (!holder) return kube::HolderState::kDone;
    } else if (!state->PodAwaitsDevices(held.uid)) {
      return kube::HolderState::kDone;
    }
    if (holder->finished() || holder->deleting || holder->phase == "Running") {
      return kube::HolderState::kDone;
    }
    if (holder->node_name.empty()) return kube::HolderState::kUnknown;
    return holder->node_name == node ? kube::HolderState::kNeedsDevices : kube::HolderState::kDone;
  };
}

}  // namespace

// Which pod bind puts on which node. The names go into API paths
// (/api/v1/namespaces/NS/pods/NAME, /api/v1/nodes/NODE): each is what Kubernetes allows for it,
// so that no body can aim a request elsewhere.
struct Extender::BindTarget {
  std::string ns, name, uid, node;
  std::string Key() const { return ns + "/" + name; }
};

namespace {

VerbReply BindFailed(std::string label, const std::string& message) {
  // The message may quote an API server's reply cut inside a character: written as U+FFFD.
  return VerbReply{200,
                   json{{"Error", message}}.dump(-1, ' ', false, json::error_handler_t::replace),
                   std::move(label), 0};
}
VerbReply BindDone() { return VerbReply{200, R"({"Error":""})", "", 1}; }

}  // namespace

VerbReply Extender::Bind(std::string_view body) {
  auto target = BindTargetOf(body);
  if (!target) return std::move(target.error());
  auto pod = PodToBind(*target);
  if (!pod) return std::move(pod.error());
  if (!pod->wants_gpu()) {
    // Nothing to grant (kube-scheduler only sends pods with a managed resource, but be exact).
    auto bound = kube::CreateBinding(*api_, target->ns, target->name, target->uid, target->node);
    if (!bound) return BindFailed("api_error", "binding: " + bound.error().ToString());
    return BindDone();
  }
  auto grant = state_->Assume(*pod, target->node);
  if (!grant) return BindFailed("no_fit", grant.error().message);
  auto lock = TakeNodeLock(*target, *grant);
  if (!lock) return std::move(lock.error());
  if (!lock->message.empty()) {
    options_.log.Info("bind took the node lock over",
                      {{"pod", target->Key()}, {"node", target->node}, {"detail", lock->message}});
  }
  // Release only a lock this bind took: a re-entered one may belong to an earlier bind of the
  // same pod that succeeded.
  const bool release = lock->outcome == kube::AcquireOutcome::kTaken && !lock->reentered;
  if (lock->outcome == kube::AcquireOutcome::kTaken && NearAHandOver()) {
    if (auto stale = FenceNode(*target, *grant, release)) return std::move(*stale);
  }
  return WriteGrantAndBind(*target, *grant, release);
}

bool Extender::NearAHandOver() {
  if (options_.leader_lease_name.empty()) return true;
  auto lease = api_->Get("/apis/coordination.k8s.io/v1/namespaces/" +
                         kube::QueryEscape(options_.leader_lease_namespace) + "/leases/" +
                         kube::QueryEscape(options_.leader_lease_name));
  if (!lease) return true;
  const json* spec = kube::JsonChild(*lease, "spec");
  auto acquired = core::ParseRfc3339(spec == nullptr ? "" : kube::JsonString(*spec, "acquireTime"));
  // Clocks of two machines: an acquireTime ahead of this one's counts as now.
  return !acquired || state_->Now() - *acquired < options_.handover_window.count();
}

// After the node lock: the node's pods as the API server has them now (a consistent read; the
// lock's compare-and-swap orders it after every Binding of an earlier turn). A pod bound there
// with a grant that this replica's watch has not shown bound there means the booking was made
// without it: given back, and the bind fails with a conflict that kube-scheduler retries.
std::optional<VerbReply> Extender::FenceNode(const BindTarget& target, const kube::Grant& grant,
                                             bool release_lock) {
  auto pods =
      api_->List("/api/v1/pods?fieldSelector=" + kube::QueryEscape("spec.nodeName=" + target.node));
  if (!pods) {
    Undo(target, grant, release_lock);
    return BindFailed("api_error", "reading the pods of " + target.node +
                                       " before binding: " + pods.error().ToString());
  }
  const json* items = kube::JsonChild(*pods, "items");
  for (std::size_t i = 0; items != nullptr && items->is_array() && i < items->size(); ++i) {
    auto seen = kube::DecodePod((*items)[i], state_->gpu_mem_unit_mib());
    if (!seen || !seen->grant || seen->uid == target.uid || seen->finished()) continue;
    const std::optional<kube::PodInfo> known = state_->FindPod(seen->uid);
    if (known && known->node_name == target.node && known->grant == seen->grant) continue;
    Undo(target, grant, release_lock);
    return BindFailed("stale_view", "pod " + seen->Key() + " is bound to " + target.node +
                                        " with a grant this extender's watch has not shown yet "
                                        "(another replica bound it): " +
                                        target.Key() +
                                        " is not bound on a stale view, and will "
                                        "be retried");
  }
  return std::nullopt;
}

tl::expected<Extender::BindTarget, VerbReply> Extender::BindTargetOf(std::string_view body) const {
  std::string error;
  auto doc = ParseObject(body, &error);
  if (!doc) return tl::unexpected(BadRequest(error));
  const auto name = BindField(*doc, "PodName", NameKind::kSubdomain, &error);
  const auto ns = name ? BindField(*doc, "PodNamespace", NameKind::kLabel, &error) : std::nullopt;
  const auto uid = ns ? BindField(*doc, "PodUID", NameKind::kUid, &error) : std::nullopt;
  const auto node = uid ? BindField(*doc, "Node", NameKind::kSubdomain, &error) : std::nullopt;
  if (!node) return tl::unexpected(BadRequest(error));
  if (api_ == nullptr) {
    return tl::unexpected(BindFailed("no_api",
                                     "gpumux extender runs without an API server "
                                     "(--offline-nodes) and cannot bind pods"));
  }
  if (!state_->synced()) {
    // Until both pods and nodes are listed, grants made before a restart are not all known.
    return tl::unexpected(
        BindFailed("not_synced", "gpumux extender has not synced with the API server yet"));
  }
  return BindTarget{*ns, *name, *uid, *node};
}

tl::expected<kube::PodInfo, VerbReply> Extender::PodToBind(const BindTarget& target) {
  std::optional<kube::PodInfo> pod = Recall(target.uid);
  if (!pod) pod = state_->FindPod(target.uid);
  if (!pod) {
    // Neither filter nor the watch has shown us this pod yet: ask the API server.
    auto got = api_->Get("/api/v1/namespaces/" + target.ns + "/pods/" + target.name);
    if (!got) {
      return tl::unexpected(
          BindFailed("api_error", "reading pod " + target.Key() + ": " + got.error().ToString()));
    }
    auto decoded = kube::DecodePod(*got, state_->gpu_mem_unit_mib());
    if (!decoded) return tl::unexpected(BindFailed("api_error", decoded.error().message));
    pod = std::move(*decoded);
  }
  if (pod->uid != target.uid) {
    return tl::unexpected(BindFailed(
        "conflict", "pod " + target.Key() + " has uid " + pod->uid + ", not " + target.uid));
  }
  return *pod;
}

// The node lock: on nodes whose device plugin announces the handshake, this pod becomes the one
// whose devices the kubelet allocates next there (node_lock.h). While another pod holds it, the
// booking is kept and the bind waits (at most bind_wait) for the watch to show the lock
// released, then tries again: bouncing the pod would send it into kube-scheduler's 1 -> 10 s
// backoff. Any failure gives the booking back.
tl::expected<kube::AcquireResult, VerbReply> Extender::TakeNodeLock(const BindTarget& target,
                                                                    const kube::Grant& grant) {
  kube::NodeLock lock;
  lock.ns = target.ns;
  lock.name = target.name;
  lock.uid = target.uid;
  lock.since = state_->Now();
  kube::AcquireOptions acquire;
  acquire.ttl_seconds = options_.node_lock_ttl_seconds;
  acquire.attempts = options_.node_lock_attempts;
  acquire.holder_state = HolderStateOf(*state_, *api_, target.node);
  const auto deadline = std::chrono::steady_clock::now() + options_.bind_wait;
  struct WaitSlot {
    std::atomic<int>* count = nullptr;
    ~WaitSlot() {
      if (count != nullptr) count->fetch_sub(1);
    }
  } slot;
  kube::ApiResult<kube::AcquireResult> acquired = kube::AcquireResult{};
  for (;;) {
    acquired = kube::AcquireNodeLock(*api_, target.node, lock, lock.since, acquire);
    if (!acquired || (acquired->outcome != kube::AcquireOutcome::kBusy &&
                      acquired->outcome != kube::AcquireOutcome::kNotReady)) {
      break;
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) break;
    if (slot.count == nullptr) {  // a waiting bind from now on, within max_waiting_binds
      if (waiting_binds_.fetch_add(1) >= options_.max_waiting_binds) {
        waiting_binds_.fetch_sub(1);
        break;
      }
      slot.count = &waiting_binds_;
    }
    const auto until = std::min(deadline, now + options_.bind_poll);
    if (options_.lock_board != nullptr && acquired->outcome == kube::AcquireOutcome::kBusy &&
        acquired->holder) {
      options_.lock_board->WaitUntilNotHeldBy(target.node, acquired->holder->uid, until);
      // The watch may show the lock released a moment before a fresh read does, or not show
      // it held at all (the watch behind): never re-read the node in a tight loop.
      std::this_thread::sleep_until(std::min(until, now + kMinLockRetry));
    } else {
      std::this_thread::sleep_until(until);
    }
    lock.since = state_->Now();
  }
  if (acquired && acquired->outcome != kube::AcquireOutcome::kBusy &&
      acquired->outcome != kube::AcquireOutcome::kNotReady) {
    return *acquired;
  }
  state_->Forget(target.uid, grant);
  if (!acquired) {
    std::string message = "taking the node lock (";
    message += kube::kAnnotationAllocating;
    message += ") on " + target.node + ": " + acquired.error().ToString();
    return tl::unexpected(
        BindFailed(acquired.error().http_status == 409 ? "conflict" : "api_error", message));
  }
  if (acquired->outcome == kube::AcquireOutcome::kNotReady) {
    return tl::unexpected(BindFailed("plugin_not_ready", acquired->message + "; " + target.Key() +
                                                             " will be retried once it is ready"));
  }
  return tl::unexpected(BindFailed(
      "node_busy", acquired->message +
                       "; gpumux binds one pod at a time to a node until its device plugin has "
                       "served it, so " +
                       target.Key() + " will be retried"));
}

void Extender::Undo(const BindTarget& target, const kube::Grant& grant, bool release_lock) {
  if (release_lock) {
    auto released =
        kube::ReleaseNodeLock(*api_, target.node, target.uid, options_.node_lock_attempts);
    if (!released) {
      options_.log.Warn(
          "bind failed and its node lock could not be released (it goes stale "
          "after stale_after_s)",
          {{"pod", target.Key()},
           {"node", target.node},
           {"stale_after_s", std::to_string(options_.node_lock_ttl_seconds)},
           {"error", released.error().ToString()}});
    }
  }
  state_->Forget(target.uid, grant);
}

// The Binding, with the grant annotation in it. A failure whose outcome is not known is read
// back, never guessed: a pod the API server shows bound with this grant holds it.
VerbReply Extender::WriteGrantAndBind(const BindTarget& target, const kube::Grant& grant,
                                      bool release_lock_on_failure) {
  auto read_back = [&] {
    return ReadPodBack(*api_, target.ns, target.name, target.uid, target.node, grant,
                       state_->gpu_mem_unit_mib());
  };
  if (!state_->BeginBinding(target.uid, grant)) {
    Undo(target, grant, release_lock_on_failure);
    return BindFailed("conflict", "the GPUs booked for pod " + target.Key() + " on " + target.node +
                                      " were given to a pod seen bound there, or the booking "
                                      "expired; not binding it, so that nothing is granted twice");
  }
  auto bound =
      kube::CreateBinding(*api_, target.ns, target.name, target.uid, target.node,
                          json{{std::string(kube::kAnnotationGrant), kube::EncodeGrant(grant)}});
  if (bound) {
    state_->ConfirmBound(target.uid, grant);
    return BindDone();
  }
  // The Binding may have been applied although its answer says otherwise (a timeout, a 5xx
  // after the commit).
  const std::string label = bound.error().http_status == 409 ? "conflict" : "api_error";
  const PodReadBack seen = read_back();
  switch (seen.outcome) {
    case BindOutcome::kBound:
      state_->ConfirmBound(target.uid, grant);
      options_.log.Warn("bind: the Binding answered an error, but the pod is bound",
                        {{"pod", target.Key()},
                         {"node", target.node},
                         {"error", bound.error().ToString()},
                         {"read_back", seen.detail}});
      return BindDone();
    case BindOutcome::kNotBound:
      Undo(target, grant, release_lock_on_failure);
      return BindFailed(
          label, "binding: " + bound.error().ToString() + " (read back: " + seen.detail + ")");
    case BindOutcome::kUnknown:
      break;
  }
  if (!MayHaveBeenApplied(bound.error())) {
    Undo(target, grant, release_lock_on_failure);  // refused by the API server: not applied
    return BindFailed(label, "binding: " + bound.error().ToString() + " (" + seen.detail + ")");
  }
  // The pod may be bound: keep its GPUs booked (binding) and the node lock; the watch settles
  // it (bound), or the booking expires with its TTL if the pod is never seen bound.
  return BindFailed("api_error", "binding: " + bound.error().ToString() +
                                     "; its outcome is unknown (" + seen.detail +
                                     "), so the GPUs on " + target.node + " stay booked for " +
                                     target.Key() +
                                     " until the API server shows it bound or the booking "
                                     "expires");
}

}  // namespace gpumux::extender
