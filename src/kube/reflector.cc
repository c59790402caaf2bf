#include "gpumux/kube/reflector.h"

#include <algorithm>
#include <optional>
#include <utility>

namespace gpumux::kube {
namespace {

using nlohmann::json;

constexpr auto kShortWatch = std::chrono::seconds(1);

std::string ResourceVersionOf(const json& object) {
  if (!object.is_object()) return {};
  auto metadata = object.find("metadata");
  if (metadata == object.end() || !metadata->is_object()) return {};
  auto rv = metadata->find("resourceVersion");
  if (rv == metadata->end() || !rv->is_string()) return {};
  return rv->get<std::string>();
}

// The code of a Status object (0 when it is not one).
std::int64_t StatusCode(const json& object) {
  if (!object.is_object()) return 0;
  auto code = object.find("code");
  if (code == object.end() || !code->is_number_integer()) return 0;
  return code->get<std::int64_t>();
}

std::string StatusText(const json& object) {
  // Depth-bounded where it was parsed (core::ParseJson); cut for the message.
  if (!object.is_object()) return object.dump().substr(0, 200);
  std::string out = "code " + std::to_string(StatusCode(object));
  if (auto reason = object.find("reason"); reason != object.end() && reason->is_string()) {
    out += " " + reason->get<std::string>();
  }
  if (auto message = object.find("message"); message != object.end() && message->is_string()) {
    out += ": " + message->get<std::string>();
  }
  return out;
}

std::string Millis(std::chrono::milliseconds delay) {
  return std::to_string(delay.count()) + " ms";
}

}  // namespace

Reflector::Reflector(KubeApi& api, std::string list_path, ReflectorHandler handler,
                     ReflectorOptions options)
    : api_(api),
      path_(std::move(list_path)),
      handler_(std::move(handler)),
      options_(std::move(options)),
      backoff_(options_.initial_backoff) {}

std::chrono::milliseconds Reflector::NextBackoff() {
  std::chrono::milliseconds delay = backoff_;
  backoff_ = std::min(backoff_ * 2, std::max(options_.max_backoff, options_.initial_backoff));
  if (options_.random_below && options_.jitter_percent > 0 && delay.count() > 0) {
    const auto span = static_cast<std::uint64_t>(delay.count()) *
                          static_cast<std::uint64_t>(options_.jitter_percent) / 100 +
                      1;
    delay += std::chrono::milliseconds(static_cast<std::int64_t>(options_.random_below(span)));
  }
  last_backoff_ms_.store(delay.count());
  return delay;
}

bool Reflector::Sleep(std::chrono::milliseconds delay, std::stop_token stop) {
  std::unique_lock lock(sleep_mutex_);
  sleep_cv_.wait_for(lock, stop, delay, [] { return false; });
  return !stop.stop_requested();
}

bool Reflector::ListOnce(std::string& resource_version) {
  auto list = api_.List(path_, options_.page_size);
  if (!list) {
    last_error_ = list.error().ToString();
    return false;
  }
  std::vector<json> items;
  if (auto it = list->find("items"); it != list->end() && it->is_array()) {
    items.reserve(it->size());
    for (auto& item : *it) items.push_back(std::move(item));
  }
  resource_version = ResourceVersionOf(*list);
  if (lists_.fetch_add(1) > 0) relists_.fetch_add(1);
  if (handler_.replace) handler_.replace(std::move(items));
  synced_.store(true);
  return true;
}

Reflector::WatchOutcome Reflector::WatchOnce(std::string& resource_version, std::stop_token stop) {
  watches_.fetch_add(1);
  const auto start = std::chrono::steady_clock::now();
  std::int64_t received = 0;
  bool gone = false;
  std::optional<std::string> error_event;
  auto result = api_.Watch(
      path_, resource_version,
      [&](WatchEvent&& event) -> bool {
        if (event.type == "ADDED" || event.type == "MODIFIED" || event.type == "DELETED") {
          ++received;
          if (std::string rv = ResourceVersionOf(event.object); !rv.empty()) {
            resource_version = std::move(rv);
          }
          if (handler_.event) handler_.event(event);
          return true;
        }
        if (event.type == "BOOKMARK") {
          ++received;
          if (std::string rv = ResourceVersionOf(event.object); !rv.empty()) {
            resource_version = std::move(rv);
          }
          return true;
        }
        if (event.type == "ERROR") {
          if (StatusCode(event.object) == 410) {
            gone = true;
          } else {
            error_event = "ERROR event: " + StatusText(event.object);
          }
          return false;
        }
        handler_.log.Warn("ignoring a watch event of unknown type",
                          {{"path", path_}, {"type", event.type}});
        return true;
      },
      stop, options_.watch_timeout_seconds);
  if (stop.stop_requested()) return WatchOutcome::kStopped;
  if (gone || (!result && result.error().http_status == 410)) {
    last_error_ = gone ? "an ERROR event with code 410 (Gone)" : result.error().ToString();
    return WatchOutcome::kGone;
  }
  if (!result) {
    last_error_ = result.error().ToString();
    return WatchOutcome::kFailed;
  }
  if (error_event) {
    last_error_ = *error_event;
    return WatchOutcome::kFailed;
  }
  if (received == 0 && std::chrono::steady_clock::now() - start < kShortWatch) {
    last_error_ = "the watch ended at once without any event";
    return WatchOutcome::kFailed;
  }
  backoff_ = options_.initial_backoff;
  return WatchOutcome::kEnded;
}

void Reflector::Run(std::stop_token stop) {
  std::string resource_version;
  bool need_list = true;
  int watches_since_list = 0;
  while (!stop.stop_requested()) {
    if (need_list) {
      if (!ListOnce(resource_version)) {
        failures_.fetch_add(1);
        const auto delay = NextBackoff();
        handler_.log.Warn("list failed; retrying",
                          {{"path", path_}, {"error", last_error_}, {"retry_in", Millis(delay)}});
        if (!Sleep(delay, stop)) return;
        continue;
      }
      need_list = false;
      watches_since_list = 0;
      if (relists_.load() > 0) {
        handler_.log.Info("relisted", {{"path", path_}, {"resource_version", resource_version}});
      }
    }
    const std::string from = resource_version;
    const WatchOutcome outcome = WatchOnce(resource_version, stop);
    ++watches_since_list;
    switch (outcome) {
      case WatchOutcome::kStopped:
        return;
      case WatchOutcome::kEnded:
        handler_.log.Debug(
            "watch ended; watching again",
            {{"path", path_}, {"from", from}, {"resource_version", resource_version}});
        break;
      case WatchOutcome::kGone:
        need_list = true;
        if (watches_since_list == 1 && resource_version == from) {
          // The list's own resourceVersion is already gone: do not hammer the server.
          failures_.fetch_add(1);
          const auto delay = NextBackoff();
          handler_.log.Warn("watch gone right after a list; relisting",
                            {{"path", path_},
                             {"from", from},
                             {"error", last_error_},
                             {"retry_in", Millis(delay)}});
          if (!Sleep(delay, stop)) return;
        } else {
          handler_.log.Info(
              "resourceVersion too old; relisting",
              {{"path", path_}, {"resource_version", resource_version}, {"error", last_error_}});
        }
        break;
      case WatchOutcome::kFailed: {
        failures_.fetch_add(1);
        const auto delay = NextBackoff();
        handler_.log.Warn("watch failed; watching again", {{"path", path_},
                                                           {"from", from},
                                                           {"error", last_error_},
                                                           {"resource_version", resource_version},
                                                           {"retry_in", Millis(delay)}});
        if (!Sleep(delay, stop)) return;
        break;
      }
    }
  }
}

}  // namespace gpumux::kube
