#include "gpumux/policy/interference_aware.h"

#include <algorithm>
#include <limits>

#include "gpumux/policy/tuner.h"

namespace gpumux::policy {

const std::vector<int>& InterferenceAwarePolicy::Tuned(const std::vector<Job>& jobs) {
  std::vector<std::pair<const ClassProfile*, core::MiB>> key;
  for (const Job& j : jobs) key.emplace_back(j.cls, j.memory_limit);
  auto it = tuned_.find(key);
  if (it != tuned_.end()) return it->second;
  std::vector<const ClassProfile*> classes;
  std::vector<std::vector<int>> candidates;
  std::vector<int> start;
  for (const Job& j : jobs) {
    classes.push_back(j.cls);
    candidates.push_back(BatchCandidates(*j.cls, j.memory_limit));
    if (candidates.back().empty()) candidates.back().push_back(j.cls->default_batch);
    start.push_back(std::clamp(j.cls->default_batch, candidates.back().front(),
                               candidates.back().back()));
  }
  return tuned_.emplace(key, OptimiseBatches(model(), classes, candidates, start)).first->second;
}

std::optional<double> InterferenceAwarePolicy::CompletionSum(std::vector<Job> jobs) {
  for (const Job& j : jobs) {
    if (j.cls == nullptr) return std::nullopt;
  }
  double now = 0;
  double sum = 0;
  std::vector<Member> members;
  std::vector<double> rate;
  while (!jobs.empty()) {
    const std::vector<int>& batches = Tuned(jobs);
    members.clear();
    for (std::size_t k = 0; k < jobs.size(); ++k) members.push_back({jobs[k].cls, batches[k]});
    rate.assign(jobs.size(), 0.0);
    Goodput(model(), members, rate);
    std::size_t first = 0;
    for (std::size_t k = 1; k < jobs.size(); ++k) {
      if (jobs[k].remaining / rate[k] < jobs[first].remaining / rate[first]) first = k;
    }
    const double dt = jobs[first].remaining / rate[first];
    now += dt;
    sum += now;
    for (std::size_t k = 0; k < jobs.size(); ++k) jobs[k].remaining -= rate[k] * dt;
    jobs.erase(jobs.begin() + static_cast<long>(first));
  }
  return sum;
}

void InterferenceAwarePolicy::BeginCycle(const Cycle& cycle) {
  drain_s_.clear();
  if (jobs() == nullptr) return;
  const core::Cluster& cluster = cycle.ledger.cluster();
  for (core::NodeIndex n = 0; n < cluster.size(); ++n) {
    const core::NodeView node = cycle.ledger.Node(n);
    if (node.tenants.empty()) continue;
    for (const auto& tenants : TenantsPerGpu(cycle.ledger, node)) {
      if (tenants.empty()) continue;
      double drain = 0;
      for (core::TenantIndex t : tenants) {
        const auto job = jobs()->Job(t);
        if (!job || job->observed_rate <= 0) continue;
        drain = std::max(drain, job->remaining_work / job->observed_rate);
      }
      drain_s_.push_back(drain);
    }
  }
  std::sort(drain_s_.begin(), drain_s_.end());
}

std::optional<double> InterferenceAwarePolicy::GpuScore(const Cycle& cycle, const GpuGroup& group,
                                                        const Member& newcomer) {
  if (group.tuning) return std::nullopt;
  std::vector<Job> before;
  for (const JobSnapshot& j : group.jobs) before.push_back({j.cls, j.memory_limit, j.remaining_work});
  const Job job{newcomer.cls, cycle.request.gpu_mib,
                newcomer.cls != nullptr ? newcomer.cls->WorkSamples() : 0.0};
  std::vector<Job> after = before;
  after.push_back(job);
  const std::optional<double> t_before = CompletionSum(before);
  const std::optional<double> t_after = CompletionSum(after);
  if (!t_before || !t_after) {
    // Something unknown: no prediction, so prefer emptier GPUs and never wait.
    return -static_cast<double>(group.members.size());
  }
  const double cost = *t_after - *t_before;
  if (!group.members.empty() && jobs() != nullptr) {
    const auto ahead = static_cast<std::size_t>(std::max(jobs()->QueuedAhead(), 0));
    if (ahead < drain_s_.size()) {
      const double wait = drain_s_[ahead] + *CompletionSum({job});
      if (cost > wait) return std::nullopt;
    }
  }
  return -cost;
}

}  // namespace gpumux::policy
