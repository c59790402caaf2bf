#include "gpumux/sched/cluster_state.h"
#include "src/sched/cluster_state_impl.h"

namespace gpumux::sched {

using core::ErrorCode;
using core::MakeError;
using nlohmann::json;

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

StateSnapshot ClusterState::Snapshot() const {
  Impl& s = *impl_;
  Impl::Locked lock(s);
  s.EnsureBuilt();
  StateSnapshot out;
  out.policy = s.options.policy;
  out.synced = s.synced.load();
  out.gpu_mem_unit_mib = s.options.gpu_mem_unit_mib;
  out.counters = s.Counters();
  for (core::NodeIndex n = 0; n < s.cluster->size(); ++n) out.nodes.push_back(s.NodeOf(n));
  // Unusable nodes by name (both maps are sorted; a name is in one of them at most).
  std::map<std::string, std::string, std::less<>> unusable(s.undecodable);
  unusable.insert(s.excluded.begin(), s.excluded.end());
  for (const auto& [name, reason] : unusable) out.unusable_nodes.push_back({name, reason});
  std::vector<const PodRecord*> records;
  for (const auto& [uid, record] : s.bookings.records()) records.push_back(&record);
  std::sort(records.begin(), records.end(),
            [](const PodRecord* a, const PodRecord* b) { return a->info.uid < b->info.uid; });
  for (const PodRecord* r : records) {
    const std::string& problem = !r->problem.empty() ? r->problem : r->info.grant_error;
    if (problem.empty() || r->in_ledger) continue;
    out.grants_not_in_ledger.push_back(
        {r->info.Key(), r->info.uid, std::string(BookingStateName(r->state)), problem});
  }
  if (s.profile != nullptr) {
    out.profile =
        ProfileSnapshot{s.profile->name, s.profile->classes.size(), s.profile->measured.size()};
  }
  return out;
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

}  // namespace gpumux::sched
