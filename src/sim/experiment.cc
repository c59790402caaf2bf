#include "gpumux/sim/experiment.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <optional>
#include <string_view>
#include <unordered_set>

#include "gpumux/core/check.h"
#include "gpumux/core/ledger.h"
#include "gpumux/core/plural.h"
#include "gpumux/core/rng.h"
#include "gpumux/policy/engine.h"
#include "gpumux/policy/registry.h"

namespace gpumux::sim {
namespace {

// numpy's pairwise summation (what pandas' Series.mean() uses for float64): exact same
// association order, so the study's means round the same way at .xx5 boundaries.
double PairwiseSum(const double* a, std::size_t n) {
  if (n < 8) {
    double s = 0.;
    for (std::size_t i = 0; i < n; ++i) s += a[i];
    return s;
  }
  if (n <= 128) {
    double r[8];
    for (std::size_t j = 0; j < 8; ++j) r[j] = a[j];
    std::size_t i = 8;
    for (; i < n - (n % 8); i += 8) {
      for (std::size_t j = 0; j < 8; ++j) r[j] += a[i + j];
    }
    double s = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i) s += a[i];
    return s;
  }
  std::size_t n2 = n / 2;
  n2 -= n2 % 8;
  return PairwiseSum(a, n2) + PairwiseSum(a + n2, n - n2);
}

double Mean(const std::vector<double>& v) {
  return PairwiseSum(v.data(), v.size()) / static_cast<double>(v.size());
}

// O(arrivals + columns): the arrivals are grouped by column once, and each bucket takes its
// values in arrival order (merging three columns by index for the X-1..X+1 fallback), which
// is the order, and so the floating-point sum, of a scan over all arrivals per column.
Curve Discretize(const std::vector<int>& arrive_pct, const std::vector<double>& values,
                 int max_column) {
  const auto columns = static_cast<std::size_t>(max_column) + 1;
  Curve curve(columns);
  std::vector<std::vector<std::size_t>> at(columns + 1);  // arrival indices per column
  for (std::size_t i = 0; i < arrive_pct.size(); ++i) {
    if (arrive_pct[i] >= 0 && static_cast<std::size_t>(arrive_pct[i]) <= columns) {
      at[static_cast<std::size_t>(arrive_pct[i])].push_back(i);
    }
  }
  std::vector<double> bucket;
  std::vector<std::size_t> merged;
  for (std::size_t x = 0; x < columns; ++x) {
    bucket.clear();
    if (!at[x].empty()) {
      for (std::size_t i : at[x]) bucket.push_back(values[i]);
    } else {
      merged.clear();
      if (x > 0) merged = at[x - 1];
      const std::size_t mid = merged.size();
      merged.insert(merged.end(), at[x + 1].begin(), at[x + 1].end());
      std::inplace_merge(merged.begin(), merged.begin() + static_cast<std::ptrdiff_t>(mid),
                         merged.end());
      for (std::size_t i : merged) bucket.push_back(values[i]);
    }
    if (!bucket.empty()) curve[x] = RoundHalfEven(Mean(bucket), 2);
  }
  return curve;
}

// "a-tuned-12" -> "a"; nothing for a name that is not "<something>-tuned-<digits>".
std::optional<std::string_view> CopyOf(std::string_view name) {
  constexpr std::string_view kTuned = "-tuned-";
  const std::size_t at = name.rfind(kTuned);
  if (at == std::string_view::npos || at == 0) return std::nullopt;
  const std::string_view digits = name.substr(at + kTuned.size());
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string_view::npos) {
    return std::nullopt;
  }
  return name.substr(0, at);
}

}  // namespace

std::size_t NumFeasibleNodesToFind(std::size_t nodes, int percentage) {
  // kube-scheduler v1.32: minFeasibleNodesToFind 100, minFeasibleNodesPercentageToFind 5,
  // basePercentageOfNodesToScore 50.
  constexpr std::size_t kMinNodes = 100;
  if (nodes < kMinNodes || percentage >= 100) return nodes;
  std::int64_t p = percentage;
  if (p <= 0) p = std::max<std::int64_t>(5, 50 - static_cast<std::int64_t>(nodes) / 125);
  return std::max(kMinNodes, nodes * static_cast<std::size_t>(p) / 100);
}

double RoundHalfEven(double x, int decimals) {
  if (decimals == 0) return std::nearbyint(x);  // default rounding mode: ties to even
  // printf rounds the exact binary value correctly (glibc), as Python's round() does.
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, x);
  return std::strtod(buf, nullptr);
}

std::optional<double> CurveColumn(const Curve& curve, int x) {
  return x >= 0 && static_cast<std::size_t>(x) < curve.size() ? curve[static_cast<std::size_t>(x)]
                                                              : std::nullopt;
}

int ArrivedColumn(core::MilliGpu arrived, std::int64_t total_gpus) {
  return static_cast<int>(
      RoundHalfEven(static_cast<double>(arrived) / static_cast<double>(total_gpus) / 10.0, 0));
}

core::Result<Workload> MakeWorkload(std::string name, std::vector<core::NodeSpec> nodes,
                                    std::vector<core::Request> pods) {
  auto cluster = core::Cluster::Build(std::move(nodes));
  if (!cluster) return tl::unexpected(cluster.error());
  if (cluster->total_gpus() == 0) {
    return core::MakeError(core::ErrorCode::kInvalidArgument,
                           "the node list has no GPUs: there is no GPU allocation to simulate");
  }
  std::unordered_set<std::string_view> names;
  for (const auto& p : pods) {
    if (auto ok = p.Validate(); !ok) return tl::unexpected(ok.error());
    names.insert(p.name);
  }
  for (const auto& p : pods) {
    if (auto original = CopyOf(p.name); original && names.count(*original) != 0) {
      return core::MakeError(core::ErrorCode::kInvalidArgument,
                             "pod '" + p.name + "' is named like a resampled copy of pod '" +
                                 std::string(*original) +
                                 "' (names '<pod>-tuned-<number>' are the copies' names)");
    }
  }
  Workload w{std::move(name), std::move(*cluster), std::move(pods), {}};
  w.typical = policy::ComputeTypicalPods(w.pods, w.cluster);
  return w;
}

namespace {

// A plan the simulator can run on the workload: a rank per node, all distinct, and arrivals
// of the workload's pods.
core::Result<void> CheckPlan(const Workload& workload, const ArrivalPlan& plan) {
  auto bad_plan = [&](const std::string& what) {
    return core::MakeError(core::ErrorCode::kInvalidArgument, plan.origin + ": " + what);
  };
  const core::Cluster& cluster = workload.cluster;
  if (plan.node_rank.size() != static_cast<std::size_t>(cluster.size())) {
    return bad_plan(std::to_string(plan.node_rank.size()) + " node ranks for " +
                    core::Plural(cluster.size(), "node"));
  }
  std::vector<std::int64_t> ranks = plan.node_rank;
  std::sort(ranks.begin(), ranks.end());
  if (std::adjacent_find(ranks.begin(), ranks.end()) != ranks.end()) {
    return bad_plan("two nodes have the same rank (ranks break score ties: they must differ)");
  }
  for (const Arrival& a : plan.arrivals) {
    if (a.pod >= workload.pods.size()) {
      return bad_plan("arrival '" + a.name + "' names pod #" + std::to_string(a.pod) + " of " +
                      std::to_string(workload.pods.size()));
    }
  }
  return {};
}

std::string GpuList(const std::vector<int>& g) {
  std::string s;
  for (int i : g) {
    if (!s.empty()) s += '-';
    s += std::to_string(i);
  }
  return s;
}

// Fragmentation and idle capacity per node, refreshed when a node changes, and the idle total.
class NodeStats {
 public:
  NodeStats(const core::Ledger& ledger, const std::vector<policy::TypicalPod>& typical)
      : ledger_(ledger), typical_(typical) {
    const auto nodes = static_cast<std::size_t>(ledger.cluster().size());
    frag_.resize(nodes);
    idle_.resize(nodes);
    for (core::NodeIndex n = 0; n < ledger.cluster().size(); ++n) Refresh(n);
    for (auto m : idle_) idle_total_ += m;
  }

  void Changed(core::NodeIndex n) {
    idle_total_ -= idle_[static_cast<std::size_t>(n)];
    Refresh(n);
    idle_total_ += idle_[static_cast<std::size_t>(n)];
  }
  core::MilliGpu idle() const { return idle_total_; }
  // Fragmented share of the idle GPU capacity, in percent.
  double FragPct() const {
    double frag = 0;
    for (double f : frag_) frag += f;
    return idle_total_ > 0 ? frag / static_cast<double>(idle_total_) * 100.0 : 0.0;
  }

 private:
  void Refresh(core::NodeIndex n) {
    const core::NodeView v = ledger_.Node(n);
    const core::ModelId model = v.gpu_count() > 0 ? v.gpu_model[0] : 0;
    frag_[static_cast<std::size_t>(n)] =
        policy::NodeFragmentation(v.cpu_free, v.gpu_free_milli, model, typical_);
    idle_[static_cast<std::size_t>(n)] = v.gpu_free_milli_total();
  }

  const core::Ledger& ledger_;
  const std::vector<policy::TypicalPod>& typical_;
  std::vector<double> frag_;
  std::vector<core::MilliGpu> idle_;
  core::MilliGpu idle_total_ = 0;
};

// One experiment: the arrivals in order, each decided by the engine and assigned in the
// ledger, with the study's measures taken after each.
class Experiment {
 public:
  Experiment(const Workload& workload, const ArrivalPlan& plan, policy::Policy& pol,
             std::uint64_t seed, const ExperimentOptions& options)
      : workload_(workload),
        plan_(plan),
        options_(options),
        ledger_(workload.cluster),
        rng_(seed, "policy"),
        engine_(ledger_, pol, plan.node_rank, rng_),
        stats_(ledger_, workload.typical) {
    const std::size_t n = plan.arrivals.size();
    arrive_pct_.reserve(n);
    alloc_pct_.reserve(n);
    frag_pct_.reserve(n);
    idle_after_.reserve(n);
  }

  core::Result<void> Run(ExperimentResult& res, std::chrono::steady_clock::time_point start) {
    auto last_report = start;
    for (std::size_t seq = 0; seq < plan_.arrivals.size(); ++seq) {
      if (options_.progress && seq % 64 == 0 && seq > 0) {
        const auto now = std::chrono::steady_clock::now();
        if (now - last_report >= options_.progress_interval) {
          last_report = now;
          options_.progress(ExperimentProgress{res.policy, res.seed, seq, plan_.arrivals.size(),
                                               std::chrono::duration<double>(now - start).count()});
        }
      }
      if (auto ok = Arrive(seq, res); !ok) return ok;
    }
    return {};
  }

  // The curves and the measures at 100% and 130% arrived.
  void Finish(ExperimentResult& res, double load) const {
    const int max_column = std::max(130, static_cast<int>(std::ceil(load * 100.0 - 1e-9)));
    res.pods = static_cast<std::int64_t>(plan_.arrivals.size());
    res.alloc_curve = Discretize(arrive_pct_, alloc_pct_, max_column);
    res.frag_ratio_curve = Discretize(arrive_pct_, frag_pct_, max_column);
    res.alloc_pct_at_100 = CurveColumn(res.alloc_curve, 100);
    res.alloc_pct_at_130 = CurveColumn(res.alloc_curve, 130);
    At(100, res.unallocated_gpus_at_100, res.frag_pct_at_100);
    At(130, res.unallocated_gpus_at_130, res.frag_pct_at_130);
    res.used_gpu_milli = ledger_.used_gpu_milli();
    res.busy_gpus = ledger_.busy_gpus();
    res.used_cpu_milli = ledger_.used_cpu_milli();
  }

 private:
  core::Result<void> Arrive(std::size_t seq, ExperimentResult& res) {
    const Arrival& a = plan_.arrivals[seq];
    const core::Request& pod = workload_.pods[a.pod];
    arrived_ += pod.total_gpu_milli();
    policy::Decision d =
        options_.percentage_of_nodes_to_score >= 100 ? engine_.Decide(pod) : DecideSampled(pod);
    PlacementRecord rec{seq, a.name, pod.name, -1, {}};
    if (d.placement) {
      auto assigned = ledger_.Assign(a.name, d.request, *d.placement);
      if (!assigned && assigned.error().code == core::ErrorCode::kAlreadyExists) {
        return core::MakeError(core::ErrorCode::kInvalidArgument,
                               plan_.origin + ": arrival " + std::to_string(seq) + ": pod '" +
                                   a.name + "' arrives twice (arrival names must be distinct)");
      }
      GPUMUX_CHECK(assigned.has_value(), "engine chose a placement the ledger refuses");
      ++res.placed;
      stats_.Changed(d.placement->node);
      rec.node = d.placement->node;
      rec.gpus = d.placement->gpus;
    } else {
      ++res.failed_pods;
    }
    if (options_.check_invariants) ledger_.CheckInvariants();
    if (plan_.has_expected) Compare(a, rec, res);
    if (options_.record_placements) res.placements.push_back(std::move(rec));
    const auto total_gpus = static_cast<double>(workload_.cluster.total_gpus());
    arrive_pct_.push_back(ArrivedColumn(arrived_, workload_.cluster.total_gpus()));
    alloc_pct_.push_back(
        RoundHalfEven(static_cast<double>(ledger_.used_gpu_milli()) / total_gpus / 10.0, 2));
    frag_pct_.push_back(stats_.FragPct());
    idle_after_.push_back(stats_.idle());
    return {};
  }

  // kube-scheduler's sampling (ExperimentOptions::percentage_of_nodes_to_score): the nodes that
  // fit, met from next_start_ on, until enough are found (the window); the policy scores only
  // the window (a policy that draws among the feasible nodes, such as random, draws there) and
  // its best wins (ties: the smaller rank, as Engine::Decide); the next arrival starts past the
  // nodes examined. Approximation: kube-scheduler counts the nodes that pass its own per-node
  // sums before the extender filters per GPU, so near saturation its window can hold fewer
  // nodes that really fit than this one.
  policy::Decision DecideSampled(const core::Request& pod) {
    const auto n = static_cast<std::size_t>(workload_.cluster.size());
    if (all_nodes_.size() != n) {
      all_nodes_.resize(n);
      std::iota(all_nodes_.begin(), all_nodes_.end(), core::NodeIndex{0});
    }
    const std::vector<std::int64_t> fit = engine_.ScoreNodes(pod, all_nodes_);
    const std::size_t want = NumFeasibleNodesToFind(n, options_.percentage_of_nodes_to_score);
    window_.clear();
    std::size_t examined = 0;
    for (; examined < n && window_.size() < want; ++examined) {
      const std::size_t i = (next_start_ + examined) % n;
      if (fit[i] != policy::Engine::kNoFit) window_.push_back(static_cast<core::NodeIndex>(i));
    }
    next_start_ = n == 0 ? 0 : (next_start_ + examined) % n;
    const std::vector<std::int64_t> scores = engine_.ScoreNodes(pod, window_);
    window_ranks_.clear();
    for (core::NodeIndex i : window_) {
      window_ranks_.push_back(plan_.node_rank[static_cast<std::size_t>(i)]);
    }
    const std::optional<std::size_t> best = policy::ChooseBest(scores, window_ranks_);
    if (!best) {
      policy::Decision none;
      none.request = pod;
      none.feasible_nodes = static_cast<int>(window_.size());
      none.declined = !window_.empty();
      return none;
    }
    return engine_.DecideOn(pod, window_[*best]);
  }

  // A replay: counts the placements that differ from the study's, describing the first.
  void Compare(const Arrival& a, const PlacementRecord& rec, ExperimentResult& res) const {
    const std::string got = rec.node >= 0 ? workload_.cluster.node(rec.node).name : "";
    if (got == a.expected_node && rec.gpus == a.expected_gpus) return;
    if (res.replay_mismatches++ != 0) return;
    res.first_mismatch = "seq " + std::to_string(rec.seq) + " " + a.name + ": study " +
                         (a.expected_node.empty() ? "failed" : a.expected_node) + " [" +
                         GpuList(a.expected_gpus) + "], gpumux " + (got.empty() ? "failed" : got) +
                         " [" + GpuList(rec.gpus) + "]";
  }

  // State at the last arrival whose rounded arrived% is <= x.
  void At(int x, double& unallocated, double& frag) const {
    for (std::size_t i = arrive_pct_.size(); i-- > 0;) {
      if (arrive_pct_[i] <= x) {
        unallocated = static_cast<double>(idle_after_[i]) / core::kMilliPerGpu;
        frag = frag_pct_[i];
        return;
      }
    }
  }

  const Workload& workload_;
  const ArrivalPlan& plan_;
  const ExperimentOptions& options_;
  core::Ledger ledger_;
  core::Rng rng_;
  policy::Engine engine_;
  NodeStats stats_;
  core::MilliGpu arrived_ = 0;
  std::vector<core::NodeIndex> all_nodes_;  // DecideSampled: every node, in index order
  std::vector<core::NodeIndex> window_;     // DecideSampled: the nodes sampled for this pod
  std::vector<std::int64_t> window_ranks_;  // DecideSampled: their ranks
  std::size_t next_start_ = 0;              // DecideSampled: where the next search begins
  std::vector<int> arrive_pct_;
  std::vector<double> alloc_pct_;
  std::vector<double> frag_pct_;
  std::vector<core::MilliGpu> idle_after_;
};

}  // namespace

core::Result<ExperimentResult> RunExperiment(const Workload& workload, const ArrivalPlan& plan,
                                             const std::string& policy_name, std::uint64_t seed,
                                             double load, const ExperimentOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  policy::PolicyContext context;
  context.typical_pods = workload.typical;
  context.knobs = options.knobs;
  auto made = policy::BuiltinPolicies().Make(policy_name, context);
  if (!made) return tl::unexpected(made.error());
  std::unique_ptr<policy::Policy> pol = std::move(*made);
  if (!(load > 0 && load <= kMaxLoad)) {
    return core::MakeError(core::ErrorCode::kInvalidArgument,
                           "load " + std::to_string(load) + " is outside (0, " +
                               std::to_string(static_cast<int>(kMaxLoad)) + "]");
  }
  if (auto ok = CheckPlan(workload, plan); !ok) return tl::unexpected(ok.error());

  ExperimentResult res;
  res.workload = workload.name;
  res.policy = policy_name;
  res.seed = seed;
  res.load = load;
  res.origin = plan.origin;
  if (plan.has_expected) res.replay_mismatches = 0;
  Experiment experiment(workload, plan, *pol, seed, options);
  if (auto ok = experiment.Run(res, start); !ok) return tl::unexpected(ok.error());
  experiment.Finish(res, load);
  res.wall_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return res;
}

}  // namespace gpumux::sim
