// `random`: a uniformly random feasible node (the FGD study's Random baseline).
// BeginCycle draws one index into the feasible set; that node scores 100, the others 0.
// GPUs: random fit (RandomFitGpus). Draws come from the policy's own seeded stream.
//
// Worked example: feasible = {n3, n7, n9} and the draw is 1 -> n7 scores 100, n3 and n9 score 0.
#pragma once

#include "gpumux/policy/policy.h"

namespace gpumux::policy {

class RandomPolicy final : public Policy {
 public:
  std::string_view name() const override { return "random"; }
  ScoreKind score_kind() const override { return ScoreKind::kUsesFeasibleSet; }
  void BeginCycle(const Cycle& cycle) override;
  std::int64_t Score(const Cycle& cycle, const core::NodeView& node) override;
  std::vector<int> ChooseGpus(const Cycle& cycle, const core::NodeView& node) override {
    return RandomFitGpus(cycle, node);
  }

 private:
  core::NodeIndex chosen_ = -1;
};

}  // namespace gpumux::policy
