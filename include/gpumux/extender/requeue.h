// The requeuer: tells kube-scheduler to try again, at once, the pods gpumux turned away, when
// the extender's own watch shows that room may have been made.
//
// Why: kube-scheduler requeues a pending pod on cluster events (an assigned pod deleted, a node
// changed) and asks the extender again at once. The extender learns of the same event from its
// own watch, which may be a few milliseconds behind kube-scheduler's: the filter then says "no
// room" once more, and since kube-scheduler sees no further event, the pod waits for its
// 5-minute flush of unschedulable pods. kube-scheduler offers extenders no way to requeue a
// pod, but it requeues an unschedulable pod whose object changes (an annotation is enough). So
// the filter reports every pod it turned away here, and when the watch shows a GPU pod ended or
// a node's gpumux inventory, allocatable or device-plugin state changed, the requeuer writes
// gpumux.io/requeued-at (the time, RFC 3339 with milliseconds) on each of those pods (a merge
// patch with the pod's uid as precondition). kube-scheduler then retries them after their
// backoff. Pods bound, deleted or not turned away again for `forget_after` are dropped.
//
// A pod whose answer changes with time alone (fgd-sat-reserve holds a pod until it is overdue:
// core::Request::overdue) is turned away with `retry_in`: the requeuer patches it once more
// when that time has passed, whether or not an event came, so that it does not wait for
// kube-scheduler's 5-minute flush. Such a pod is kept until its retry is made (forget_after
// does not drop it), and a retry whose patch fails is made again after `retry_after_error`.
//
// Cost: one PATCH per waiting pod per round, plus one per timed retry; events within
// `coalesce` make one round, a pod is patched by rounds at most once per `min_interval` (a
// timed retry is not delayed by it), and at most `max_pods` pods are followed.
// Thread safety: all methods may be called concurrently; the patches are made on the
// requeuer's own thread, never inside a verb.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>

#include "gpumux/core/log.h"
#include "gpumux/kube/api_client.h"

namespace gpumux::extender {

inline constexpr std::string_view kAnnotationRequeuedAt = "gpumux.io/requeued-at";

struct RequeuerOptions {
  std::chrono::milliseconds coalesce{50};       // events this close together make one round
  std::chrono::milliseconds min_interval{500};  // per pod, between two patches
  std::chrono::seconds forget_after{1800};      // not turned away again for this long: dropped
  std::size_t max_pods = 4096;                  // the oldest are dropped past this
  std::function<std::string()> now_text;        // the annotation's value; default: UTC, ms
  core::Logger log;                             // one line per round; may be empty
  // A timed retry (TurnedAway's retry_in) whose patch failed is made again after this long.
  std::chrono::milliseconds retry_after_error{5000};
};

class Requeuer {
 public:
  // `api` must outlive the requeuer.
  explicit Requeuer(kube::KubeApi& api, RequeuerOptions options = {});
  ~Requeuer();
  Requeuer(const Requeuer&) = delete;
  Requeuer& operator=(const Requeuer&) = delete;

  void Start();
  void Stop();  // returns once the thread has ended (an API call in flight is waited for)

  // The filter found no node for this pod. retry_in > 0: patch it again after that long even
  // if no event makes room (replaces what an earlier call asked; 0 asks nothing).
  void TurnedAway(const std::string& ns, const std::string& name, const std::string& uid,
                  std::chrono::steady_clock::duration retry_in = {});
  // Watch events: decide whether room may have been made, and stop following bound or
  // deleted pods.
  void ObservePod(const kube::WatchEvent& event);
  void ObserveNode(const kube::WatchEvent& event);
  // Something else may have made room (e.g. the state synced with the API server).
  void RoomMayHaveBeenMade(std::string_view why);

  std::size_t waiting() const;
  std::int64_t requeued() const;  // patches that succeeded

 private:
  struct Waiting {
    std::string ns, name;
    std::chrono::steady_clock::time_point last_turned_away, last_patched;
    std::chrono::steady_clock::time_point retry_at;  // {}: none asked
  };
  void Run(std::stop_token stop);
  // Patches the waiting pods (only those whose retry_at has passed when `due_only`).
  void Round(const std::string& why, bool due_only);
  std::chrono::steady_clock::time_point NextRetryLocked() const;  // max(): none

  kube::KubeApi* api_;
  RequeuerOptions options_;
  mutable std::mutex mu_;
  std::condition_variable_any wake_;
  std::unordered_map<std::string, Waiting> waiting_;  // by uid
  std::map<std::string, std::string> node_fingerprints_;
  std::string pending_why_;   // non-empty: a round is due
  bool retry_asked_ = false;  // a retry_in was given: Run looks at the earliest retry again
  std::int64_t requeued_ = 0;
  std::jthread thread_;
};

}  // namespace gpumux::extender
