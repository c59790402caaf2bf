#include "gpumux/extender/cluster_sync.h"

#include <condition_variable>
#include <mutex>

#include "gpumux/core/plural.h"
#include "gpumux/core/rng.h"

namespace gpumux::extender {

ClusterSync::ClusterSync(kube::KubeApi& api, sched::ClusterState& state, ClusterSyncOptions options)
    : api_(&api), state_(&state), options_(std::move(options)) {}

ClusterSync::~ClusterSync() { Stop(); }

void ClusterSync::Start() {
  sched::ClusterState* state = state_;
  const core::Logger log = options_.log;
  const auto prefixed = [log](const std::string& what) { return log.Prefixed(what + ": "); };
  const auto on_node = options_.on_node_event;
  const auto on_pod = options_.on_pod_event;
  // A relist is handed to the observers as ADDED events.
  const auto relisted = [](const std::function<void(const kube::WatchEvent&)>& observer,
                           std::vector<nlohmann::json>& items) {
    if (!observer) return;
    kube::WatchEvent e{"ADDED", {}};
    for (nlohmann::json& item : items) {
      e.object = std::move(item);
      observer(e);
      item = std::move(e.object);
    }
  };
  kube::ReflectorHandler nodes;
  nodes.replace = [state, on_node, relisted](std::vector<nlohmann::json> items) {
    state->SetNodes(items);
    relisted(on_node, items);
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
  nodes.log = prefixed("nodes");
  kube::ReflectorHandler pods;
  pods.replace = [state, on_pod, relisted](std::vector<nlohmann::json> items) {
    state->SetPods(items);
    relisted(on_pod, items);
  };
  pods.event = [state, on_pod](const kube::WatchEvent& e) {
    if (e.type == "DELETED") {
      state->RemovePod(e.object);
    } else {
      state->UpsertPod(e.object);
    }
    if (on_pod) on_pod(e);
  };
  pods.log = prefixed("pods");
  const auto reflector_options = [this](std::string_view stream) {
    kube::ReflectorOptions r = options_.reflector;
    r.random_below = nullptr;
    if (options_.jitter_seed != 0) {
      r.random_below = [rng = std::make_shared<core::Rng>(options_.jitter_seed, stream)](
                           std::uint64_t n) { return rng->Below(n); };
    }
    return r;
  };
  nodes_ = std::make_unique<kube::Reflector>(*api_, "/api/v1/nodes", std::move(nodes),
                                             reflector_options("nodes"));
  pods_ = std::make_unique<kube::Reflector>(*api_, "/api/v1/pods", std::move(pods),
                                            reflector_options("pods"));
  nodes_thread_ = std::jthread([this](std::stop_token stop) { nodes_->Run(stop); });
  pods_thread_ = std::jthread([this](std::stop_token stop) { pods_->Run(stop); });
  ticker_ = std::jthread([this](std::stop_token stop) {
    std::mutex mu;
    std::condition_variable_any cv;
    auto next_expiry = std::chrono::steady_clock::now() + options_.expire_interval;
    std::unique_lock lock(mu);
    while (!stop.stop_requested()) {
      if (!state_->synced() && nodes_->synced() && pods_->synced()) {
        state_->MarkSynced();
        if (options_.on_synced) options_.on_synced();
        const sched::StateCounters c = state_->counters();
        options_.log.Info("synced: " + core::Plural(c.nodes, "node") + ", " +
                          core::Plural(c.gpus, "GPU") + ", " +
                          core::Plural(c.grants_bound, "bound grant"));
      }
      if (std::chrono::steady_clock::now() >= next_expiry) {
        state_->ExpireAssumed();
        next_expiry = std::chrono::steady_clock::now() + options_.expire_interval;
      }
      cv.wait_for(lock, stop, std::chrono::milliseconds(state_->synced() ? 200 : 20),
                  [] { return false; });
    }
  });
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
