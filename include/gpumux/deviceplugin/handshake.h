// The device plugin's side of the grant handshake: which pod, and which container of it, a
// kubelet Allocate call serves — read from the node lock (kube/node_lock.h), never guessed.
//
// The extender takes the node lock for a pod before binding it, so at most one pod per node
// waits for its devices. Allocate for resource R with N devices serves the lock holder's next
// container (in pod spec order) that asks for R and has not been served R yet; N must equal
// what that container asks for. The served pair is recorded in the lock with the node's
// resourceVersion as precondition (so two plugin processes, or a restarted one, cannot serve
// a pair twice), and the lock is removed when every pair of the pod has been served.
// kubelet allocates a pod's containers in spec order; the order of resources inside one
// container is not fixed (a Go map), which is why progress is kept per resource.
//
// Reads: with Watch() running, the node and the node's pods come from a watch cache (and the
// node from each PATCH answer), so a steady-state Allocate costs one conditional PATCH. The
// cache is only trusted when it agrees: a stale node fails the PATCH's resourceVersion
// precondition (409) and the call retries with fresh GETs, and any negative answer from the
// cache (no lock, pod or grant not found) is checked again with fresh GETs before refusing.
//
// Concurrency: no lock is held across an API call. Claims running at once (the kubelet's calls
// for several resources, a retried call, GetPreferredAllocation) each read, decide and write
// the lock with the resourceVersion they read as precondition; the API server lets exactly one
// of them through and the others get 409, read afresh and decide again. So Claims are
// serialised by the node object itself (also across plugin processes), and none waits for
// another's network round trips.
//
// Everything that cannot be matched exactly fails closed with an error that says why: no lock
// on the node, the holder has no grant or a grant for another node, the counts differ, the
// holder was replaced (uid), an init container asks for gpumux resources.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "gpumux/core/log.h"
#include "gpumux/core/result.h"
#include "gpumux/deviceplugin/devices.h"
#include "gpumux/kube/api_client.h"
#include "gpumux/kube/grant.h"

namespace gpumux::deviceplugin {

// One regular container and the device counts it asks for, per Resource (kubelet units).
struct ContainerAsk {
  std::string name;
  std::array<std::int64_t, 3> count{};  // indexed by Resource
};

// The containers of a pod that ask for gpumux resources, in spec order (limits, else
// requests, as the extender reads them). Error if an init container asks for any, or a value
// is malformed.
core::Result<std::vector<ContainerAsk>> ContainerAsks(const nlohmann::json& pod);

// "<container>/<resource name>" as recorded in the lock's `served` list.
std::string ServedKey(const std::string& container, Resource resource);

struct ServedContainer {
  std::string pod_ns, pod_name, pod_uid;
  std::string policy;
  kube::ContainerGrant grant;
};

// Why an Allocate was refused; `code` maps to a gRPC status.
struct HandshakeError {
  enum class Code : std::uint8_t {
    kFailedPrecondition,  // the state does not allow it (no lock, no grant, counts differ)
    kInvalidArgument,     // the request itself is wrong
    kUnavailable,         // the API server could not be reached or kept conflicting
  };
  Code code = Code::kFailedPrecondition;
  std::string message;
};

template <typename T>
using HandshakeResult = tl::expected<T, HandshakeError>;

// What the grants of the pods bound to this node give one GPU (Handshake::Granted).
struct GrantedOnGpu {
  int containers = 0;        // containers holding it
  core::MilliGpu milli = 0;  // compute granted; an exclusive grant counts the whole GPU
  core::MiB memory_mib = 0;  // memory shares granted (exclusive grants not included)
  bool exclusive = false;    // a container holds it whole
};

struct HandshakeOptions {
  int attempts = 5;  // reads + conditional writes of the lock before giving up (409s)
};

class Handshake {
 public:
  // `api` must outlive the handshake.
  Handshake(kube::KubeApi& api, std::string node, HandshakeOptions options = {});
  ~Handshake();  // StopWatching()

  // Starts watching the node and the pods bound to it (two reflectors); optional.
  void Watch(core::Logger log = {});
  void StopWatching();
  // Feed the caches from a watch the caller runs instead (one process standing in for the
  // plugins of many nodes: bench/scale's): this node's events, and the events of pods bound to
  // it. Watch() feeds them itself. Thread safe.
  void ObserveNode(const kube::WatchEvent& event);
  void ObservePod(const kube::WatchEvent& event);

  // Serves one Allocate call: `counts` has the number of devices of each container request,
  // in order. Returns one served container per entry. Thread safe; concurrent calls overlap
  // (see above). Cost: one conditional PATCH with a warm cache; two GETs more per conflict.
  HandshakeResult<std::vector<ServedContainer>> Claim(Resource resource,
                                                      const std::vector<std::int64_t>& counts);

  // For GetPreferredAllocation: the granted GPU indices of the container the next Allocate of
  // `resource` with `count` devices would serve, without recording anything. Empty when that
  // cannot be told (the caller then prefers nothing in particular). Thread safe; never waits
  // for a Claim.
  std::vector<int> Peek(Resource resource, std::int64_t count);

  // Per GPU index, what the grants of the pods in the watch's cache give it (pods that have
  // ended, and grants for another node, left out). Empty without Watch(). Thread safe.
  std::map<int, GrantedOnGpu> Granted() const;

  // The uids of the pods bound to this node that have not ended, once the watch has listed
  // them at least once; nullopt before that (or without Watch()), when nothing can be said about
  // which pods are gone. Thread safe.
  std::optional<std::set<std::string>> LivePodUids() const;

  // The containers of this node's pods that hold a share of a GPU (not a whole one) by their
  // grant and that the watch last saw running (status.containerStatuses[].state.running).
  struct RunningShare {
    std::string pod_uid, pod, container;  // pod: "namespace/name"
    std::vector<int> gpus;                // granted GPU indices
  };
  std::vector<RunningShare> RunningShares() const;

 private:
  struct Holder;
  // From the cache when `cached`, else with GETs.
  HandshakeResult<Holder> ReadHolder(bool cached);
  std::optional<nlohmann::json> CachedNode() const;
  std::optional<nlohmann::json> CachedPod(const std::string& ns, const std::string& name) const;
  void RememberNode(const nlohmann::json& node);
  kube::KubeApi* api_;
  std::string node_;
  HandshakeOptions options_;

  mutable std::mutex cache_mu_;                 // the caches only; never held across an API call
  std::unique_ptr<nlohmann::json> node_cache_;  // latest node seen
  std::map<std::string, nlohmann::json> pod_cache_;  // "ns/name" -> pod
  bool pods_listed_ = false;                         // the pod watch has listed once
  std::vector<std::jthread> watchers_;
};

}  // namespace gpumux::deviceplugin
