#include "gpumux/coordinator/pod_grants.h"

#include "gpumux/kube/grant.h"
#include "gpumux/kube/objects.h"
#include "gpumux/kube/reflector.h"

namespace gpumux::coordinator {

namespace {

using Json = nlohmann::json;

std::string PodKey(const Json& pod) {
  const Json* metadata = kube::JsonChild(pod, "metadata");
  if (metadata == nullptr) return {};
  return kube::JsonString(*metadata, "namespace") + "/" + kube::JsonString(*metadata, "name");
}

bool Ended(const Json& pod) {
  const Json* status = kube::JsonChild(pod, "status");
  if (status == nullptr) return false;
  const std::string phase = kube::JsonString(*status, "phase");
  return phase == "Succeeded" || phase == "Failed";
}

}  // namespace

PodGrants::PodGrants(kube::KubeApi& api, std::string node, std::vector<std::string> index_to_uuid,
                     core::Logger log)
    : api_(&api),
      node_(std::move(node)),
      index_to_uuid_(std::move(index_to_uuid)),
      log_(std::move(log)) {}

PodGrants::~PodGrants() {
  thread_.request_stop();
  if (thread_.joinable()) thread_.join();
}

void PodGrants::Start() {
  if (reflector_) return;
  kube::ReflectorHandler handler;
  handler.replace = [this](std::vector<Json> items) { Replace(items); };
  handler.event = [this](const kube::WatchEvent& e) { Update(e.object, e.type == "DELETED"); };
  handler.log = log_;
  reflector_ = std::make_unique<kube::Reflector>(
      *api_, "/api/v1/pods?fieldSelector=" + kube::QueryEscape("spec.nodeName=" + node_), handler);
  thread_ = std::jthread([r = reflector_.get()](std::stop_token stop) { r->Run(stop); });
}

bool PodGrants::synced() const { return reflector_ && reflector_->synced(); }

void PodGrants::Replace(const std::vector<Json>& pods) {
  std::set<std::string> present;
  for (const Json& p : pods) {
    present.insert(PodKey(p));
    Update(p, false);
  }
  std::lock_guard lock(mu_);
  std::erase_if(pod_of_uid_, [&](const auto& e) { return present.count(e.second) == 0; });
  for (auto it = grants_.begin(); it != grants_.end();) {
    if (present.count(it->first) == 0) {
      gone_.insert(it->first);
      it = grants_.erase(it);
    } else {
      ++it;
    }
  }
}

void PodGrants::Update(const Json& pod, bool deleted) {
  const std::string key = PodKey(pod);
  if (key.size() < 2) return;
  const Json* metadata = kube::JsonChild(pod, "metadata");
  const std::string uid = metadata != nullptr ? kube::JsonString(*metadata, "uid") : "";
  std::lock_guard lock(mu_);
  if (deleted || Ended(pod)) {
    if (grants_.erase(key) > 0 || deleted) gone_.insert(key);
    if (!uid.empty()) pod_of_uid_.erase(uid);
    return;
  }
  if (!uid.empty()) pod_of_uid_[uid] = key;
  const Json* annotations =
      metadata != nullptr ? kube::JsonChild(*metadata, "annotations") : nullptr;
  const std::string text =
      annotations != nullptr
          ? kube::JsonString(*annotations, std::string(kube::kAnnotationGrant).c_str())
          : "";
  if (text.empty()) return;
  auto grant = kube::DecodeGrant(text);
  if (!grant) {
    log_.Warn("unreadable grant", {{"pod", key},
                                   {"annotation", std::string(kube::kAnnotationGrant)},
                                   {"error", grant.error().message}});
    return;
  }
  auto& containers = grants_[key];
  containers.clear();
  for (const auto& c : grant->containers) {
    std::vector<std::string> gpus;
    for (const auto& g : c.gpus) {
      if (!g.uuid.empty()) {
        gpus.push_back(g.uuid);
      } else if (g.index >= 0 && static_cast<std::size_t>(g.index) < index_to_uuid_.size()) {
        gpus.push_back(index_to_uuid_[static_cast<std::size_t>(g.index)]);
      } else {
        gpus.push_back("index-" + std::to_string(g.index));
      }
    }
    containers[c.name] = std::move(gpus);
  }
}

std::optional<std::vector<std::string>> PodGrants::GpusOf(std::string_view job) const {
  const auto last = job.rfind('/');
  if (last == std::string_view::npos || last == 0) return std::nullopt;
  const std::string_view pod = job.substr(0, last);
  const std::string container(job.substr(last + 1));
  std::lock_guard lock(mu_);
  auto it = grants_.find(pod);
  if (it == grants_.end()) return std::nullopt;
  auto c = it->second.find(container);
  if (c == it->second.end()) return std::nullopt;
  return c->second;
}

std::optional<std::string> PodGrants::PodOfUid(std::string_view uid) const {
  std::lock_guard lock(mu_);
  auto it = pod_of_uid_.find(uid);
  if (it == pod_of_uid_.end()) return std::nullopt;
  return it->second;
}

std::vector<std::string> PodGrants::TakeGone() {
  std::lock_guard lock(mu_);
  std::vector<std::string> out(gone_.begin(), gone_.end());
  gone_.clear();
  return out;
}

}  // namespace gpumux::coordinator
