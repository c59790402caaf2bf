// The pieces the cluster state is built from (internal to sched): the cluster model of the
// nodes (which node it leaves out, and why), a fast name index, the co-location policies' view
// of the tenants, and the ledger's words for a pod's containers.
#pragma once

#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gpumux/core/cluster.h"
#include "gpumux/core/ledger.h"
#include "gpumux/kube/grant.h"
#include "gpumux/kube/objects.h"
#include "gpumux/policy/colocation.h"
#include "gpumux/policy/workload_profile.h"

namespace gpumux::sched::detail {

// The ledger key of one container of a pod: "<uid>/<container>".
std::string TenantKey(const std::string& uid, const std::string& container);
// metadata.name of a node object, "" when it has none.
std::string NodeNameOf(const nlohmann::json& node);
// The core request of one container as booked by a grant.
core::Request GrantedRequest(const kube::ContainerGrant& c, const kube::PodInfo& pod);
// Whether two decodings of a node differ in nothing gpumux uses (a status heartbeat).
bool SameNode(const kube::NodeInfo& a, const kube::NodeInfo& b);

// The cluster model of `nodes`, leaving out (into `out`, with why) each node it cannot take, so
// that no node takes the others with it. In name order, so deterministic. (DecodeNode already
// refuses nodes beyond the per-node limits that Cluster::Build enforces.)
core::Cluster BuildClusterModel(const std::map<std::string, kube::NodeInfo, std::less<>>& nodes,
                                std::map<std::string, std::string, std::less<>>& out,
                                const std::function<void(std::string)>& log_error);

// The extender's job view for the co-location policies: what it knows of each tenant is its
// class (the pod's gpumux.io/workload-class) and memory grant; no progress, no step times.
class TenantJobs final : public policy::JobView {
 public:
  const core::Ledger* ledger = nullptr;
  const policy::WorkloadProfile* profile = nullptr;
  std::optional<policy::JobSnapshot> Job(core::TenantIndex t) const override {
    if (ledger == nullptr || profile == nullptr) return std::nullopt;
    const core::Tenant& tenant = ledger->tenant(t);
    const policy::ClassProfile* cls = profile->Find(tenant.request.workload_class);
    if (cls == nullptr) return std::nullopt;  // an unknown class: the pessimistic member
    policy::JobSnapshot s;
    s.cls = cls;
    s.batch = cls->default_batch;
    s.memory_limit = tenant.request.gpu_mib;
    return s;
  }
  int QueuedAhead() const override { return 0; }
};

// Node name -> index, for the verbs' hot loop (thousands of names per call): open addressing
// with FNV-1a over a power-of-two table, names compared against the cluster's own. About a
// quarter of the instructions of std::unordered_map<std::string>::find with a temporary string.
class NameIndex {
 public:
  void Build(const core::Cluster& cluster) {
    cluster_ = &cluster;
    std::size_t size = 16;
    while (size < 2 * static_cast<std::size_t>(cluster.size()) + 1) size *= 2;
    slots_.assign(size, -1);
    for (core::NodeIndex n = 0; n < cluster.size(); ++n) {
      std::size_t i = Hash(cluster.node(n).name) & (size - 1);
      while (slots_[i] >= 0) i = (i + 1) & (size - 1);
      slots_[i] = n;
    }
  }
  core::NodeIndex Find(std::string_view name) const {
    if (slots_.empty()) return -1;
    const std::size_t mask = slots_.size() - 1;
    for (std::size_t i = Hash(name) & mask;; i = (i + 1) & mask) {
      const core::NodeIndex n = slots_[i];
      if (n < 0) return -1;
      if (cluster_->node(n).name == name) return n;
    }
  }

 private:
  static std::size_t Hash(std::string_view s) {
    std::uint64_t h = 14695981039346656037ULL;
    for (char c : s) {
      h ^= static_cast<unsigned char>(c);
      h *= 1099511628211ULL;
    }
    return static_cast<std::size_t>(h ^ (h >> 29));
  }
  const core::Cluster* cluster_ = nullptr;
  std::vector<core::NodeIndex> slots_;
};

}  // namespace gpumux::sched::detail
