// What the node coordinator measures (wire format), published where a platform engineer can read it
// without reaching the node: the coordinator's state (the body of GET /v1/state) as the node
// annotation gpumux.io/coordinator, read by `kubectl gpumux top`.
//
//   gpumux.io/coordinator: {"node":"gpu-1","tuner":"joint","updated":"2026-11-26T10:00:00Z",
//     "gpus":[{"uuid":"GPU-8f0c...","state":"tuned","tuning_sessions":1,
//              "measurement_windows":3,
//              "jobs":[{"job":"team-a/train-1/main","class":"resnet","batch_size":64,
//                       "target_batch":64,"step_s":0.081,"samples_per_s":790.1,
//                       "slowdown":1.31,"solo_step_s":0.062,"steps":1200}]}]}
// (a last entry with "uuid": "" and "state": "untuned" holds the jobs on no single GPU).
//
// Written by the coordinator (coordinator/node_status.h), read by inspect; a wire object of
// gpumux's like the grant, so it lives with the Kubernetes library.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gpumux/core/result.h"

namespace gpumux::kube {

// One job as the coordinator sees it.
struct JobView {
  std::string job, cls, gpu;
  int batch_size = 0;  // the batch it last reported running
  int target_batch = 0;
  double step_s = 0;         // mean over its recent steps (0 = none yet)
  double samples_per_s = 0;  // batch_size / step_s
  double slowdown = 0;       // step_s / solo step time at that batch (0 = unknown)
  double solo_step_s = 0;    // the solo reference used (0 = unknown)
  std::int64_t steps = 0;    // steps reported since registration
};
struct GpuView {
  std::string uuid, state;
  std::vector<JobView> jobs;
  std::int64_t sessions = 0;  // tuning sessions started on this GPU
  std::int64_t windows = 0;   // measurement windows closed
};

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

}  // namespace gpumux::kube
