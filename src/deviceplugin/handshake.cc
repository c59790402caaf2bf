#include "gpumux/deviceplugin/handshake.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "gpumux/kube/node_lock.h"
#include "gpumux/kube/objects.h"
#include "gpumux/kube/reflector.h"

namespace gpumux::deviceplugin {
namespace {

using json = nlohmann::json;

// The device counts of one container, as the kubelet counts them (gpu-mem in units).
core::Result<ContainerAsk> AskOf(const json& container, const std::string& where) {
  auto amounts = kube::ReadContainerAmounts(container, where);
  if (!amounts) return tl::unexpected(amounts.error());
  ContainerAsk ask;
  ask.name = kube::JsonString(container, "name");
  ask.count = {amounts->gpu, amounts->mem, amounts->milli};
  return ask;
}

HandshakeError Refuse(std::string message) {
  return HandshakeError{HandshakeError::Code::kFailedPrecondition, std::move(message)};
}

HandshakeError Unavailable(std::string message) {
  return HandshakeError{HandshakeError::Code::kUnavailable, std::move(message)};
}

}  // namespace

core::Result<std::vector<ContainerAsk>> ContainerAsks(const nlohmann::json& pod) {
  std::vector<ContainerAsk> out;
  const json* spec = kube::JsonChild(pod, "spec");
  if (spec == nullptr) return out;
  if (const json* init = kube::JsonChild(*spec, "initContainers");
      init != nullptr && init->is_array()) {
    for (const json& c : *init) {
      auto ask = AskOf(c, "init container " + kube::JsonString(c, "name"));
      if (!ask) return tl::unexpected(ask.error());
      for (std::int64_t n : ask->count) {
        if (n > 0) {
          return core::MakeError(core::ErrorCode::kInvalidArgument,
                                 "init container \"" + ask->name +
                                     "\" asks for gpumux resources; only regular containers may");
        }
      }
    }
  }
  const json* containers = kube::JsonChild(*spec, "containers");
  if (containers == nullptr || !containers->is_array()) return out;
  for (const json& c : *containers) {
    auto ask = AskOf(c, "container " + kube::JsonString(c, "name"));
    if (!ask) return tl::unexpected(ask.error());
    if (std::any_of(ask->count.begin(), ask->count.end(), [](std::int64_t n) { return n > 0; })) {
      out.push_back(std::move(*ask));
    }
  }
  return out;
}

std::string ServedKey(const std::string& container, Resource resource) {
  std::string key = container;
  key += '/';
  key += ResourceName(resource);
  return key;
}

struct Handshake::Holder {
  std::string resource_version;
  kube::NodeLock lock;
  std::vector<ContainerAsk> asks;
  kube::Grant grant;
};

Handshake::Handshake(kube::KubeApi& api, std::string node, HandshakeOptions options)
    : api_(&api), node_(std::move(node)), options_(options) {}

Handshake::~Handshake() { StopWatching(); }

namespace {

// resourceVersion as a number (they are decimal on real API servers); 0 when it is not one.
std::uint64_t VersionOf(const json& object) {
  const json* metadata = kube::JsonChild(object, "metadata");
  const std::string rv = metadata != nullptr ? kube::JsonString(*metadata, "resourceVersion") : "";
  if (rv.empty() || rv.size() > 19 || rv.find_first_not_of("0123456789") != std::string::npos)
    return 0;
  return std::stoull(rv);
}

std::string PodKeyOf(const json& pod) {
  const json* metadata = kube::JsonChild(pod, "metadata");
  if (metadata == nullptr) return {};
  return kube::JsonString(*metadata, "namespace") + "/" + kube::JsonString(*metadata, "name");
}

}  // namespace

void Handshake::RememberNode(const json& node) {
  std::lock_guard lock(cache_mu_);
  // Keep the newer of the two (a watch event may arrive after a PATCH answer it predates).
  if (node_cache_ != nullptr && VersionOf(*node_cache_) > VersionOf(node)) return;
  node_cache_ = std::make_unique<json>(node);
}

std::optional<json> Handshake::CachedNode() const {
  std::lock_guard lock(cache_mu_);
  if (node_cache_ == nullptr) return std::nullopt;
  return *node_cache_;
}

std::optional<json> Handshake::CachedPod(const std::string& ns, const std::string& name) const {
  std::lock_guard lock(cache_mu_);
  auto it = pod_cache_.find(ns + "/" + name);
  if (it == pod_cache_.end()) return std::nullopt;
  return it->second;
}

std::map<int, GrantedOnGpu> Handshake::Granted() const {
  std::map<int, GrantedOnGpu> out;
  std::lock_guard lock(cache_mu_);
  for (const auto& [key, pod] : pod_cache_) {
    const json* status = kube::JsonChild(pod, "status");
    const std::string phase = status != nullptr ? kube::JsonString(*status, "phase") : "";
    if (phase == "Succeeded" || phase == "Failed") continue;  // its GPUs are free again
    const json* metadata = kube::JsonChild(pod, "metadata");
    const json* annotations =
        metadata != nullptr ? kube::JsonChild(*metadata, "annotations") : nullptr;
    if (annotations == nullptr) continue;
    const std::string text =
        kube::JsonString(*annotations, std::string(kube::kAnnotationGrant).c_str());
    if (text.empty()) continue;
    auto grant = kube::DecodeGrant(text);
    if (!grant || grant->node != node_) continue;
    for (const kube::ContainerGrant& c : grant->containers) {
      for (const kube::GrantedGpu& g : c.gpus) {
        GrantedOnGpu& sum = out[g.index];
        ++sum.containers;
        sum.exclusive = sum.exclusive || c.exclusive;
        sum.milli += c.exclusive ? core::kMilliPerGpu : c.gpu_milli;
        if (!c.exclusive) sum.memory_mib += c.gpu_mem_mib;
      }
    }
  }
  return out;
}

std::optional<std::set<std::string>> Handshake::LivePodUids() const {
  std::lock_guard lock(cache_mu_);
  if (!pods_listed_) return std::nullopt;
  std::set<std::string> out;
  for (const auto& [key, pod] : pod_cache_) {
    const json* status = kube::JsonChild(pod, "status");
    const std::string phase = status != nullptr ? kube::JsonString(*status, "phase") : "";
    if (phase == "Succeeded" || phase == "Failed") continue;
    const json* metadata = kube::JsonChild(pod, "metadata");
    if (metadata != nullptr) out.insert(kube::JsonString(*metadata, "uid"));
  }
  return out;
}

std::vector<Handshake::RunningShare> Handshake::RunningShares() const {
  std::vector<RunningShare> out;
  std::lock_guard lock(cache_mu_);
  for (const auto& [key, pod] : pod_cache_) {
    const json* metadata = kube::JsonChild(pod, "metadata");
    const json* annotations =
        metadata != nullptr ? kube::JsonChild(*metadata, "annotations") : nullptr;
    const json* status = kube::JsonChild(pod, "status");
    const json* statuses =
        status != nullptr ? kube::JsonChild(*status, "containerStatuses") : nullptr;
    if (annotations == nullptr || statuses == nullptr || !statuses->is_array()) continue;
    auto grant = kube::DecodeGrant(
        kube::JsonString(*annotations, std::string(kube::kAnnotationGrant).c_str()));
    if (!grant || grant->node != node_) continue;
    for (const kube::ContainerGrant& c : grant->containers) {
      if (c.exclusive) continue;
      for (const json& cs : *statuses) {
        const json* state = kube::JsonChild(cs, "state");
        if (kube::JsonString(cs, "name") != c.name || state == nullptr ||
            kube::JsonChild(*state, "running") == nullptr) {
          continue;
        }
        RunningShare r{kube::JsonString(*metadata, "uid"), key, c.name, {}};
        for (const kube::GrantedGpu& g : c.gpus) r.gpus.push_back(g.index);
        out.push_back(std::move(r));
      }
    }
  }
  return out;
}

void Handshake::ObserveNode(const kube::WatchEvent& e) {
  if (e.type == "DELETED") {
    std::lock_guard lock(cache_mu_);
    node_cache_.reset();
  } else {
    RememberNode(e.object);
  }
}

void Handshake::ObservePod(const kube::WatchEvent& e) {
  std::lock_guard lock(cache_mu_);
  if (e.type == "DELETED") {
    pod_cache_.erase(PodKeyOf(e.object));
  } else {
    pod_cache_[PodKeyOf(e.object)] = e.object;
  }
}

void Handshake::Watch(core::Logger log) {
  if (!watchers_.empty()) return;
  kube::ReflectorHandler nodes;
  nodes.replace = [this](std::vector<json> items) {
    for (const json& n : items) RememberNode(n);
  };
  nodes.event = [this](const kube::WatchEvent& e) { ObserveNode(e); };
  nodes.log = log;
  kube::ReflectorHandler pods;
  pods.replace = [this](std::vector<json> items) {
    std::lock_guard lock(cache_mu_);
    pod_cache_.clear();
    pods_listed_ = true;
    for (json& p : items) {
      // The key first: in `cache[Key(p)] = std::move(p)` the right side is evaluated first
      // (C++17), and json's assignment takes its argument by value, so p would be empty.
      std::string key = PodKeyOf(p);
      pod_cache_[std::move(key)] = std::move(p);
    }
  };
  pods.event = [this](const kube::WatchEvent& e) { ObservePod(e); };
  pods.log = log;
  auto run = [](std::shared_ptr<kube::Reflector> r) {
    return std::jthread([r](std::stop_token stop) { r->Run(stop); });
  };
  watchers_.push_back(run(std::make_shared<kube::Reflector>(
      *api_, "/api/v1/nodes?fieldSelector=" + kube::QueryEscape("metadata.name=" + node_), nodes)));
  watchers_.push_back(run(std::make_shared<kube::Reflector>(
      *api_, "/api/v1/pods?fieldSelector=" + kube::QueryEscape("spec.nodeName=" + node_), pods)));
}

void Handshake::StopWatching() {
  for (auto& w : watchers_) w.request_stop();
  watchers_.clear();  // joins
}

HandshakeResult<Handshake::Holder> Handshake::ReadHolder(bool cached) {
  std::optional<json> node = cached ? CachedNode() : std::nullopt;
  if (!node) {
    auto got = api_->Get("/api/v1/nodes/" + kube::QueryEscape(node_));
    if (!got)
      return tl::unexpected(Unavailable("reading node " + node_ + ": " + got.error().ToString()));
    RememberNode(*got);
    node = std::move(*got);
  }
  kube::NodeLockView view = kube::ReadNodeLock(*node);
  if (!view.lock_error.empty()) {
    return tl::unexpected(Refuse("node " + node_ +
                                 ": annotation gpumux.io/allocating is unreadable (" +
                                 view.lock_error + ")"));
  }
  if (!view.lock) {
    return tl::unexpected(Refuse(
        "no pod holds the node lock gpumux.io/allocating on node " + node_ +
        ", so gpumux cannot tell which pod this Allocate is for and will not guess (was the pod "
        "bound by the gpumux scheduler extender? did its lock expire before the kubelet "
        "admitted it?)"));
  }
  Holder h;
  h.resource_version = std::move(view.resource_version);
  h.lock = std::move(*view.lock);
  const std::string key = h.lock.PodKey();
  std::optional<json> pod = cached ? CachedPod(h.lock.ns, h.lock.name) : std::nullopt;
  if (!pod) {
    auto got = api_->Get("/api/v1/namespaces/" + kube::QueryEscape(h.lock.ns) + "/pods/" +
                         kube::QueryEscape(h.lock.name));
    if (!got) {
      if (got.error().http_status == 404) {
        return tl::unexpected(Refuse("pod " + key + ", holder of the node lock on " + node_ +
                                     ", does not exist any more"));
      }
      return tl::unexpected(Unavailable("reading pod " + key + ": " + got.error().ToString()));
    }
    pod = std::move(*got);
  }
  const json* metadata = kube::JsonChild(*pod, "metadata");
  const std::string uid = metadata != nullptr ? kube::JsonString(*metadata, "uid") : "";
  if (uid != h.lock.uid) {
    return tl::unexpected(Refuse("pod " + key + " has uid " + uid + ", but the node lock on " +
                                 node_ + " was taken for uid " + h.lock.uid));
  }
  auto asks = ContainerAsks(*pod);
  if (!asks) return tl::unexpected(Refuse("pod " + key + ": " + asks.error().message));
  h.asks = std::move(*asks);
  const json* annotations =
      metadata != nullptr ? kube::JsonChild(*metadata, "annotations") : nullptr;
  const std::string grant_text =
      annotations != nullptr
          ? kube::JsonString(*annotations, std::string(kube::kAnnotationGrant).c_str())
          : "";
  if (grant_text.empty()) {
    return tl::unexpected(Refuse("pod " + key + " holds the node lock on " + node_ +
                                 " but has no gpumux.io/grant annotation"));
  }
  auto grant = kube::DecodeGrant(grant_text);
  if (!grant) {
    return tl::unexpected(
        Refuse("pod " + key + ": gpumux.io/grant is unreadable: " + grant.error().message));
  }
  if (grant->node != node_) {
    return tl::unexpected(
        Refuse("pod " + key + " was granted GPUs on node " + grant->node + ", not on " + node_));
  }
  h.grant = std::move(*grant);
  return h;
}

HandshakeResult<std::vector<ServedContainer>> Handshake::Claim(
    Resource resource, const std::vector<std::int64_t>& counts) {
  const std::string resource_name(ResourceName(resource));
  bool cached = true;
  for (int attempt = 0; attempt < options_.attempts; ++attempt) {
    auto holder = ReadHolder(cached);
    if (!holder && cached) {
      // The cache may lag: never refuse on its word alone.
      cached = false;
      holder = ReadHolder(false);
    }
    cached = false;  // after a conflict, read afresh
    if (!holder) return tl::unexpected(holder.error());
    const std::string key = holder->lock.PodKey();
    std::vector<std::string> served = holder->lock.served;
    auto is_served = [&](const std::string& k) {
      return std::find(served.begin(), served.end(), k) != served.end();
    };
    std::vector<ServedContainer> out;
    for (std::int64_t count : counts) {
      const ContainerAsk* next = nullptr;
      for (const ContainerAsk& a : holder->asks) {
        if (a.count[static_cast<std::size_t>(resource)] > 0 &&
            !is_served(ServedKey(a.name, resource))) {
          next = &a;
          break;
        }
      }
      if (next == nullptr) {
        return tl::unexpected(Refuse("pod " + key + " (holder of the node lock on " + node_ +
                                     ") has no container left that asks for " + resource_name +
                                     "; the kubelet asks for " + std::to_string(count) + " more"));
      }
      const std::int64_t wanted = next->count[static_cast<std::size_t>(resource)];
      if (wanted != count) {
        return tl::unexpected(Refuse("the kubelet asks for " + std::to_string(count) + " " +
                                     resource_name + " devices, but container " + next->name +
                                     " of pod " + key + " (holder of the node lock on " + node_ +
                                     ") asks for " + std::to_string(wanted)));
      }
      const kube::ContainerGrant* g = nullptr;
      for (const kube::ContainerGrant& c : holder->grant.containers) {
        if (c.name == next->name) g = &c;
      }
      if (g == nullptr) {
        return tl::unexpected(
            Refuse("the grant of pod " + key + " has no entry for container " + next->name));
      }
      served.push_back(ServedKey(next->name, resource));
      out.push_back(ServedContainer{holder->lock.ns, holder->lock.name, holder->lock.uid,
                                    holder->grant.policy, *g});
    }
    bool complete = true;
    for (const ContainerAsk& a : holder->asks) {
      for (Resource r : kAllResources) {
        if (a.count[static_cast<std::size_t>(r)] > 0 && !is_served(ServedKey(a.name, r))) {
          complete = false;
        }
      }
    }
    std::optional<kube::NodeLock> next_lock;
    if (!complete) {
      next_lock = holder->lock;
      next_lock->served = std::move(served);
    }
    auto replaced = kube::ReplaceNodeLock(*api_, node_, holder->resource_version, next_lock);
    if (replaced) {
      RememberNode(*replaced);
      return out;
    }
    if (replaced.error().http_status != 409) {
      return tl::unexpected(Unavailable("recording the allocation in the node lock of " + node_ +
                                        ": " + replaced.error().ToString()));
    }
  }
  return tl::unexpected(Unavailable("the node lock on " + node_ + " kept changing (" +
                                    std::to_string(options_.attempts) + " conflicts in a row)"));
}

std::vector<int> Handshake::Peek(Resource resource, std::int64_t count) {
  auto holder = ReadHolder(true);
  if (!holder) holder = ReadHolder(false);
  if (!holder) return {};
  for (const ContainerAsk& a : holder->asks) {
    const std::int64_t n = a.count[static_cast<std::size_t>(resource)];
    if (n <= 0) continue;
    if (std::find(holder->lock.served.begin(), holder->lock.served.end(),
                  ServedKey(a.name, resource)) != holder->lock.served.end()) {
      continue;
    }
    if (n != count) return {};
    for (const kube::ContainerGrant& c : holder->grant.containers) {
      if (c.name != a.name) continue;
      std::vector<int> out;
      for (const kube::GrantedGpu& g : c.gpus) out.push_back(g.index);
      return out;
    }
    return {};
  }
  return {};
}

}  // namespace gpumux::deviceplugin
