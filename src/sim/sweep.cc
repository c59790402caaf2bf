#include "gpumux/sim/sweep.h"

#include "gpumux/policy/registry.h"
#include "src/sim/parallel.h"

namespace gpumux::sim {

core::Result<std::vector<ExperimentResult>> RunSweep(const Workload& workload,
                                                     const SweepConfig& config,
                                                     const ProgressFn& progress) {
  for (const auto& p : config.policies) {
    if (policy::BuiltinPolicies().Find(p) == nullptr) {
      auto err = policy::BuiltinPolicies().Make(p, {});
      return tl::unexpected(err.error());
    }
  }
  if (config.seeds.empty()) {
    return core::MakeError(core::ErrorCode::kInvalidArgument, "no seeds given");
  }
  if (!(config.load > 0)) {
    return core::MakeError(core::ErrorCode::kInvalidArgument, "load must be positive");
  }

  // One arrival plan per seed, shared read-only by that seed's experiments.
  std::vector<ArrivalPlan> plans;
  if (config.replay_dir) {
    auto plan = LoadReplay(*config.replay_dir, workload.pods, workload.cluster);
    if (!plan) return tl::unexpected(plan.error());
    plans.push_back(std::move(*plan));
  } else {
    for (std::uint64_t seed : config.seeds) {
      plans.push_back(MakeStudyArrivals(workload.pods, workload.cluster, seed, config.load));
    }
  }
  struct Job {
    std::size_t policy;
    std::size_t seed;
  };
  std::vector<Job> jobs;
  for (std::size_t p = 0; p < config.policies.size(); ++p) {
    for (std::size_t s = 0; s < (config.replay_dir ? 1 : config.seeds.size()); ++s) {
      jobs.push_back({p, s});
    }
  }
  std::vector<std::optional<core::Result<ExperimentResult>>> results(jobs.size());
  RunParallel(
      jobs.size(), config.threads,
      [&](std::size_t j) {
        const Job& job = jobs[j];
        results[j] = RunExperiment(workload, plans[job.seed], config.policies[job.policy],
                                   config.seeds[job.seed], config.load, config.experiment);
      },
      [&](std::size_t j, std::size_t done) {
        if (progress && *results[j]) progress(**results[j], done, jobs.size());
      });

  std::vector<ExperimentResult> out;
  for (auto& r : results) {
    if (!*r) return tl::unexpected(r->error());
    out.push_back(std::move(**r));
  }
  return out;
}

}  // namespace gpumux::sim
