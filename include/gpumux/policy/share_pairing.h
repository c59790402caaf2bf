// Share pairing (fgd-sat-pair): what a GPU's free milli is worth to the shares still to come,
// priced by the duals of the cutting-stock LP over the typical single-GPU shares.
//
// The typical shares (sizes s with weights w_s) are packed into GPUs of 1000 milli (Gilmore and
// Gomory's LP; c ranges over the ways to fill one GPU, a_sc the shares of size s in c):
//     min sum_c x_c   s.t.   sum_c a_sc x_c >= w_s,   x >= 0
// Its dual gives each size a price p_s (max sum_s w_s p_s s.t. sum_s a_sc p_s <= 1 for every c):
// what a share of size s is worth, in GPUs, when shares come in the typical mix. On the default
// list (V(s), below, of each size in it; 11 sizes are typical): 810 -> 1, 550-650 -> 2/3, 460-480
// -> 1/2, 320-440 -> 1/3, 230-290 -> 1/4, 220 -> 1/12, 50-160 -> 0. V(f), the value of f free
// milli, is the most that shares fitting in f are worth (an unbounded knapsack over the prices;
// V(1000) = 1). Placing a share of size s on a GPU with f milli free costs
//     loss = V(f) - V(s) - V(f - s)   (>= 0)
// of that value: 0 when the share and what can still join it lie on a way of filling the GPU
// that the LP uses (a 470 beside a 470, a 320 beside a 650, an 810 on an idle GPU or beside a
// 160), > 0 when it strands what could have come (a 320 beside a 470 leaves 210 that only the
// rare small shares fill: a sixth of a GPU). A remainder on a node whose CPU cannot take even
// the least CPU-hungry typical share fitting it is worth 0 (before and after the placement):
// placing onto a GPU that is already dead costs nothing, leaving one dead costs its value.
//
// The prices come from the typical pods only (what FGD already assumes the scheduler knows), not
// from the pods that will come. GPU models are not told apart. Degenerate duals are resolved by
// GLPK's simplex. docs/SIMULATOR.md, "fgd-sat-pair", has the measurements and the ablation.
#pragma once

#include <array>
#include <span>

#include "gpumux/core/quantity.h"
#include "gpumux/policy/fragmentation.h"

namespace gpumux::policy {

class SharePrices {
 public:
  // No shares: every value and loss is 0.
  SharePrices() = default;
  // Prices from the single-GPU shares among `typical` (gpu_count 1, 0 < milli < 1000). The LP
  // is solved by adding the ways to fill a GPU that the current prices violate (a knapsack over
  // 1000 milli per round) until none is: 9 to 11 rounds, under half a millisecond, for the 11 to
  // 14 typical share sizes of the trace's lists. Sizes that no typical share has are worth V(s).
  static SharePrices FromTypical(std::span<const TypicalPod> typical);

  // V(f) for f in [0, 1000].
  double GapValue(core::MilliGpu free) const;
  // The loss above of a share of `share` milli on a GPU with `free` milli free on a node with
  // `cpu_before` CPU free (`cpu_after` once the share is placed); 0 when the share does not fit.
  double Loss(core::MilliGpu free, core::MilliGpu share, core::MilliCpu cpu_before,
              core::MilliCpu cpu_after) const;

 private:
  std::array<double, core::kMilliPerGpu + 1> value_{};  // V(f)
  // The least CPU of a typical share of at most f milli (max(): none).
  std::array<core::MilliCpu, core::kMilliPerGpu + 1> min_cpu_upto_{};
};

}  // namespace gpumux::policy
