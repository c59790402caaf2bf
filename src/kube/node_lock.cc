#include "gpumux/kube/node_lock.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "gpumux/core/json.h"
#include "gpumux/core/time.h"
#include "gpumux/kube/grant.h"
#include "gpumux/kube/objects.h"

namespace gpumux::kube {
namespace {

using core::ErrorCode;
using core::MakeError;
using nlohmann::json;

constexpr std::string_view kWhere = "annotation gpumux.io/allocating";

core::Error FieldError(const std::string& what) {
  return core::Error{ErrorCode::kInvalidArgument, std::string(kWhere) + ": " + what};
}

// The annotation value named `key` of a node, or null when absent.
const json* Annotation(const json& node, std::string_view key) {
  if (!node.is_object() || !node.contains("metadata")) return nullptr;
  const json& metadata = node.at("metadata");
  if (!metadata.is_object() || !metadata.contains("annotations")) return nullptr;
  const json& annotations = metadata.at("annotations");
  const std::string k(key);
  if (!annotations.is_object() || !annotations.contains(k)) return nullptr;
  const json& value = annotations.at(k);
  return value.is_null() ? nullptr : &value;
}

std::string NodePath(const std::string& node) { return "/api/v1/nodes/" + QueryEscape(node); }

ApiError Malformed(const std::string& node, const std::string& what) {
  return ApiError{0, "BadNode", "node " + node + ": " + what};
}

}  // namespace

std::string EncodeNodeLock(const NodeLock& lock) {
  const json out = {{"version", lock.version},
                    {"pod", lock.PodKey()},
                    {"uid", lock.uid},
                    {"since", core::FormatRfc3339(lock.since)},
                    {"served", lock.served}};
  return out.dump();
}

core::Result<NodeLock> DecodeNodeLock(std::string_view text) {
  const auto parsed = core::ParseJson(text, kWhere);
  if (!parsed) return tl::unexpected(parsed.error());
  const json& doc = *parsed;
  if (!doc.is_object()) {
    return tl::unexpected(FieldError("not a JSON object"));
  }
  NodeLock lock;
  // version
  if (!doc.contains("version")) return tl::unexpected(FieldError("missing field \"version\""));
  const json& version = doc.at("version");
  if (!version.is_number_integer()) {
    return tl::unexpected(FieldError(std::string("field \"version\" has the wrong type (") +
                                     version.type_name() + ")"));
  }
  if (version.get<std::int64_t>() != 1) {
    return tl::unexpected(
        FieldError("unsupported version " + core::JsonSummary(version) + " (this build reads 1)"));
  }
  lock.version = 1;
  // pod: "<namespace>/<name>"
  if (!doc.contains("pod")) return tl::unexpected(FieldError("missing field \"pod\""));
  const json& pod = doc.at("pod");
  if (!pod.is_string()) {
    return tl::unexpected(
        FieldError(std::string("field \"pod\" has the wrong type (") + pod.type_name() + ")"));
  }
  const std::string& key = pod.get_ref<const std::string&>();
  const std::size_t slash = key.find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == key.size() ||
      key.find('/', slash + 1) != std::string::npos) {
    return tl::unexpected(
        FieldError("field \"pod\" must be \"<namespace>/<name>\", not \"" + key + "\""));
  }
  lock.ns = key.substr(0, slash);
  lock.name = key.substr(slash + 1);
  // uid
  if (!doc.contains("uid")) return tl::unexpected(FieldError("missing field \"uid\""));
  const json& uid = doc.at("uid");
  if (!uid.is_string()) {
    return tl::unexpected(
        FieldError(std::string("field \"uid\" has the wrong type (") + uid.type_name() + ")"));
  }
  lock.uid = uid.get<std::string>();
  if (lock.uid.empty()) return tl::unexpected(FieldError("empty \"uid\""));
  // since
  if (!doc.contains("since")) return tl::unexpected(FieldError("missing field \"since\""));
  const json& since = doc.at("since");
  if (!since.is_string()) {
    return tl::unexpected(
        FieldError(std::string("field \"since\" has the wrong type (") + since.type_name() + ")"));
  }
  auto when = core::ParseRfc3339(since.get_ref<const std::string&>());
  if (!when) return tl::unexpected(FieldError("since: " + when.error().message));
  lock.since = *when;
  // served: optional (absent = nothing served yet)
  if (doc.contains("served") && !doc.at("served").is_null()) {
    const json& served = doc.at("served");
    if (!served.is_array()) {
      return tl::unexpected(FieldError(std::string("field \"served\" has the wrong type (") +
                                       served.type_name() + ")"));
    }
    for (std::size_t i = 0; i < served.size(); ++i) {
      const json& s = served[i];
      std::string where = "served[";
      where += std::to_string(i);
      where += "]";
      if (!s.is_string() || s.get_ref<const std::string&>().empty()) {
        return tl::unexpected(
            FieldError(where + " must be a non-empty \"<container>/<resource>\" string"));
      }
      lock.served.push_back(s.get<std::string>());
    }
  }
  return lock;
}

NodeLockView ReadNodeLock(const nlohmann::json& node) {
  NodeLockView view;
  if (const json* h = Annotation(node, kAnnotationHandshake); h != nullptr && h->is_string()) {
    view.handshake = h->get_ref<const std::string&>() == kHandshakeNodeLock;
  }
  if (const json* a = Annotation(node, kAnnotationAllocating); a != nullptr) {
    if (!a->is_string()) {
      view.lock_error = std::string(kWhere) + ": not a string";
    } else if (auto lock = DecodeNodeLock(a->get_ref<const std::string&>()); lock) {
      view.lock = std::move(*lock);
    } else {
      view.lock_error = lock.error().message;
    }
  }
  if (const json* p = Annotation(node, kAnnotationDevicePlugin); p != nullptr) {
    view.plugin_state = p->is_string() ? p->get<std::string>() : core::JsonSummary(*p);
  }
  if (node.is_object() && node.contains("metadata") && node.at("metadata").is_object()) {
    const json& metadata = node.at("metadata");
    if (metadata.contains("resourceVersion") && metadata.at("resourceVersion").is_string()) {
      view.resource_version = metadata.at("resourceVersion").get<std::string>();
    }
  }
  return view;
}

nlohmann::json NodeLockPatch(const std::optional<NodeLock>& lock,
                             const std::string& resource_version) {
  json metadata = {
      {"annotations",
       {{std::string(kAnnotationAllocating), lock ? json(EncodeNodeLock(*lock)) : json(nullptr)}}}};
  if (!resource_version.empty()) metadata["resourceVersion"] = resource_version;
  return json{{"metadata", std::move(metadata)}};
}

ApiResult<nlohmann::json> ReplaceNodeLock(KubeApi& api, const std::string& node,
                                          const std::string& resource_version,
                                          const std::optional<NodeLock>& next) {
  return api.Patch(NodePath(node), NodeLockPatch(next, resource_version), PatchType::kMerge);
}

ApiResult<AcquireResult> AcquireNodeLock(KubeApi& api, const std::string& node,
                                         const NodeLock& lock, std::int64_t now,
                                         const AcquireOptions& options) {
  const int attempts = std::max(1, options.attempts);
  ApiError last;
  for (int attempt = 0; attempt < attempts; ++attempt) {
    auto got = api.Get(NodePath(node));
    if (!got) return tl::unexpected(got.error());
    const NodeLockView view = ReadNodeLock(*got);
    if (!view.handshake) return AcquireResult{AcquireOutcome::kNotNeeded, {}, false, std::nullopt};
    if (view.resource_version.empty()) {
      // Without it the patch would not be atomic; a real API server always sends one.
      return tl::unexpected(Malformed(node, "has no metadata.resourceVersion"));
    }
    if (!view.plugin_state.empty() && view.plugin_state != kDevicePluginReady) {
      // Read with the same resourceVersion the lock would be written with: a plugin that
      // starts stopping after this read makes the patch below fail with 409 and be re-read.
      std::string message = "the device plugin on node ";
      message += node;
      message += " is ";
      message += view.plugin_state;
      message += " (";
      message += kAnnotationDevicePlugin;
      message += "); the kubelet would reject a pod admitted now";
      return AcquireResult{AcquireOutcome::kNotReady, std::move(message), false, std::nullopt};
    }
    NodeLock next = lock;
    AcquireResult result{AcquireOutcome::kTaken, {}, false, std::nullopt};
    if (view.lock) {
      const NodeLock& held = *view.lock;
      const std::int64_t age = std::max<std::int64_t>(0, now - held.since);
      if (held.uid == lock.uid) {
        // Ours already (a retried bind, or one whose release failed): keep what the device
        // plugin has served, so that a pod it is part-way through is not served twice.
        result.reentered = true;
        next.served = held.served;
      } else {
        const HolderState state =
            options.holder_state ? options.holder_state(held) : HolderState::kUnknown;
        const bool expired = state == HolderState::kUnknown && age > options.ttl_seconds;
        if (state == HolderState::kNeedsDevices || (state == HolderState::kUnknown && !expired)) {
          std::string message = "node ";
          message += node;
          message += " is allocating devices for pod ";
          message += held.PodKey();
          message += " (";
          message += std::to_string(age);
          message += " s)";
          return AcquireResult{AcquireOutcome::kBusy, std::move(message), false, held};
        }
        result.message = "took over the lock of pod ";
        result.message += held.PodKey();
        result.message += " (";
        result.message += std::to_string(age);
        result.message += expired ? " s, not bound and older than the TTL)"
                                  : " s, the pod no longer needs devices)";
      }
    } else if (!view.lock_error.empty()) {
      result.message = "replaced an unreadable lock: " + view.lock_error;
    }
    auto patched = ReplaceNodeLock(api, node, view.resource_version, next);
    if (patched) return result;
    if (patched.error().http_status != 409) return tl::unexpected(patched.error());
    last = patched.error();  // someone else changed the node: read it again
  }
  return tl::unexpected(last);
}

void NodeLockBoard::Observe(const WatchEvent& event) {
  const json* metadata = JsonChild(event.object, "metadata");
  const std::string name = metadata != nullptr ? JsonString(*metadata, "name") : std::string();
  if (name.empty()) return;
  std::string holder;
  if (event.type != "DELETED") {
    const json* annotations = JsonChild(*metadata, "annotations");
    if (annotations != nullptr &&
        JsonChild(*annotations, kAnnotationAllocating.data()) != nullptr) {
      const NodeLockView view = ReadNodeLock(event.object);
      if (view.lock) holder = view.lock->uid;
    }
  }
  std::lock_guard lock(mu_);
  auto it = holders_.find(name);
  if (holder.empty()) {
    if (it == holders_.end()) return;
    holders_.erase(it);
  } else if (it == holders_.end()) {
    holders_.emplace(name, std::move(holder));
  } else if (it->second != holder) {
    it->second = std::move(holder);
  } else {
    return;
  }
  changed_.notify_all();
}

bool NodeLockBoard::WaitUntilNotHeldBy(const std::string& node, const std::string& holder_uid,
                                       std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(mu_);
  return changed_.wait_until(lock, deadline, [&] {
    auto it = holders_.find(node);
    return it == holders_.end() || it->second != holder_uid;
  });
}

ApiResult<void> ReleaseNodeLock(KubeApi& api, const std::string& node, const std::string& uid,
                                int attempts) {
  attempts = std::max(1, attempts);
  ApiError last;
  for (int attempt = 0; attempt < attempts; ++attempt) {
    auto got = api.Get(NodePath(node));
    if (!got) {
      if (got.error().http_status == 404) return {};  // the node, and its lock, are gone
      return tl::unexpected(got.error());
    }
    const NodeLockView view = ReadNodeLock(*got);
    if (!view.lock || view.lock->uid != uid) return {};
    if (view.resource_version.empty()) {
      return tl::unexpected(Malformed(node, "has no metadata.resourceVersion"));
    }
    auto patched = ReplaceNodeLock(api, node, view.resource_version, std::nullopt);
    if (patched) return {};
    if (patched.error().http_status == 404) return {};
    if (patched.error().http_status != 409) return tl::unexpected(patched.error());
    last = patched.error();
  }
  return tl::unexpected(last);
}

}  // namespace gpumux::kube
