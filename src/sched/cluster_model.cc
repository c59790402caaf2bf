#include "src/sched/cluster_model.h"

#include <algorithm>

#include "gpumux/core/check.h"

namespace gpumux::sched::detail {

using nlohmann::json;

std::string TenantKey(const std::string& uid, const std::string& container) {
  return uid + "/" + container;
}

// metadata.name of a node object, "" when it has none.
std::string NodeNameOf(const json& node) {
  const json* metadata = kube::JsonChild(node, "metadata");
  return metadata != nullptr ? kube::JsonString(*metadata, "name") : std::string();
}

// The core request of one container as booked by a grant.
core::Request GrantedRequest(const kube::ContainerGrant& c, const kube::PodInfo& pod) {
  core::Request r;
  r.name = pod.Key() + "/" + c.name;
  r.gpu_count = static_cast<int>(c.gpus.size());
  r.gpu_milli = c.gpu_milli;
  r.gpu_mib = c.gpu_mem_mib;
  r.sharing = c.exclusive ? core::GpuSharing::kExclusive : core::GpuSharing::kShared;
  for (const kube::ContainerRequest& cr : pod.containers) {
    if (cr.container == c.name) r.workload_class = cr.request.workload_class;
  }
  return r;
}

bool SameNode(const kube::NodeInfo& a, const kube::NodeInfo& b) {
  const core::NodeSpec& x = a.spec;
  const core::NodeSpec& y = b.spec;
  if (a.gpu_mem_unit_mib != b.gpu_mem_unit_mib || a.gpu_mem_unit_error != b.gpu_mem_unit_error ||
      a.device_plugin_state != b.device_plugin_state || a.enforcement != b.enforcement) {
    return false;
  }
  if (x.name != y.name || x.cpu_milli != y.cpu_milli || x.memory_mib != y.memory_mib ||
      x.max_pods != y.max_pods || x.labels != y.labels || x.gpus.size() != y.gpus.size()) {
    return false;
  }
  for (std::size_t i = 0; i < x.gpus.size(); ++i) {
    const core::GpuSpec& g = x.gpus[i];
    const core::GpuSpec& h = y.gpus[i];
    if (g.index != h.index || g.uuid != h.uuid || g.model != h.model ||
        g.memory_mib != h.memory_mib || g.health != h.health || g.enforces != h.enforces) {
      return false;
    }
  }
  return true;
}

// The cluster model of `nodes`, leaving out (into `out`, with why) each node it cannot
// take, so that no node takes the others with it. In name order, so deterministic.
// (DecodeNode already refuses nodes beyond the per-node limits that Cluster::Build enforces,
// e.g. more than core::kMaxGpusPerNode GPUs.)
core::Cluster BuildClusterModel(const std::map<std::string, kube::NodeInfo, std::less<>>& nodes,
                                std::map<std::string, std::string, std::less<>>& out,
                                const std::function<void(std::string)>& log_error) {
  auto specs = [&] {
    std::vector<core::NodeSpec> v;
    v.reserve(nodes.size());
    for (const auto& [name, info] : nodes) {
      if (out.count(name) == 0) v.push_back(info.spec);
    }
    return v;
  };
  auto built = core::Cluster::Build(specs());
  if (built) return std::move(*built);
  // Find the culprits: each node alone, then the limit on distinct GPU models across nodes.
  std::vector<std::string> models;
  for (const auto& [name, info] : nodes) {
    if (out.count(name) != 0) continue;
    auto alone = core::Cluster::Build({info.spec});
    if (!alone) {
      out[name] = alone.error().message;
      continue;
    }
    std::vector<std::string> fresh;
    for (const core::GpuSpec& gpu : info.spec.gpus) {
      if (std::find(models.begin(), models.end(), gpu.model) == models.end() &&
          std::find(fresh.begin(), fresh.end(), gpu.model) == fresh.end()) {
        fresh.push_back(gpu.model);
      }
    }
    if (models.size() + fresh.size() > static_cast<std::size_t>(core::kMaxModels)) {
      out[name] = "node " + name + ": its GPU model " + fresh.front() +
                  " would be one more than the " + std::to_string(core::kMaxModels) +
                  " distinct GPU models gpumux handles";
      continue;
    }
    models.insert(models.end(), fresh.begin(), fresh.end());
  }
  built = core::Cluster::Build(specs());
  if (built) return std::move(*built);
  // A rule the loop above does not know: add the nodes one at a time (quadratic; a safety
  // net that no known input reaches).
  log_error("cannot build the cluster model: " + built.error().message +
            "; adding the nodes one at a time");
  std::vector<core::NodeSpec> accepted;
  for (core::NodeSpec& spec : specs()) {
    accepted.push_back(std::move(spec));
    auto trial = core::Cluster::Build(accepted);
    if (!trial) {
      out[accepted.back().name] = trial.error().message;
      accepted.pop_back();
    }
  }
  built = core::Cluster::Build(std::move(accepted));
  GPUMUX_CHECK(built.has_value(), "a cluster built one node at a time builds");
  return std::move(*built);
}

}  // namespace gpumux::sched::detail
