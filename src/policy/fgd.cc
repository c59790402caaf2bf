#include "gpumux/policy/fgd.h"

#include <array>
#include <cmath>

#include "gpumux/core/check.h"

namespace gpumux::policy {
namespace {

constexpr std::size_t kMaxGpusPerNode = static_cast<std::size_t>(core::kMaxGpusPerNode);

std::int64_t SigmoidScore(double frag_before, double frag_after) {
  const double x = (frag_before - frag_after) / 1000.0;
  return static_cast<std::int64_t>(std::floor(100.0 * (1.0 / (1.0 + std::exp(-x)))));
}

}  // namespace

double FgdPolicy::FragBefore(const core::NodeView& node) {
  const auto n = static_cast<std::size_t>(node.index);
  if (before_cache_.size() <= n) before_cache_.resize(n + 1, {~std::uint64_t{0}, 0.0});
  auto& [generation, value] = before_cache_[n];
  if (generation != node.generation) {
    const core::ModelId model = node.gpu_count() > 0 ? node.gpu_model[0] : 0;
    value = NodeFragmentation(node.cpu_free, node.gpu_free_milli, model, typical_);
    generation = node.generation;
  }
  return value;
}

std::pair<std::int64_t, std::vector<int>> FgdPolicy::Evaluate(const Cycle& cycle,
                                                              const core::NodeView& node) {
  const core::Request& r = cycle.request;
  const double before = FragBefore(node);
  const std::size_t gpus = node.gpu_free_milli.size();
  GPUMUX_CHECK(gpus <= kMaxGpusPerNode, "too many GPUs on one node");
  std::array<core::MilliGpu, kMaxGpusPerNode> after{};
  std::copy(node.gpu_free_milli.begin(), node.gpu_free_milli.end(), after.begin());
  const std::span<const core::MilliGpu> after_span(after.data(), gpus);
  const core::MilliCpu cpu_after = node.cpu_free - r.cpu_milli;
  const core::ModelId model = gpus > 0 ? node.gpu_model[0] : 0;

  const bool fractional = r.gpu_count == 1 && r.gpu_milli < core::kMilliPerGpu &&
                          r.sharing == core::GpuSharing::kShared;
  if (fractional) {
    std::int64_t best = -1;
    int best_gpu = -1;
    for (std::size_t i = 0; i < gpus; ++i) {
      if (!core::GpuAdmits(node, static_cast<int>(i), r, cycle.models)) continue;
      after[i] -= r.gpu_milli;
      const std::int64_t s =
          SigmoidScore(before, NodeFragmentation(cpu_after, after_span, model, typical_));
      after[i] += r.gpu_milli;
      if (s > best) {
        best = s;
        best_gpu = static_cast<int>(i);
      }
    }
    GPUMUX_CHECK(best_gpu >= 0, "node does not fit");
    return {best, {best_gpu}};
  }
  std::vector<int> chosen;
  if (r.wants_gpu()) {
    chosen = LowestIndexGpus(cycle, node);
    for (int g : chosen) {
      auto& free = after[static_cast<std::size_t>(g)];
      free = r.sharing == core::GpuSharing::kExclusive ? 0 : free - r.gpu_milli;
    }
  }
  return {SigmoidScore(before, NodeFragmentation(cpu_after, after_span, model, typical_)),
          std::move(chosen)};
}

std::int64_t FgdPolicy::Score(const Cycle& cycle, const core::NodeView& node) {
  return Evaluate(cycle, node).first;
}

std::vector<int> FgdPolicy::ChooseGpus(const Cycle& cycle, const core::NodeView& node) {
  return Evaluate(cycle, node).second;
}

}  // namespace gpumux::policy
