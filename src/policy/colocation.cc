#include "gpumux/policy/colocation.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "gpumux/policy/gpu_scoring.h"

namespace gpumux::policy {

std::vector<std::vector<core::TenantIndex>> TenantsPerGpu(const core::Ledger& ledger,
                                                          const core::NodeView& node) {
  std::vector<std::vector<core::TenantIndex>> out(static_cast<std::size_t>(node.gpu_count()));
  for (core::TenantIndex t : node.tenants) {
    for (int g : ledger.tenant(t).placement.gpus) out[static_cast<std::size_t>(g)].push_back(t);
  }
  return out;
}

GpuGroup GroupOf(const JobView* view, std::span<const core::TenantIndex> tenants) {
  GpuGroup group;
  for (core::TenantIndex t : tenants) {
    std::optional<JobSnapshot> job = view != nullptr ? view->Job(t) : std::nullopt;
    if (!job) job = JobSnapshot{};
    group.members.push_back({job->cls, job->batch, job->noise_scale});
    group.tuning = group.tuning || job->tuning;
    group.jobs.push_back(*job);
  }
  return group;
}

double ObservedRate(const JobSnapshot& job) {
  if (job.cls == nullptr || job.batch <= 0 || !(job.observed_step_s > 0)) return 0;
  return static_cast<double>(job.batch) / job.observed_step_s *
         job.cls->Efficiency(job.batch, job.noise_scale);
}

namespace {

// Mills ratio R(x) = Q(x) / phi(x) (Q the normal tail, phi the density): from erfc where phi
// cannot underflow, else by its continued fraction 1 / (x + 1 / (x + 2 / (x + 3 / ...))).
double MillsRatio(double x) {
  constexpr double kSqrt2 = 1.4142135623730951;
  constexpr double kSqrt2Pi = 2.5066282746310002;
  if (x < 3) return 0.5 * std::erfc(x / kSqrt2) * kSqrt2Pi * std::exp(0.5 * x * x);
  double t = x;
  for (int k = 200; k >= 1; --k) t = x + k / t;
  return 1.0 / t;
}

}  // namespace

double EstimatedRemainingWork(double prior_mean, double spread, double done) {
  if (!(prior_mean > 0)) return 0;
  if (!(done > 0)) return prior_mean;
  if (!(spread > 0)) return std::max(prior_mean - done, 0.05 * prior_mean);
  // W = prior * exp(spread Z - spread^2 / 2). With mu = ln prior - spread^2 / 2 and
  // a = (ln done - mu) / spread: E[W | W > done] = prior Q(a - spread) / Q(a), and since
  // prior exp(a spread - spread^2 / 2) = done this is done R(a - spread) / R(a) with the Mills
  // ratio R, which stays exact far in the tail (where Q underflows).
  const double mu = std::log(prior_mean) - 0.5 * spread * spread;
  const double a = (std::log(done) - mu) / spread;
  if (a < 3) {
    const double tail = std::erfc(a / std::sqrt(2.0));
    const double above = std::erfc((a - spread) / std::sqrt(2.0));
    return std::max(prior_mean * above / tail - done, 0.0);
  }
  return std::max(done * (MillsRatio(a - spread) / MillsRatio(a) - 1.0), 0.0);
}

double EstimatedRemainingWork(const JobSnapshot& job, double spread) {
  if (job.cls == nullptr) return 0;
  return EstimatedRemainingWork(job.cls->WorkSamples(), spread, job.work_done);
}

namespace {

// A model for when the context has none: an empty profile, so every class is unknown and
// predicted GPU-bound.
const InterferenceModel& FallbackModel() {
  static const WorkloadProfile empty;
  static const ProfileInterference model(empty);
  return model;
}

}  // namespace

GpuScoringPolicy::GpuScoringPolicy(const PolicyContext& context)
    : profile_(context.profile),
      model_(context.interference != nullptr ? context.interference : &FallbackModel()),
      jobs_(context.jobs),
      options_(context.colocation) {}

const ClassProfile* GpuScoringPolicy::ClassOf(const core::Request& r) const {
  return profile_ != nullptr ? profile_->Find(r.workload_class) : nullptr;
}

std::vector<std::optional<double>> GpuScoringPolicy::GpuScores(const Cycle& cycle,
                                                               const core::NodeView& node) {
  std::vector<std::optional<double>> scores(static_cast<std::size_t>(node.gpu_count()));
  const auto per_gpu = TenantsPerGpu(cycle.ledger, node);
  const ClassProfile* cls = ClassOf(cycle.request);
  const Member newcomer{cls, cls != nullptr ? cls->default_batch : 0};
  for (int i = 0; i < node.gpu_count(); ++i) {
    const auto gi = static_cast<std::size_t>(i);
    if (!core::GpuAdmits(node, i, cycle.request, cycle.models)) continue;
    if (static_cast<int>(per_gpu[gi].size()) >= options_.max_jobs_per_gpu) continue;
    scores[gi] = GpuScore(cycle, GroupOf(jobs_, per_gpu[gi]), newcomer);
  }
  return scores;
}

std::int64_t GpuScoringPolicy::Score(const Cycle& cycle, const core::NodeView& node) {
  const auto scores = GpuScores(cycle, node);
  std::vector<double> ok;
  for (const auto& s : scores) {
    if (s) ok.push_back(*s);
  }
  const auto need = static_cast<std::size_t>(std::max(cycle.request.gpu_count, 1));
  if (cycle.request.gpu_count == 0) return 0;  // CPU-only: nothing to judge
  if (ok.size() < need) return kDecline;
  // The node is worth the sum of the GPUs it would give (the best `need` of them).
  std::sort(ok.begin(), ok.end(), std::greater<>());
  const double total = std::accumulate(ok.begin(), ok.begin() + static_cast<long>(need), 0.0);
  const double scaled = std::clamp(total * 1e6, -9e18, 9e18);
  return static_cast<std::int64_t>(std::llround(scaled));
}

std::vector<int> GpuScoringPolicy::ChooseGpus(const Cycle& cycle, const core::NodeView& node) {
  const auto scores = GpuScores(cycle, node);
  std::vector<int> order;
  for (int i = 0; i < node.gpu_count(); ++i) {
    if (scores[static_cast<std::size_t>(i)]) order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return *scores[static_cast<std::size_t>(a)] > *scores[static_cast<std::size_t>(b)];
  });
  order.resize(std::min(order.size(), static_cast<std::size_t>(cycle.request.gpu_count)));
  std::sort(order.begin(), order.end());
  return order;
}

}  // namespace gpumux::policy
