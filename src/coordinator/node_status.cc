#include "gpumux/coordinator/node_status.h"

#include <ctime>

#include "gpumux/core/time.h"
#include "gpumux/kube/grant.h"
#include "gpumux/kube/objects.h"

namespace gpumux::coordinator {

using Json = nlohmann::json;

NodeStatusPublisher::NodeStatusPublisher(kube::KubeApi& api, std::string node, Options options,
                                         core::Logger log)
    : api_(&api), node_(std::move(node)), options_(options), log_(std::move(log)) {
  thread_ = std::jthread([this](std::stop_token stop) { Run(stop); });
}

NodeStatusPublisher::~NodeStatusPublisher() {
  thread_.request_stop();
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool NodeStatusPublisher::Due() const {
  std::lock_guard lock(mu_);
  return last_offer_ == std::chrono::steady_clock::time_point{} ||
         std::chrono::steady_clock::now() - last_offer_ >= options_.every;
}

void NodeStatusPublisher::Offer(Json state) {
  {
    std::lock_guard lock(mu_);
    offered_ = std::move(state);
    last_offer_ = std::chrono::steady_clock::now();
  }
  cv_.notify_all();
}

std::int64_t NodeStatusPublisher::patches() const {
  std::lock_guard lock(mu_);
  return patches_;
}

void NodeStatusPublisher::Run(std::stop_token stop) {
  bool failing = false;
  std::unique_lock lock(mu_);
  while (!stop.stop_requested()) {
    cv_.wait_for(lock, stop, options_.every, [this] { return offered_.has_value(); });
    if (stop.stop_requested()) break;
    if (!offered_) continue;
    const auto now = std::chrono::steady_clock::now();
    const bool changed = !ever_patched_ || *offered_ != published_;
    const bool heartbeat = now - last_patch_ >= options_.heartbeat;
    if (!changed && !heartbeat) {
      offered_.reset();
      continue;
    }
    Json state = std::move(*offered_);
    offered_.reset();
    Json body = state;
    body["updated"] = core::FormatRfc3339(static_cast<std::int64_t>(std::time(nullptr)));
    const Json patch = {
        {"metadata",
         {{"annotations", {{std::string(kube::kAnnotationCoordinator), body.dump()}}}}}};
    lock.unlock();
    auto result =
        api_->Patch("/api/v1/nodes/" + kube::QueryEscape(node_), patch, kube::PatchType::kMerge);
    lock.lock();
    last_patch_ = std::chrono::steady_clock::now();
    if (result) {
      if (failing)
        log_("node " + node_ + ": " + std::string(kube::kAnnotationCoordinator) +
             " published again");
      failing = false;
      published_ = std::move(state);
      ever_patched_ = true;
      ++patches_;
    } else if (!failing) {
      failing = true;
      log_.Warn("cannot publish the coordinator's state on the node (retrying)",
                {{"node", node_},
                 {"annotation", std::string(kube::kAnnotationCoordinator)},
                 {"error", result.error().ToString()},
                 {"retry_s", std::to_string(options_.every.count() / 1000)}});
    }
  }
}

}  // namespace gpumux::coordinator
