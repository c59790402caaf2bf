// Keeps a ClusterState in step with the API server: one Reflector for nodes and one for pods
// (list + watch, relist on 410 Gone, reconnect with backoff), marks the state synced once both
// have listed, and releases assumed grants whose TTL has passed.
//
// Thread safety: Start/Stop from one thread; the reflectors and the ticker run on their own
// threads and only call ClusterState's (thread-safe) methods. Stop (and the destructor) return
// within about a second.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <thread>

#include "gpumux/core/log.h"
#include "gpumux/kube/api_client.h"
#include "gpumux/kube/reflector.h"
#include "gpumux/sched/cluster_state.h"

namespace gpumux::extender {

struct ClusterSyncOptions {
  std::chrono::milliseconds expire_interval{2000};  // how often assumed grants are checked
  kube::ReflectorOptions reflector;                 // its random_below is ignored: see jitter_seed
  // Non-zero: each reflector's backoff gets seeded jitter (a stream per collection), so that
  // replicas do not relist in step after an API server restart. 0: no jitter.
  std::uint64_t jitter_seed = 0;
  core::Logger log;  // may be empty
  // Called for every node and pod event after the state has taken it (the items of a relist
  // as ADDED events), and once when the state is first marked synced; may be empty. They run on
  // the reflectors' threads and must be quick (the requeuer and the node lock board).
  std::function<void(const kube::WatchEvent&)> on_node_event, on_pod_event;
  std::function<void()> on_synced;
};

class ClusterSync {
 public:
  // `api` and `state` must outlive the sync.
  ClusterSync(kube::KubeApi& api, sched::ClusterState& state, ClusterSyncOptions options = {});
  ~ClusterSync();
  ClusterSync(const ClusterSync&) = delete;
  ClusterSync& operator=(const ClusterSync&) = delete;

  void Start();
  void Stop();
  // True once both collections were listed (and handed to the state) within `timeout`.
  bool WaitSynced(std::chrono::milliseconds timeout) const;

 private:
  kube::KubeApi* api_;
  sched::ClusterState* state_;
  ClusterSyncOptions options_;
  std::unique_ptr<kube::Reflector> nodes_, pods_;
  std::jthread nodes_thread_, pods_thread_, ticker_;
};

}  // namespace gpumux::extender
