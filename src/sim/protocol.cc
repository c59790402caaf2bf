#include "gpumux/sim/protocol.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "gpumux/core/check.h"
#include "gpumux/core/cluster.h"
#include "gpumux/core/plural.h"
#include "gpumux/core/rng.h"
#include "gpumux/io/csv.h"
#include "src/sim/input_file.h"

namespace gpumux::sim {

using io::CsvReader;
namespace {

std::string Number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

std::vector<std::size_t> ByName(std::span<const core::Request> pods) {
  std::vector<std::size_t> order(pods.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return pods[a].name < pods[b].name; });
  return order;
}

// The positions 0..n-1 of a list from which elements are removed one at a time by their rank
// among those left (what vector::erase(begin() + k) does to indices), in O(log n) per removal
// instead of O(n): a Fenwick tree of 0/1 counts, searched by binary lifting.
class Survivors {
 public:
  explicit Survivors(std::size_t n) : tree_(n + 1, 0), top_(1) {
    for (std::size_t i = 1; i <= n; ++i) {  // O(n) build: every position present
      tree_[i] += 1;
      const std::size_t parent = i + (i & (~i + 1));
      if (parent <= n) tree_[parent] += tree_[i];
    }
    while (top_ * 2 <= n) top_ *= 2;
  }
  // Removes the k-th (0-based) position still present; returns it. k < the number present.
  std::size_t RemoveKth(std::size_t k) {
    const std::size_t n = tree_.size() - 1;
    std::size_t pos = 0;
    for (std::size_t step = top_; step > 0; step >>= 1) {
      if (pos + step <= n && tree_[pos + step] <= k) {
        pos += step;
        k -= tree_[pos];
      }
    }
    for (std::size_t i = pos + 1; i <= n; i += i & (~i + 1)) --tree_[i];
    return pos;
  }

 private:
  std::vector<std::size_t> tree_;  // 1-based
  std::size_t top_;                // the largest power of two <= n (1 when n is 0)
};

// Steps 1 and 2 of the protocol: the shuffled (and possibly thinned) pod order and the pods
// copied to reach the load, or the limit error as soon as the plan would pass max_arrivals.
struct Resampled {
  std::vector<std::size_t> order;   // pod indices, in arrival order
  std::vector<std::size_t> copies;  // pod indices of the "-tuned-<i>" copies, after `order`
};

core::Result<Resampled> Resample(std::span<const core::Request> pods,
                                 const std::vector<std::size_t>& by_name,
                                 const core::Cluster& cluster, std::uint64_t seed, double load,
                                 const ArrivalLimit& limit) {
  const std::size_t max_arrivals = limit.max;
  auto too_many = [&] {
    return core::MakeError(core::ErrorCode::kFailedPrecondition,
                           "seed " + std::to_string(seed) + ": resampling the " +
                               core::Plural(pods.size(), "pod") + " to load " + Number(load) +
                               " makes " + limit.TooMany());
  };
  Resampled r;
  r.order = by_name;
  core::Rng shuffle(seed, "shuffle");
  shuffle.Shuffle(std::span<std::size_t>(r.order));

  const double target = load * static_cast<double>(cluster.total_gpu_milli());
  core::MilliGpu total = TotalGpuMilli(pods);
  core::Rng tune(seed, "tune");
  const bool any_gpu_pod =
      std::any_of(pods.begin(), pods.end(), [](const core::Request& p) { return p.wants_gpu(); });
  if (!any_gpu_pod) {
    // Nothing to resample towards: copies would add no GPU demand, forever.
  } else if (static_cast<double>(total) < target) {
    while (true) {
      const std::size_t pick = by_name[static_cast<std::size_t>(tune.Below(by_name.size()))];
      if (static_cast<double>(total + pods[pick].gpu_milli) > target) break;
      if (r.order.size() + r.copies.size() >= max_arrivals) return too_many();
      r.copies.push_back(pick);
      total += pods[pick].total_gpu_milli();
    }
  } else {
    // Uniform removals by rank among the pods left, as order.erase(begin() + victim) would
    // make them (the same draws, the same survivors in the same order).
    Survivors left(r.order.size());
    std::vector<bool> removed(r.order.size(), false);
    std::size_t remaining = r.order.size();
    while (static_cast<double>(total) > target && remaining > 0) {
      const std::size_t victim = left.RemoveKth(static_cast<std::size_t>(tune.Below(remaining)));
      removed[victim] = true;
      total -= pods[r.order[victim]].total_gpu_milli();
      --remaining;
    }
    std::size_t kept = 0;
    for (std::size_t i = 0; i < r.order.size(); ++i) {
      if (!removed[i]) r.order[kept++] = r.order[i];
    }
    r.order.resize(kept);
  }
  if (r.order.size() + r.copies.size() > max_arrivals) return too_many();
  return r;
}

}  // namespace

core::MilliGpu TotalGpuMilli(std::span<const core::Request> pods) {
  core::MilliGpu total = 0;
  for (const auto& p : pods) total += p.total_gpu_milli();
  return total;
}

core::Result<std::size_t> CountStudyArrivals(std::span<const core::Request> pods,
                                             const core::Cluster& cluster, std::uint64_t seed,
                                             double load, const ArrivalLimit& limit) {
  auto r = Resample(pods, ByName(pods), cluster, seed, load, limit);
  if (!r) return tl::unexpected(r.error());
  return r->order.size() + r->copies.size();
}

core::Result<void> CheckStudyArrivals(std::span<const core::Request> pods,
                                      const core::Cluster& cluster,
                                      std::span<const std::uint64_t> seeds, double load,
                                      const ArrivalLimit& limit) {
  const double target = load * static_cast<double>(cluster.total_gpu_milli());
  if (pods.size() <= limit.max && !(static_cast<double>(TotalGpuMilli(pods)) < target)) {
    return {};  // every seed only removes pods (or none): at most pods.size() arrivals
  }
  const std::vector<std::size_t> by_name = ByName(pods);
  for (std::uint64_t seed : seeds) {
    if (auto r = Resample(pods, by_name, cluster, seed, load, limit); !r) {
      return tl::unexpected(r.error());
    }
  }
  return {};
}

core::Result<ArrivalPlan> MakeStudyArrivals(std::span<const core::Request> pods,
                                            const core::Cluster& cluster, std::uint64_t seed,
                                            double load, const ArrivalLimit& limit) {
  auto r = Resample(pods, ByName(pods), cluster, seed, load, limit);
  if (!r) return tl::unexpected(r.error());
  ArrivalPlan plan;
  plan.origin = "seed " + std::to_string(seed);
  plan.arrivals.reserve(r->order.size() + r->copies.size());
  for (std::size_t p : r->order) plan.arrivals.push_back(Arrival{p, pods[p].name, {}, {}});
  for (std::size_t i = 0; i < r->copies.size(); ++i) {
    const std::size_t p = r->copies[i];
    plan.arrivals.push_back(Arrival{p, pods[p].name + "-tuned-" + std::to_string(i), {}, {}});
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

ArrivalPlan MakeStudyArrivals(std::span<const core::Request> pods, const core::Cluster& cluster,
                              std::uint64_t seed, double load) {
  auto plan = MakeStudyArrivals(pods, cluster, seed, load, ArrivalLimit{SIZE_MAX, ""});
  GPUMUX_CHECK(plan.has_value(), "a plan without a limit cannot pass it");
  return std::move(*plan);
}

namespace {

// gpu_index: empty, or GPU indices joined by '-' ("0", "0-1-2-3"), each below
// core::kMaxGpusPerNode.
core::Result<std::vector<int>> ParseGpuIndex(const CsvReader& csv) {
  static const std::string kIndexRange =
      "an index must be 0.." + std::to_string(core::kMaxGpusPerNode - 1) + " (a node has at most " +
      std::to_string(core::kMaxGpusPerNode) + " GPUs)";
  const std::string_view gpus = csv.Field("gpu_index");
  std::vector<int> out;
  std::size_t start = 0;
  while (start < gpus.size()) {
    std::size_t dash = gpus.find('-', start);
    if (dash == std::string_view::npos) dash = gpus.size();
    const std::string_view digits = gpus.substr(start, dash - start);
    const auto bad_index = [&](const std::string& why) {
      return tl::unexpected(csv.ErrorHere("bad gpu_index '" + std::string(gpus) + "': " + why));
    };
    if (digits.empty()) return bad_index("an empty index between dashes");
    std::int64_t g = 0;
    for (char c : digits) {
      if (c < '0' || c > '9') return bad_index("not an index");
      if (__builtin_mul_overflow(g, 10, &g) || __builtin_add_overflow(g, c - '0', &g) ||
          g >= core::kMaxGpusPerNode) {
        return bad_index(kIndexRange);
      }
    }
    if (std::find(out.begin(), out.end(), static_cast<int>(g)) != out.end()) {
      return bad_index("GPU " + std::to_string(g) + " is listed twice");
    }
    out.push_back(static_cast<int>(g));
    start = dash + 1;
  }
  return out;
}

tl::unexpected<core::Error> BadRow(const CsvReader& csv, const std::string& what) {
  return tl::unexpected(csv.ErrorHere(what));
}

using Unprefixed = std::unordered_map<std::string, core::NodeIndex>;

// nodes.csv: a distinct rank per node of the cluster (into plan.node_rank), and the prefixed
// names that arrival.csv uses.
core::Result<Unprefixed> ReadNodeRanks(std::istream& nodes_csv, const std::string& nodes_source,
                                       const core::Cluster& cluster, ArrivalPlan& plan) {
  CsvReader ncsv(nodes_csv, nodes_source);
  if (auto h = ncsv.ReadHeader({"node_prefixed", "node", "prefix"}); !h) {
    return tl::unexpected(h.error());
  }
  plan.node_rank.assign(static_cast<std::size_t>(cluster.size()), -1);
  Unprefixed unprefixed;
  std::vector<bool> rank_taken(static_cast<std::size_t>(cluster.size()), false);
  while (true) {
    auto more = ncsv.Next();
    if (!more) return tl::unexpected(more.error());
    if (!*more) break;
    const std::string node(ncsv.Field("node"));
    const core::NodeIndex n = cluster.FindNode(node);
    if (n < 0) return BadRow(ncsv, "node '" + node + "' is not in the cluster");
    auto rank = ncsv.Int("prefix");
    if (!rank) return tl::unexpected(rank.error());
    if (*rank < 0 || *rank >= cluster.size()) {
      return BadRow(ncsv, "prefix " + std::to_string(*rank) + " is outside 0.." +
                              std::to_string(cluster.size() - 1) + " (a rank among the cluster's " +
                              core::Plural(cluster.size(), "node") + ")");
    }
    if (rank_taken[static_cast<std::size_t>(*rank)]) {
      return BadRow(ncsv, "prefix " + std::to_string(*rank) +
                              " is given to two nodes (ranks must "
                              "be distinct: they break score ties)");
    }
    if (plan.node_rank[static_cast<std::size_t>(n)] >= 0) {
      return BadRow(ncsv, "node '" + node + "' is listed twice");
    }
    const std::string prefixed(ncsv.Field("node_prefixed"));
    if (prefixed.empty()) return BadRow(ncsv, "empty node_prefixed");
    if (!unprefixed.emplace(prefixed, n).second) {
      return BadRow(ncsv, "node_prefixed '" + prefixed + "' is listed twice");
    }
    rank_taken[static_cast<std::size_t>(*rank)] = true;
    plan.node_rank[static_cast<std::size_t>(n)] = *rank;
  }
  for (core::NodeIndex n = 0; n < cluster.size(); ++n) {
    if (plan.node_rank[static_cast<std::size_t>(n)] < 0) {
      return core::MakeError(core::ErrorCode::kInvalidArgument,
                             nodes_source + ": no rank for node " + cluster.node(n).name);
    }
  }
  return unprefixed;
}

// The study's placement of an arrival of `pod` (the row's node and gpu_index columns).
core::Result<void> ReadExpected(const CsvReader& acsv, const core::Request& pod,
                                const std::string& source, const Unprefixed& unprefixed,
                                const core::Cluster& cluster, Arrival& a) {
  auto gpus = ParseGpuIndex(acsv);
  if (!gpus) return tl::unexpected(gpus.error());
  a.expected_gpus = std::move(*gpus);
  const std::string node(acsv.Field("node"));
  if (node.empty()) {
    if (!a.expected_gpus.empty()) {
      return BadRow(acsv, "gpu_index '" + std::string(acsv.Field("gpu_index")) +
                              "' for an arrival the study failed (no node)");
    }
    return {};
  }
  auto u = unprefixed.find(node);
  if (u == unprefixed.end()) return BadRow(acsv, "node '" + node + "' is not in nodes.csv");
  const core::NodeSpec& spec = cluster.node(u->second);
  a.expected_node = spec.name;
  const std::size_t want = pod.wants_gpu() ? static_cast<std::size_t>(pod.gpu_count) : 0;
  if (a.expected_gpus.size() != want) {
    return BadRow(acsv, "gpu_index '" + std::string(acsv.Field("gpu_index")) + "' names " +
                            core::Plural(a.expected_gpus.size(), "GPU") + " but pod '" + source +
                            "' asks " + std::to_string(want));
  }
  for (int g : a.expected_gpus) {
    if (static_cast<std::size_t>(g) >= spec.gpus.size()) {
      return BadRow(acsv, "gpu_index '" + std::string(acsv.Field("gpu_index")) + "': node " +
                              spec.name + " has " + core::Plural(spec.gpus.size(), "GPU"));
    }
  }
  return {};
}

}  // namespace

core::Result<ArrivalPlan> ParseReplay(std::istream& nodes_csv, const std::string& nodes_source,
                                      std::istream& arrival_csv, const std::string& arrival_source,
                                      std::span<const core::Request> pods,
                                      const core::Cluster& cluster, const ArrivalLimit& limit) {
  ArrivalPlan plan;
  plan.origin = "replay " + arrival_source;
  plan.has_expected = true;
  auto unprefixed = ReadNodeRanks(nodes_csv, nodes_source, cluster, plan);
  if (!unprefixed) return tl::unexpected(unprefixed.error());

  std::unordered_map<std::string, std::size_t> pod_index;
  for (std::size_t i = 0; i < pods.size(); ++i) pod_index[pods[i].name] = i;
  CsvReader acsv(arrival_csv, arrival_source);
  if (auto h = acsv.ReadHeader({"seq", "pod", "source_pod", "node", "gpu_index"}); !h) {
    return tl::unexpected(h.error());
  }
  std::unordered_map<std::string, int> first_line;  // arrival name -> its line
  while (true) {
    auto more = acsv.Next();
    if (!more) return tl::unexpected(more.error());
    if (!*more) break;
    const std::size_t expected_seq = plan.arrivals.size();
    if (expected_seq == limit.max) return BadRow(acsv, limit.TooMany());
    auto seq = acsv.Int("seq");
    if (!seq) return tl::unexpected(seq.error());
    if (*seq < 0 || static_cast<std::uint64_t>(*seq) != expected_seq) {
      return BadRow(acsv, "seq " + std::to_string(*seq) + " where " + std::to_string(expected_seq) +
                              " is expected (arrivals are numbered 0, 1, 2, ... in row order)");
    }
    const std::string name(acsv.Field("pod"));
    if (name.empty()) return BadRow(acsv, "empty pod name (column 'pod')");
    if (auto [it, fresh] = first_line.emplace(name, acsv.line()); !fresh) {
      return BadRow(acsv, "pod '" + name + "' arrives twice (first on line " +
                              std::to_string(it->second) + ")");
    }
    const std::string source(acsv.Field("source_pod"));
    auto it = pod_index.find(source);
    if (it == pod_index.end()) {
      return BadRow(acsv, "source_pod '" + source + "' is not in the pod list");
    }
    Arrival a{it->second, name, {}, {}};
    if (auto ok = ReadExpected(acsv, pods[it->second], source, *unprefixed, cluster, a); !ok) {
      return tl::unexpected(ok.error());
    }
    plan.arrivals.push_back(std::move(a));
  }
  if (plan.arrivals.empty()) {
    return core::MakeError(core::ErrorCode::kInvalidArgument, arrival_source + ": no arrivals");
  }
  return plan;
}

core::Result<ArrivalPlan> LoadReplay(const std::string& dir, std::span<const core::Request> pods,
                                     const core::Cluster& cluster, const ArrivalLimit& limit) {
  const std::string arrival_path = dir + "/arrival.csv";
  const std::string nodes_path = dir + "/nodes.csv";
  auto arrivals = ReadSimInput(arrival_path);
  if (!arrivals) return tl::unexpected(arrivals.error());
  auto nodes = ReadSimInput(nodes_path);
  if (!nodes) return tl::unexpected(nodes.error());
  ViewStream arrival_in(*arrivals);
  ViewStream nodes_in(*nodes);
  auto plan = ParseReplay(nodes_in, nodes_path, arrival_in, arrival_path, pods, cluster, limit);
  if (plan) plan->origin = "replay " + dir;
  return plan;
}

}  // namespace gpumux::sim
