// The extender's side of "closing the loop": learned interference observations, written by the
// node coordinators into the store (`<prefix>observations/<set>/<batches>/<node>`,
// docs/COORDINATOR.md), read every `every` and added to the shipped profile
// (policy::WithObservations); the result is swapped into the cluster state
// (ClusterState::SetProfile), so the interference-aware policies place with what the cluster
// has measured.
//
// A read that fails (the store is down, a file store is locked by its coordinator) keeps the
// profile in use and logs; a key whose value does not parse is skipped, counted and logged
// (the others are used). The profile is swapped only when the observations changed.
// Stores: an etcd store is opened once and kept (one long-lived channel); a file store is
// opened for each read and closed at once, since a file store is held by one process at a
// time (its coordinator's, when one runs: the read then fails until it stops).
//
// Thread safety: ReadOnce and Start/Stop may be called from any thread; reads are serialised.
// The background thread (Start) calls ReadOnce every `every`, first at once.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "gpumux/core/log.h"
#include "gpumux/core/result.h"
#include "gpumux/policy/observations.h"
#include "gpumux/sched/cluster_state.h"
#include "gpumux/store/store.h"

namespace gpumux::extender {

struct ObservationFeedOptions {
  std::string url;                  // store URL (store::OpenStore)
  store::StoreOptions store;        // TLS and auth for etcd
  std::string prefix = "/gpumux/";  // the coordinators' --store-prefix
  std::chrono::milliseconds every{30'000};
  policy::ObservationOptions observations;
  core::Logger log;  // may be empty
};

struct FeedStatus {
  bool ok = false;                     // the last read succeeded
  std::string error;                   // why it did not
  policy::ObservationSummary summary;  // of the profile in use
  std::size_t unreadable_keys = 0;     // keys in the last successful read that did not parse
  std::int64_t reads = 0, failed_reads = 0, swaps = 0;
};

class ObservationFeed {
 public:
  // `base` is the shipped profile the observations are added to; `state` outlives the feed.
  ObservationFeed(ObservationFeedOptions options,
                  std::shared_ptr<const policy::WorkloadProfile> base, sched::ClusterState& state);
  ~ObservationFeed();  // stops the thread
  ObservationFeed(const ObservationFeed&) = delete;
  ObservationFeed& operator=(const ObservationFeed&) = delete;

  // One read now: lists the observation keys, and if they changed since the last read that
  // was applied, builds and swaps in the new profile. Error when the store could not be read
  // (the state keeps its profile).
  core::Result<void> ReadOnce();
  void Start();
  void Stop();
  FeedStatus status() const;

 private:
  core::Result<std::vector<store::KeyValue>> List();

  ObservationFeedOptions options_;
  std::shared_ptr<const policy::WorkloadProfile> base_;
  sched::ClusterState& state_;
  std::mutex read_mu_;                  // one read at a time
  std::unique_ptr<store::Store> kept_;  // etcd: opened once
  std::optional<std::string> applied_;  // the key/value text of the observations in use
  mutable std::mutex status_mu_;
  FeedStatus status_;
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace gpumux::extender
