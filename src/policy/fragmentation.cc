#include "gpumux/policy/fragmentation.h"

#include <algorithm>
#include <map>
#include <tuple>

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
  const auto total = static_cast<double>(pods.size());
  std::vector<TypicalPod> typical;
  std::int64_t covered = 0;
  for (const auto& [key, count] : sorted) {
    if (total > 0 && static_cast<double>(covered) / total >= options.coverage) break;
    TypicalPod p;
    std::tie(p.cpu_milli, p.gpu_milli, p.gpu_count, p.models) = key;
    p.model_mask = cluster.MaskOf(model_lists[key]);
    p.count = count;
    covered += count;
    typical.push_back(std::move(p));
  }
  for (TypicalPod& p : typical) {
    p.weight = static_cast<double>(p.count) / static_cast<double>(covered);
  }
  return typical;
}

double NodeFragmentation(core::MilliCpu cpu_free, std::span<const core::MilliGpu> gpu_free,
                         core::ModelId model, std::span<const TypicalPod> typical) {
  core::MilliGpu all_free = 0;
  for (core::MilliGpu g : gpu_free) all_free += g;
  double f = 0;
  for (const TypicalPod& p : typical) {
    core::MilliGpu frag = all_free;
    if (p.gpu_milli > 0 && ((p.model_mask >> model) & 1U) != 0 && cpu_free >= p.cpu_milli) {
      int fitting = 0;
      core::MilliGpu remnant = 0;
      for (core::MilliGpu g : gpu_free) {
        if (g >= p.gpu_milli) {
          ++fitting;
        } else {
          remnant += g;
        }
      }
      if (fitting >= p.gpu_count) frag = remnant;
    }
    f += p.weight * static_cast<double>(frag);
  }
  return f;
}

}  // namespace gpumux::policy
