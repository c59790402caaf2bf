// The Coordinator's per-job and per-GPU state (coordinator.cc, admission.cc): private to the
// coordinator's sources.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "gpumux/coordinator/coordinator.h"

namespace gpumux::coordinator {

// What a tuning computation produced (the runner's side of Coordinator::RunTuning).
struct Coordinator::Computed {
  bool started = false;  // a session's start: `session` is null when there is nothing to tune
  std::shared_ptr<policy::TuningSession> session;
  policy::TuneStep step;
  std::string tuner_state;  // after a final step: the tuner's learned corrections, as stored
};

// `batch` within the job's own bounds (min_batch, max_batch; 0 = none): what it is ever told.
inline int WithinBounds(const Registration& r, int batch) {
  if (r.min_batch > 0) batch = std::max(batch, r.min_batch);
  if (r.max_batch > 0) batch = std::min(batch, r.max_batch);
  return batch;
}

inline double MeanOf(const std::deque<double>& v) {
  if (v.empty()) return 0;
  return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

struct Coordinator::Job {
  Registration reg;
  std::string owner;             // the registering caller's Principal(); "" = restored without one
  std::int64_t seen_unix = 0;    // wall-clock seconds of its last registration or report
  std::int64_t stored_seen = 0;  // the `seen_unix` last written to the store
  const policy::ClassProfile* cls = nullptr;
  std::string gpu;  // the group it belongs to; "" = none (no GPU or several)
  int batch = 0;    // the batch it last ran
  int target = 0;
  Clock::time_point last_seen;
  std::int64_t steps_total = 0;
  int since_change = 0;
  std::deque<double> recent;                            // step times at `batch`, after warm-up
  std::map<int, std::pair<double, std::int64_t>> solo;  // batch -> (sum, n) while alone
  bool adopted = false;           // ran a step at its target since the session's step began
  bool skip_next_report = false;  // the first report after a window opens may straddle it
  double window_sum = 0;
  int window_n = 0;
  double noise_scale = 0;
};

struct Coordinator::Group {
  std::string gpu;
  std::vector<std::string> members;  // registration order
  std::string state = "solo";
  // Null while no session runs, and while a computation holds it (the runner's side).
  std::shared_ptr<policy::TuningSession> session;
  bool computing = false;  // a computation for this group is in flight
  // The group's generation: it changes whenever its jobs change or its session ends, and a
  // computation asked for under another is dropped. Shared with the runner's side, which reads
  // it to skip stale work before computing.
  std::shared_ptr<std::atomic<std::uint64_t>> generation =
      std::make_shared<std::atomic<std::uint64_t>>(0);
  std::vector<std::string> session_jobs;
  int window_steps = 0;
  bool window_open = false;
  Clock::time_point step_started;
  std::int64_t sessions = 0, windows = 0;
  // From the store, until the group changes: the tuned assignment of these jobs.
  std::map<std::string, int> restored;
};

}  // namespace gpumux::coordinator
