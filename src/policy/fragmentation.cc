#include "gpumux/policy/fragmentation.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "fragmentation_gradient.h"

namespace gpumux::policy {
namespace {

std::string JoinModels(const std::vector<std::string>& models) {
  std::string out;
  for (const auto& m : models) {
    if (!out.empty()) out += '|';
    out += m;
  }
  return out;
}

}  // namespace

std::vector<TypicalPod> ComputeTypicalPods(std::span<const core::Request> pods,
                                           const core::Cluster& cluster,
                                           TypicalPodOptions options) {
  using Key = std::tuple<core::MilliCpu, core::MilliGpu, int, std::string>;
  std::map<Key, std::int64_t> counts;
  std::map<Key, std::vector<std::string>> model_lists;
  for (const core::Request& r : pods) {
    Key key{r.cpu_milli, r.wants_gpu() ? r.gpu_milli : 0, r.gpu_count, JoinModels(r.gpu_models)};
    if (++counts[key] == 1) model_lists[key] = r.gpu_models;
  }
  std::vector<std::pair<Key, std::int64_t>> sorted(counts.begin(), counts.end());
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
    if (a.second != b.second) return a.second > b.second;
    return a.first > b.first;  // larger cpu, then milli, then count, then model string
  });
  // Float arithmetic as in the study (weights feed sums whose last bits break ties): the loop
  // adds shapes while the covered count is below threshold% of all pods, and each weight is
  // (count/total) / (covered/total) rather than count/covered.
  const auto total = static_cast<double>(pods.size());
  const double expected = static_cast<double>(options.popularity_threshold_pct) * total / 100.0;
  std::vector<TypicalPod> typical;
  double covered = 0;
  for (const auto& [key, count] : sorted) {
    if (covered >= expected) break;
    TypicalPod p;
    std::tie(p.cpu_milli, p.gpu_milli, p.gpu_count, p.models) = key;
    p.model_mask = cluster.MaskOf(model_lists[key]);
    p.count = count;
    covered += static_cast<double>(count);
    typical.push_back(std::move(p));
  }
  for (TypicalPod& p : typical) {
    p.weight = (static_cast<double>(p.count) / total) / (covered / total);
  }
  return typical;
}

double NodeFragmentation(core::MilliCpu cpu_free, std::span<const core::MilliGpu> gpu_free,
                         core::ModelId model, std::span<const TypicalPod> typical) {
  return detail::MeasureFragmentation<false>(cpu_free, gpu_free, model, typical).f;
}

}  // namespace gpumux::policy
