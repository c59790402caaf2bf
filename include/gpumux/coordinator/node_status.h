// What the node coordinator measures, published where a platform engineer can read it without
// reaching the node: the coordinator's state (the body of GET /v1/state) as the node annotation
// gpumux.io/coordinator, read by `kubectl gpumux top`.
//
//   gpumux.io/coordinator: {"node":"gpu-1","tuner":"joint","updated":"2026-11-26T10:00:00Z",
//     "gpus":[{"uuid":"GPU-8f0c...","state":"tuned","tuning_sessions":1,
//              "measurement_windows":3,
//              "jobs":[{"job":"team-a/train-1/main","class":"resnet","batch_size":64,
//                       "target_batch":64,"step_s":0.081,"samples_per_s":790.1,
//                       "slowdown":1.31,"solo_step_s":0.062,"steps":1200}]}]}
// (a last entry with "uuid": "" and "state": "untuned" holds the jobs on no single GPU).
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
#include "gpumux/k8s/api_client.h"

namespace gpumux::coordinator {

inline constexpr std::string_view kAnnotationCoordinator = "gpumux.io/coordinator";

// The coordinator's state as JSON (GET /v1/state and the annotation, without "updated").
nlohmann::json StateJson(std::string_view node, std::string_view tuner,
                         std::span<const GpuView> gpus);

// The annotation read back: the views, the node and tuner, and when it was written (unix
// seconds). Error names the field that is missing or wrong.
struct NodeStatus {
  std::string node, tuner;
  std::int64_t updated = 0;
  std::vector<GpuView> gpus;
};
core::Result<NodeStatus> DecodeNodeStatus(std::string_view text);

class NodeStatusPublisher {
 public:
  struct Options {
    std::chrono::milliseconds every{10000};
    std::chrono::milliseconds heartbeat{60000};
  };
  // `api` must outlive the publisher. The thread starts at once and patches the first state
  // offered.
  NodeStatusPublisher(k8s::KubeApi& api, std::string node, Options options, core::Logger log);
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

  k8s::KubeApi* api_;
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
