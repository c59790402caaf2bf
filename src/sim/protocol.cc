#include "gpumux/sim/protocol.h"

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <numeric>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "gpumux/core/cluster.h"
#include "gpumux/core/rng.h"
#include "gpumux/io/csv.h"

namespace gpumux::sim {

using io::CsvReader;
namespace {

std::vector<std::size_t> ByName(std::span<const core::Request> pods) {
  std::vector<std::size_t> order(pods.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return pods[a].name < pods[b].name; });
  return order;
}

}  // namespace

core::MilliGpu TotalGpuMilli(std::span<const core::Request> pods) {
  core::MilliGpu total = 0;
  for (const auto& p : pods) total += p.total_gpu_milli();
  return total;
}

ArrivalPlan MakeStudyArrivals(std::span<const core::Request> pods, const core::Cluster& cluster,
                              std::uint64_t seed, double load) {
  ArrivalPlan plan;
  plan.origin = "seed " + std::to_string(seed);
  const std::vector<std::size_t> by_name = ByName(pods);

  std::vector<std::size_t> order = by_name;
  core::Rng shuffle(seed, "shuffle");
  shuffle.Shuffle(std::span<std::size_t>(order));

  const double target = load * static_cast<double>(cluster.total_gpu_milli());
  core::MilliGpu total = TotalGpuMilli(pods);
  core::Rng tune(seed, "tune");
  std::vector<std::size_t> copies;
  const bool any_gpu_pod =
      std::any_of(pods.begin(), pods.end(), [](const core::Request& p) { return p.wants_gpu(); });
  if (!any_gpu_pod) {
    // Nothing to resample towards: copies would add no GPU demand, forever.
  } else if (static_cast<double>(total) < target) {
    while (true) {
      const std::size_t pick = by_name[static_cast<std::size_t>(tune.Below(by_name.size()))];
      if (static_cast<double>(total + pods[pick].gpu_milli) > target) break;
      copies.push_back(pick);
      total += pods[pick].total_gpu_milli();
    }
  } else {
    while (static_cast<double>(total) > target && !order.empty()) {
      const auto victim = static_cast<std::ptrdiff_t>(tune.Below(order.size()));
      total -= pods[order[static_cast<std::size_t>(victim)]].total_gpu_milli();
      order.erase(order.begin() + victim);
    }
  }
  plan.arrivals.reserve(order.size() + copies.size());
  for (std::size_t p : order) plan.arrivals.push_back(Arrival{p, pods[p].name, {}, {}});
  for (std::size_t i = 0; i < copies.size(); ++i) {
    plan.arrivals.push_back(
        Arrival{copies[i], pods[copies[i]].name + "-tuned-" + std::to_string(i), {}, {}});
  }

  // Node ranks: a permutation over the nodes sorted by name.
  std::vector<core::NodeIndex> nodes(static_cast<std::size_t>(cluster.size()));
  std::iota(nodes.begin(), nodes.end(), 0);
  std::sort(nodes.begin(), nodes.end(), [&](core::NodeIndex a, core::NodeIndex b) {
    return cluster.node(a).name < cluster.node(b).name;
  });
  core::Rng rank(seed, "node-rank");
  const std::vector<int> perm = rank.Permutation(cluster.size());
  plan.node_rank.assign(nodes.size(), 0);
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    plan.node_rank[static_cast<std::size_t>(nodes[i])] = perm[i];
  }
  return plan;
}

core::Result<ArrivalPlan> LoadReplay(const std::string& dir, std::span<const core::Request> pods,
                                     const core::Cluster& cluster) {
  static const std::string kIndexRange =
      "an index must be 0.." + std::to_string(core::kMaxGpusPerNode - 1) + " (a node has at most " +
      std::to_string(core::kMaxGpusPerNode) + " GPUs)";
  ArrivalPlan plan;
  plan.origin = "replay " + dir;
  plan.has_expected = true;
  auto bad = [](const CsvReader& csv, const std::string& what) {
    return tl::unexpected(csv.ErrorHere(what));
  };

  // nodes.csv: ranks, and the prefixed names used in arrival.csv.
  const std::string nodes_path = dir + "/nodes.csv";
  std::ifstream nodes_in(nodes_path);
  if (!nodes_in) return core::MakeError(core::ErrorCode::kIo, nodes_path + ": cannot open");
  CsvReader ncsv(nodes_in, nodes_path);
  if (auto h = ncsv.ReadHeader({"node_prefixed", "node", "prefix"}); !h) {
    return tl::unexpected(h.error());
  }
  plan.node_rank.assign(static_cast<std::size_t>(cluster.size()), -1);
  std::unordered_map<std::string, std::string> unprefixed;
  std::unordered_set<std::int64_t> seen_ranks;
  while (true) {
    auto more = ncsv.Next();
    if (!more) return tl::unexpected(more.error());
    if (!*more) break;
    const core::NodeIndex n = cluster.FindNode(ncsv.Field("node"));
    if (n < 0)
      return bad(ncsv, "node '" + std::string(ncsv.Field("node")) + "' is not in the cluster");
    auto rank = ncsv.Int("prefix");
    if (!rank) return tl::unexpected(rank.error());
    if (*rank < 0) return bad(ncsv, "negative prefix " + std::to_string(*rank));
    if (!seen_ranks.insert(*rank).second) {
      return bad(ncsv, "prefix " + std::to_string(*rank) +
                           " is given to two nodes (ranks must "
                           "be distinct: they break score ties)");
    }
    if (plan.node_rank[static_cast<std::size_t>(n)] >= 0) {
      return bad(ncsv, "node '" + std::string(ncsv.Field("node")) + "' is listed twice");
    }
    plan.node_rank[static_cast<std::size_t>(n)] = *rank;
    unprefixed[std::string(ncsv.Field("node_prefixed"))] = std::string(ncsv.Field("node"));
  }
  for (core::NodeIndex n = 0; n < cluster.size(); ++n) {
    if (plan.node_rank[static_cast<std::size_t>(n)] < 0) {
      return core::MakeError(core::ErrorCode::kInvalidArgument,
                             nodes_path + ": no rank for node " + cluster.node(n).name);
    }
  }

  std::unordered_map<std::string, std::size_t> pod_index;
  for (std::size_t i = 0; i < pods.size(); ++i) pod_index[pods[i].name] = i;
  const std::string arrival_path = dir + "/arrival.csv";
  std::ifstream arr_in(arrival_path);
  if (!arr_in) return core::MakeError(core::ErrorCode::kIo, arrival_path + ": cannot open");
  CsvReader acsv(arr_in, arrival_path);
  if (auto h = acsv.ReadHeader({"seq", "pod", "source_pod", "node", "gpu_index"}); !h) {
    return tl::unexpected(h.error());
  }
  while (true) {
    auto more = acsv.Next();
    if (!more) return tl::unexpected(more.error());
    if (!*more) break;
    auto it = pod_index.find(std::string(acsv.Field("source_pod")));
    if (it == pod_index.end()) {
      return bad(acsv, "source_pod '" + std::string(acsv.Field("source_pod")) +
                           "' is not in the pod list");
    }
    Arrival a{it->second, std::string(acsv.Field("pod")), {}, {}};
    const std::string node(acsv.Field("node"));
    if (!node.empty()) {
      auto u = unprefixed.find(node);
      if (u == unprefixed.end()) return bad(acsv, "node '" + node + "' is not in nodes.csv");
      a.expected_node = u->second;
    }
    // gpu_index: empty, or GPU indices joined by '-' ("0", "0-1-2-3"), each below
    // core::kMaxGpusPerNode.
    const std::string_view gpus = acsv.Field("gpu_index");
    std::size_t start = 0;
    while (start < gpus.size()) {
      std::size_t dash = gpus.find('-', start);
      if (dash == std::string_view::npos) dash = gpus.size();
      const std::string_view digits = gpus.substr(start, dash - start);
      const auto bad_index = [&](const char* why) {
        return bad(acsv, "bad gpu_index '" + std::string(gpus) + "': " + why);
      };
      if (digits.empty()) return bad_index("an empty index between dashes");
      std::int64_t g = 0;
      for (char c : digits) {
        if (c < '0' || c > '9') return bad_index("not an index");
        if (__builtin_mul_overflow(g, 10, &g) || __builtin_add_overflow(g, c - '0', &g) ||
            g >= core::kMaxGpusPerNode) {
          return bad_index(kIndexRange.c_str());
        }
      }
      a.expected_gpus.push_back(static_cast<int>(g));
      start = dash + 1;
    }
    plan.arrivals.push_back(std::move(a));
  }
  return plan;
}

}  // namespace gpumux::sim
