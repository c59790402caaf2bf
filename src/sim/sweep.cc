#include "gpumux/sim/sweep.h"

#include <memory>
#include <mutex>

#include "gpumux/policy/registry.h"
#include "src/sim/parallel.h"

namespace gpumux::sim {
namespace {

// One seed's arrival plan, built by the first experiment that needs it and dropped when the
// last one is done, so that a sweep holds about one plan per thread, not one per seed.
struct SharedPlan {
  std::mutex mu;
  std::shared_ptr<const ArrivalPlan> plan;
  std::size_t users_left = 0;
};

// The sweep's own arguments (a workload's are checked where they are loaded).
core::Result<void> CheckSweepConfig(const SweepConfig& config) {
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
  return {};
}

}  // namespace

core::Result<std::vector<ExperimentResult>> RunSweep(const Workload& workload,
                                                     const SweepConfig& config,
                                                     const ProgressFn& progress) {
  if (auto ok = CheckSweepConfig(config); !ok) return tl::unexpected(ok.error());

  // A replay's plan is loaded (and checked) here and shared by every policy; generated plans
  // are only counted here, so that one too large is refused before anything runs.
  const std::size_t seeds = config.replay_dir ? 1 : config.seeds.size();
  const std::size_t policies = config.policies.size();
  auto shared = std::make_unique<SharedPlan[]>(seeds);
  if (config.replay_dir) {
    auto plan = LoadReplay(*config.replay_dir, workload.pods, workload.cluster, config.limit);
    if (!plan) return tl::unexpected(plan.error());
    shared[0].plan = std::make_shared<const ArrivalPlan>(std::move(*plan));
  } else if (auto ok = CheckStudyArrivals(workload.pods, workload.cluster, config.seeds,
                                          config.load, config.limit);
             !ok) {
    return tl::unexpected(ok.error());
  }
  for (std::size_t s = 0; s < seeds; ++s) shared[s].users_left = policies;

  // Experiments run seed by seed (all policies of a seed, then the next seed), so that a plan
  // is dropped soon after it is built; results go to (policy, seed) order.
  std::vector<std::optional<core::Result<ExperimentResult>>> results(policies * seeds);
  auto slot = [&](std::size_t job) { return (job % policies) * seeds + job / policies; };
  RunParallel(
      results.size(), config.threads,
      [&](std::size_t job) {
        const std::size_t s = job / policies;
        const std::uint64_t seed = config.seeds[s];
        SharedPlan& sp = shared[s];
        std::shared_ptr<const ArrivalPlan> plan;
        {
          std::lock_guard<std::mutex> lock(sp.mu);
          if (!sp.plan) {
            auto made =
                MakeStudyArrivals(workload.pods, workload.cluster, seed, config.load, config.limit);
            if (!made) {
              results[slot(job)] = tl::unexpected(made.error());
              --sp.users_left;
              return;
            }
            sp.plan = std::make_shared<const ArrivalPlan>(std::move(*made));
          }
          plan = sp.plan;
        }
        results[slot(job)] = RunExperiment(workload, *plan, config.policies[job % policies], seed,
                                           config.load, config.experiment);
        std::lock_guard<std::mutex> lock(sp.mu);
        if (--sp.users_left == 0) sp.plan.reset();
      },
      [&](std::size_t job, std::size_t done) {
        const auto& r = results[slot(job)];
        if (progress && *r) progress(**r, done, results.size());
      });

  std::vector<ExperimentResult> out;
  for (auto& r : results) {
    if (!*r) return tl::unexpected(r->error());
    out.push_back(std::move(**r));
  }
  return out;
}

}  // namespace gpumux::sim
