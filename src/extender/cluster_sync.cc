#include "gpumux/extender/cluster_sync.h"

#include <condition_variable>
#include <mutex>

#include "gpumux/core/plural.h"
#include "gpumux/core/rng.h"

namespace gpumux::extender {

ClusterSync::ClusterSync(kube::KubeApi& api, sched::ClusterState& state, ClusterSyncOptions options)
    : api_(&api), state_(&state), options_(std::move(options)) {}

ClusterSync::~ClusterSync() { Stop(); }

namespace {

using Observer = std::function<void(const kube::WatchEvent&)>;

// Hands a relist to `observer` (may be empty) as ADDED events; the items are left as they were.
void HandOverRelist(const Observer& observer, std::vector<nlohmann::json>& items) {
  if (!observer) return;
  kube::WatchEvent e{"ADDED", {}};
  for (nlohmann::json& item : items) {
    e.object = std::move(item);
    observer(e);
    item = std::move(e.object);
  }
}

// The nodes reflector's handler: every list and event goes to `state`, then to `on_node`.
kube::ReflectorHandler NodeHandler(sched::ClusterState* state, Observer on_node,
                                   const core::Logger& log) {
  kube::ReflectorHandler nodes;
  nodes.replace = [state, on_node](std::vector<nlohmann::json> items) {
    state->SetNodes(items);
    HandOverRelist(on_node, items);
  };
  nodes.event = [state, on_node](const kube::WatchEvent& e) {
    if (e.type == "DELETED") {
      const auto& metadata = e.object.contains("metadata") ? e.object.at("metadata") : e.object;
      if (metadata.contains("name") && metadata.at("name").is_string()) {
        state->RemoveNode(metadata.at("name").get<std::string>());
      }
    } else {
      state->UpsertNode(e.object);
    }
    if (on_node) on_node(e);
  };
  nodes.log = log.Prefixed("nodes: ");
  return nodes;
}

// The pods reflector's handler: every list and event goes to `state`, then to `on_pod`.
kube::ReflectorHandler PodHandler(sched::ClusterState* state, Observer on_pod,
                                  const core::Logger& log) {
  kube::ReflectorHandler pods;
  pods.replace = [state, on_pod](std::vector<nlohmann::json> items) {
    state->SetPods(items);
    HandOverRelist(on_pod, items);
  };
  pods.event = [state, on_pod](const kube::WatchEvent& e) {
    if (e.type == "DELETED") {
      state->RemovePod(e.object);
    } else {
      state->UpsertPod(e.object);
    }
    if (on_pod) on_pod(e);
  };
  pods.log = log.Prefixed("pods: ");
  return pods;
}

// The reflector options of the collection `stream`: options.reflector, with jitter seeded from
// (jitter_seed, stream) when a seed is given.
kube::ReflectorOptions StreamOptions(const ClusterSyncOptions& options, std::string_view stream) {
  kube::ReflectorOptions r = options.reflector;
  r.random_below = nullptr;
  if (options.jitter_seed != 0) {
    r.random_below = [rng = std::make_shared<core::Rng>(options.jitter_seed, stream)](
                         std::uint64_t n) { return rng->Below(n); };
  }
  return r;
}

// The ticker's loop until `stop`: marks `state` synced (once) when both reflectors have listed,
// and expires assumed grants every options.expire_interval. Wakes every 20 ms until synced,
// every 200 ms after.
void RunTicker(const std::stop_token& stop, sched::ClusterState& state,
               const kube::Reflector& nodes, const kube::Reflector& pods,
               const ClusterSyncOptions& options) {
  std::mutex mu;
  std::condition_variable_any cv;
  auto next_expiry = std::chrono::steady_clock::now() + options.expire_interval;
  std::unique_lock lock(mu);
  while (!stop.stop_requested()) {
    if (!state.synced() && nodes.synced() && pods.synced()) {
      state.MarkSynced();
      if (options.on_synced) options.on_synced();
      const sched::StateCounters c = state.counters();
      options.log.Info("synced", {{"nodes", std::to_string(c.nodes)},
                                  {"gpus", std::to_string(c.gpus)},
                                  {"bound_grants", std::to_string(c.grants_bound)}});
    }
    if (std::chrono::steady_clock::now() >= next_expiry) {
      state.ExpireAssumed();
      next_expiry = std::chrono::steady_clock::now() + options.expire_interval;
    }
    cv.wait_for(lock, stop, std::chrono::milliseconds(state.synced() ? 200 : 20),
                [] { return false; });
  }
}

}  // namespace

void ClusterSync::Start() {
  nodes_ = std::make_unique<kube::Reflector>(
      *api_, "/api/v1/nodes", NodeHandler(state_, options_.on_node_event, options_.log),
      StreamOptions(options_, "nodes"));
  pods_ = std::make_unique<kube::Reflector>(*api_, "/api/v1/pods",
                                            PodHandler(state_, options_.on_pod_event, options_.log),
                                            StreamOptions(options_, "pods"));
  nodes_thread_ = std::jthread([this](std::stop_token stop) { nodes_->Run(stop); });
  pods_thread_ = std::jthread([this](std::stop_token stop) { pods_->Run(stop); });
  ticker_ = std::jthread(
      [this](std::stop_token stop) { RunTicker(stop, *state_, *nodes_, *pods_, options_); });
}

void ClusterSync::Stop() {
  for (std::jthread* t : {&ticker_, &nodes_thread_, &pods_thread_}) {
    if (t->joinable()) {
      t->request_stop();
      t->join();
    }
  }
}

bool ClusterSync::WaitSynced(std::chrono::milliseconds timeout) const {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!state_->synced()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

}  // namespace gpumux::extender
