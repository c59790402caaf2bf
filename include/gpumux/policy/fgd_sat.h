// `fgd-sat`: FGD with saturation fragmentation, gpumux's own placement policy.
//
// Why. FGD (fgd.h) asks, for each typical pod p, "could ONE more p fit here, and which free
// GPU milli would it leave unusable?". At 130 % arrived demand the cluster ends saturated:
// every node keeps taking pods until nothing more fits, so what is wasted at the end is what
// is left after MANY pods, and two things FGD's one-pod test misses decide it: a node's free
// CPU runs out before its GPUs (at the end of an FGD run on the Alibaba default list, 38 GPUs
// of free compute are GPU shares that pods would fit by GPU but not by the node's CPU), and a GPU
// that one p fits still strands the remainder of repeated p's (1000 free and p = 470: two fit,
// 60 is left; FGD counts 0).
//
// Saturation fragmentation of node n (free CPU c, free milli per GPU g_1..g_G, R = sum g_i)
// for typical pod p = (c_p, milli_p, k_p, models_p, weight w_p):
//     copies_p = min( sum_i floor(g_i / milli_p)        if k_p = 1,
//                     floor(#{i: g_i >= milli_p} / k_p)  if k_p > 1,
//                     floor(c / c_p) )                   (no CPU limit when c_p = 0)
//     sat_p(n) = R - copies_p * milli_p * k_p     (R when p asks no GPU or cannot use n's model)
//     S(n)     = sum_p w_p * sat_p(n)
// i.e. the free GPU compute a stream of p's would leave behind. The policy adds a tenth of S
// to FGD's fragmentation F (fragmentation.h) and scores the sum exactly as FGD scores F:
//     M(n) = F(n) + 0.1 * S(n)
//     score = floor(100 * sigmoid((M_before - M_after) / 1000))
// and picks GPUs as FGD does (fractional requests: every admitting GPU is tried, the lowest
// index reaching the best score wins; whole GPUs: the lowest-indexed admitting ones). Ties go to
// the engine's node rank. It uses only the cluster's state, the pod in hand and the typical
// pods (statistics of past arrivals), as FGD does. S is a nudge, not a replacement: FGD's
// integer score is coarse (one point is about 40 milli-GPU of Delta F near 0), and a tenth of S
// moves a placement across FGD's ties and near-ties towards the node where fewer GPUs will be
// stranded. The ablations that chose this form (S alone, half and half, other weights, exact
// scores instead of the sigmoid, lexicographic tie-breaks, other weightings of the typical
// pods) are recorded, measured, in docs/ARCHITECTURE.md.
//
// Worked example: one typical pod a = (4 cores, 1000 milli, 1 GPU, weight 1); two nodes with
// four idle GPUs each, X with 16 cores free, Y with 64; a CPU-only request of 4 cores.
//   Before, on both: a fits (F = 0) and 4 copies fit (S = 0), so M = 0.
//   X after: 12 cores. F = 0 (a still fits). copies = min(4, floor(12/4) = 3) = 3,
//            S = 4000 - 3000 = 1000, M = 100: Delta = -100 -> floor(100 * sigmoid(-0.1)) = 47.
//   Y after: 60 cores. F = 0, copies = min(4, 15) = 4, S = 0, M = 0: Delta 0 -> 50.
// fgd-sat puts the CPU pod on Y. FGD scores both 50 and lets the node rank decide; on X the
// fourth GPU could then no longer be sold to an a.
//
// Cost: like FGD's, O(|typical| * G) per GPU tried, about 1.7x FGD's time per experiment (both
// sums in one pass); scores are pure (memoised by the engine), M per node is cached by
// generation. Not thread-safe (one engine, one thread), as every policy.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "gpumux/policy/fragmentation.h"
#include "gpumux/policy/policy.h"

namespace gpumux::policy {
namespace detail {
class FragmentationGradient;
}

// S(n) for a (possibly hypothetical) node state, as defined above. O(|typical| * |gpus|).
double NodeSaturationFragmentation(core::MilliCpu cpu_free,
                                   std::span<const core::MilliGpu> gpu_free, core::ModelId model,
                                   std::span<const TypicalPod> typical);

// `fgd-sat-reserve`: fgd-sat plus a reservation of idle GPUs for whole-GPU pods when they run
// short. It is admission control, not only placement: it declines nodes that fit.
//
// Why. At the end of an fgd-sat run on the Alibaba default list about 184 of the ~260 GPUs of
// compute left free are the 190-milli remainders of 810-milli pods, each alone on a GPU: only the
// 50/110/160-milli pods (1.3 % of the pods) fit there. No placement can avoid them, since an
// 810 needs a GPU of its own; what can is not giving an 810 one of the LAST idle GPUs, which a
// whole-GPU pod would use fully. The reservation: a fractional request is declined on a node when
//   (1) the GPU fgd-sat picks there is idle (nothing on it yet),
//   (2) the remainder it would leave, 1000 - milli, is stranded: the typical single-GPU pods of
//       the node's model that fit in it weigh less than kStrandedShare of all typical GPU pods,
//   (3) every typical whole-GPU pod could use that GPU: the node has the CPU of the most
//       CPU-hungry one (else the kept GPU may end up stranded by CPU instead), and
//   (4) idle GPUs are scarce: fewer than `reserve_idle_fraction` of the cluster's GPUs are idle.
// The request still goes to any node where it shares a GPU or where (1)-(3) do not hold; when
// every feasible node is declined the decision is "declined" (the extender keeps the pod
// Pending, with the reason; the FGD study's protocol, one attempt per pod, counts it as failed).
// Everything it reads is the cluster's current state, the pod in hand and the typical pods.
// What it bets on is that more whole-GPU demand will come while idle GPUs are scarce: true at
// the study's 130 % load, and in a busy cluster with a queue of pending pods; in a cluster that
// is not full it never triggers (4).
//
// Worked example (default list): 6,212 GPUs, 600 idle (9.7 % < 10 %), an 810-milli pod. Node A
// has an idle GPU and 40 cores free, node B a GPU holding one 160-milli pod and 8 cores free.
// Remainder 190: the typical pods fitting 190 milli (160) weigh 0.8 % of the typical GPU pods
// (< 5 %), so (2) holds; (3) holds on A (the least CPU-hungry whole-GPU typical pod asks 3 cores).
// A is declined, B scores as in fgd-sat: the 810 goes to B. Had B not existed, the pod is declined
// and A's GPU stays for the next whole-GPU pod.
//
// Cost: fgd-sat's, plus O(1) per node (two cached per-model lookups); the "scarce" flag is the
// policy's score epoch (policy.h), so memoised scores are dropped once when it flips.
class FgdSatPolicy final : public Policy {
 public:
  // Weight of S in M (see above).
  static constexpr double kSaturationWeight = 0.1;
  // fgd-sat-reserve's default: reserve when fewer than a tenth of the GPUs are idle.
  static constexpr double kDefaultReserveIdleFraction = 0.10;
  // (2) above: a remainder is stranded when fewer than this share of the typical GPU pods fit it.
  static constexpr double kStrandedShare = 0.05;

  // reserve_idle_fraction 0 = plain fgd-sat; > 0 = fgd-sat-reserve with that threshold.
  explicit FgdSatPolicy(std::vector<TypicalPod> typical, double reserve_idle_fraction = 0);
  ~FgdSatPolicy() override;
  std::string_view name() const override {
    return reserve_idle_fraction_ > 0 ? "fgd-sat-reserve" : "fgd-sat";
  }
  std::uint64_t ScoreEpoch(const core::Ledger& ledger) const override;
  std::int64_t Score(const Cycle& cycle, const core::NodeView& node) override;
  std::vector<int> ChooseGpus(const Cycle& cycle, const core::NodeView& node) override;

  // The score and the GPUs it implies, computed together.
  std::pair<std::int64_t, std::vector<int>> Evaluate(const Cycle& cycle,
                                                     const core::NodeView& node);
  // M(n) = F(n) + 0.1 * S(n) for a node state.
  double Mixed(core::MilliCpu cpu_free, std::span<const core::MilliGpu> gpu_free,
               core::ModelId model) const;
  // (4): fewer than reserve_idle_fraction of the GPUs are idle (false for plain fgd-sat).
  bool IdleGpusScarce(const core::Ledger& ledger) const;
  // (2) for GPU model `model`: the typical single-GPU pods fitting `remainder` milli weigh less
  // than kStrandedShare of the typical GPU pods that can use the model.
  bool Stranded(core::ModelId model, core::MilliGpu remainder);
  // (3): the CPU of the most CPU-hungry typical whole-GPU pod for the model (-1: none).
  core::MilliCpu WholeGpuPodCpu(core::ModelId model);

 private:
  struct ModelFacts {
    bool known = false;
    std::vector<std::pair<core::MilliGpu, double>> share_weight_upto;  // (milli, cumulative w)
    double gpu_pod_weight = 0;
    core::MilliCpu whole_gpu_cpu = -1;
  };
  const ModelFacts& Facts(core::ModelId model);

  std::vector<TypicalPod> typical_;
  double reserve_idle_fraction_;
  std::vector<ModelFacts> facts_;  // [model], filled lazily
  std::unique_ptr<detail::FragmentationGradient> gradient_;  // the step; caches M(n) per node
};

}  // namespace gpumux::policy
