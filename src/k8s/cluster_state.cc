#include "gpumux/k8s/cluster_state.h"

#include <algorithm>
#include <atomic>
#include <numeric>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "gpumux/core/check.h"
#include "gpumux/core/explain.h"
#include "gpumux/core/ledger.h"
#include "gpumux/core/rng.h"
#include "gpumux/policy/engine.h"

namespace gpumux::k8s {
namespace {

using core::ErrorCode;
using core::MakeError;
using nlohmann::json;

enum class Booking : std::uint8_t { kNone, kAssumed, kBound };

std::string_view BookingName(Booking b) {
  switch (b) {
    case Booking::kNone: return "none";
    case Booking::kAssumed: return "assumed";
    case Booking::kBound: return "bound";
  }
  return "none";
}

struct PodRecord {
  PodInfo info;
  std::optional<Grant> booked;     // the grant this pod should hold
  Booking state = Booking::kNone;  // kNone iff !booked
  bool in_ledger = false;          // booked and placed in the ledger
  std::string problem;             // why a booked grant is not in the ledger
  std::optional<Grant> forgotten;  // a grant whose bind failed: ignore its annotation
};

std::string TenantKey(const std::string& uid, const std::string& container) {
  return uid + "/" + container;
}

// The core request of one container as booked by a grant.
core::Request GrantedRequest(const ContainerGrant& c, const PodInfo& pod) {
  core::Request r;
  r.name = pod.Key() + "/" + c.name;
  r.gpu_count = static_cast<int>(c.gpus.size());
  r.gpu_milli = c.gpu_milli;
  r.gpu_mib = c.gpu_mem_mib;
  r.sharing = c.exclusive ? core::GpuSharing::kExclusive : core::GpuSharing::kShared;
  return r;
}

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

}  // namespace

struct ClusterState::Impl {
  explicit Impl(ClusterStateOptions o, Clock c)
      : options(std::move(o)), clock(std::move(c)), rng(1, "extender") {}

  ClusterStateOptions options;
  Clock clock;
  mutable std::mutex mu;
  std::atomic<bool> synced{false};

  std::map<std::string, NodeInfo, std::less<>> nodes;  // by name: rebuilds are deterministic
  std::unordered_map<std::string, PodRecord> pods;     // by uid
  StateCounters counters;

  // Derived from `nodes` (rebuilt when dirty).
  bool dirty = true;
  std::unique_ptr<core::Cluster> cluster;
  std::unique_ptr<core::Ledger> ledger;
  std::unique_ptr<policy::Policy> policy;
  std::unique_ptr<policy::Engine> engine;
  NameIndex name_index;
  core::Rng rng;
  // Per node index: why pods asking for gpu-mem cannot go there (the node's device plugin
  // counts gpu-mem in another unit, or its unit annotation is unreadable); "" when they can.
  std::vector<std::string> unit_problems;
  bool any_unit_problem = false;

  void Log(const std::string& line) const {
    if (options.log) options.log(line);
  }

  // --- the ledger ---

  void EnsureBuilt() {
    if (!dirty) return;
    dirty = false;
    ++counters.rebuilds;
    std::vector<core::NodeSpec> specs;
    specs.reserve(nodes.size());
    for (const auto& [name, info] : nodes) specs.push_back(info.spec);
    auto built = core::Cluster::Build(std::move(specs));
    if (!built) {
      // Only possible with more GPU models than the core supports; keep serving, say why.
      Log("cannot build the cluster model: " + built.error().message +
          "; serving an empty cluster until the nodes change");
      built = core::Cluster::Build({});
    }
    engine.reset();
    ledger.reset();
    cluster = std::make_unique<core::Cluster>(std::move(*built));
    ledger = std::make_unique<core::Ledger>(*cluster);
    name_index.Build(*cluster);
    unit_problems.assign(static_cast<std::size_t>(cluster->size()), {});
    any_unit_problem = false;
    for (core::NodeIndex n = 0; n < cluster->size(); ++n) {
      const auto it = nodes.find(cluster->node(n).name);
      if (it == nodes.end()) continue;
      std::string problem = UnitProblem(it->second);
      if (problem.empty()) continue;
      any_unit_problem = true;
      unit_problems[static_cast<std::size_t>(n)] = std::move(problem);
    }
    reasons.clear();
    // Typical pods name GPU models; their masks are only meaningful against this cluster.
    policy::PolicyContext context = options.context;
    for (policy::TypicalPod& t : context.typical_pods) {
      std::vector<std::string> models;
      std::size_t start = 0;
      while (start < t.models.size()) {
        std::size_t end = t.models.find('|', start);
        if (end == std::string::npos) end = t.models.size();
        if (end > start) models.push_back(t.models.substr(start, end - start));
        start = end + 1;
      }
      t.model_mask = cluster->MaskOf(models);
    }
    auto made = policy::BuiltinPolicies().Make(options.policy, context);
    GPUMUX_CHECK(made.has_value(), "policy was validated at Create");
    policy = std::move(*made);
    std::vector<std::int64_t> rank(static_cast<std::size_t>(cluster->size()));
    std::iota(rank.begin(), rank.end(), 0);
    engine = std::make_unique<policy::Engine>(*ledger, *policy, std::move(rank), rng);
    counters.nodes = cluster->size();
    counters.gpus = cluster->total_gpus();
    // Replay every booked grant: bound ones first, then assumed ones by age, uid breaking ties.
    std::vector<PodRecord*> order;
    for (auto& [uid, record] : pods) {
      record.in_ledger = false;
      if (record.booked) order.push_back(&record);
    }
    std::sort(order.begin(), order.end(), [](const PodRecord* a, const PodRecord* b) {
      if (a->state != b->state) return a->state == Booking::kBound;
      if (a->booked->assumed_at != b->booked->assumed_at) {
        return a->booked->assumed_at < b->booked->assumed_at;
      }
      return a->info.uid < b->info.uid;
    });
    for (PodRecord* record : order) Place(*record);
  }

  std::string UnitProblem(const NodeInfo& info) const {
    if (!info.gpu_mem_unit_error.empty()) {
      return info.gpu_mem_unit_error + "; the node's unit of gpumux.io/gpu-mem is unknown";
    }
    if (info.gpu_mem_unit_mib == 0 || info.gpu_mem_unit_mib == options.gpu_mem_unit_mib) return {};
    std::string reason = "node counts gpumux.io/gpu-mem in ";
    reason += std::to_string(info.gpu_mem_unit_mib);
    reason += " MiB units, this extender in ";
    reason += std::to_string(options.gpu_mem_unit_mib);
    reason += " MiB (--gpu-mem-unit-mib)";
    return reason;
  }

  // Why `pod` cannot go to node n because of the gpu-mem unit ("" if it can). Built state.
  const std::string* UnitMismatch(const PodInfo& pod, core::NodeIndex n) const {
    if (!any_unit_problem || n < 0) return nullptr;
    const std::string& problem = unit_problems[static_cast<std::size_t>(n)];
    if (problem.empty() || !AsksGpuMem(pod)) return nullptr;
    return &problem;
  }

  static bool AsksGpuMem(const PodInfo& pod) {
    return std::any_of(pod.containers.begin(), pod.containers.end(),
                       [](const ContainerRequest& c) { return c.request.gpu_mib > 0; });
  }

  // Puts record.booked into the ledger; on failure records why (a conflict is counted).
  void Place(PodRecord& record) {
    GPUMUX_CHECK(record.booked.has_value() && !record.in_ledger, "place a booked grant once");
    const Grant& grant = *record.booked;
    const core::NodeIndex n = cluster->FindNode(grant.node);
    if (n < 0) {
      record.problem = "node " + grant.node + " is not known (yet)";
      return;
    }
    std::vector<std::string> placed;
    for (const ContainerGrant& c : grant.containers) {
      core::Placement placement{n, {}};
      for (const GrantedGpu& g : c.gpus) placement.gpus.push_back(g.index);
      std::sort(placement.gpus.begin(), placement.gpus.end());
      const std::string key = TenantKey(record.info.uid, c.name);
      auto assigned = ledger->Assign(key, GrantedRequest(c, record.info), placement);
      if (!assigned) {
        for (const std::string& k : placed) (void)ledger->Release(k);
        record.problem = "grant of pod " + record.info.Key() + " on node " + grant.node +
                         " conflicts with the ledger: " + assigned.error().message;
        ++counters.grant_conflicts;
        Log(record.problem);
        return;
      }
      placed.push_back(key);
    }
    record.in_ledger = true;
    record.problem.clear();
  }

  void Unplace(PodRecord& record) {
    if (!record.in_ledger) return;
    for (const ContainerGrant& c : record.booked->containers) {
      auto released = ledger->Release(TenantKey(record.info.uid, c.name));
      GPUMUX_CHECK(released.has_value(), "a placed grant releases");
    }
    record.in_ledger = false;
  }

  // Changes what `record` holds to (grant, state); ledger kept in step unless a rebuild is due.
  void Book(PodRecord& record, std::optional<Grant> grant, Booking state) {
    if (record.booked == grant) {
      record.state = grant ? state : Booking::kNone;
      return;
    }
    if (!dirty) Unplace(record);
    record.in_ledger = false;
    record.booked = std::move(grant);
    record.state = record.booked ? state : Booking::kNone;
    record.problem.clear();
    if (record.booked && !dirty) Place(record);
  }

  // What a pod seen from the API server should hold.
  void Reconcile(PodRecord& record) {
    const PodInfo& p = record.info;
    const std::int64_t now = clock();
    if (p.finished()) {
      Book(record, std::nullopt, Booking::kNone);
      return;
    }
    if (p.grant && !(record.forgotten && *record.forgotten == *p.grant)) {
      const Grant& g = *p.grant;
      if (!p.node_name.empty()) {
        if (p.node_name == g.node) {
          Book(record, g, Booking::kBound);
        } else {
          Log("pod " + p.Key() + " is bound to " + p.node_name + " but its grant names " + g.node +
              "; ignoring the grant");
          ++counters.grant_conflicts;
          Book(record, std::nullopt, Booking::kNone);
        }
        return;
      }
      if (record.state == Booking::kAssumed && record.booked == g) return;  // our own bind
      if (now - g.assumed_at <= options.grant_ttl_seconds) {
        Book(record, g, Booking::kAssumed);
      } else {
        Book(record, std::nullopt, Booking::kNone);
      }
      return;
    }
    // No (usable) grant annotation: keep an assumption made by bind until its TTL.
    if (record.state == Booking::kAssumed) {
      if (!p.node_name.empty() && record.booked && p.node_name == record.booked->node) {
        record.state = Booking::kBound;
      }
      return;
    }
    // Otherwise the pod holds no grant (e.g. scheduled by something other than gpumux).
    Book(record, std::nullopt, Booking::kNone);
  }

  void Upsert(PodInfo info) {
    if (!info.grant_error.empty()) {
      auto seen = pods.find(info.uid);
      if (seen == pods.end() || seen->second.info.grant_error != info.grant_error) {
        ++counters.unreadable_grants;
        Log("pod " + info.Key() + ": " + info.grant_error + "; the grant is ignored");
      }
    }
    auto it = pods.find(info.uid);
    if (!info.wants_gpu() && !info.grant) {
      if (it != pods.end()) Remove(it);
      return;
    }
    if (it == pods.end()) it = pods.emplace(info.uid, PodRecord{}).first;
    it->second.info = std::move(info);
    Reconcile(it->second);
  }

  void Remove(std::unordered_map<std::string, PodRecord>::iterator it) {
    if (!dirty) Unplace(it->second);
    pods.erase(it);
  }


  // Whether all containers of `pod` fit on node n (placing them one after another), and the
  // first container's score. Leaves the ledger as it was.
  NodeVerdict TrialOnNode(const PodInfo& pod, core::NodeIndex n) {
    NodeVerdict v;
    std::vector<std::string> placed;
    for (std::size_t i = 0; i < pod.containers.size(); ++i) {
      const ContainerRequest& c = pod.containers[i];
      policy::Decision d = engine->DecideOn(c.request, n);
      if (!d.placement) {
        v = Misfit(d, n, c.request);
        break;
      }
      if (i == 0) v.score = d.score;
      const std::string key = "trial/" + std::to_string(i);
      auto assigned = ledger->Assign(key, d.request, *d.placement);
      GPUMUX_CHECK(assigned.has_value(), "the engine's placement is assignable");
      placed.push_back(key);
    }
    for (const std::string& key : placed) (void)ledger->Release(key);
    return v;
  }

  NodeVerdict Misfit(const policy::Decision& d, core::NodeIndex n, const core::Request& original) {
    const core::Request adapted = policy->Adapt(original);
    return Misfit(d, n, adapted, cluster->MaskOf(adapted.gpu_models));
  }
  NodeVerdict Misfit(const policy::Decision& d, core::NodeIndex n, const core::Request& adapted,
                     core::ModelMask models) {
    NodeVerdict v;
    if (d.declined) {
      v.kind = NodeVerdict::Kind::kDeclined;
      v.reason = "policy " + options.policy + " would rather wait than use this node";
      return v;
    }
    // The reason is memoised per node like the engine's scores: valid while the node's ledger
    // generation and the request's shape are unchanged (replicas of a job share a shape, and
    // most nodes do not change between two scheduling cycles).
    const ReasonKey key{adapted.gpu_count, adapted.gpu_milli, adapted.gpu_mib, adapted.sharing,
                        models, ledger->Generation(n)};
    if (reasons.size() != static_cast<std::size_t>(cluster->size())) {
      reasons.assign(static_cast<std::size_t>(cluster->size()), {});
    }
    ReasonMemo& memo = reasons[static_cast<std::size_t>(n)];
    if (!memo.valid || !(memo.key == key)) {
      memo.misfit = core::ExplainMisfit(ledger->Node(n), adapted, models);
      memo.key = key;
      memo.valid = true;
    }
    v.kind = memo.misfit.resolvable ? NodeVerdict::Kind::kDoesNotFit
                                    : NodeVerdict::Kind::kUnresolvable;
    v.reason = memo.misfit.reason;
    return v;
  }

  struct ReasonKey {
    int gpu_count;
    core::MilliGpu milli;
    core::MiB mib;
    core::GpuSharing sharing;
    core::ModelMask models;
    std::uint64_t generation;
    bool operator==(const ReasonKey&) const = default;
  };
  struct ReasonMemo {
    bool valid = false;
    ReasonKey key{};
    core::Misfit misfit;
  };
  std::vector<ReasonMemo> reasons;  // per node; cleared on every rebuild
};

core::Result<std::unique_ptr<ClusterState>> ClusterState::Create(ClusterStateOptions options,
                                                                 Clock clock) {
  auto probe = policy::BuiltinPolicies().Make(options.policy, options.context);
  if (!probe) return tl::unexpected(probe.error());
  if (options.grant_ttl_seconds < 1) {
    return MakeError(ErrorCode::kInvalidArgument, "grant TTL must be at least 1 second");
  }
  if (options.gpu_mem_unit_mib < 1 || options.gpu_mem_unit_mib > kMaxGpuMemUnitMib) {
    std::string message = "the gpumux.io/gpu-mem unit must be 1..";
    message += std::to_string(kMaxGpuMemUnitMib);
    message += " MiB, not ";
    message += std::to_string(options.gpu_mem_unit_mib);
    return MakeError(ErrorCode::kInvalidArgument, std::move(message));
  }
  if (!clock) {
    clock = [] {
      return static_cast<std::int64_t>(std::chrono::duration_cast<std::chrono::seconds>(
                                           std::chrono::system_clock::now().time_since_epoch())
                                           .count());
    };
  }
  return std::unique_ptr<ClusterState>(
      new ClusterState(std::make_unique<Impl>(std::move(options), std::move(clock))));
}

ClusterState::ClusterState(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ClusterState::~ClusterState() = default;

namespace {

bool SameNode(const NodeInfo& a, const NodeInfo& b) {
  const core::NodeSpec& x = a.spec;
  const core::NodeSpec& y = b.spec;
  if (a.gpu_mem_unit_mib != b.gpu_mem_unit_mib || a.gpu_mem_unit_error != b.gpu_mem_unit_error) {
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
        g.memory_mib != h.memory_mib || g.health != h.health) {
      return false;
    }
  }
  return true;
}

}  // namespace

void ClusterState::SetNodes(std::span<const nlohmann::json> nodes) {
  std::map<std::string, NodeInfo, std::less<>> fresh;
  for (const json& node : nodes) {
    auto info = DecodeNode(node, impl_->options.defaults);
    if (!info) {
      impl_->Log("ignoring a node: " + info.error().message);
      continue;
    }
    if (!info->gpus_error.empty()) {
      impl_->Log("node " + info->spec.name + ": " + info->gpus_error + "; it gets no GPUs");
    }
    if (!info->gpu_mem_unit_error.empty()) {
      impl_->Log("node " + info->spec.name + ": " + info->gpu_mem_unit_error +
                 "; pods asking for gpumux.io/gpu-mem cannot go there");
    }
    std::string name = info->spec.name;
    fresh.insert_or_assign(std::move(name), std::move(*info));
  }
  std::lock_guard lock(impl_->mu);
  impl_->nodes = std::move(fresh);
  impl_->dirty = true;
}

void ClusterState::UpsertNode(const nlohmann::json& node) {
  auto info = DecodeNode(node, impl_->options.defaults);
  if (!info) {
    impl_->Log("ignoring a node: " + info.error().message);
    return;
  }
  std::lock_guard lock(impl_->mu);
  auto it = impl_->nodes.find(info->spec.name);
  if (it != impl_->nodes.end() && SameNode(it->second, *info)) {
    it->second.unschedulable = info->unschedulable;
    return;  // a status heartbeat: nothing gpumux uses changed
  }
  if (!info->gpus_error.empty()) {
    impl_->Log("node " + info->spec.name + ": " + info->gpus_error + "; it gets no GPUs");
  }
  if (!info->gpu_mem_unit_error.empty()) {
    impl_->Log("node " + info->spec.name + ": " + info->gpu_mem_unit_error +
               "; pods asking for gpumux.io/gpu-mem cannot go there");
  }
  std::string name = info->spec.name;
  impl_->nodes.insert_or_assign(std::move(name), std::move(*info));
  impl_->dirty = true;
}

void ClusterState::RemoveNode(std::string_view name) {
  std::lock_guard lock(impl_->mu);
  auto it = impl_->nodes.find(name);
  if (it == impl_->nodes.end()) return;
  impl_->nodes.erase(it);
  impl_->dirty = true;
}

void ClusterState::SetPods(std::span<const nlohmann::json> pods) {
  std::vector<PodInfo> decoded;
  decoded.reserve(pods.size());
  for (const json& pod : pods) {
    auto info = DecodePod(pod, impl_->options.gpu_mem_unit_mib);
    if (!info) {
      impl_->Log("ignoring a pod: " + info.error().message);
      continue;
    }
    decoded.push_back(std::move(*info));
  }
  std::lock_guard lock(impl_->mu);
  Impl& s = *impl_;
  std::unordered_map<std::string, bool> seen;
  for (const PodInfo& p : decoded) seen.emplace(p.uid, true);
  for (auto it = s.pods.begin(); it != s.pods.end();) {
    if (seen.count(it->first) == 0 && it->second.state != Booking::kAssumed) {
      if (!s.dirty) s.Unplace(it->second);
      it = s.pods.erase(it);
    } else {
      ++it;
    }
  }
  // Bound grants first so that an older, stale assumption never displaces them.
  std::stable_sort(decoded.begin(), decoded.end(), [](const PodInfo& a, const PodInfo& b) {
    return !a.node_name.empty() && b.node_name.empty();
  });
  for (PodInfo& p : decoded) s.Upsert(std::move(p));
}

void ClusterState::UpsertPod(const nlohmann::json& pod) {
  auto info = DecodePod(pod, impl_->options.gpu_mem_unit_mib);
  if (!info) {
    impl_->Log("ignoring a pod: " + info.error().message);
    return;
  }
  std::lock_guard lock(impl_->mu);
  impl_->Upsert(std::move(*info));
}

void ClusterState::RemovePod(const nlohmann::json& pod) {
  const json* metadata = pod.is_object() && pod.contains("metadata") ? &pod.at("metadata") : nullptr;
  if (metadata == nullptr || !metadata->contains("uid") || !metadata->at("uid").is_string()) return;
  const std::string uid = metadata->at("uid").get<std::string>();
  std::lock_guard lock(impl_->mu);
  auto it = impl_->pods.find(uid);
  if (it != impl_->pods.end()) impl_->Remove(it);
}

void ClusterState::MarkSynced() { impl_->synced.store(true); }
bool ClusterState::synced() const { return impl_->synced.load(); }

std::vector<NodeVerdict> ClusterState::Evaluate(const PodInfo& pod,
                                                std::span<const std::string> names) {
  const std::vector<std::string_view> views(names.begin(), names.end());
  return Evaluate(pod, views, Reasons::kExplain);
}

std::vector<NodeVerdict> ClusterState::Evaluate(const PodInfo& pod,
                                                std::span<const std::string_view> names,
                                                Reasons reasons) {
  std::vector<NodeVerdict> out(names.size());
  if (!pod.request_error.empty()) {
    for (NodeVerdict& v : out) v = {NodeVerdict::Kind::kUnresolvable, 0, pod.request_error};
    return out;
  }
  if (pod.containers.empty()) return out;  // asks gpumux for nothing: every node passes
  std::lock_guard lock(impl_->mu);
  Impl& s = *impl_;
  s.EnsureBuilt();
  std::vector<core::NodeIndex> nodes;
  nodes.reserve(names.size());
  for (std::string_view name : names) nodes.push_back(s.name_index.Find(name));
  auto unknown = [&](NodeVerdict& v, std::string_view name) {
    v.kind = NodeVerdict::Kind::kUnresolvable;
    v.reason = "node " + std::string(name) + " is not known to gpumux yet";
  };
  // Nodes whose device plugin counts gpu-mem in another unit: the kubelet would admit the pod
  // with the wrong amount, so they are out whatever the ledger says.
  auto units = [&] {
    if (!s.any_unit_problem) return;
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      if (const std::string* problem = s.UnitMismatch(pod, nodes[i]); problem != nullptr) {
        out[i] = {NodeVerdict::Kind::kUnresolvable, 0, *problem};
      }
    }
  };
  if (pod.containers.size() == 1) {
    const core::Request& request = pod.containers[0].request;
    std::vector<core::NodeIndex> known;
    known.reserve(nodes.size());
    for (core::NodeIndex n : nodes) {
      if (n >= 0) known.push_back(n);
    }
    const std::vector<std::int64_t> scores = s.engine->ScoreNodes(request, known);
    const core::Request adapted = s.policy->Adapt(request);
    const core::ModelMask models = s.cluster->MaskOf(adapted.gpu_models);
    std::size_t k = 0;
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      if (nodes[i] < 0) {
        unknown(out[i], names[i]);
        continue;
      }
      const std::int64_t score = scores[k++];
      if (reasons == Reasons::kSkip && score < 0 &&
          (score == policy::Engine::kNoFit || score == policy::Policy::kDecline)) {
        out[i].kind = score == policy::Engine::kNoFit ? NodeVerdict::Kind::kDoesNotFit
                                                      : NodeVerdict::Kind::kDeclined;
      } else if (score == policy::Engine::kNoFit) {
        policy::Decision none;
        out[i] = s.Misfit(none, nodes[i], adapted, models);
      } else if (score == policy::Policy::kDecline) {
        policy::Decision declined;
        declined.declined = true;
        out[i] = s.Misfit(declined, nodes[i], adapted, models);
      } else {
        out[i].score = score;
      }
    }
    units();
    return out;
  }
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i] < 0) {
      unknown(out[i], names[i]);
    } else {
      out[i] = s.TrialOnNode(pod, nodes[i]);
    }
  }
  units();
  return out;
}

std::optional<PodInfo> ClusterState::FindPod(const std::string& uid) const {
  std::lock_guard lock(impl_->mu);
  auto it = impl_->pods.find(uid);
  if (it == impl_->pods.end()) return std::nullopt;
  return it->second.info;
}

core::Result<Grant> ClusterState::Assume(const PodInfo& pod, const std::string& node) {
  if (!pod.request_error.empty()) return MakeError(ErrorCode::kInvalidArgument, pod.request_error);
  if (pod.containers.empty()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "pod " + pod.Key() + " asks for no gpumux resource");
  }
  std::lock_guard lock(impl_->mu);
  Impl& s = *impl_;
  s.EnsureBuilt();
  const core::NodeIndex n = s.cluster->FindNode(node);
  if (n < 0) return MakeError(ErrorCode::kNotFound, "node " + node + " is not known to gpumux");
  if (const std::string* problem = s.UnitMismatch(pod, n); problem != nullptr) {
    return MakeError(ErrorCode::kFailedPrecondition, "node " + node + ": " + *problem);
  }
  auto existing = s.pods.find(pod.uid);
  if (existing != s.pods.end() && existing->second.state == Booking::kBound) {
    return MakeError(ErrorCode::kFailedPrecondition,
                     "pod " + pod.Key() + " is already bound to " + existing->second.booked->node);
  }
  // An earlier assumption of this pod (a retried bind) gives its GPUs back first.
  std::optional<Grant> previous;
  if (existing != s.pods.end() && existing->second.in_ledger) {
    previous = existing->second.booked;
    s.Unplace(existing->second);
  }
  Grant grant;
  grant.node = node;
  grant.policy = s.options.policy;
  grant.assumed_at = s.clock();
  std::vector<std::string> placed;
  std::string failure;
  for (const ContainerRequest& c : pod.containers) {
    policy::Decision d = s.engine->DecideOn(c.request, n);
    if (!d.placement) {
      failure = "container " + c.container + " no longer fits on " + node + ": " +
                s.Misfit(d, n, c.request).reason;
      break;
    }
    const std::string key = TenantKey(pod.uid, c.container);
    auto assigned = s.ledger->Assign(key, d.request, *d.placement);
    if (!assigned) {
      failure = assigned.error().message;
      break;
    }
    placed.push_back(key);
    ContainerGrant cg;
    cg.name = c.container;
    cg.gpu_milli = d.request.gpu_milli;
    cg.gpu_mem_mib = d.request.gpu_mib;
    cg.milli_requested = c.milli_requested;
    cg.exclusive = d.request.sharing == core::GpuSharing::kExclusive;
    for (int g : d.placement->gpus) {
      cg.gpus.push_back({g, s.cluster->node(n).gpus[static_cast<std::size_t>(g)].uuid});
    }
    grant.containers.push_back(std::move(cg));
  }
  if (!failure.empty()) {
    for (const std::string& key : placed) (void)s.ledger->Release(key);
    if (previous) s.Place(existing->second);
    return MakeError(ErrorCode::kFailedPrecondition, failure);
  }
  for (const std::string& key : placed) (void)s.ledger->Release(key);  // re-placed via Book
  PodRecord& record = existing != s.pods.end() ? existing->second
                                               : s.pods.emplace(pod.uid, PodRecord{}).first->second;
  if (existing == s.pods.end()) record.info = pod;
  record.in_ledger = false;
  record.booked.reset();
  record.forgotten.reset();
  s.Book(record, grant, Booking::kAssumed);
  GPUMUX_CHECK(record.in_ledger, "the grant just computed is placeable");
  return grant;
}

void ClusterState::ConfirmBound(const std::string& uid) {
  std::lock_guard lock(impl_->mu);
  auto it = impl_->pods.find(uid);
  if (it != impl_->pods.end() && it->second.booked) it->second.state = Booking::kBound;
}

void ClusterState::Forget(const std::string& uid, const Grant& grant) {
  std::lock_guard lock(impl_->mu);
  Impl& s = *impl_;
  auto it = s.pods.find(uid);
  if (it == s.pods.end() || !it->second.booked || !(*it->second.booked == grant)) return;
  s.Book(it->second, std::nullopt, Booking::kNone);
  it->second.forgotten = grant;
}

bool ClusterState::FitsWithout(const PodInfo& pod, const std::string& node,
                               std::span<const std::string> victims) {
  if (!pod.request_error.empty()) return false;
  if (pod.containers.empty()) return true;
  std::lock_guard lock(impl_->mu);
  Impl& s = *impl_;
  s.EnsureBuilt();
  const core::NodeIndex n = s.cluster->FindNode(node);
  if (n < 0 || s.UnitMismatch(pod, n) != nullptr) return false;
  std::vector<PodRecord*> evicted;
  for (const std::string& uid : victims) {
    auto it = s.pods.find(uid);
    if (it == s.pods.end() || !it->second.in_ledger || it->second.booked->node != node) continue;
    s.Unplace(it->second);
    evicted.push_back(&it->second);
  }
  const bool fits = s.TrialOnNode(pod, n).kind == NodeVerdict::Kind::kFits;
  for (PodRecord* record : evicted) s.Place(*record);
  return fits;
}

int ClusterState::ExpireAssumed() {
  std::lock_guard lock(impl_->mu);
  Impl& s = *impl_;
  const std::int64_t now = s.clock();
  int expired = 0;
  for (auto& [uid, record] : s.pods) {
    if (record.state != Booking::kAssumed || !record.booked) continue;
    if (now - record.booked->assumed_at <= s.options.grant_ttl_seconds) continue;
    s.Log("grant of pod " + record.info.Key() + " on " + record.booked->node +
          " expired: the pod was not bound within " +
          std::to_string(s.options.grant_ttl_seconds) + " s");
    record.forgotten = record.booked;
    s.Book(record, std::nullopt, Booking::kNone);
    ++expired;
  }
  s.counters.grants_expired += expired;
  return expired;
}

nlohmann::json ClusterState::Inspect() const {
  std::lock_guard lock(impl_->mu);
  Impl& s = *impl_;
  s.EnsureBuilt();
  // Which pod each tenant key belongs to.
  std::unordered_map<std::string, const PodRecord*> by_uid;
  for (const auto& [uid, record] : s.pods) by_uid.emplace(uid, &record);
  json nodes = json::array();
  for (core::NodeIndex n = 0; n < s.cluster->size(); ++n) {
    const core::NodeView view = s.ledger->Node(n);
    const core::NodeSpec& spec = *view.spec;
    const NodeInfo& info = s.nodes.find(spec.name)->second;
    std::vector<json> tenants(spec.gpus.size(), json::array());
    for (core::TenantIndex t : view.tenants) {
      const core::Tenant& tenant = s.ledger->tenant(t);
      const std::string uid = tenant.key.substr(0, tenant.key.find('/'));
      const std::string container = tenant.key.substr(tenant.key.find('/') + 1);
      const PodRecord* record = by_uid.count(uid) != 0 ? by_uid.at(uid) : nullptr;
      for (int g : tenant.placement.gpus) {
        tenants[static_cast<std::size_t>(g)].push_back(
            {{"pod", record != nullptr ? record->info.Key() : uid},
             {"uid", uid},
             {"container", container},
             {"gpu_milli", tenant.request.gpu_milli},
             {"gpu_mem_mib", tenant.request.gpu_mib},
             {"exclusive", tenant.request.sharing == core::GpuSharing::kExclusive},
             {"state", record != nullptr ? BookingName(record->state) : "unknown"}});
      }
    }
    json gpus = json::array();
    for (std::size_t g = 0; g < spec.gpus.size(); ++g) {
      gpus.push_back({{"index", spec.gpus[g].index},
                      {"uuid", spec.gpus[g].uuid},
                      {"model", spec.gpus[g].model},
                      {"memory_mib", spec.gpus[g].memory_mib},
                      {"health", spec.gpus[g].health == core::GpuHealth::kHealthy ? "Healthy"
                                                                                  : "Unhealthy"},
                      {"free_milli", view.gpu_free_milli[g]},
                      {"free_mib", view.gpu_free_mib[g]},
                      {"tenants", std::move(tenants[g])}});
    }
    json node = {{"name", spec.name}, {"gpus", std::move(gpus)}};
    if (!info.gpus_from_annotation) node["gpus_source"] = "default";
    if (!info.gpus_error.empty()) node["gpus_error"] = info.gpus_error;
    if (info.unschedulable) node["unschedulable"] = true;
    if (info.gpu_mem_unit_mib > 0) node["gpu_mem_unit_mib"] = info.gpu_mem_unit_mib;
    if (!info.gpu_mem_unit_error.empty()) node["gpu_mem_unit_error"] = info.gpu_mem_unit_error;
    nodes.push_back(std::move(node));
  }
  json problems = json::array();
  std::vector<const PodRecord*> records;
  for (const auto& [uid, record] : s.pods) records.push_back(&record);
  std::sort(records.begin(), records.end(),
            [](const PodRecord* a, const PodRecord* b) { return a->info.uid < b->info.uid; });
  for (const PodRecord* r : records) {
    if (r->booked && !r->in_ledger) {
      problems.push_back({{"pod", r->info.Key()}, {"uid", r->info.uid}, {"problem", r->problem}});
    } else if (!r->info.grant_error.empty()) {
      problems.push_back(
          {{"pod", r->info.Key()}, {"uid", r->info.uid}, {"problem", r->info.grant_error}});
    }
  }
  StateCounters c = s.counters;
  for (const PodRecord* r : records) {
    if (r->state == Booking::kBound) ++c.grants_bound;
    if (r->state == Booking::kAssumed) ++c.grants_assumed;
  }
  return {{"policy", s.options.policy},
          {"synced", s.synced.load()},
          {"gpu_mem_unit_mib", s.options.gpu_mem_unit_mib},
          {"counters",
           {{"nodes", c.nodes},
            {"gpus", c.gpus},
            {"grants_bound", c.grants_bound},
            {"grants_assumed", c.grants_assumed},
            {"grants_expired", c.grants_expired},
            {"grant_conflicts", c.grant_conflicts},
            {"unreadable_grants", c.unreadable_grants},
            {"rebuilds", c.rebuilds}}},
          {"nodes", std::move(nodes)},
          {"grants_not_in_ledger", std::move(problems)}};
}

StateCounters ClusterState::counters() const {
  std::lock_guard lock(impl_->mu);
  Impl& s = *impl_;
  s.EnsureBuilt();
  StateCounters c = s.counters;
  for (const auto& [uid, record] : s.pods) {
    if (record.state == Booking::kBound) ++c.grants_bound;
    if (record.state == Booking::kAssumed) ++c.grants_assumed;
  }
  return c;
}

const std::string& ClusterState::policy_name() const { return impl_->options.policy; }

std::int64_t ClusterState::gpu_mem_unit_mib() const { return impl_->options.gpu_mem_unit_mib; }

std::int64_t ClusterState::Now() const { return impl_->clock(); }

bool ClusterState::PodAwaitsDevices(const std::string& uid) const {
  std::lock_guard lock(impl_->mu);
  auto it = impl_->pods.find(uid);
  if (it == impl_->pods.end()) return false;
  const PodInfo& p = it->second.info;
  return !p.finished() && !p.deleting && p.phase != "Running";
}

}  // namespace gpumux::k8s
