#include "gpumux/policy/interference_aware.h"

#include <algorithm>
#include <limits>
#include <tuple>

#include "gpumux/policy/tuner.h"

namespace gpumux::policy {

namespace {

double KnobOr(const PolicyContext& context, std::string_view name, double fallback) {
  return context.knobs.count(name) != 0 ? context.knob(name) : fallback;
}

}  // namespace

InterferenceAwarePolicy::InterferenceAwarePolicy(const PolicyContext& context)
    : GpuScoringPolicy(context),
      calibrate_(KnobOr(context, "calibrate", kDefaultCalibrate) != 0),
      min_gain_(KnobOr(context, "min-gain", kDefaultMinGain)),
      calibrated_(model()),
      hedged_(calibrate_ ? static_cast<const InterferenceModel&>(calibrated_) : model(),
              kValidatedMembers, KnobOr(context, "beyond-pairs", kDefaultBeyondPairs),
              static_cast<HedgeLearning>(KnobOr(context, "hedge-learn", kDefaultHedgeLearn))),
      model_version_(hedged_.Version()),
      saturated_busy_(KnobOr(context, "saturated-busy", kDefaultSaturatedBusy)) {}

void InterferenceAwarePolicy::ReportGpu(const GpuGroup& group,
                                        std::span<const core::TenantIndex> tenants) {
  if ((!calibrate_ && !hedged_.Learns()) || group.tuning || group.members.size() < 2) return;
  std::vector<double> reported(group.members.size(), 0.0);
  std::uint64_t key = 1469598103934665603ULL;  // FNV-1a over the tenants and batch sizes
  for (std::size_t k = 0; k < group.jobs.size(); ++k) {
    const JobSnapshot& j = group.jobs[k];
    // Only a report whose window saw this very set measures it.
    if (j.cls != nullptr && j.batch > 0 && j.observed_step_s > 0 && j.observed_steady) {
      reported[k] = j.observed_step_s / j.cls->StepSeconds(j.batch);
    }
    for (std::uint64_t v :
         {static_cast<std::uint64_t>(tenants[k]), static_cast<std::uint64_t>(j.batch)}) {
      key = (key ^ v) * 1099511628211ULL;
    }
  }
  if (calibrate_) calibrated_.Report(key, group.members, reported);
  hedged_.Report(key, group.members, reported);
}

double InterferenceAwarePolicy::Throughput(const std::vector<Member>& members) const {
  std::vector<double> s(members.size());
  belief().Predict(members, s);
  double total = 0;
  for (double x : s) total += 1.0 / x;
  return total;
}

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
    start.push_back(
        std::clamp(j.cls->default_batch, candidates.back().front(), candidates.back().back()));
  }
  return tuned_.emplace(key, OptimiseBatches(belief(), classes, candidates, start)).first->second;
}

std::optional<double> InterferenceAwarePolicy::CompletionSum(std::vector<Job> jobs) {
  for (const Job& j : jobs) {
    if (j.cls == nullptr) return std::nullopt;
  }
  // A scheduling pass asks the same sums for many queued jobs: remember them (the key holds
  // every input, so a hit is exact).
  std::vector<std::tuple<const ClassProfile*, core::MiB, double>> key;
  for (const Job& j : jobs) key.emplace_back(j.cls, j.memory_limit, j.remaining);
  if (auto it = sums_.find(key); it != sums_.end()) return it->second;
  if (sums_.size() > 100000) sums_.clear();
  const double sum = Evolve(std::move(jobs));
  sums_.emplace(std::move(key), sum);
  return sum;
}

double InterferenceAwarePolicy::Evolve(std::vector<Job> jobs) {
  double now = 0;
  double sum = 0;
  std::vector<Member> members;
  std::vector<double> rate;
  while (!jobs.empty()) {
    const std::vector<int>& batches = Tuned(jobs);
    members.clear();
    for (std::size_t k = 0; k < jobs.size(); ++k) members.push_back({jobs[k].cls, batches[k]});
    rate.assign(jobs.size(), 0.0);
    Goodput(belief(), members, rate);
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
  if (jobs() != nullptr) ReadGpus(cycle);
  if (hedged_.Version() != model_version_) {  // the model learned: its old answers are stale
    sums_.clear();
    tuned_.clear();
    model_version_ = hedged_.Version();
  }
}

void InterferenceAwarePolicy::ReadGpus(const Cycle& cycle) {
  const core::Cluster& cluster = cycle.ledger.cluster();
  for (core::NodeIndex n = 0; n < cluster.size(); ++n) {
    const core::NodeView node = cycle.ledger.Node(n);
    if (node.tenants.empty()) continue;
    for (const auto& tenants : TenantsPerGpu(cycle.ledger, node)) {
      if (tenants.empty()) continue;
      // A job without an observed rate yet (just placed, or pausing to change its batch)
      // drains at its predicted rate on this GPU.
      const GpuGroup group = GroupOf(jobs(), tenants);
      ReportGpu(group, tenants);
      std::vector<double> predicted;
      for (const JobSnapshot& job : group.jobs) {
        if (ObservedRate(job) <= 0 && predicted.empty()) {
          predicted.resize(group.members.size());
          Goodput(belief(), group.members, predicted);
        }
      }
      double drain = 0;
      for (std::size_t k = 0; k < group.jobs.size(); ++k) {
        const JobSnapshot& job = group.jobs[k];
        const double observed = ObservedRate(job);
        const double rate = observed > 0 ? observed : predicted[k];
        const double remaining = EstimatedRemainingWork(job, options().work_spread);
        if (rate > 0) drain = std::max(drain, remaining / rate);
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
  for (const JobSnapshot& j : group.jobs) {
    before.push_back({j.cls, j.memory_limit, EstimatedRemainingWork(j, options().work_spread)});
  }
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
  if (!group.members.empty()) {
    // A saturated GPU takes no one else: the cost below sees only the jobs involved, not the
    // GPU time a newcomer would take from better uses (measured in the header).
    double busy = 0;
    for (const Member& m : group.members) busy += m.cls->GpuBusy(m.batch);
    if (busy >= saturated_busy_) return std::nullopt;
    if (min_gain_ > 0 && newcomer.cls != nullptr) {
      std::vector<Member> with = group.members;
      with.push_back({newcomer.cls, newcomer.cls->default_batch});
      if (Throughput(with) - Throughput(group.members) < min_gain_) return std::nullopt;
    }
  }
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
