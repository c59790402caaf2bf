// `fgd`: Fragmentation Gradient Descent (Weng et al., USENIX ATC'23).
//
// Score of node n for request P: place P hypothetically and measure how much the node's
// fragmentation F (fragmentation.h) grows:
//     score = floor(100 * sigmoid((F_before - F_after) / 1000)),  sigmoid(x) = 1/(1+e^-x)
// (Delta in milli-GPU, so /1000 is in GPUs; Delta = 0 gives 50). The score is an integer before
// any comparison, as in the study's plugin.
//   * fractional single-GPU requests try every admitting GPU in index order; the node score is
//     the best over GPUs, and the GPU granted is the lowest-indexed one reaching it;
//   * whole-GPU requests take the lowest-indexed admitting GPUs (set to 0 free);
//   * CPU-only requests change only the free CPU (F still changes when typical pods stop fitting).
//
// Worked example: one typical pod a = (4 cores, 700 milli, 1 GPU, weight 1). Node: 8 cores
// free, GPUs free {1000, 300}. F_before = 300 (a fits on GPU 0; GPU 1's 300 is a fragment).
// Request P = (2 cores, 500 milli): only GPU 0 admits it; after: 6 cores, {500, 300}; a no
// longer fits anywhere, so F_after = R = 800. Delta = -500, sigmoid(-0.5) = 0.3775 -> score 37.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "gpumux/policy/fragmentation.h"
#include "gpumux/policy/policy.h"

namespace gpumux::policy {
namespace detail {
class FragmentationGradient;
}

class FgdPolicy final : public Policy {
 public:
  explicit FgdPolicy(std::vector<TypicalPod> typical);
  ~FgdPolicy() override;
  std::string_view name() const override { return "fgd"; }
  std::int64_t Score(const Cycle& cycle, const core::NodeView& node) override;
  std::vector<int> ChooseGpus(const Cycle& cycle, const core::NodeView& node) override;

  // The score and the GPUs it implies, computed together.
  std::pair<std::int64_t, std::vector<int>> Evaluate(const Cycle& cycle,
                                                     const core::NodeView& node);

 private:
  std::vector<TypicalPod> typical_;
  std::unique_ptr<detail::FragmentationGradient> gradient_;  // the step; caches F(n) per node
};

}  // namespace gpumux::policy
