// Base of the co-location policies: they judge GPUs one by one, because what matters to them
// is who else is on each GPU. A node scores as its best GPU; ChooseGpus takes the best-scoring
// GPUs (ties: lowest index). A GPU a subclass refuses is skipped; a node with no acceptable
// GPU is declined (the job waits).
#pragma once

#include <optional>

#include "gpumux/policy/colocation.h"
#include "gpumux/policy/policy.h"
#include "gpumux/policy/registry.h"

namespace gpumux::policy {

class GpuScoringPolicy : public Policy {
 public:
  explicit GpuScoringPolicy(const PolicyContext& context);
  // Scores depend on job state outside the ledger: never memoised.
  ScoreKind score_kind() const override { return ScoreKind::kUsesFeasibleSet; }
  std::int64_t Score(const Cycle& cycle, const core::NodeView& node) final;
  std::vector<int> ChooseGpus(const Cycle& cycle, const core::NodeView& node) final;

 protected:
  // Higher is better; nullopt refuses the GPU. Called only for GPUs that admit the request
  // and hold fewer than max_jobs_per_gpu tenants. `group` is the GPU's current tenants.
  virtual std::optional<double> GpuScore(const Cycle& cycle, const GpuGroup& group,
                                         const Member& newcomer) = 0;

  const InterferenceModel& model() const { return *model_; }
  const JobView* jobs() const { return jobs_; }
  const ColocationOptions& options() const { return options_; }
  const ClassProfile* ClassOf(const core::Request& r) const;

 private:
  // Scores of every GPU of the node (nullopt: not acceptable).
  std::vector<std::optional<double>> GpuScores(const Cycle& cycle, const core::NodeView& node);

  const WorkloadProfile* profile_;
  const InterferenceModel* model_;
  const JobView* jobs_;
  ColocationOptions options_;
};

}  // namespace gpumux::policy
