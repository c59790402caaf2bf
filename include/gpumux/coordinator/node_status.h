// The coordinator's publisher of its state as the node annotation gpumux.io/coordinator (the
// format: kube/coordinator_status.h), read by `kubectl gpumux top`.
//
// The coordinator patches it (a merge patch of metadata.annotations) when the state changed
// since the last patch and at least `every` has passed, and at least every `heartbeat` even
// when nothing changed, so that a reader can tell a live report from a stale one by `updated`.
// A failed patch is logged once per failure streak and retried at the next interval; it never
// blocks the coordinator (the patch runs on the publisher's own thread).
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>

#include "gpumux/coordinator/coordinator.h"
#include "gpumux/core/log.h"
#include "gpumux/core/result.h"
#include "gpumux/kube/api_client.h"
#include "gpumux/kube/coordinator_status.h"

namespace gpumux::coordinator {

class NodeStatusPublisher {
 public:
  struct Options {
    std::chrono::milliseconds every{10000};
    std::chrono::milliseconds heartbeat{60000};
  };
  // `api` must outlive the publisher. The thread starts at once and patches the first state
  // offered.
  NodeStatusPublisher(kube::KubeApi& api, std::string node, Options options, core::Logger log);
  ~NodeStatusPublisher();  // stops the thread (a patch in flight ends within the API timeout)
  NodeStatusPublisher(const NodeStatusPublisher&) = delete;
  NodeStatusPublisher& operator=(const NodeStatusPublisher&) = delete;

  // Whether the publisher wants a new state now (cheap; callers build the state only then).
  bool Due() const;
  // The newest state (StateJson); replaces one not yet published.
  void Offer(nlohmann::json state);
  std::int64_t patches() const;  // successful patches so far

 private:
  void Run(std::stop_token stop);

  kube::KubeApi* api_;
  std::string node_;
  Options options_;
  core::Logger log_;
  mutable std::mutex mu_;
  std::condition_variable_any cv_;
  std::optional<nlohmann::json> offered_;
  nlohmann::json published_;  // the last state patched (without "updated")
  std::chrono::steady_clock::time_point last_offer_{}, last_patch_{};
  bool ever_patched_ = false;
  std::int64_t patches_ = 0;
  std::jthread thread_;
};

}  // namespace gpumux::coordinator
