#include "gpumux/sched/cluster_state.h"

#include "src/sched/cluster_state_impl.h"

namespace gpumux::sched {

using core::ErrorCode;
using core::MakeError;
using nlohmann::json;

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
  const kube::PodInfo& pod = Adjusted(given, overdue);
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
  const policy::Explain explain =
      reasons == Reasons::kSkip ? policy::Explain::kNoReason : policy::Explain::kReason;
  if (pod.containers.size() == 1) {
    s.ScoreOne(pod.containers[0].request, nodes, explain, out);
  } else {
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      if (nodes[i] >= 0) out[i] = s.TrialOnNode(pod, nodes[i], explain);
    }
  }
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i] < 0) {
      out[i] = s.UnknownNode(names[i], explain);
    } else {
      out[i].rank = nodes[i];  // the engine's ranks are the nodes' indices (Impl::BuildPolicy)
    }
  }
  s.MarkNodeProblems(pod, nodes, out);
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

const kube::PodInfo& ClusterState::Adjusted(const kube::PodInfo& pod, kube::PodInfo& copy) const {
  const std::optional<std::int64_t> in = OverdueInSeconds(pod);
  const bool overdue = in && *in <= 0;
  const core::Enforcement floor = impl_->options.required_enforcement;
  bool required_any = floor != core::kEnforcesNothing;
  for (const kube::ContainerRequest& c : pod.containers) {
    required_any = required_any || c.request.required_enforcement != core::kEnforcesNothing;
  }
  if (!overdue && !required_any) return pod;
  copy = pod;
  for (kube::ContainerRequest& c : copy.containers) {
    c.request.overdue = c.request.overdue || overdue;
    c.request.required_enforcement |= floor;
    const core::Enforcement required = c.request.required_enforcement;
    if (c.request.sharing != core::GpuSharing::kShared || !copy.request_error.empty()) continue;
    const char* missing = nullptr;
    if ((required & core::kEnforcesMemory) != 0 && c.request.gpu_mib == 0) {
      missing = "gpumux.io/gpu-mem";
    } else if ((required & core::kEnforcesCompute) != 0 && !c.milli_requested) {
      missing = "gpumux.io/gpu-milli";
    }
    if (missing != nullptr) {
      copy.request_error = "container \"" + c.container + "\" shares a GPU without asking for " +
                           missing + ", but " + kube::RequiredEnforcementName(required) +
                           " limits are required (the extender's --require-enforcement or the "
                           "pod's " +
                           std::string(kube::kAnnotationRequireEnforcement) +
                           "): nothing would hold it to a limit; ask for " + missing;
    }
  }
  if (!copy.request_error.empty()) copy.containers.clear();
  return copy;
}

core::Result<kube::Grant> ClusterState::Assume(const kube::PodInfo& given,
                                               const std::string& node) {
  kube::PodInfo overdue;
  const kube::PodInfo& pod = Adjusted(given, overdue);
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

bool ClusterState::FitsWithout(const kube::PodInfo& given, const std::string& node,
                               std::span<const std::string> victims) {
  // The filter's rule for a pod held past its limit (fgd-sat-reserve places it wherever it
  // fits): preempt must not find room the filter would refuse, nor refuse room it would take.
  kube::PodInfo overdue;
  const kube::PodInfo& pod = Adjusted(given, overdue);
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
