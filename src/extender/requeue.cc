#include "gpumux/extender/requeue.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <vector>

#include "gpumux/core/time.h"
#include "gpumux/kube/grant.h"
#include "gpumux/kube/objects.h"

namespace gpumux::extender {
namespace {

using nlohmann::json;

// What of a node can change whether a GPU pod fits there: gpumux's annotations (inventory,
// device plugin state, unit, handshake), the kubelet's allocatable gpumux resources, and
// spec.unschedulable. Status heartbeats leave it unchanged.
std::string NodeFingerprint(const json& node) {
  std::string out;
  const json* metadata = kube::JsonChild(node, "metadata");
  const json* annotations =
      metadata != nullptr ? kube::JsonChild(*metadata, "annotations") : nullptr;
  if (annotations != nullptr && annotations->is_object()) {
    for (const auto& [key, value] : annotations->items()) {
      if (key.rfind("gpumux.io/", 0) != 0 || key == "gpumux.io/allocating") continue;
      out += key;
      out += '=';
      out += value.is_string() ? value.get<std::string>() : value.dump();
      out += '\n';
    }
  }
  const json* status = kube::JsonChild(node, "status");
  const json* allocatable = status != nullptr ? kube::JsonChild(*status, "allocatable") : nullptr;
  if (allocatable != nullptr && allocatable->is_object()) {
    for (const auto& [key, value] : allocatable->items()) {
      if (key.rfind("gpumux.io/", 0) != 0) continue;
      out += key;
      out += ':';
      out += value.is_string() ? value.get<std::string>() : value.dump();
      out += '\n';
    }
  }
  const json* spec = kube::JsonChild(node, "spec");
  const json* unschedulable = spec != nullptr ? kube::JsonChild(*spec, "unschedulable") : nullptr;
  if (unschedulable != nullptr && unschedulable->is_boolean() && unschedulable->get<bool>()) {
    out += "unschedulable\n";
  }
  return out;
}

}  // namespace

Requeuer::Requeuer(kube::KubeApi& api, RequeuerOptions options)
    : api_(&api), options_(std::move(options)) {
  if (!options_.now_text)
    options_.now_text = [] {
      return core::FormatRfc3339Millis(core::UnixMillis(std::chrono::system_clock::now()));
    };
}

Requeuer::~Requeuer() { Stop(); }

void Requeuer::Start() {
  thread_ = std::jthread([this](std::stop_token stop) { Run(stop); });
}

void Requeuer::Stop() {
  if (!thread_.joinable()) return;
  thread_.request_stop();
  wake_.notify_all();
  thread_.join();
}

void Requeuer::TurnedAway(const std::string& ns, const std::string& name, const std::string& uid,
                          std::chrono::steady_clock::duration retry_in) {
  if (uid.empty() || name.empty()) return;
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard lock(mu_);
  auto [it, inserted] = waiting_.try_emplace(uid, Waiting{ns, name, now, {}, {}});
  it->second.last_turned_away = now;
  it->second.retry_at =
      retry_in > retry_in.zero() ? now + retry_in : std::chrono::steady_clock::time_point{};
  if (retry_in > retry_in.zero()) {
    retry_asked_ = true;
    wake_.notify_all();
  }
  if (!inserted || waiting_.size() <= options_.max_pods) return;
  // Full: drop the pod turned away longest ago.
  auto oldest =
      std::min_element(waiting_.begin(), waiting_.end(), [](const auto& a, const auto& b) {
        return a.second.last_turned_away < b.second.last_turned_away;
      });
  if (oldest == waiting_.end()) return;
  const std::string key = oldest->first;  // a copy: erase must not read the erased node
  waiting_.erase(key);
}

void Requeuer::ObservePod(const kube::WatchEvent& event) {
  const json* metadata = kube::JsonChild(event.object, "metadata");
  if (metadata == nullptr) return;
  const std::string uid = kube::JsonString(*metadata, "uid");
  const json* annotations = kube::JsonChild(*metadata, "annotations");
  const bool granted = annotations != nullptr && annotations->is_object() &&
                       annotations->contains("gpumux.io/grant");
  const json* spec = kube::JsonChild(event.object, "spec");
  const bool bound = spec != nullptr && !kube::JsonString(*spec, "nodeName").empty();
  const json* status = kube::JsonChild(event.object, "status");
  const std::string phase = status != nullptr ? kube::JsonString(*status, "phase") : std::string();
  std::string why;
  if (event.type == "DELETED") {
    if (granted)
      why = "pod " + kube::JsonString(*metadata, "namespace") + "/" +
            kube::JsonString(*metadata, "name") + " deleted";
  } else if (granted && (phase == "Succeeded" || phase == "Failed")) {
    why = "pod " + kube::JsonString(*metadata, "namespace") + "/" +
          kube::JsonString(*metadata, "name") + " " +
          (phase == "Succeeded" ? "succeeded" : "failed");
  }
  std::lock_guard lock(mu_);
  if (event.type == "DELETED" || bound) waiting_.erase(uid);
  if (!why.empty() && !waiting_.empty()) {
    pending_why_ = std::move(why);
    wake_.notify_all();
  }
}

void Requeuer::ObserveNode(const kube::WatchEvent& event) {
  const json* metadata = kube::JsonChild(event.object, "metadata");
  if (metadata == nullptr) return;
  const std::string name = kube::JsonString(*metadata, "name");
  std::lock_guard lock(mu_);
  if (event.type == "DELETED") {
    node_fingerprints_.erase(name);
    return;
  }
  std::string fingerprint = NodeFingerprint(event.object);
  auto [it, inserted] = node_fingerprints_.try_emplace(name, fingerprint);
  if (!inserted) {
    if (it->second == fingerprint) return;
    it->second = std::move(fingerprint);
  }
  if (waiting_.empty()) return;
  pending_why_ = "node " + name + (inserted ? " added" : " changed");
  wake_.notify_all();
}

void Requeuer::RoomMayHaveBeenMade(std::string_view why) {
  std::lock_guard lock(mu_);
  if (waiting_.empty()) return;
  pending_why_ = std::string(why);
  wake_.notify_all();
}

std::size_t Requeuer::waiting() const {
  std::lock_guard lock(mu_);
  return waiting_.size();
}

std::int64_t Requeuer::requeued() const {
  std::lock_guard lock(mu_);
  return requeued_;
}

std::chrono::steady_clock::time_point Requeuer::NextRetryLocked() const {
  auto next = std::chrono::steady_clock::time_point::max();
  for (const auto& [uid, w] : waiting_) {
    if (w.retry_at != std::chrono::steady_clock::time_point{}) next = std::min(next, w.retry_at);
  }
  return next;
}

void Requeuer::Run(std::stop_token stop) {
  std::unique_lock lock(mu_);
  while (!stop.stop_requested()) {
    const auto next_retry = NextRetryLocked();
    const auto woken = [this] { return !pending_why_.empty() || retry_asked_; };
    if (next_retry == std::chrono::steady_clock::time_point::max()) {
      wake_.wait(lock, stop, woken);
    } else {
      wake_.wait_until(lock, stop, next_retry, woken);
    }
    if (stop.stop_requested()) return;
    retry_asked_ = false;
    if (pending_why_.empty()) {
      if (std::chrono::steady_clock::now() < next_retry) continue;  // a new retry_in: look again
      lock.unlock();
      Round("a wait limit passed", /*due_only=*/true);
      lock.lock();
      continue;
    }
    // Let a burst of events (a Job's pods ending together) make one round.
    wake_.wait_for(lock, stop, options_.coalesce, [] { return false; });
    if (stop.stop_requested()) return;
    std::string why = std::move(pending_why_);
    pending_why_.clear();
    lock.unlock();
    Round(why, /*due_only=*/false);
    lock.lock();
  }
}

void Requeuer::Round(const std::string& why, bool due_only) {
  struct Target {
    std::string uid, ns, name;
    bool due;  // its retry time had come
  };
  std::vector<Target> targets;
  const auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard lock(mu_);
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      Waiting& w = it->second;
      const bool timed = w.retry_at != std::chrono::steady_clock::time_point{};
      if (!timed && now - w.last_turned_away > options_.forget_after) {  // a timed one waits
        it = waiting_.erase(it);
        continue;
      }
      const bool due = timed && w.retry_at <= now;
      // A retry that has come is made even right after another round's patch: that one came
      // before the pod's answer changed.
      if (due || (!due_only && (w.last_patched == std::chrono::steady_clock::time_point{} ||
                                now - w.last_patched >= options_.min_interval))) {
        w.last_patched = now;
        if (due) w.retry_at = {};
        targets.push_back({it->first, w.ns, w.name, due});
      }
      ++it;
    }
  }
  if (targets.empty()) return;
  // Oldest names first is arbitrary; sort for a deterministic order in logs and tests.
  std::sort(targets.begin(), targets.end(), [](const Target& a, const Target& b) {
    return a.ns != b.ns ? a.ns < b.ns : a.name < b.name;
  });
  const std::string stamp = options_.now_text();
  int done = 0;
  std::string failures;
  for (const Target& t : targets) {
    auto patched = kube::PatchPodAnnotations(*api_, t.ns, t.name, t.uid,
                                             json{{std::string(kAnnotationRequeuedAt), stamp}});
    std::lock_guard lock(mu_);
    if (patched) {
      ++done;
      ++requeued_;
    } else if (patched.error().http_status == 404 || patched.error().http_status == 409) {
      waiting_.erase(t.uid);  // gone, or replaced by another pod of the same name
    } else {
      if (failures.empty()) {
        failures = "; " + t.ns + "/" + t.name + ": " + patched.error().ToString();
      }
      // A timed retry that failed is tried again (no event may ever come for it).
      if (auto it = waiting_.find(t.uid); t.due && it != waiting_.end()) {
        it->second.retry_at = std::chrono::steady_clock::now() + options_.retry_after_error;
      }
    }
  }
  if (options_.log) {
    options_.log.Write(failures.empty() ? core::LogLevel::kInfo : core::LogLevel::kWarn,
                       "requeued " + std::to_string(done) + " of " +
                           std::to_string(targets.size()) +
                           (targets.size() == 1 ? " pod" : " pods") + " waiting for GPUs (" + why +
                           ")" + failures);
  }
}

}  // namespace gpumux::extender
