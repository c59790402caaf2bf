// `best-fit`: least leftover CPU and GPU after placement (the FGD study's BestFit baseline).
//
//   score = floor(100 * (1 - [0.5*(c_n - c_P)/128000 + 0.5*(R - M_P)/8000]))
// c_n: node's free CPU milli; R: node's free milli-GPU summed over GPUs; c_P, M_P: the
// request's CPU milli and total milli-GPU. Constants are fixed (study_constants.h). The study
// then min-max normalises over feasible nodes, which keeps the order, so the raw score is used.
// GPUs: best fit (BestFitGpus).
//
// Worked example: node 32 cores and GPUs {1000, 500} free (R = 1500); request 8 cores, 500
// milli. Leftover = 0.5*24000/128000 + 0.5*1000/8000 = 0.09375 + 0.0625 = 0.15625,
// score = floor(84.375) = 84; the 500-milli GPU (GPU 1) is granted.
#pragma once

#include "gpumux/policy/policy.h"

namespace gpumux::policy {

class BestFitPolicy final : public BestFitGpuPolicy {
 public:
  std::string_view name() const override { return "best-fit"; }
  std::int64_t Score(const Cycle& cycle, const core::NodeView& node) override;
};

}  // namespace gpumux::policy
