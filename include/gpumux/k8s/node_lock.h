// The node lock: how the device plugin knows, without guessing, which pod a kubelet Allocate
// call serves.
//
// kubelet's Allocate carries device IDs only, never the pod (PROTOCOLS.md). So the extender,
// at bind time and before it writes the grant and creates the Binding, takes a lock on the
// node: the node annotation gpumux.io/allocating names the one pod whose devices the kubelet
// will allocate next on that node. It is taken atomically through the API server (a merge
// patch with the node's resourceVersion as precondition: a concurrent writer gets 409 and
// re-reads). While another live pod holds it, bind on that node is refused with a retriable
// error (kube-scheduler requeues the pod), so two pods of the same size bound to one node are
// never confused: the second is bound only after the first one's devices were allocated.
//
// The device plugin reads the lock in Allocate, serves the holder's grant, and records each
// (container, resource) pair it has served in the lock itself (the same atomic patch), so a
// plugin restart in the middle of a pod loses nothing. When every pair the pod asks for has
// been served, the plugin removes the annotation. A lock whose holder never gets its devices
// (pod deleted before the kubelet admitted it, kubelet down) goes stale after a TTL, and the
// extender may then take it over.
//
// The lock is used only on nodes whose device plugin announces it: node annotation
// gpumux.io/handshake = "node-lock/v1". Elsewhere bind takes no lock.
//
//   gpumux.io/allocating:
//   {"version":1,"pod":"default/train","uid":"5f1c...","since":"2026-11-21T10:00:00Z",
//    "served":["main/gpumux.io/gpu-mem"]}
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "gpumux/core/result.h"
#include "gpumux/k8s/api_client.h"

namespace gpumux::k8s {

inline constexpr std::string_view kAnnotationAllocating = "gpumux.io/allocating";
inline constexpr std::string_view kAnnotationHandshake = "gpumux.io/handshake";
inline constexpr std::string_view kHandshakeNodeLock = "node-lock/v1";

struct NodeLock {
  int version = 1;
  std::string ns, name, uid;        // the holder pod
  std::int64_t since = 0;           // unix seconds; RFC 3339 on the wire
  std::vector<std::string> served;  // "<container>/<resource>", in the order served
  std::string PodKey() const { return ns + "/" + name; }
  bool operator==(const NodeLock&) const = default;
};

std::string EncodeNodeLock(const NodeLock& lock);
// Error names the field that is missing or wrong. `served` may be absent (nothing served yet);
// every other field is required; `pod` must be "<namespace>/<name>".
core::Result<NodeLock> DecodeNodeLock(std::string_view text);

// What a node object says about the handshake (from its JSON).
struct NodeLockView {
  bool handshake = false;          // gpumux.io/handshake == node-lock/v1
  std::optional<NodeLock> lock;    // gpumux.io/allocating, when present and readable
  std::string lock_error;          // present but unreadable (then `lock` is empty)
  std::string resource_version;    // metadata.resourceVersion
};
NodeLockView ReadNodeLock(const nlohmann::json& node);

// --- extender side ---
struct AcquireOptions {
  std::int64_t ttl_seconds = 120;  // a lock older than this is stale and may be taken over
  int attempts = 4;                // tries on 409 Conflict (fresh GET each time)
  // Whether the pod with this uid still needs its devices allocated (exists, not finished,
  // not deleting). A lock held by a pod that does not is stale at once. May be empty (then
  // only the TTL makes a lock stale).
  std::function<bool(const std::string& uid)> holder_alive;
};

enum class AcquireOutcome : std::uint8_t {
  kTaken,       // the lock now names `lock`'s pod
  kNotNeeded,   // the node does not announce the handshake: no lock taken
  kBusy,        // another live pod holds it (the error message names it and its age)
};

struct AcquireResult {
  AcquireOutcome outcome = AcquireOutcome::kTaken;
  std::string message;  // for kBusy: "node n1 is allocating devices for pod default/a (3 s)"
                        // for kTaken: "" or what was taken over ("took over the lock of ...")
  // kTaken only: the lock already named this uid (a retried bind, or an earlier release that
  // failed). It was re-written with the new `since` and the `served` list it had, so a pod the
  // device plugin is part-way through is not served twice. A caller whose bind then fails
  // should not release such a lock: an earlier bind of the pod may have succeeded.
  bool reentered = false;
};

// GET the node, then (when it announces the handshake and the lock is free, stale, or already
// ours) merge-patch gpumux.io/allocating = lock with the node's resourceVersion as a
// precondition. `now` is unix seconds. API errors (after `attempts` conflicts, or any other
// failure) come back as ApiError.
// Details: a lock is stale when now - since > ttl_seconds, or when holder_alive says its uid no
// longer needs devices. A present but unreadable annotation (on a node that announces
// node-lock/v1) is replaced, and says so in `message`. "Ours" means the same uid (see
// AcquireResult::reentered). A node without metadata.resourceVersion is an ApiError (status 0,
// reason "BadNode"): the patch could not be atomic.
ApiResult<AcquireResult> AcquireNodeLock(KubeApi& api, const std::string& node,
                                         const NodeLock& lock, std::int64_t now,
                                         const AcquireOptions& options);

// Removes the lock if it is still held by `uid` (bind failed after taking it). A lock held by
// another pod, or no lock, is left alone (success). A node that is gone (404) is success too.
ApiResult<void> ReleaseNodeLock(KubeApi& api, const std::string& node, const std::string& uid,
                                int attempts = 4);

// --- device plugin side ---
// Atomically replaces the node's lock with `next` (or removes it when `next` is empty), with
// the node's resourceVersion `resource_version` (as read with the lock the caller decided on)
// as precondition. On 409 the caller re-reads the node and decides again. Returns the patched
// node.
ApiResult<nlohmann::json> ReplaceNodeLock(KubeApi& api, const std::string& node,
                                          const std::string& resource_version,
                                          const std::optional<NodeLock>& next);

// The merge patch that sets (or, when `lock` is empty, removes) the annotation, with the
// resourceVersion precondition when `resource_version` is not empty.
nlohmann::json NodeLockPatch(const std::optional<NodeLock>& lock,
                             const std::string& resource_version);

}  // namespace gpumux::k8s
