// The node lock: how the device plugin knows, without guessing, which pod a kubelet Allocate
// call serves.
//
// kubelet's Allocate carries device IDs only, never the pod (PROTOCOLS.md). So the extender,
// at bind time and before it writes the grant and creates the Binding, takes a lock on the
// node: the node annotation gpumux.io/allocating names the one pod whose devices the kubelet
// will allocate next on that node. It is taken atomically through the API server (a merge
// patch with the node's resourceVersion as precondition: a concurrent writer gets 409 and
// re-reads). While another pod that still needs its devices holds it, a bind on that node waits
// for it (NodeLockBoard, below) and is refused with a retriable error only past its wait, so two
// pods of the same size bound to one node are never confused: the second is bound only after
// the first one's devices were allocated.
//
// The device plugin reads the lock in Allocate, serves the holder's grant, and records each
// (container, resource) pair it has served in the lock itself (the same atomic patch), so a
// plugin restart in the middle of a pod loses nothing. When every pair the pod asks for has
// been served, the plugin removes the annotation. A lock whose holder will never get its
// devices (pod deleted, finished, bound elsewhere) is stale at once and the extender may take
// it over; one whose holder is not bound (a failed bind) goes stale after a TTL. A holder bound
// to the node and still waiting for the kubelet keeps the lock, however old (HolderState).
//
// The lock is used only on nodes whose device plugin announces it: node annotation
// gpumux.io/handshake = "node-lock/v1". Elsewhere bind takes no lock.
//
//   gpumux.io/allocating:
//   {"version":1,"pod":"default/train","uid":"5f1c...","since":"2026-11-21T10:00:00Z",
//    "served":["main/gpumux.io/gpu-mem"]}
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gpumux/core/result.h"
#include "gpumux/kube/api_client.h"

namespace gpumux::kube {

inline constexpr std::string_view kAnnotationAllocating = "gpumux.io/allocating";
inline constexpr std::string_view kAnnotationHandshake = "gpumux.io/handshake";
inline constexpr std::string_view kHandshakeNodeLock = "node-lock/v1";
// The device plugin's state on its node: "starting" from its start until every resource is
// registered with the kubelet and the kubelet watches each, then "ready", and "stopping" from
// SIGTERM until it has served the lock's holder and stops. The kubelet rejects a pod whose
// resources are not all registered (UnexpectedAdmissionError), so on a handshake node the lock
// is taken only when the plugin is "ready" (or announces no state).
inline constexpr std::string_view kAnnotationDevicePlugin = "gpumux.io/device-plugin";
inline constexpr std::string_view kDevicePluginStarting = "starting";
inline constexpr std::string_view kDevicePluginReady = "ready";
inline constexpr std::string_view kDevicePluginStopping = "stopping";

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
  bool handshake = false;        // gpumux.io/handshake == node-lock/v1
  std::optional<NodeLock> lock;  // gpumux.io/allocating, when present and readable
  std::string lock_error;        // present but unreadable (then `lock` is empty)
  std::string resource_version;  // metadata.resourceVersion
  std::string plugin_state;      // gpumux.io/device-plugin ("" when absent)
};
NodeLockView ReadNodeLock(const nlohmann::json& node);

// --- extender side ---
// What the extender knows of a lock's holder (from its own watch of pods).
enum class HolderState : std::uint8_t {
  // Bound to this node and not yet started, finished or being deleted: the kubelet may still
  // admit it and call Allocate for it. Its lock is never taken over, whatever its age: handing
  // the lock to another pod would let Allocate serve the old holder with the new pod's GPUs
  // (the gpushare race the lock exists to prevent). A kubelet that never admits it blocks only
  // its own node.
  kNeedsDevices,
  // Gone, finished, being deleted, Running (its devices were allocated) or bound elsewhere:
  // the lock is stale at once.
  kDone,
  // Not bound yet (a bind in flight, or one that failed and could not release the lock), or
  // its state cannot be told: the lock is stale once older than the TTL.
  kUnknown,
};

struct AcquireOptions {
  std::int64_t ttl_seconds = 120;  // a kUnknown holder's lock older than this is stale
  int attempts = 4;                // tries on 409 Conflict (fresh GET each time)
  // The holder's state. May be empty (then every holder is kUnknown: only the TTL makes a
  // lock stale).
  std::function<HolderState(const NodeLock& held)> holder_state;
};

enum class AcquireOutcome : std::uint8_t {
  kTaken,      // the lock now names `lock`'s pod
  kNotNeeded,  // the node does not announce the handshake: no lock taken
  kBusy,       // another live pod holds it (the error message names it and its age)
  kNotReady,   // the node's device plugin is starting or stopping (the message says which)
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
  std::optional<NodeLock> holder;  // kBusy only: the lock that holds the node
};

// GET the node, then (when it announces the handshake and the lock is free, stale, or already
// ours) merge-patch gpumux.io/allocating = lock with the node's resourceVersion as a
// precondition. `now` is unix seconds. API errors (after `attempts` conflicts, or any other
// failure) come back as ApiError.
// Details: a lock is stale when holder_state says kDone, or says kUnknown and
// now - since > ttl_seconds; a kNeedsDevices holder keeps its lock. A present but unreadable
// annotation (on a node that announces node-lock/v1) is replaced, and says so in `message`. "Ours"
// means the same uid (see AcquireResult::reentered). A node without metadata.resourceVersion is an
// ApiError (status 0, reason "BadNode"): the patch could not be atomic.
ApiResult<AcquireResult> AcquireNodeLock(KubeApi& api, const std::string& node,
                                         const NodeLock& lock, std::int64_t now,
                                         const AcquireOptions& options);

// Removes the lock if it is still held by `uid` (bind failed after taking it). A lock held by
// another pod, or no lock, is left alone (success). A node that is gone (404) is success too.
ApiResult<void> ReleaseNodeLock(KubeApi& api, const std::string& node, const std::string& uid,
                                int attempts = 4);

// Who holds each node's lock, as the extender's node watch last saw it. A bind refused because
// another pod holds the lock waits here for the watch to show the lock released (the device
// plugin removes it once the holder's devices are allocated), instead of bouncing its pod into
// kube-scheduler's 1 -> 10 s backoff.
// Thread safety: all methods may be called concurrently.
class NodeLockBoard {
 public:
  // A node event from the watch (a relist's items come as ADDED); a DELETED node holds no
  // lock. Cheap when the node has no lock annotation.
  void Observe(const WatchEvent& event);
  // Blocks until the watch shows `node` not held by `holder_uid` (free, or held by another
  // pod), or until `deadline`. True when it changed.
  bool WaitUntilNotHeldBy(const std::string& node, const std::string& holder_uid,
                          std::chrono::steady_clock::time_point deadline);

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  std::unordered_map<std::string, std::string> holders_;  // node -> holder uid (absent: free)
};

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

}  // namespace gpumux::kube
