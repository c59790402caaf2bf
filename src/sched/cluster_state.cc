#include "gpumux/sched/cluster_state.h"

#include <algorithm>
#include <atomic>
#include <nlohmann/json.hpp>
#include <numeric>
#include <unordered_map>

#include "gpumux/core/check.h"
#include "gpumux/core/explain.h"
#include "gpumux/core/ledger.h"
#include "gpumux/core/rng.h"
#include "gpumux/kube/node_lock.h"
#include "gpumux/policy/engine.h"

namespace gpumux::sched {

namespace {

using core::ErrorCode;
using core::MakeError;
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

}  // namespace

struct ClusterState::Impl final : public GrantLedger {
  explicit Impl(ClusterStateOptions o, Clock c)
      : options(std::move(o)),
        clock(std::move(c)),
        rng(1, "extender"),
        bookings(*this,
                 {options.grant_ttl_seconds, clock, [this](core::LogLevel level, std::string line) {
                    Log(level, std::move(line));
                  }}) {
    UseProfile(options.profile);
  }

  ClusterStateOptions options;
  Clock clock;
  mutable std::mutex mu;
  std::atomic<bool> synced{false};

  // Holds `mu`; the lines logged meanwhile are written once it is released.
  class Locked {
   public:
    explicit Locked(Impl& s) : s_(s), lock_(s.mu) {}
    ~Locked() {
      std::vector<std::pair<core::LogLevel, std::string>> lines;
      lines.swap(s_.pending_log);
      lock_.unlock();
      for (const auto& [level, line] : lines) s_.options.log.Write(level, line);
    }
    Locked(const Locked&) = delete;
    Locked& operator=(const Locked&) = delete;

   private:
    Impl& s_;
    std::unique_lock<std::mutex> lock_;
  };

  std::map<std::string, kube::NodeInfo, std::less<>> nodes;  // by name: rebuilds are deterministic
  // Nodes known by name that DecodeNode refused, with its error.
  std::map<std::string, std::string, std::less<>> undecodable;
  StateCounters counters;
  // Written by Locked's destructor.
  std::vector<std::pair<core::LogLevel, std::string>> pending_log;

  // Derived from `nodes` (rebuilt when dirty).
  bool dirty = true;
  std::unique_ptr<core::Cluster> cluster;
  std::unique_ptr<core::Ledger> ledger;
  std::unique_ptr<policy::Policy> policy;
  std::unique_ptr<policy::Engine> engine;
  // The co-location profile in use (options.profile, or the last SetProfile) and what the
  // policy is built on; replaced together under `mu`.
  std::shared_ptr<const policy::WorkloadProfile> profile;
  std::unique_ptr<policy::ProfileInterference> interference;
  TenantJobs tenant_jobs;
  NameIndex name_index;
  core::Rng rng;
  Bookings bookings;  // every pod's booking (bookings.h); after clock and options, which it uses
  // Nodes of `nodes` the cluster model left out, with why (rebuilt with it).
  std::map<std::string, std::string, std::less<>> excluded;
  // Per node index: why pods asking for gpu-mem cannot go there (the node's device plugin
  // counts gpu-mem in another unit, or its unit annotation is unreadable); "" when they can.
  std::vector<std::string> unit_problems;
  bool any_unit_problem = false;
  // Per node index: why no pod may be bound there now (its device plugin is starting or
  // stopping); empty when every node's plugin is ready or announces no state.
  std::vector<std::string> plugin_problems;

  // Caller holds `mu` (through Locked).
  void Log(core::LogLevel level, std::string line) {
    if (options.log.Enabled(level)) pending_log.emplace_back(level, std::move(line));
  }

  // Why node `name` cannot be used at all, or nullptr if nothing is known against it.
  const std::string* Unusable(std::string_view name) const {
    if (auto it = undecodable.find(name); it != undecodable.end()) return &it->second;
    if (auto it = excluded.find(name); it != excluded.end()) return &it->second;
    return nullptr;
  }

  // --- nodes ---

  void NoteNodeProblems(const kube::NodeInfo& info) {
    if (!info.gpus_error.empty()) {
      Log(core::LogLevel::kWarn,
          "node " + info.spec.name + ": " + info.gpus_error + "; it gets no GPUs");
    }
    if (!info.gpu_mem_unit_error.empty()) {
      Log(core::LogLevel::kWarn, "node " + info.spec.name + ": " + info.gpu_mem_unit_error +
                                     "; pods asking for gpumux.io/gpu-mem cannot go there");
    }
  }

  // A node object DecodeNode refused: kept by name as unusable, or counted when it has none.
  void NoteUndecodable(const json& node, const std::string& error) {
    std::string name = NodeNameOf(node);
    if (name.empty()) {
      ++counters.unreadable_nodes;
      Log(core::LogLevel::kWarn, "ignoring a node object: " + error);
      return;
    }
    auto [it, inserted] = undecodable.try_emplace(name, error);
    if (!inserted && it->second == error) return;
    it->second = error;
    Log(core::LogLevel::kWarn, "node " + name + " cannot be used by gpumux: " + error);
    if (nodes.erase(name) > 0) dirty = true;
  }

  // The cluster model of `nodes`, leaving out (into `out`, with why) each node it cannot
  // take, so that no node takes the others with it. In name order, so deterministic.
  // (DecodeNode already refuses nodes beyond the per-node limits that Cluster::Build enforces,
  // e.g. more than core::kMaxGpusPerNode GPUs.)
  core::Cluster BuildCluster(std::map<std::string, std::string, std::less<>>& out) {
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
    Log(core::LogLevel::kError, "cannot build the cluster model: " + built.error().message +
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

  // --- the ledger ---

  void EnsureBuilt() {
    if (!dirty) return;
    dirty = false;
    ++counters.rebuilds;
    std::map<std::string, std::string, std::less<>> left_out;
    core::Cluster built = BuildCluster(left_out);
    for (const auto& [name, why] : left_out) {
      auto it = excluded.find(name);
      if (it == excluded.end() || it->second != why) {
        Log(core::LogLevel::kWarn, "node " + name + " cannot be used by gpumux: " + why);
      }
    }
    excluded = std::move(left_out);
    engine.reset();
    ledger.reset();
    cluster = std::make_unique<core::Cluster>(std::move(built));
    ledger = std::make_unique<core::Ledger>(*cluster);
    name_index.Build(*cluster);
    unit_problems.assign(static_cast<std::size_t>(cluster->size()), {});
    any_unit_problem = false;
    plugin_problems.clear();
    for (core::NodeIndex n = 0; n < cluster->size(); ++n) {
      const auto it = nodes.find(cluster->node(n).name);
      if (it == nodes.end()) continue;
      std::string problem = UnitProblem(it->second);
      if (!problem.empty()) {
        any_unit_problem = true;
        unit_problems[static_cast<std::size_t>(n)] = std::move(problem);
      }
      const std::string& plugin = it->second.device_plugin_state;
      if (!plugin.empty() && plugin != kube::kDevicePluginReady) {
        if (plugin_problems.empty()) {
          plugin_problems.assign(static_cast<std::size_t>(cluster->size()), {});
        }
        plugin_problems[static_cast<std::size_t>(n)] =
            "the device plugin on node " + it->first + " is " + plugin +
            " (gpumux.io/device-plugin); the kubelet would reject a pod admitted now";
      }
    }
    BuildPolicy();
    counters.nodes = cluster->size();
    counters.gpus = cluster->total_gpus();
    bookings.Replay();
  }

  // The policy and the engine over the built cluster and ledger, with the profile in use.
  void BuildPolicy() {
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
    if (profile != nullptr) {
      tenant_jobs.ledger = ledger.get();
      tenant_jobs.profile = profile.get();
      context.profile = profile.get();
      context.interference = interference.get();
      context.jobs = &tenant_jobs;
    }
    auto made = policy::BuiltinPolicies().Make(options.policy, context);
    GPUMUX_CHECK(made.has_value(), "policy was validated at Create");
    engine.reset();
    policy = std::move(*made);
    std::vector<std::int64_t> rank(static_cast<std::size_t>(cluster->size()));
    std::iota(rank.begin(), rank.end(), 0);
    engine = std::make_unique<policy::Engine>(*ledger, *policy, std::move(rank), rng);
  }

  // Swaps in a new profile (SetProfile); the policy and engine follow when they are built.
  void UseProfile(std::shared_ptr<const policy::WorkloadProfile> p) {
    if (p == nullptr) return;
    auto model = std::make_unique<policy::ProfileInterference>(*p);
    if (ledger != nullptr) {
      // Build the new policy before dropping the old profile it borrows from.
      auto old_profile = std::move(profile);
      auto old_model = std::move(interference);
      profile = std::move(p);
      interference = std::move(model);
      BuildPolicy();
      return;
    }
    profile = std::move(p);
    interference = std::move(model);
  }

  std::string UnitProblem(const kube::NodeInfo& info) const {
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
  const std::string* UnitMismatch(const kube::PodInfo& pod, core::NodeIndex n) const {
    if (!any_unit_problem || n < 0) return nullptr;
    const std::string& problem = unit_problems[static_cast<std::size_t>(n)];
    if (problem.empty() || !AsksGpuMem(pod)) return nullptr;
    return &problem;
  }

  static bool AsksGpuMem(const kube::PodInfo& pod) {
    return std::any_of(pod.containers.begin(), pod.containers.end(),
                       [](const kube::ContainerRequest& c) { return c.request.gpu_mib > 0; });
  }

  // --- the ledger as the bookings see it (GrantLedger) ---

  bool built() const override { return !dirty; }

  std::optional<PlaceFailure> Place(const PodRecord& record) override {
    const kube::Grant& grant = *record.booked;
    const core::NodeIndex n = cluster->FindNode(grant.node);
    if (n < 0) {
      const std::string* why = Unusable(grant.node);
      return PlaceFailure{why != nullptr ? "node " + grant.node + " is unusable: " + *why
                                         : "node " + grant.node + " is not known (yet)",
                          false};
    }
    std::vector<std::string> placed;
    for (const kube::ContainerGrant& c : grant.containers) {
      core::Placement placement{n, {}};
      for (const kube::GrantedGpu& g : c.gpus) placement.gpus.push_back(g.index);
      std::sort(placement.gpus.begin(), placement.gpus.end());
      const std::string key = TenantKey(record.info.uid, c.name);
      auto assigned = ledger->Assign(key, GrantedRequest(c, record.info), placement);
      if (!assigned) {
        for (const std::string& k : placed) (void)ledger->Release(k);
        return PlaceFailure{GpusOf(grant) + " of node " + grant.node +
                                " conflict with the ledger: " + assigned.error().message,
                            true};
      }
      placed.push_back(key);
    }
    return std::nullopt;
  }

  void Unplace(const PodRecord& record) override {
    for (const kube::ContainerGrant& c : record.booked->containers) {
      auto released = ledger->Release(TenantKey(record.info.uid, c.name));
      GPUMUX_CHECK(released.has_value(), "a placed grant releases");
    }
  }

  // The counters with the gauges counted now. Built state.
  StateCounters Counters() const {
    StateCounters c = counters;
    const BookingCounters b = bookings.counters();
    c.grant_conflicts += b.grant_conflicts;
    c.unreadable_grants += b.unreadable_grants;
    for (const auto& [uid, record] : bookings.records()) {
      switch (record.state) {
        case BookingState::kNone:
          break;
        case BookingState::kAssumed:
          ++c.grants_assumed;
          break;
        case BookingState::kBinding:
          ++c.grants_binding;
          break;
        case BookingState::kBound:
          ++c.grants_bound;
          break;
        case BookingState::kConflict:
          ++c.grants_in_conflict;
          break;
      }
    }
    c.unusable_nodes = static_cast<std::int64_t>(undecodable.size() + excluded.size());
    return c;
  }

  // Whether all containers of `pod` fit on node n (the engine's plan), and the first
  // container's score. Leaves the ledger as it was.
  NodeVerdict TrialOnNode(const kube::PodInfo& pod, core::NodeIndex n,
                          policy::Explain explain = policy::Explain::kReason) {
    const policy::NodePlan plan = engine->PlanOn(RequestsOf(pod), n, *ledger, explain);
    return VerdictOf(plan);
  }

  static NodeVerdict VerdictOf(const policy::NodePlan& plan) {
    NodeVerdict v;
    switch (plan.outcome) {
      case policy::NodePlan::Outcome::kFits:
        v.score = plan.score;
        return v;
      case policy::NodePlan::Outcome::kDoesNotFit:
        v.kind = NodeVerdict::Kind::kDoesNotFit;
        break;
      case policy::NodePlan::Outcome::kUnresolvable:
        v.kind = NodeVerdict::Kind::kUnresolvable;
        break;
      case policy::NodePlan::Outcome::kDeclined:
        v.kind = NodeVerdict::Kind::kDeclined;
        break;
    }
    v.reason = plan.reason;
    return v;
  }

  static std::vector<core::Request> RequestsOf(const kube::PodInfo& pod) {
    std::vector<core::Request> requests;
    requests.reserve(pod.containers.size());
    for (const kube::ContainerRequest& c : pod.containers) requests.push_back(c.request);
    return requests;
  }

  // The policy's Policy::HoldLimitSeconds (fixed by its name and knobs; read without the lock).
  std::int64_t hold_limit_seconds = 0;
};

core::Result<std::unique_ptr<ClusterState>> ClusterState::Create(ClusterStateOptions options,
                                                                 Clock clock) {
  auto probe = policy::BuiltinPolicies().Make(options.policy, options.context);
  if (!probe) return tl::unexpected(probe.error());
  if (options.grant_ttl_seconds < 1) {
    return MakeError(ErrorCode::kInvalidArgument, "grant TTL must be at least 1 second");
  }
  if (options.gpu_mem_unit_mib < 1 || options.gpu_mem_unit_mib > kube::kMaxGpuMemUnitMib) {
    std::string message = "the gpumux.io/gpu-mem unit must be 1..";
    message += std::to_string(kube::kMaxGpuMemUnitMib);
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
  const std::int64_t hold_limit = (*probe)->HoldLimitSeconds();
  auto state = std::unique_ptr<ClusterState>(
      new ClusterState(std::make_unique<Impl>(std::move(options), std::move(clock))));
  state->impl_->hold_limit_seconds = hold_limit;
  return state;
}

ClusterState::ClusterState(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ClusterState::~ClusterState() = default;

namespace {

bool SameNode(const kube::NodeInfo& a, const kube::NodeInfo& b) {
  const core::NodeSpec& x = a.spec;
  const core::NodeSpec& y = b.spec;
  if (a.gpu_mem_unit_mib != b.gpu_mem_unit_mib || a.gpu_mem_unit_error != b.gpu_mem_unit_error ||
      a.device_plugin_state != b.device_plugin_state) {
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
  std::map<std::string, kube::NodeInfo, std::less<>> fresh;
  std::vector<std::pair<const json*, std::string>> refused;
  for (const json& node : nodes) {
    auto info = kube::DecodeNode(node, impl_->options.defaults);
    if (!info) {
      refused.emplace_back(&node, info.error().message);
      continue;
    }
    std::string name = info->spec.name;
    fresh.insert_or_assign(std::move(name), std::move(*info));
  }
  Impl& s = *impl_;
  Impl::Locked lock(s);
  auto previous = std::move(s.undecodable);
  s.undecodable.clear();
  for (const auto& [node, error] : refused) {
    const std::string name = NodeNameOf(*node);
    if (name.empty()) {
      ++s.counters.unreadable_nodes;
      s.Log(core::LogLevel::kWarn, "ignoring a node object: " + error);
      continue;
    }
    fresh.erase(name);
    auto seen = previous.find(name);
    if (seen == previous.end() || seen->second != error) {
      s.Log(core::LogLevel::kWarn, "node " + name + " cannot be used by gpumux: " + error);
    }
    s.undecodable.insert_or_assign(name, error);
  }
  for (const auto& [name, info] : fresh) s.NoteNodeProblems(info);
  s.nodes = std::move(fresh);
  s.dirty = true;
}

void ClusterState::UpsertNode(const nlohmann::json& node) {
  auto info = kube::DecodeNode(node, impl_->options.defaults);
  Impl& s = *impl_;
  Impl::Locked lock(s);
  if (!info) {
    s.NoteUndecodable(node, info.error().message);
    return;
  }
  if (s.undecodable.erase(info->spec.name) > 0) {
    s.Log(core::LogLevel::kInfo, "node " + info->spec.name + " decodes again");
  }
  auto it = s.nodes.find(info->spec.name);
  if (it != s.nodes.end() && SameNode(it->second, *info)) {
    it->second.unschedulable = info->unschedulable;
    return;  // a status heartbeat: nothing gpumux uses changed
  }
  s.NoteNodeProblems(*info);
  std::string name = info->spec.name;
  s.nodes.insert_or_assign(std::move(name), std::move(*info));
  s.dirty = true;
}

void ClusterState::RemoveNode(std::string_view name) {
  Impl& s = *impl_;
  Impl::Locked lock(s);
  s.undecodable.erase(std::string(name));
  auto it = s.nodes.find(name);
  if (it == s.nodes.end()) return;
  s.nodes.erase(it);
  s.dirty = true;
}

void ClusterState::SetPods(std::span<const nlohmann::json> pods) {
  std::vector<kube::PodInfo> decoded;
  std::vector<std::string> refused;
  decoded.reserve(pods.size());
  for (const json& pod : pods) {
    auto info = kube::DecodePod(pod, impl_->options.gpu_mem_unit_mib);
    if (!info) {
      refused.push_back("ignoring a pod: " + info.error().message);
      continue;
    }
    decoded.push_back(std::move(*info));
  }
  Impl& s = *impl_;
  Impl::Locked lock(s);
  for (std::string& line : refused) s.Log(core::LogLevel::kWarn, std::move(line));
  std::unordered_map<std::string, bool> seen;
  for (const kube::PodInfo& p : decoded) seen.emplace(p.uid, true);
  // Pods gone from the list are gone, except bookings of a bind in flight (the list may
  // predate the pod) or of unknown outcome: those wait for the watch or their TTL.
  std::vector<std::string> gone;
  for (const auto& [uid, record] : s.bookings.records()) {
    if (seen.count(uid) == 0 && record.state != BookingState::kAssumed &&
        record.state != BookingState::kBinding) {
      gone.push_back(uid);
    }
  }
  std::sort(gone.begin(), gone.end());
  for (const std::string& uid : gone) s.bookings.Apply(uid, {BookingEvent::Kind::kRemoved});
  // Bound grants first so that an older, stale assumption never displaces them.
  std::stable_sort(decoded.begin(), decoded.end(),
                   [](const kube::PodInfo& a, const kube::PodInfo& b) {
                     return !a.node_name.empty() && b.node_name.empty();
                   });
  for (const kube::PodInfo& p : decoded) s.bookings.Apply(p.uid, {BookingEvent::Kind::kSeen, &p});
}

void ClusterState::UpsertPod(const nlohmann::json& pod) {
  auto info = kube::DecodePod(pod, impl_->options.gpu_mem_unit_mib);
  Impl& s = *impl_;
  Impl::Locked lock(s);
  if (!info) {
    s.Log(core::LogLevel::kWarn, "ignoring a pod: " + info.error().message);
    return;
  }
  s.bookings.Apply(info->uid, {BookingEvent::Kind::kSeen, &*info});
}

void ClusterState::RemovePod(const nlohmann::json& pod) {
  const json* metadata =
      pod.is_object() && pod.contains("metadata") ? &pod.at("metadata") : nullptr;
  if (metadata == nullptr || !metadata->contains("uid") || !metadata->at("uid").is_string()) return;
  const std::string uid = metadata->at("uid").get<std::string>();
  Impl& s = *impl_;
  Impl::Locked lock(s);
  s.bookings.Apply(uid, {BookingEvent::Kind::kRemoved});
}

void ClusterState::MarkSynced() { impl_->synced.store(true); }
bool ClusterState::synced() const { return impl_->synced.load(); }

std::vector<NodeVerdict> ClusterState::Evaluate(const kube::PodInfo& pod,
                                                std::span<const std::string> names) {
  const std::vector<std::string_view> views(names.begin(), names.end());
  return Evaluate(pod, views, Reasons::kExplain);
}

std::vector<NodeVerdict> ClusterState::Evaluate(const kube::PodInfo& given,
                                                std::span<const std::string_view> names,
                                                Reasons reasons) {
  kube::PodInfo overdue;
  const kube::PodInfo& pod = MarkedOverdue(given, overdue);
  std::vector<NodeVerdict> out(names.size());
  if (!pod.request_error.empty()) {
    for (NodeVerdict& v : out) v = {NodeVerdict::Kind::kUnresolvable, 0, pod.request_error};
    return out;
  }
  if (pod.containers.empty()) return out;  // asks gpumux for nothing: every node passes
  Impl& s = *impl_;
  Impl::Locked lock(s);
  s.EnsureBuilt();
  std::vector<core::NodeIndex> nodes;
  nodes.reserve(names.size());
  for (std::string_view name : names) nodes.push_back(s.name_index.Find(name));
  // A name the cluster model lacks: unusable (with why), or not known (yet): retriable.
  auto unknown = [&](NodeVerdict& v, std::string_view name) {
    if (const std::string* why = s.Unusable(name); why != nullptr) {
      v.kind = NodeVerdict::Kind::kUnresolvable;
      v.reason = "node " + std::string(name) + " cannot be used by gpumux: " + *why;
      return;
    }
    v.kind = NodeVerdict::Kind::kUnknownNode;
    if (reasons == Reasons::kSkip) return;
    v.reason = s.synced.load()
                   ? "node " + std::string(name) +
                         " is not known to gpumux yet (new? its watch may be a moment behind)"
                   : "node " + std::string(name) +
                         " is not known yet: gpumux is waiting for its first sync with the API "
                         "server";
  };
  // Nodes whose device plugin counts gpu-mem in another unit: the kubelet would admit the pod
  // with the wrong amount, so they are out whatever the ledger says.
  // Nodes whose device plugin is starting or stopping: the pod would be rejected by the kubelet
  // (a resource not registered). Unresolvable for this cycle, so that no pod is preempted for
  // it; the requeuer retries the pod when the node's state changes.
  auto units = [&] {
    if (!s.plugin_problems.empty()) {
      for (std::size_t i = 0; i < nodes.size(); ++i) {
        if (nodes[i] < 0) continue;
        const std::string& problem = s.plugin_problems[static_cast<std::size_t>(nodes[i])];
        if (!problem.empty()) out[i] = {NodeVerdict::Kind::kUnresolvable, 0, problem};
      }
    }
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
        const core::Misfit& misfit = s.engine->ExplainMisfit(request, nodes[i]);
        out[i] = {
            misfit.resolvable ? NodeVerdict::Kind::kDoesNotFit : NodeVerdict::Kind::kUnresolvable,
            0, misfit.reason};
      } else if (score == policy::Policy::kDecline) {
        out[i] = {NodeVerdict::Kind::kDeclined, 0, s.engine->DeclineReason()};
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
      out[i] = s.TrialOnNode(
          pod, nodes[i],
          reasons == Reasons::kSkip ? policy::Explain::kNoReason : policy::Explain::kReason);
    }
  }
  units();
  return out;
}

std::optional<kube::PodInfo> ClusterState::FindPod(const std::string& uid) const {
  Impl& s = *impl_;
  Impl::Locked lock(s);
  const PodRecord* record = s.bookings.Find(uid);
  if (record == nullptr) return std::nullopt;
  return record->info;
}

std::optional<BookingView> ClusterState::Booking(const std::string& uid) const {
  Impl& s = *impl_;
  Impl::Locked lock(s);
  s.EnsureBuilt();
  const PodRecord* r = s.bookings.Find(uid);
  if (r == nullptr) return std::nullopt;
  return BookingView{r->state, r->booked, r->in_ledger, r->problem};
}

std::optional<std::int64_t> ClusterState::OverdueInSeconds(const kube::PodInfo& pod) const {
  const std::int64_t limit = impl_->hold_limit_seconds;
  if (limit <= 0 || pod.created_unix_s <= 0) return std::nullopt;
  // A creation time in the future (clock skew, or a hand-written object) waits the limit.
  return std::min(limit, limit - (impl_->clock() - pod.created_unix_s));
}

const kube::PodInfo& ClusterState::MarkedOverdue(const kube::PodInfo& pod,
                                                 kube::PodInfo& copy) const {
  const std::optional<std::int64_t> in = OverdueInSeconds(pod);
  if (!in || *in > 0) return pod;
  copy = pod;
  for (kube::ContainerRequest& c : copy.containers) c.request.overdue = true;
  return copy;
}

core::Result<kube::Grant> ClusterState::Assume(const kube::PodInfo& given,
                                               const std::string& node) {
  kube::PodInfo overdue;
  const kube::PodInfo& pod = MarkedOverdue(given, overdue);
  if (!pod.request_error.empty()) return MakeError(ErrorCode::kInvalidArgument, pod.request_error);
  if (pod.containers.empty()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "pod " + pod.Key() + " asks for no gpumux resource");
  }
  Impl& s = *impl_;
  Impl::Locked lock(s);
  s.EnsureBuilt();
  const core::NodeIndex n = s.cluster->FindNode(node);
  if (n < 0) {
    if (const std::string* why = s.Unusable(node); why != nullptr) {
      return MakeError(ErrorCode::kFailedPrecondition,
                       "node " + node + " cannot be used by gpumux: " + *why);
    }
    return MakeError(ErrorCode::kNotFound, "node " + node + " is not known to gpumux");
  }
  if (const std::string* problem = s.UnitMismatch(pod, n); problem != nullptr) {
    return MakeError(ErrorCode::kFailedPrecondition, "node " + node + ": " + *problem);
  }
  if (const PodRecord* r = s.bookings.Find(pod.uid); r != nullptr) {
    if (r->state == BookingState::kBound || r->state == BookingState::kConflict) {
      return MakeError(ErrorCode::kFailedPrecondition,
                       "pod " + pod.Key() + " is already bound to " + r->booked->node);
    }
    if (r->state == BookingState::kBinding) {
      return MakeError(ErrorCode::kFailedPrecondition,
                       "an earlier bind of pod " + pod.Key() + " to " + r->booked->node +
                           " has an unknown outcome; its GPUs stay booked until the API "
                           "server shows the pod bound, or for at most " +
                           std::to_string(s.options.grant_ttl_seconds) + " s");
    }
  }
  // An earlier assumption of this pod (a retried bind) gives its GPUs back first.
  const std::string uids[] = {pod.uid};
  const std::vector<PodRecord*> previous = s.bookings.Evict(uids, "");
  const policy::NodePlan plan = s.engine->PlanOn(Impl::RequestsOf(pod), n, *s.ledger);
  if (!plan.fits()) {
    s.bookings.Restore(previous);
    return MakeError(ErrorCode::kFailedPrecondition,
                     "container " + pod.containers[plan.failed].container + " no longer fits on " +
                         node + ": " + plan.reason);
  }
  kube::Grant grant;
  grant.node = node;
  grant.policy = s.options.policy;
  grant.assumed_at = s.clock();
  for (std::size_t i = 0; i < pod.containers.size(); ++i) {
    const kube::ContainerRequest& c = pod.containers[i];
    const policy::Decision& d = plan.containers[i];
    kube::ContainerGrant cg;
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
  s.bookings.Apply(pod.uid, {BookingEvent::Kind::kAssumed, &pod, &grant});
  return grant;
}

bool ClusterState::BeginBinding(const std::string& uid, const kube::Grant& grant) {
  Impl& s = *impl_;
  Impl::Locked lock(s);
  s.EnsureBuilt();  // a pending rebuild may drop the booking
  return !s.bookings.Apply(uid, {BookingEvent::Kind::kBindingBegun, nullptr, &grant}).refused;
}

void ClusterState::ConfirmBound(const std::string& uid, const kube::Grant& grant) {
  Impl& s = *impl_;
  Impl::Locked lock(s);
  s.bookings.Apply(uid, {BookingEvent::Kind::kConfirmedBound, nullptr, &grant});
}

void ClusterState::Forget(const std::string& uid, const kube::Grant& grant) {
  Impl& s = *impl_;
  Impl::Locked lock(s);
  s.bookings.Apply(uid, {BookingEvent::Kind::kForgotten, nullptr, &grant});
}

bool ClusterState::FitsWithout(const kube::PodInfo& pod, const std::string& node,
                               std::span<const std::string> victims) {
  if (!pod.request_error.empty()) return false;
  if (pod.containers.empty()) return true;
  Impl& s = *impl_;
  Impl::Locked lock(s);
  s.EnsureBuilt();
  const core::NodeIndex n = s.cluster->FindNode(node);
  if (n < 0 || s.UnitMismatch(pod, n) != nullptr) return false;
  if (!s.plugin_problems.empty() && !s.plugin_problems[static_cast<std::size_t>(n)].empty()) {
    return false;
  }
  const std::vector<PodRecord*> evicted = s.bookings.Evict(victims, node);
  const bool fits =
      s.engine->PlanOn(Impl::RequestsOf(pod), n, *s.ledger, policy::Explain::kNoReason).fits();
  s.bookings.Restore(evicted);
  return fits;
}

int ClusterState::ExpireAssumed() {
  Impl& s = *impl_;
  Impl::Locked lock(s);
  int expired = 0;
  for (const std::string& uid : s.bookings.Overdue()) {
    if (!s.bookings.Apply(uid, {BookingEvent::Kind::kExpired}).refused) ++expired;
  }
  s.counters.grants_expired += expired;
  return expired;
}

nlohmann::json ClusterState::Inspect() const {
  Impl& s = *impl_;
  Impl::Locked lock(s);
  s.EnsureBuilt();
  // Which pod each tenant key belongs to.
  std::unordered_map<std::string, const PodRecord*> by_uid;
  for (const auto& [uid, record] : s.bookings.records()) by_uid.emplace(uid, &record);
  json nodes = json::array();
  for (core::NodeIndex n = 0; n < s.cluster->size(); ++n) {
    const core::NodeView view = s.ledger->Node(n);
    const core::NodeSpec& spec = *view.spec;
    const kube::NodeInfo& info = s.nodes.find(spec.name)->second;
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
             {"state", record != nullptr ? BookingStateName(record->state) : "unknown"}});
      }
    }
    json gpus = json::array();
    for (std::size_t g = 0; g < spec.gpus.size(); ++g) {
      gpus.push_back(
          {{"index", spec.gpus[g].index},
           {"uuid", spec.gpus[g].uuid},
           {"model", spec.gpus[g].model},
           {"memory_mib", spec.gpus[g].memory_mib},
           {"health", spec.gpus[g].health == core::GpuHealth::kHealthy ? "Healthy" : "Unhealthy"},
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
  // Unusable nodes by name (both maps are sorted; a name is in one of them at most).
  std::map<std::string, std::string, std::less<>> unusable(s.undecodable);
  unusable.insert(s.excluded.begin(), s.excluded.end());
  json unusable_nodes = json::array();
  for (const auto& [name, reason] : unusable) {
    unusable_nodes.push_back({{"name", name}, {"reason", reason}});
  }
  json problems = json::array();
  std::vector<const PodRecord*> records;
  for (const auto& [uid, record] : s.bookings.records()) records.push_back(&record);
  std::sort(records.begin(), records.end(),
            [](const PodRecord* a, const PodRecord* b) { return a->info.uid < b->info.uid; });
  for (const PodRecord* r : records) {
    const std::string& problem = !r->problem.empty() ? r->problem : r->info.grant_error;
    if (problem.empty() || r->in_ledger) continue;
    problems.push_back({{"pod", r->info.Key()},
                        {"uid", r->info.uid},
                        {"state", BookingStateName(r->state)},
                        {"problem", problem}});
  }
  const StateCounters c = s.Counters();
  json result = {{"policy", s.options.policy},
                 {"synced", s.synced.load()},
                 {"gpu_mem_unit_mib", s.options.gpu_mem_unit_mib},
                 {"counters",
                  {{"nodes", c.nodes},
                   {"gpus", c.gpus},
                   {"unusable_nodes", c.unusable_nodes},
                   {"unreadable_nodes", c.unreadable_nodes},
                   {"grants_bound", c.grants_bound},
                   {"grants_assumed", c.grants_assumed},
                   {"grants_binding", c.grants_binding},
                   {"grants_in_conflict", c.grants_in_conflict},
                   {"grants_expired", c.grants_expired},
                   {"grant_conflicts", c.grant_conflicts},
                   {"unreadable_grants", c.unreadable_grants},
                   {"rebuilds", c.rebuilds}}},
                 {"nodes", std::move(nodes)},
                 {"unusable_nodes", std::move(unusable_nodes)},
                 {"grants_not_in_ledger", std::move(problems)}};
  if (s.profile != nullptr) {
    result["profile"] = {{"name", s.profile->name},
                         {"classes", s.profile->classes.size()},
                         {"measured_sets", s.profile->measured.size()},
                         {"observed_sets", c.observed_sets},
                         {"swaps", c.profile_swaps},
                         {"observation_read_failures", c.observation_read_failures}};
  }
  return result;
}

void ClusterState::SetProfile(std::shared_ptr<const policy::WorkloadProfile> profile,
                              std::size_t observed_sets) {
  Impl& s = *impl_;
  Impl::Locked lock(s);
  s.UseProfile(std::move(profile));
  s.counters.observed_sets = static_cast<std::int64_t>(observed_sets);
  ++s.counters.profile_swaps;
}

void ClusterState::CountObservationReadFailure() {
  Impl& s = *impl_;
  Impl::Locked lock(s);
  ++s.counters.observation_read_failures;
}

StateCounters ClusterState::counters() const {
  Impl& s = *impl_;
  Impl::Locked lock(s);
  s.EnsureBuilt();
  return s.Counters();
}

const std::string& ClusterState::policy_name() const { return impl_->options.policy; }

std::int64_t ClusterState::gpu_mem_unit_mib() const { return impl_->options.gpu_mem_unit_mib; }

std::int64_t ClusterState::Now() const { return impl_->clock(); }

bool ClusterState::PodAwaitsDevices(const std::string& uid) const {
  Impl& s = *impl_;
  Impl::Locked lock(s);
  const PodRecord* record = s.bookings.Find(uid);
  if (record == nullptr) return false;
  const kube::PodInfo& p = record->info;
  return !p.finished() && !p.deleting && p.phase != "Running";
}

}  // namespace gpumux::sched
