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
// Variants (one class): fgd-sat-reserve (below: idle GPUs kept for whole-GPU pods while scarce),
// fgd-sat-keep (the nodes with the most CPU for their GPU count kept whole for the pods that need
// all their GPUs) and fgd-sat-pair (fgd-sat-keep, and a share goes first to the GPU where it
// loses the least of what the typical shares could still fill: share_pairing.h).
//
// Cost: like FGD's, O(|typical| * G) per GPU tried, about 1.7x FGD's time per experiment (both
// sums in one pass); scores are pure (memoised by the engine), M per node is cached by
// generation. Not thread-safe (one engine, one thread), as every policy.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "gpumux/policy/fragmentation.h"
#include "gpumux/policy/policy.h"
#include "gpumux/policy/share_pairing.h"

namespace gpumux::policy {
namespace detail {
class FragmentationGradient;
}

// S(n) for a (possibly hypothetical) node state, as defined above. O(|typical| * |gpus|).
double NodeSaturationFragmentation(core::MilliCpu cpu_free,
                                   std::span<const core::MilliGpu> gpu_free, core::ModelId model,
                                   std::span<const TypicalPod> typical);

// `fgd-sat-reserve`: fgd-sat plus a reservation of idle GPUs for whole-GPU pods while idle GPUs
// are scarce. This is admission control, not only placement: it declines nodes that fit.
//
// Why. At the end of an fgd-sat run on the Alibaba default list (seed 42) 264 GPUs of compute
// are left free, and 184 of them are the 190-milli remainders of 970 GPUs that hold one 810-milli
// pod: only the 50/110/160-milli pods (1.3 % of the pods) fit there. No placement avoids them, as
// an 810 needs a GPU of its own; what can is not giving an 810 one of the LAST idle GPUs, which a
// whole-GPU pod would use fully. The rule: a fractional request is declined on a node when
//   (1) the GPU fgd-sat picks there is idle (nothing on it yet; fgd-sat picks a GPU in use
//       whenever one admits the share and that fragments less, which is how shares go: see
//       docs/ablations.md, "Ablation record: fgd-sat-reserve"),
//   (2) the remainder it would leave, 1000 - milli, is stranded: the typical single-GPU shares
//       that fit in it weigh less than kStrandedShare of all typical GPU pods (of that model),
//   (3) every typical single-GPU whole pod could use that GPU: the node has the free CPU of
//       the most CPU-hungry one (else the kept GPU may end up stranded by CPU instead; without
//       such typical pods nothing is reserved; multi-GPU pods, which need several idle GPUs
//       of one node, are not counted), and
//   (4) idle GPUs are scarce: fewer than `reserve_idle_fraction` (default 0.10) of the cluster's
//       GPUs are idle.
// The request still goes to any node where fgd-sat would share a GPU, or where (1)-(3) do not
// hold; when every feasible node is declined the decision is "declined": the extender keeps the
// pod Pending with the reason, and the FGD study's protocol (one attempt per pod) counts it as
// failed. On the default list only 810-milli pods are ever held (190 fits 0.8 % of the typical
// GPU pods; the next largest share, 650, leaves 350, which 7.8 % fit).
// It reads only the cluster's current state, the pod in hand and the typical pods. What it bets
// on is that whole-GPU demand keeps coming while idle GPUs are scarce: true at the study's 130 %
// load, and in a busy cluster with pending pods. The price is paid before the cluster saturates:
// a held 810 is a pod not running yet (in the study's protocol, a failed pod), and a kept GPU is
// idle until a whole-GPU pod comes. A pod held by the rule waits until a GPU with room for it
// frees up or idle GPUs rise above the threshold, or until it is overdue (core::Request::overdue:
// the extender marks a pod older than HoldLimitSeconds(), --reserve-max-wait-seconds, 600 by
// default), which the rule never holds.
//
// Worked example (default list): 6,212 GPUs, 600 idle (9.7 % < 10 %), an 810-milli pod. Node A
// has an idle GPU and 40 cores free, node B a GPU holding one 160-milli pod. Remainder 190: only
// the 160-milli typical pods fit, 0.8 % of the typical GPU pods (< 5 %), so (2) holds; the most
// CPU-hungry typical whole-GPU pod asks 24.2 cores and A has 40, so (3) holds: A is declined and
// B is scored as fgd-sat scores it. The 810 goes to B; had B not been there, it would wait and
// A's GPU would stay for the next whole-GPU pod.
//
// Cost: fgd-sat's, plus O(1) per node (two per-model lookups, computed once); the "scarce" flag
// is the policy's score epoch (policy.h), part of the engine's memo key.
class FgdSatPolicy final : public Policy {
 public:
  // Weight of S in M (see above).
  static constexpr double kSaturationWeight = 0.1;
  // fgd-sat-reserve's default: reserve when fewer than a tenth of the GPUs are idle.
  static constexpr double kDefaultReserveIdleFraction = 0.10;
  // (2) above: a remainder is stranded when fewer than this share of the typical GPU pods fit it.
  static constexpr double kStrandedShare = 0.05;

  // fgd-sat-reserve's default wait limit: a pod is held at most 10 minutes.
  static constexpr std::int64_t kDefaultMaxWaitSeconds = 600;

  // fgd-sat-keep: a node is kept while all its GPUs are idle for pods that need all of them
  // when its CPU is above this percentile of the CPU of the cluster's nodes with as many GPUs
  // (2 or more): the few nodes that alone can host the most CPU-hungry multi-GPU pods.
  // docs/ablations.md, "where fgd-sat loses before saturation".
  static constexpr double kKeepCpuPercentile = 0.9;
  static constexpr int kKeepMinGpus = 2;
  // Subtracted from a kept node's score: below every score of a node that is not kept, above
  // Policy::kDecline, so a kept node is taken only when nothing else fits.
  static constexpr std::int64_t kKeepPenalty = std::int64_t{1} << 40;

  // fgd-sat-pair: a share's loss (share_pairing.h) in millionths of a GPU, times this step,
  // is subtracted from its score on a GPU: any loss outweighs the whole 0..100 of FGD's score,
  // which decides between GPUs of equal loss; kKeepPenalty outweighs any loss (at most 1 GPU).
  static constexpr double kLossResolution = 1e6;
  static constexpr std::int64_t kLossStep = 101;

  // reserve_idle_fraction 0 = plain fgd-sat; > 0 = fgd-sat-reserve with that threshold, holding
  // a pod at most max_wait_seconds (0: no limit). keep_rare_nodes: fgd-sat-keep (above);
  // pair_shares (with keep_rare_nodes): fgd-sat-pair, a share goes to the GPU where it loses
  // the least of what the typical shares could still fill (share_pairing.h), FGD's score second.
  explicit FgdSatPolicy(std::vector<TypicalPod> typical, double reserve_idle_fraction = 0,
                        std::int64_t max_wait_seconds = 0, bool keep_rare_nodes = false,
                        bool pair_shares = false);
  ~FgdSatPolicy() override;
  std::string_view name() const override {
    if (pair_shares_) return "fgd-sat-pair";
    if (keep_rare_nodes_) return "fgd-sat-keep";
    return reserve_idle_fraction_ > 0 ? "fgd-sat-reserve" : "fgd-sat";
  }
  std::int64_t HoldLimitSeconds() const override {
    return reserve_idle_fraction_ > 0 ? max_wait_seconds_ : 0;
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
  // fgd-sat-keep: `node` is kept from a request for fewer than all its GPUs (above).
  bool Kept(const core::Cluster& cluster, const core::NodeView& node, const core::Request& request);

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
  std::int64_t max_wait_seconds_;
  bool keep_rare_nodes_;
  bool pair_shares_;
  // fgd-sat-keep's CPU threshold per GPU count, for the cluster it was computed on.
  const core::Cluster* keep_cluster_ = nullptr;
  std::map<int, core::MilliCpu> keep_cpu_above_;
  std::vector<ModelFacts> facts_;                            // [model], filled lazily
  std::unique_ptr<detail::FragmentationGradient> gradient_;  // the step; caches M(n) per node
  SharePrices prices_;                                       // fgd-sat-pair's (share_pairing.h)
};

}  // namespace gpumux::policy
