// `iadeep`: the placement of IADeep (SC'23), faithful to its published design.
//  * An idle GPU is taken first (lowest index).
//  * Otherwise a GPU qualifies if it has the memory, fewer than max_jobs_per_gpu jobs, is not
//    in a tuning session (IADeep locks a GPU while it tunes), and its predicted utilisation is
//    below 99% (utilisation = min(1, sum of its jobs' GPU busy fractions)).
//  * Among qualifying GPUs, the lowest predicted interference of {its jobs + the new job}:
//        I(S) = sum over k in S of (s_k - 1),   s_k = co-located / solo step time
//    from the interference model (measured table, else the predictor: IADeep's missed lookup
//    returned an arbitrary value; here it falls back to the busy-time prediction).
//  * No qualifying GPU: the job waits. Queue: FIFO. Tuner: `iadeep` (newcomer only).
// Score = 2 for an idle GPU, else -I(S).
//
// Worked example (beta = 0.05): newcomer with busy 0.4; GPU A holds one job with busy 0.9,
// GPU B one with busy 0.55. A: sum 1.3 > 1, x = 1.412 (0.9/(0.1+0.9x) + 0.4/(0.6+0.4x) = 1),
// s = 1.371*1.05, 1.165*1.05 -> I = 0.439 + 0.223 = 0.662. B: sum 0.95, x = 1, I = 0.05 + 0.05
// = 0.1. IADeep picks B.
#pragma once

#include "gpumux/policy/gpu_scoring.h"

namespace gpumux::policy {

class IadeepPolicy final : public GpuScoringPolicy {
 public:
  explicit IadeepPolicy(const PolicyContext& context) : GpuScoringPolicy(context) {}
  std::string_view name() const override { return "iadeep"; }
  const ColocationTraits* colocation() const override { return &traits_; }

 protected:
  std::optional<double> GpuScore(const Cycle& cycle, const GpuGroup& group,
                                 const Member& newcomer) override;

 private:
  ColocationTraits traits_{QueueOrder::kArrival, "iadeep"};
};

}  // namespace gpumux::policy
