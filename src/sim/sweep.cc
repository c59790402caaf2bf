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
  if (config.seeds.size() > kMaxSweepSeeds) {
    return core::MakeError(core::ErrorCode::kInvalidArgument,
                           std::to_string(config.seeds.size()) + " seeds, more than the " +
                               std::to_string(kMaxSweepSeeds) + " a sweep may run");
  }
  if (!(config.load > 0) || !(config.load <= kMaxLoad)) {
    return core::MakeError(core::ErrorCode::kInvalidArgument,
                           "load must be positive and at most " +
                               std::to_string(static_cast<int>(kMaxLoad)) + " (load " +
                               std::to_string(config.load) + ")");
  }

  // A replay's plan is shared read-only by its experiments; generated plans are only counted
  // here (refused up front when too large) and built by each experiment.
  std::optional<ArrivalPlan> replay;
  if (config.replay_dir) {
    auto plan = LoadReplay(*config.replay_dir, workload.pods, workload.cluster, config.limit);
    if (!plan) return tl::unexpected(plan.error());
    replay = std::move(*plan);
  } else {
    for (std::uint64_t seed : config.seeds) {
      auto n = CountStudyArrivals(workload.pods, workload.cluster, seed, config.load, config.limit);
      if (!n) return tl::unexpected(n.error());
    }
  }
  struct Job {
    std::size_t policy;
    std::size_t seed;
  };
  std::vector<Job> jobs;
  for (std::size_t p = 0; p < config.policies.size(); ++p) {
    for (std::size_t s = 0; s < (replay ? 1 : config.seeds.size()); ++s) {
      jobs.push_back({p, s});
    }
  }
  std::vector<std::optional<core::Result<ExperimentResult>>> results(jobs.size());
  RunParallel(
      jobs.size(), config.threads,
      [&](std::size_t j) {
        const Job& job = jobs[j];
        const std::uint64_t seed = config.seeds[job.seed];
        if (replay) {
          results[j] = RunExperiment(workload, *replay, config.policies[job.policy], seed,
                                     config.load, config.experiment);
          return;
        }
        auto plan =
            MakeStudyArrivals(workload.pods, workload.cluster, seed, config.load, config.limit);
        if (!plan) {
          results[j] = tl::unexpected(plan.error());
          return;
        }
        results[j] = RunExperiment(workload, *plan, config.policies[job.policy], seed, config.load,
                                   config.experiment);
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
