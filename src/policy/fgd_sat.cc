#include "gpumux/policy/fgd_sat.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <map>

#include "fragmentation_gradient.h"
#include "gpumux/core/check.h"

namespace gpumux::policy {

double NodeSaturationFragmentation(core::MilliCpu cpu_free,
                                   std::span<const core::MilliGpu> gpu_free, core::ModelId model,
                                   std::span<const TypicalPod> typical) {
  return detail::MeasureFragmentation<true>(cpu_free, gpu_free, model, typical).s;
}

FgdSatPolicy::FgdSatPolicy(std::vector<TypicalPod> typical, double reserve_idle_fraction,
                           std::int64_t max_wait_seconds, bool keep_rare_nodes, bool pair_shares)
    : typical_(std::move(typical)),
      reserve_idle_fraction_(reserve_idle_fraction),
      max_wait_seconds_(max_wait_seconds),
      keep_rare_nodes_(keep_rare_nodes),
      pair_shares_(pair_shares),
      gradient_(std::make_unique<detail::FragmentationGradient>()) {
  GPUMUX_CHECK(!pair_shares || keep_rare_nodes, "fgd-sat-pair is fgd-sat-keep with pairing");
  if (pair_shares_) prices_ = SharePrices::FromTypical(typical_);
  GPUMUX_CHECK(reserve_idle_fraction >= 0 && reserve_idle_fraction <= 1,
               "the reserve threshold is a fraction of the GPUs (0..1)");
  GPUMUX_CHECK(max_wait_seconds >= 0, "a wait limit is not negative");
}

FgdSatPolicy::~FgdSatPolicy() = default;

double FgdSatPolicy::Mixed(core::MilliCpu cpu_free, std::span<const core::MilliGpu> gpu_free,
                           core::ModelId model) const {
  // F and S in one pass (the same operations in the same order as NodeFragmentation and
  // NodeSaturationFragmentation, so M equals F + 0.1 * S computed by those two bit for bit;
  // fgd_sat_test checks it).
  const detail::FragmentationTerms t =
      detail::MeasureFragmentation<true>(cpu_free, gpu_free, model, typical_);
  return t.f + kSaturationWeight * t.s;
}

std::pair<std::int64_t, std::vector<int>> FgdSatPolicy::Evaluate(const Cycle& cycle,
                                                                 const core::NodeView& node) {
  const auto measure = [this](core::MilliCpu cpu, std::span<const core::MilliGpu> gpus,
                              core::ModelId model) { return Mixed(cpu, gpus, model); };
  if (!pair_shares_) return gradient_->Evaluate(cycle, node, measure);
  // fgd-sat-pair: the pairing loss first (lexicographically: FGD's score is 0..100), then M's.
  return gradient_->Evaluate(
      cycle, node, measure,
      [this](core::MilliGpu free, core::MilliGpu request, core::MilliCpu cpu_before,
             core::MilliCpu cpu_after) {
        return std::llround(prices_.Loss(free, request, cpu_before, cpu_after) * kLossResolution) *
               kLossStep;
      });
}

bool FgdSatPolicy::IdleGpusScarce(const core::Ledger& ledger) const {
  if (reserve_idle_fraction_ <= 0) return false;
  const auto total = static_cast<double>(ledger.cluster().total_gpus());
  const auto idle = static_cast<double>(ledger.cluster().total_gpus() - ledger.busy_gpus());
  return idle < reserve_idle_fraction_ * total;
}

std::uint64_t FgdSatPolicy::ScoreEpoch(const core::Ledger& ledger) const {
  return IdleGpusScarce(ledger) ? 1 : 0;
}

const FgdSatPolicy::ModelFacts& FgdSatPolicy::Facts(core::ModelId model) {
  const auto m = static_cast<std::size_t>(model);
  if (facts_.size() <= m) facts_.resize(m + 1);
  ModelFacts& f = facts_[m];
  if (f.known) return f;
  f.known = true;
  for (const TypicalPod& p : typical_) {
    if (p.gpu_milli == 0 || ((p.model_mask >> model) & 1U) == 0) continue;
    f.gpu_pod_weight += p.weight;
    if (p.gpu_count != 1) continue;
    if (p.gpu_milli >= core::kMilliPerGpu) {
      f.whole_gpu_cpu = std::max(f.whole_gpu_cpu, p.cpu_milli);
    } else {
      f.share_weight_upto.emplace_back(p.gpu_milli, p.weight);
    }
  }
  std::sort(f.share_weight_upto.begin(), f.share_weight_upto.end());
  double sum = 0;
  for (auto& [milli, w] : f.share_weight_upto) w = sum += w;
  return f;
}

bool FgdSatPolicy::Stranded(core::ModelId model, core::MilliGpu remainder) {
  const ModelFacts& f = Facts(model);
  // The cumulative weight of the shares of at most `remainder` milli.
  const auto it = std::upper_bound(
      f.share_weight_upto.begin(), f.share_weight_upto.end(), remainder,
      [](core::MilliGpu r, const std::pair<core::MilliGpu, double>& e) { return r < e.first; });
  const double fitting = it == f.share_weight_upto.begin() ? 0.0 : std::prev(it)->second;
  return fitting < kStrandedShare * f.gpu_pod_weight;
}

core::MilliCpu FgdSatPolicy::WholeGpuPodCpu(core::ModelId model) {
  return Facts(model).whole_gpu_cpu;
}

bool FgdSatPolicy::Kept(const core::Cluster& cluster, const core::NodeView& node,
                        const core::Request& request) {
  if (node.gpu_count() < kKeepMinGpus || request.gpu_count >= node.gpu_count()) return false;
  if (keep_cluster_ != &cluster) {
    keep_cluster_ = &cluster;
    keep_cpu_above_.clear();
    std::map<int, std::vector<core::MilliCpu>> by_count;
    for (const core::NodeSpec& n : cluster.nodes()) {
      by_count[static_cast<int>(n.gpus.size())].push_back(n.cpu_milli);
    }
    for (auto& [count, cpus] : by_count) {
      std::sort(cpus.begin(), cpus.end());
      const auto k =
          static_cast<std::size_t>(kKeepCpuPercentile * static_cast<double>(cpus.size() - 1));
      keep_cpu_above_[count] = cpus[k];
    }
  }
  const auto t = keep_cpu_above_.find(node.gpu_count());
  if (t == keep_cpu_above_.end() || node.spec->cpu_milli <= t->second) return false;
  for (int g = 0; g < node.gpu_count(); ++g) {
    if (!node.GpuIsIdle(g)) return false;
  }
  return true;
}

std::int64_t FgdSatPolicy::Score(const Cycle& cycle, const core::NodeView& node) {
  auto [score, gpus] = Evaluate(cycle, node);
  const core::Request& r = cycle.request;
  if (keep_rare_nodes_ && Kept(cycle.ledger.cluster(), node, r)) score -= kKeepPenalty;
  const bool fractional = r.gpu_count == 1 && r.gpu_milli < core::kMilliPerGpu &&
                          r.sharing == core::GpuSharing::kShared;
  if (!fractional || r.overdue || !IdleGpusScarce(cycle.ledger)) return score;
  const auto g = static_cast<std::size_t>(gpus.front());
  const core::ModelId model = node.gpu_model[g];
  const core::MilliCpu whole_cpu = WholeGpuPodCpu(model);
  if (node.GpuIsIdle(static_cast<int>(g)) && whole_cpu >= 0 && node.cpu_free >= whole_cpu &&
      Stranded(model, core::kMilliPerGpu - r.gpu_milli)) {
    return kDecline;  // (1)-(4) of fgd_sat.h: keep this idle GPU for a whole-GPU pod
  }
  return score;
}

std::vector<int> FgdSatPolicy::ChooseGpus(const Cycle& cycle, const core::NodeView& node) {
  return Evaluate(cycle, node).second;
}

}  // namespace gpumux::policy
