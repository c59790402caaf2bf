// ClusterState's state (internal to sched): shared by cluster_state.cc (creation and the
// verbs) and cluster_state_feed.cc (what the watch feeds in, and the snapshot).
#pragma once

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <numeric>
#include <unordered_map>

#include "gpumux/core/check.h"
#include "gpumux/core/explain.h"
#include "gpumux/core/ledger.h"
#include "gpumux/core/rng.h"
#include "gpumux/kube/node_lock.h"
#include "gpumux/policy/engine.h"
#include "gpumux/sched/cluster_state.h"
#include "src/sched/cluster_model.h"

namespace gpumux::sched {

using detail::BuildClusterModel;
using detail::GrantedRequest;
using detail::NameIndex;
using detail::NodeNameOf;
using detail::SameNode;
using detail::TenantJobs;
using detail::TenantKey;

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
  void NoteUndecodable(const nlohmann::json& node, const std::string& error) {
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

  // The cluster model of `nodes` (BuildClusterModel), leaving out each node it cannot take.
  core::Cluster BuildCluster(std::map<std::string, std::string, std::less<>>& out) {
    return BuildClusterModel(
        nodes, out, [this](std::string line) { Log(core::LogLevel::kError, std::move(line)); });
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

  // Node n of the built cluster with its GPUs and their tenants (Snapshot).
  NodeSnapshot NodeOf(core::NodeIndex n) const {
    const core::NodeView view = ledger->Node(n);
    const core::NodeSpec& spec = *view.spec;
    const kube::NodeInfo& info = nodes.find(spec.name)->second;
    NodeSnapshot node;
    node.name = spec.name;
    for (std::size_t g = 0; g < spec.gpus.size(); ++g) {
      const core::GpuSpec& gpu = spec.gpus[g];
      node.gpus.push_back(
          {gpu.index,
           gpu.uuid,
           gpu.model,
           gpu.memory_mib,
           gpu.health == core::GpuHealth::kHealthy,
           view.gpu_free_milli[g],
           view.gpu_free_mib[g],
           {},
           g < info.enforcement.size() ? info.enforcement[g] : kube::EnforcementFromJson(nullptr)});
    }
    for (core::TenantIndex t : view.tenants) {
      const core::Tenant& tenant = ledger->tenant(t);
      const std::string uid = tenant.key.substr(0, tenant.key.find('/'));
      const PodRecord* record = bookings.Find(uid);
      const TenantSnapshot entry{record != nullptr ? record->info.Key() : uid,
                                 uid,
                                 tenant.key.substr(tenant.key.find('/') + 1),
                                 tenant.request.gpu_milli,
                                 tenant.request.gpu_mib,
                                 tenant.request.sharing == core::GpuSharing::kExclusive,
                                 record != nullptr ? std::string(BookingStateName(record->state))
                                                   : std::string("unknown")};
      for (int g : tenant.placement.gpus)
        node.gpus[static_cast<std::size_t>(g)].tenants.push_back(entry);
    }
    node.gpus_from_annotation = info.gpus_from_annotation;
    node.gpus_error = info.gpus_error;
    node.unschedulable = info.unschedulable;
    node.gpu_mem_unit_mib = info.gpu_mem_unit_mib;
    node.gpu_mem_unit_error = info.gpu_mem_unit_error;
    return node;
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

  // Verdicts for a one-container pod on `nodes` (the known ones; -1 is left for UnknownNode)
  // from the engine's scores, memoised per node; a reason only when `explain` asks for one.
  void ScoreOne(const core::Request& request, std::span<const core::NodeIndex> targets,
                policy::Explain explain, std::vector<NodeVerdict>& out) {
    std::vector<core::NodeIndex> known;
    known.reserve(targets.size());
    for (core::NodeIndex n : targets) {
      if (n >= 0) known.push_back(n);
    }
    const std::vector<std::int64_t> scores = engine->ScoreNodes(request, known);
    std::size_t k = 0;
    for (std::size_t i = 0; i < targets.size(); ++i) {
      if (targets[i] < 0) continue;
      const std::int64_t score = scores[k++];
      if (explain == policy::Explain::kNoReason && score < 0 &&
          (score == policy::Engine::kNoFit || score == policy::Policy::kDecline)) {
        out[i].kind = score == policy::Engine::kNoFit ? NodeVerdict::Kind::kDoesNotFit
                                                      : NodeVerdict::Kind::kDeclined;
      } else if (score == policy::Engine::kNoFit) {
        const core::Misfit& misfit = engine->ExplainMisfit(request, targets[i]);
        out[i] = {
            misfit.resolvable ? NodeVerdict::Kind::kDoesNotFit : NodeVerdict::Kind::kUnresolvable,
            0, misfit.reason};
      } else if (score == policy::Policy::kDecline) {
        out[i] = {NodeVerdict::Kind::kDeclined, 0, engine->DeclineReason()};
      } else {
        out[i].score = score;
      }
    }
  }

  // A name the cluster model lacks: unusable (with why), or not known (yet): retriable.
  NodeVerdict UnknownNode(std::string_view name, policy::Explain explain) const {
    NodeVerdict v;
    if (const std::string* why = Unusable(name); why != nullptr) {
      v.kind = NodeVerdict::Kind::kUnresolvable;
      v.reason = "node " + std::string(name) + " cannot be used by gpumux: " + *why;
      return v;
    }
    v.kind = NodeVerdict::Kind::kUnknownNode;
    if (explain == policy::Explain::kNoReason) return v;
    v.reason = synced.load()
                   ? "node " + std::string(name) +
                         " is not known to gpumux yet (new? its watch may be a moment behind)"
                   : "node " + std::string(name) +
                         " is not known yet: gpumux is waiting for its first sync with the API "
                         "server";
    return v;
  }

  // Nodes whose device plugin counts gpu-mem in another unit: the kubelet would admit the pod
  // with the wrong amount, so they are out whatever the ledger says. Nodes whose device plugin
  // is starting or stopping: the pod would be rejected by the kubelet (a resource not
  // registered). Unresolvable for this cycle, so that no pod is preempted for it; the requeuer
  // retries the pod when the node's state changes.
  void MarkNodeProblems(const kube::PodInfo& pod, std::span<const core::NodeIndex> targets,
                        std::vector<NodeVerdict>& out) const {
    if (!plugin_problems.empty()) {
      for (std::size_t i = 0; i < targets.size(); ++i) {
        if (targets[i] < 0) continue;
        const std::string& problem = plugin_problems[static_cast<std::size_t>(targets[i])];
        if (!problem.empty()) out[i] = {NodeVerdict::Kind::kUnresolvable, 0, problem};
      }
    }
    if (!any_unit_problem) return;
    for (std::size_t i = 0; i < targets.size(); ++i) {
      if (const std::string* problem = UnitMismatch(pod, targets[i]); problem != nullptr) {
        out[i] = {NodeVerdict::Kind::kUnresolvable, 0, *problem};
      }
    }
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

}  // namespace gpumux::sched
