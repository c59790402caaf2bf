// A reflector keeps a local copy of one Kubernetes collection in sync: it lists the
// collection, hands over every item, then watches from the list's resourceVersion and hands
// over each change, the way client-go's Reflector does.
//
//   Run:  List -> replace(items) -> Watch(rv) -> event(e)... -> (stream ends) -> Watch(rv) ...
//   - rv follows every event and BOOKMARK, so a re-watch resumes where the last one stopped;
//   - "410 Gone" (an HTTP 410 answer, or an ERROR event whose Status has code 410) means rv is
//     too old: list again (replace is called again with the whole collection);
//   - any other failure (list or watch) is retried after an exponential backoff (initial,
//     doubling up to max; reset by a successful watch), with optional seeded jitter;
//   - a watch that ends at once with no event counts as a failure (no hot loop against a
//     server that closes every stream);
//   - every reconnect and relist is logged with its reason.
//
// Thread safety: Run is called once, on the thread that owns the reflector's work; the
// handler's functions are called on that thread only, and must not throw (an exception
// leaves Run). synced(), relists() and the other
// counters may be read from any thread. Run returns within about a second (usually at once)
// after `stop` is requested, also during a backoff or a silent watch; a List in flight is
// bounded by the client's request timeout.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include "gpumux/core/log.h"
#include "gpumux/kube/api_client.h"

namespace gpumux::kube {

struct ReflectorHandler {
  // The whole collection, after every (re)list. Items are as the list returned them.
  std::function<void(std::vector<nlohmann::json> items)> replace;
  // One ADDED, MODIFIED or DELETED event (bookmarks and errors are handled inside).
  std::function<void(const WatchEvent&)> event;
  // One line for humans per reconnect, relist or failure; may be empty.
  core::Logger log;
};

struct ReflectorOptions {
  std::chrono::milliseconds initial_backoff{500};
  std::chrono::milliseconds max_backoff{30000};
  int page_size = 500;              // List's limit
  int watch_timeout_seconds = 300;  // timeoutSeconds of each watch
  // Jitter: when set, each backoff delay d becomes d + random_below(d * jitter_percent / 100
  // + 1) milliseconds. random_below(n) must return a uniform integer in [0, n), e.g. from a
  // seeded core::Rng. Empty: no jitter.
  std::function<std::uint64_t(std::uint64_t n)> random_below;
  int jitter_percent = 20;
};

class Reflector {
 public:
  // `api` must outlive the reflector. `list_path` is a collection, e.g. "/api/v1/pods" or
  // "/api/v1/namespaces/ns/pods?fieldSelector=spec.nodeName%3Dn1".
  Reflector(KubeApi& api, std::string list_path, ReflectorHandler handler,
            ReflectorOptions options = {});

  // Lists and watches until `stop` is requested. Never returns an error: failures are
  // retried (and logged).
  void Run(std::stop_token stop);

  // True once the first list has been handed to `replace`.
  bool synced() const { return synced_.load(); }
  // Completed lists after the first completed one (e.g. after a 410 Gone); failed list
  // attempts are counted by failures(), not here.
  std::int64_t relists() const { return relists_.load(); }
  // Watches started (each connection attempt).
  std::int64_t watches() const { return watches_.load(); }
  // Failed lists and watches (each followed by a backoff).
  std::int64_t failures() const { return failures_.load(); }
  // The delay of the most recent backoff (for tests of the schedule).
  std::chrono::milliseconds last_backoff() const {
    return std::chrono::milliseconds(last_backoff_ms_.load());
  }

 private:
  enum class WatchOutcome : std::uint8_t { kEnded, kGone, kFailed, kStopped };

  bool ListOnce(std::string& resource_version);
  WatchOutcome WatchOnce(std::string& resource_version, std::stop_token stop);
  std::chrono::milliseconds NextBackoff();
  // Waits `delay` or until `stop`; false when stopped.
  bool Sleep(std::chrono::milliseconds delay, std::stop_token stop);

  KubeApi& api_;
  std::string path_;
  ReflectorHandler handler_;
  ReflectorOptions options_;
  std::chrono::milliseconds backoff_;
  std::string last_error_;  // of the latest failed list/watch, for the log

  std::mutex sleep_mutex_;
  std::condition_variable_any sleep_cv_;

  std::atomic<bool> synced_{false};
  std::atomic<std::int64_t> lists_{0};
  std::atomic<std::int64_t> relists_{0};
  std::atomic<std::int64_t> watches_{0};
  std::atomic<std::int64_t> failures_{0};
  std::atomic<std::int64_t> last_backoff_ms_{0};
};

}  // namespace gpumux::kube
