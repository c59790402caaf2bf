// `dotprod`: dot product of the node's free vector and the request vector (the FGD study's
// DotProd baseline, "dimext merge, norm max"), smallest product wins.
//
//   node = (c_n/128000, R/8000), pod = (c_P/128000, M_P/8000), d = (node . pod) / 2
//   score = floor(100 * (1 - d))
// GPUs: best fit (BestFitGpus).
//
// Worked example: node 32 cores, R = 1500; request 8 cores, 500 milli.
// node = (0.25, 0.1875), pod = (0.0625, 0.0625), dot = 0.02734375, d = 0.013671875,
// score = floor(98.6328125) = 98.
#pragma once

#include "gpumux/policy/policy.h"

namespace gpumux::policy {

class DotProductPolicy final : public BestFitGpuPolicy {
 public:
  std::string_view name() const override { return "dotprod"; }
  std::int64_t Score(const Cycle& cycle, const core::NodeView& node) override;
};

}  // namespace gpumux::policy
