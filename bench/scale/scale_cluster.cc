#include "bench/scale/scale_cluster.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <set>
#include <thread>
#include <tuple>

#include "gpumux/core/time.h"
#include "gpumux/kube/grant.h"
#include "gpumux/kube/node_lock.h"
#include "gpumux/kube/objects.h"
#include "gpumux/kube/reflector.h"
#include "gpumux/runs/workload.h"

namespace gpumux::scale {
namespace {

using nlohmann::json;
constexpr std::string_view kNvidiaGpu = "nvidia.com/gpu";
// The image is never pulled (API-only nodes have no kubelet).
constexpr const char* kImage = "registry.k8s.io/pause:3.10";

json Inventory(const core::NodeSpec& shape, const std::string& name) {
  json gpus = json::array();
  for (const core::GpuSpec& g : shape.gpus) {
    gpus.push_back({{"index", g.index},
                    {"uuid", "GPU-" + name + "-" + std::to_string(g.index)},
                    {"model", g.model},
                    {"memory_mib", g.memory_mib},
                    {"health", "Healthy"}});
  }
  return gpus;
}

json Resources(const core::NodeSpec& shape, std::int64_t unit) {
  std::int64_t mem_units = 0;
  for (const core::GpuSpec& g : shape.gpus) mem_units += g.memory_mib / unit;
  const auto gpus = static_cast<std::int64_t>(shape.gpus.size());
  json r = {{"cpu", std::to_string(shape.cpu_milli) + "m"},
            {"memory", std::to_string(shape.memory_mib) + "Mi"},
            {"pods", std::to_string(shape.max_pods)}};
  r[std::string(kube::kResourceGpu)] = std::to_string(gpus);
  r[std::string(kube::kResourceGpuMem)] = std::to_string(mem_units);
  r[std::string(kube::kResourceGpuMilli)] = std::to_string(gpus * core::kMilliPerGpu);
  r[std::string(kNvidiaGpu)] = std::to_string(gpus);
  return r;
}

}  // namespace

std::string ScaleNodeName(int i) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "scale-node-%05d", i);
  return buf;
}

json NodeObject(const core::NodeSpec& shape, const std::string& name, std::int64_t unit,
                bool handshake) {
  json annotations = json::object();
  annotations[std::string(kube::kAnnotationGpus)] = Inventory(shape, name).dump();
  if (handshake) {
    annotations[std::string(kube::kAnnotationHandshake)] = std::string(kube::kHandshakeNodeLock);
  }
  annotations[std::string(kube::kAnnotationDevicePlugin)] = std::string(kube::kDevicePluginReady);
  annotations[std::string(kube::kAnnotationGpuMemUnit)] = std::to_string(unit);
  const json resources = Resources(shape, unit);
  const std::string now = core::FormatRfc3339(std::time(nullptr));
  json ready = {{"type", "Ready"},          {"status", "True"},
                {"reason", "KubeletReady"}, {"message", "API-only node of gpumux's scale rig"},
                {"lastHeartbeatTime", now}, {"lastTransitionTime", now}};
  return {{"apiVersion", "v1"},
          {"kind", "Node"},
          {"metadata",
           {{"name", name},
            {"labels", {{"kubernetes.io/hostname", name}, {"gpumux.io/enabled", "true"}}},
            {"annotations", annotations}}},
          {"spec", json::object()},
          {"status",
           {{"capacity", resources},
            {"allocatable", resources},
            {"conditions", json::array({ready})},
            {"phase", "Running"}}}};
}

core::Result<Mode> ParseMode(const std::string& text) {
  if (text == "gpumux") return Mode::kGpumux;
  if (text == "default") return Mode::kDefault;
  return core::MakeError(core::ErrorCode::kInvalidArgument,
                         "mode must be gpumux or default, not '" + text + "'");
}

core::Result<json> PodObject(const core::Request& request, const std::string& ns,
                             const std::string& name, Mode mode, std::int64_t unit) {
  runs::WorkloadItem item;
  item.job = name;
  item.request = request;
  runs::ManifestOptions options;
  options.image = kImage;
  options.gpu_mem_unit_mib = unit;
  auto pod = runs::MakeManifest(item, options);
  if (!pod) return pod;
  (*pod)["metadata"]["namespace"] = ns;
  if (mode == Mode::kDefault) {
    json& spec = (*pod)["spec"];
    spec["schedulerName"] = "default-scheduler";
    json& resources = spec["containers"][0]["resources"];
    json limits = json::object();
    limits[std::string(kNvidiaGpu)] = std::to_string(request.gpu_count);
    resources["limits"] = limits;
    (*pod)["metadata"]["annotations"].erase(std::string(kube::kAnnotationGpuModel));
  }
  return pod;
}

std::vector<core::Request> TakeGpuPods(const std::vector<core::Request>& requests,
                                       std::size_t offset, std::size_t count, std::int64_t max_gpus,
                                       std::size_t* next) {
  std::vector<core::Request> out;
  std::int64_t gpus = 0;
  std::size_t i = offset;
  for (; i < requests.size() && out.size() < count; ++i) {
    const core::Request& r = requests[i];
    if (!r.wants_gpu()) continue;
    if (gpus + r.gpu_count > max_gpus) break;
    gpus += r.gpu_count;
    out.push_back(r);
  }
  if (next != nullptr) *next = i;
  return out;
}

std::string ResourceOfPath(const std::string& path) {
  std::string p = path.substr(0, path.find('?'));
  std::vector<std::string> parts;
  for (std::size_t start = 0; start < p.size();) {
    std::size_t end = p.find('/', start);
    if (end == std::string::npos) end = p.size();
    if (end > start) parts.push_back(p.substr(start, end - start));
    start = end + 1;
  }
  // api/v1/... or apis/GROUP/VERSION/...
  std::size_t i = !parts.empty() && parts[0] == "apis" ? 3 : 2;
  if (i + 1 < parts.size() && parts[i] == "namespaces" && i + 2 < parts.size()) i += 2;
  if (i >= parts.size()) return "?";
  std::string resource = parts[i];
  if (i + 2 < parts.size()) resource += "/" + parts[i + 2];
  return resource;
}

void CountingApi::Count(const char* verb, const std::string& path) {
  std::lock_guard lock(mu_);
  ++counts_[std::string(verb) + " " + ResourceOfPath(path)];
}

kube::ApiResult<json> CountingApi::Get(const std::string& path) {
  Count("GET", path);
  return inner_->Get(path);
}

kube::ApiResult<json> CountingApi::List(const std::string& path, int page_size) {
  Count("LIST", path);
  return inner_->List(path, page_size);
}

kube::ApiResult<json> CountingApi::Patch(const std::string& path, const json& body,
                                         kube::PatchType type) {
  Count("PATCH", path);
  return inner_->Patch(path, body, type);
}

kube::ApiResult<json> CountingApi::Post(const std::string& path, const json& body) {
  Count("POST", path);
  return inner_->Post(path, body);
}

kube::ApiResult<void> CountingApi::Watch(const std::string& path,
                                         const std::string& resource_version,
                                         const std::function<bool(kube::WatchEvent&&)>& on_event,
                                         std::stop_token stop, int timeout_seconds) {
  Count("WATCH", path);
  return inner_->Watch(path, resource_version, on_event, stop, timeout_seconds);
}

std::map<std::string, std::int64_t> CountingApi::Counts() const {
  std::lock_guard lock(mu_);
  return counts_;
}

deviceplugin::Handshake& PluginStandIn::HandshakeOf(const std::string& node) {
  std::lock_guard lock(mu_);
  auto& slot = handshakes_[node];
  if (!slot) slot = std::make_unique<deviceplugin::Handshake>(*api_, node);
  return *slot;
}

PluginStandIn::~PluginStandIn() {
  for (auto& w : watchers_) w.request_stop();
  watchers_.clear();  // joins
}

void PluginStandIn::Watch(const std::string& ns) {
  const auto node_of_pod = [](const json& pod) {
    const json* spec = kube::JsonChild(pod, "spec");
    return spec == nullptr ? std::string() : kube::JsonString(*spec, "nodeName");
  };
  const auto name_of = [](const json& object) {
    const json* meta = kube::JsonChild(object, "metadata");
    return meta == nullptr ? std::string() : kube::JsonString(*meta, "name");
  };
  kube::ReflectorHandler nodes;
  nodes.replace = [this, name_of](std::vector<json> items) {
    for (json& n : items) HandshakeOf(name_of(n)).ObserveNode({"ADDED", std::move(n)});
  };
  nodes.event = [this, name_of](const kube::WatchEvent& e) {
    if (const std::string name = name_of(e.object); !name.empty()) HandshakeOf(name).ObserveNode(e);
  };
  kube::ReflectorHandler pods;
  pods.replace = [this, node_of_pod](std::vector<json> items) {
    for (json& p : items) {
      const std::string node = node_of_pod(p);
      if (!node.empty()) HandshakeOf(node).ObservePod({"ADDED", std::move(p)});
    }
  };
  pods.event = [this, node_of_pod](const kube::WatchEvent& e) {
    const std::string node = node_of_pod(e.object);
    if (!node.empty()) HandshakeOf(node).ObservePod(e);
  };
  std::vector<std::shared_ptr<kube::Reflector>> reflectors = {
      std::make_shared<kube::Reflector>(*api_, "/api/v1/nodes", nodes),
      std::make_shared<kube::Reflector>(*api_, "/api/v1/namespaces/" + ns + "/pods", pods)};
  for (const auto& r : reflectors) {
    watchers_.emplace_back([r](std::stop_token stop) { r->Run(stop); });
  }
  for (const auto& r : reflectors) {
    while (!r->synced()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::string PluginStandIn::Serve(const json& pod, const std::string& node) {
  auto asks = deviceplugin::ContainerAsks(pod);
  if (!asks) return asks.error().message;
  deviceplugin::Handshake& handshake = HandshakeOf(node);
  for (const deviceplugin::ContainerAsk& ask : *asks) {
    for (deviceplugin::Resource r : deviceplugin::kAllResources) {
      const std::int64_t n = ask.count[static_cast<std::size_t>(r)];
      if (n <= 0) continue;
      auto served = handshake.Claim(r, {n});
      claims_.fetch_add(1);
      if (!served) {
        return "Allocate " + std::string(deviceplugin::ShortName(r)) + " for container " +
               ask.name + ": " + served.error().message;
      }
    }
  }
  return "";
}

namespace {

struct GpuUse {
  core::MiB memory = 0;
  core::MilliGpu milli = 0;
  int holders = 0;
  bool exclusive = false;
};

void CheckGrant(const json& pod, const std::map<std::string, core::NodeSpec>& nodes,
                std::map<std::tuple<std::string, int>, GpuUse>& use,
                std::vector<std::string>& out) {
  const json& meta = pod.at("metadata");
  const std::string who =
      kube::JsonString(meta, "namespace") + "/" + kube::JsonString(meta, "name");
  const std::string node = kube::JsonString(pod.at("spec"), "nodeName");
  const json* annotations = kube::JsonChild(meta, "annotations");
  const std::string key(kube::kAnnotationGrant);
  if (annotations == nullptr || !annotations->contains(key)) {
    out.push_back(who + " is bound to " + node + " without a grant");
    return;
  }
  auto grant = kube::DecodeGrant(kube::JsonString(*annotations, key.c_str()));
  if (!grant) {
    out.push_back(who + ": unreadable grant: " + grant.error().message);
    return;
  }
  if (grant->node != node) out.push_back(who + ": granted on " + grant->node + ", bound " + node);
  auto it = nodes.find(node);
  for (const kube::ContainerGrant& c : grant->containers) {
    for (const kube::GrantedGpu& g : c.gpus) {
      if (it == nodes.end() || g.index < 0 || g.index >= static_cast<int>(it->second.gpus.size())) {
        out.push_back(who + ": GPU " + std::to_string(g.index) + " of " + node + " does not exist");
        continue;
      }
      GpuUse& u = use[{node, g.index}];
      u.memory += c.gpu_mem_mib;
      u.milli += c.exclusive ? core::kMilliPerGpu : c.gpu_milli;
      u.exclusive = u.exclusive || c.exclusive;
      ++u.holders;
    }
  }
}

}  // namespace

std::vector<std::string> CapacityViolations(const std::vector<json>& pods,
                                            const std::map<std::string, core::NodeSpec>& nodes,
                                            Mode mode) {
  std::vector<std::string> out;
  std::map<std::tuple<std::string, int>, GpuUse> use;
  std::map<std::string, std::int64_t> whole;
  for (const json& pod : pods) {
    const json* spec = kube::JsonChild(pod, "spec");
    const std::string node = spec == nullptr ? "" : kube::JsonString(*spec, "nodeName");
    if (node.empty()) continue;
    if (mode == Mode::kGpumux) {
      CheckGrant(pod, nodes, use, out);
      continue;
    }
    const json& limits = pod.at("spec").at("containers").at(0).at("resources").at("limits");
    whole[node] += kube::ParseQuantity(limits.value(std::string(kNvidiaGpu), "0")).value_or(0);
  }
  for (const auto& [key, u] : use) {
    const auto& [node, index] = key;
    const core::GpuSpec& gpu = nodes.at(node).gpus[static_cast<std::size_t>(index)];
    const std::string where = node + " GPU " + std::to_string(index);
    if (u.memory > gpu.memory_mib) {
      out.push_back(where + ": " + std::to_string(u.memory) + " MiB granted of " +
                    std::to_string(gpu.memory_mib));
    }
    if (u.milli > core::kMilliPerGpu)
      out.push_back(where + ": " + std::to_string(u.milli) + " milli");
    if (u.exclusive && u.holders > 1) out.push_back(where + ": exclusive and shared");
  }
  for (const auto& [node, n] : whole) {
    auto it = nodes.find(node);
    const std::int64_t have =
        it == nodes.end() ? 0 : static_cast<std::int64_t>(it->second.gpus.size());
    if (n > have)
      out.push_back(node + ": " + std::to_string(n) + " GPUs of " + std::to_string(have));
  }
  return out;
}

std::optional<Granted> GrantOf(const json& pod) {
  const json* spec = kube::JsonChild(pod, "spec");
  const std::string node = spec == nullptr ? "" : kube::JsonString(*spec, "nodeName");
  const json* meta = kube::JsonChild(pod, "metadata");
  const json* annotations = meta == nullptr ? nullptr : kube::JsonChild(*meta, "annotations");
  const std::string key(kube::kAnnotationGrant);
  if (node.empty() || annotations == nullptr || !annotations->contains(key)) return std::nullopt;
  auto grant = kube::DecodeGrant(kube::JsonString(*annotations, key.c_str()));
  if (!grant) return std::nullopt;
  Granted out;
  out.node = node;
  for (const kube::ContainerGrant& c : grant->containers) {
    for (const kube::GrantedGpu& g : c.gpus) {
      out.gpus.push_back(g.index);
      out.milli += c.exclusive ? core::kMilliPerGpu : c.gpu_milli;
    }
  }
  return out;
}

core::MilliGpu GrantedMilli(const std::vector<json>& pods) {
  core::MilliGpu total = 0;
  for (const json& pod : pods) {
    if (auto g = GrantOf(pod)) total += g->milli;
  }
  return total;
}

std::string NodeListCsv(const std::vector<std::pair<std::string, core::NodeSpec>>& nodes) {
  std::string out = "sn,cpu_milli,memory_mib,gpu,model\n";
  for (const auto& [name, shape] : nodes) {
    out += name + ',' + std::to_string(shape.cpu_milli) + ',' + std::to_string(shape.memory_mib) +
           ',' + std::to_string(shape.gpus.size()) + ',' +
           (shape.gpus.empty() ? "" : shape.gpus.front().model) + '\n';
  }
  return out;
}

std::string ReplayNodesCsv(const std::vector<std::string>& names) {
  std::string out = "node_prefixed,node,prefix\n";
  for (std::size_t i = 0; i < names.size(); ++i) {
    out += names[i] + ',' + names[i] + ',' + std::to_string(i) + '\n';
  }
  return out;
}

std::string ArrivalCsv(const std::vector<ReplayArrival>& arrivals) {
  std::string out = "seq,pod,source_pod,node,gpu_index\n";
  for (std::size_t i = 0; i < arrivals.size(); ++i) {
    const ReplayArrival& a = arrivals[i];
    out += std::to_string(i) + ',' + a.pod + ',' + a.source_pod + ',' + a.node + ',';
    for (std::size_t g = 0; g < a.gpus.size(); ++g) {
      if (g > 0) out += '-';
      out += std::to_string(a.gpus[g]);
    }
    out += '\n';
  }
  return out;
}

}  // namespace gpumux::scale
