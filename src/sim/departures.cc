#include "gpumux/sim/departures.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <queue>
#include <tuple>
#include <utility>

#include "gpumux/core/check.h"
#include "gpumux/core/ledger.h"
#include "gpumux/core/rng.h"
#include "gpumux/policy/engine.h"
#include "gpumux/policy/registry.h"

namespace gpumux::sim {

std::string_view PodKindName(PodKind kind) {
  switch (kind) {
    case PodKind::kShare:
      return "share";
    case PodKind::kWhole:
      return "whole";
    case PodKind::kMulti:
      return "multi";
  }
  return "?";
}

PodKind KindOf(const core::Request& r) {
  if (r.gpu_count > 1) return PodKind::kMulti;
  return r.gpu_milli < core::kMilliPerGpu ? PodKind::kShare : PodKind::kWhole;
}

core::Result<std::vector<double>> PodDurations(std::span<const TracePod> timed, std::uint64_t seed,
                                               double max_duration_s) {
  std::vector<double> known;
  for (const TracePod& p : timed) {
    if (p.RunSeconds() > 0) known.push_back(static_cast<double>(p.RunSeconds()));
  }
  if (known.empty()) {
    return core::MakeError(core::ErrorCode::kInvalidArgument,
                           "no pod of the list has a run time (deletion_time after its "
                           "scheduled_time or creation_time): departures need durations");
  }
  core::Rng rng(seed, "durations");
  std::vector<double> out;
  out.reserve(timed.size());
  for (const TracePod& p : timed) {
    const double d = p.RunSeconds() > 0 ? static_cast<double>(p.RunSeconds())
                                        : known[static_cast<std::size_t>(rng.Below(known.size()))];
    out.push_back(std::min(d, max_duration_s));
  }
  return out;
}

namespace {

// The state of one run: the ledger and engine, the clock and what is measured.
class DepartureRun {
 public:
  DepartureRun(const Workload& workload, const ArrivalPlan& plan, std::span<const double> durations,
               std::vector<double> arrive_at, policy::Policy& pol, std::uint64_t seed,
               double warmup_s)
      : w_(workload),
        plan_(plan),
        durations_(durations),
        arrive_at_(std::move(arrive_at)),
        ledger_(workload.cluster),
        rng_(seed, "policy"),
        engine_(ledger_, pol, plan.node_rank, rng_),
        pol_(pol),
        hold_s_(static_cast<double>(pol.HoldLimitSeconds())),
        placed_at_(plan.arrivals.size(), -1),
        node_of_(plan.arrivals.size(), -1) {
    std::size_t shapes = 0;
    shape_of_pod_ = Shapes(workload, shapes);
    queues_.resize(shapes);
    start_ = arrive_at_.empty() ? 0 : arrive_at_.front();
    span_ = arrive_at_.empty() ? 0 : arrive_at_.back() - start_;
    measure_from_ = start_ + std::min(warmup_s, span_ / 2);
    epoch_ = pol_.ScoreEpoch(ledger_);
  }

  void Run() {
    for (std::size_t i = 0; i < plan_.arrivals.size(); ++i) {
      DrainUntil(arrive_at_[i]);
      Advance(arrive_at_[i]);
      if (!TryPlace(i, /*only_node=*/-1)) {
        queues_[ShapeOf(i)].push_back(i);
        if (hold_s_ > 0) overdue_.push({arrive_at_[i] + hold_s_, i});
      }
    }
    Advance(start_ + span_);
    Sample(start_ + span_ + 1);  // the last column
  }

  void Finish(DepartureResult& res) const {
    res.span_s = span_;
    res.warmup_s = measure_from_ - start_;
    res.pods = static_cast<std::int64_t>(plan_.arrivals.size());
    const double measured = start_ + span_ - measure_from_;
    res.mean_alloc_pct = measured > 0 ? area_ / measured / Capacity() * 100.0 : 0.0;
    res.alloc_over_time = columns_;
    std::array<std::vector<double>, 3> waits;
    for (std::size_t i = 0; i < plan_.arrivals.size(); ++i) {
      const core::Request& r = Pod(i);
      if (!r.wants_gpu()) continue;
      const auto k = static_cast<std::size_t>(KindOf(r));
      KindWaits& kw = res.waits[k];
      ++kw.arrived;
      if (placed_at_[i] < 0) {
        ++kw.never_placed;
        continue;
      }
      ++kw.placed;
      const double wait = placed_at_[i] - arrive_at_[i];
      if (wait > 0) ++kw.waited;
      waits[k].push_back(wait);
    }
    for (std::size_t k = 0; k < waits.size(); ++k) {
      std::vector<double>& v = waits[k];
      if (v.empty()) continue;
      double sum = 0;
      for (double x : v) sum += x;
      res.waits[k].mean_wait_s = sum / static_cast<double>(v.size());
      std::sort(v.begin(), v.end());
      res.waits[k].p95_wait_s =
          v[static_cast<std::size_t>(0.95 * static_cast<double>(v.size() - 1))];
    }
  }

 private:
  const core::Request& Pod(std::size_t i) const { return w_.pods[plan_.arrivals[i].pod]; }
  double Capacity() const { return static_cast<double>(w_.cluster.total_gpu_milli()); }

  // Departures and overdue events up to time t, in time order.
  void DrainUntil(double t) {
    for (;;) {
      const bool dep = !departures_.empty() && departures_.top().first <= t;
      const bool due = !overdue_.empty() && overdue_.top().first <= t;
      if (!dep && !due) return;
      if (dep && (!due || departures_.top().first <= overdue_.top().first)) {
        const auto [when, i] = departures_.top();
        departures_.pop();
        Advance(when);
        const core::NodeIndex node = node_of_[i];
        GPUMUX_CHECK(ledger_.Release(plan_.arrivals[i].name).has_value(),
                     "a departing pod is in the ledger");
        RetryQueue(node);
      } else {
        const auto [when, i] = overdue_.top();
        overdue_.pop();
        Advance(when);
        std::deque<std::size_t>& q = queues_[ShapeOf(i)];
        const auto it = std::find(q.begin(), q.end(), i);
        if (it != q.end() && TryPlace(i, -1)) q.erase(it);
      }
    }
  }

  // After node `freed` changed: a queued pod fits nowhere else that it did not before, unless
  // the policy's score epoch changed (e.g. idle GPUs no longer scarce), then everywhere. The
  // queue is retried in arrival order; once a pod of one shape does not fit, the later pods of
  // that shape are not tried (they would not fit either: the ledger did not change, and they are
  // no more overdue than it).
  void RetryQueue(core::NodeIndex freed) {
    const std::uint64_t epoch = pol_.ScoreEpoch(ledger_);
    const core::NodeIndex only = epoch == epoch_ ? freed : -1;
    epoch_ = epoch;
    MinHeap heads;  // (arrival index, shape) of each shape's oldest queued pod
    for (std::size_t shape = 0; shape < queues_.size(); ++shape) {
      if (!queues_[shape].empty()) heads.push({static_cast<double>(queues_[shape].front()), shape});
    }
    while (!heads.empty()) {
      const std::size_t shape = heads.top().second;
      heads.pop();
      std::deque<std::size_t>& q = queues_[shape];
      if (!TryPlace(q.front(), only)) continue;
      q.pop_front();
      if (!q.empty()) heads.push({static_cast<double>(q.front()), shape});
    }
  }

  // Pods with the same request are one shape (index into queues_).
  std::size_t ShapeOf(std::size_t i) const { return shape_of_pod_[plan_.arrivals[i].pod]; }
  static std::vector<std::size_t> Shapes(const Workload& w, std::size_t& count) {
    using Key = std::tuple<core::MilliCpu, core::MiB, int, core::MilliGpu, core::MiB,
                           core::GpuSharing, std::vector<std::string>>;
    std::map<Key, std::size_t> ids;
    std::vector<std::size_t> out;
    out.reserve(w.pods.size());
    for (const core::Request& r : w.pods) {
      const Key key{r.cpu_milli, r.memory_mib, r.gpu_count, r.gpu_milli,
                    r.gpu_mib,   r.sharing,    r.gpu_models};
      out.push_back(ids.try_emplace(key, ids.size()).first->second);
    }
    count = ids.size();
    return out;
  }

  bool TryPlace(std::size_t i, core::NodeIndex only_node) {
    core::Request r = Pod(i);
    if (hold_s_ > 0 && now_ - arrive_at_[i] >= hold_s_) r.overdue = true;
    const policy::Decision d = only_node >= 0 ? engine_.DecideOn(r, only_node) : engine_.Decide(r);
    if (!d.placement) return false;
    const auto assigned = ledger_.Assign(plan_.arrivals[i].name, d.request, *d.placement);
    GPUMUX_CHECK(assigned.has_value(), "the engine chose a placement the ledger refuses");
    placed_at_[i] = now_;
    node_of_[i] = d.placement->node;
    departures_.push({now_ + durations_[plan_.arrivals[i].pod], i});
    epoch_ = pol_.ScoreEpoch(ledger_);
    return true;
  }

  // Moves the clock to t, adding the allocation held since the last move to the area and to
  // the time columns passed.
  void Advance(double t) {
    if (t <= now_) return;
    Sample(t);
    if (t > measure_from_) {
      area_ += static_cast<double>(ledger_.used_gpu_milli()) * (t - std::max(now_, measure_from_));
    }
    now_ = t;
  }
  void Sample(double until) {
    while (columns_.size() <= static_cast<std::size_t>(kTimeColumns)) {
      const double at =
          start_ + span_ * static_cast<double>(columns_.size()) / static_cast<double>(kTimeColumns);
      if (at >= until) return;
      columns_.push_back(static_cast<double>(ledger_.used_gpu_milli()) / Capacity() * 100.0);
    }
  }

  using Event = std::pair<double, std::size_t>;  // time, arrival index
  using MinHeap = std::priority_queue<Event, std::vector<Event>, std::greater<>>;

  const Workload& w_;
  const ArrivalPlan& plan_;
  std::span<const double> durations_;
  std::vector<double> arrive_at_;
  core::Ledger ledger_;
  core::Rng rng_;
  policy::Engine engine_;
  policy::Policy& pol_;
  double hold_s_;
  std::vector<double> placed_at_;
  std::vector<core::NodeIndex> node_of_;
  std::vector<std::size_t> shape_of_pod_;        // per workload pod
  std::vector<std::deque<std::size_t>> queues_;  // per shape, arrival order
  MinHeap departures_;
  MinHeap overdue_;
  std::uint64_t epoch_ = 0;
  double now_ = 0;
  double start_ = 0;
  double span_ = 0;
  double measure_from_ = 0;
  double area_ = 0;
  std::vector<double> columns_;
};

}  // namespace

core::Result<DepartureResult> RunWithDepartures(const Workload& workload,
                                                std::span<const double> durations,
                                                const std::string& policy_name, std::uint64_t seed,
                                                const DepartureOptions& departure,
                                                const ExperimentOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  const double load = departure.load;
  for (const auto& [what, v] : {std::pair{"load", load}, std::pair{"rounds", departure.rounds}}) {
    if (!(v > 0 && v <= kMaxLoad)) {
      return core::MakeError(core::ErrorCode::kInvalidArgument,
                             std::string(what) + " " + std::to_string(v) + " is outside (0, " +
                                 std::to_string(static_cast<int>(kMaxLoad)) + "]");
    }
  }
  if (durations.size() != workload.pods.size()) {
    return core::MakeError(core::ErrorCode::kInvalidArgument,
                           std::to_string(durations.size()) + " durations for " +
                               std::to_string(workload.pods.size()) + " pods");
  }
  policy::PolicyContext context;
  context.typical_pods = workload.typical;
  context.knobs = options.knobs;
  auto made = policy::BuiltinPolicies().Make(policy_name, context);
  if (!made) return tl::unexpected(made.error());

  // The study's pods in the study's order; Poisson arrival times at the rate that offers `load`.
  auto made_plan =
      MakeStudyArrivals(workload.pods, workload.cluster, seed, departure.rounds, ArrivalLimit{});
  if (!made_plan) return tl::unexpected(made_plan.error());
  const ArrivalPlan& plan = *made_plan;
  double work = 0;  // GPU milli x seconds the arrivals ask for
  for (const Arrival& a : plan.arrivals) {
    work += static_cast<double>(workload.pods[a.pod].total_gpu_milli()) * durations[a.pod];
  }
  if (work <= 0) {
    return core::MakeError(core::ErrorCode::kInvalidArgument,
                           "the arrivals ask for no GPU: there is no GPU load to offer");
  }
  const double rate = load * static_cast<double>(workload.cluster.total_gpu_milli()) /
                      (work / static_cast<double>(plan.arrivals.size()));
  core::Rng arrivals_rng(seed, "departures-arrivals");
  std::vector<double> arrive_at;
  arrive_at.reserve(plan.arrivals.size());
  double t = 0;
  for (std::size_t i = 0; i < plan.arrivals.size(); ++i) {
    arrive_at.push_back(t);
    t += -std::log1p(-arrivals_rng.Unit()) / rate;
  }

  DepartureResult res;
  res.workload = workload.name;
  res.policy = policy_name;
  res.seed = seed;
  res.load = load;
  DepartureRun run(workload, plan, durations, std::move(arrive_at), **made, seed,
                   departure.max_duration_s);
  run.Run();
  run.Finish(res);
  res.wall_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return res;
}

}  // namespace gpumux::sim
