// The discrete-event DL simulator's state (dl_sim.cc): the hidden truth of how GPUs run
// co-located jobs, and a job's, a GPU's and an event's state. Internal to the simulator.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "gpumux/core/ledger.h"
#include "gpumux/core/rng.h"
#include "gpumux/policy/interference.h"
#include "gpumux/policy/tuner.h"
#include "gpumux/sim/dl_sim.h"
#include "gpumux/sim/dl_truth.h"

namespace gpumux::sim::dl_state {

using core::Micros;
using policy::ClassProfile;

// The GPUs as they really behave. A set the truth profile has measured: its answer (the
// measured slowdowns; with the predictor rule scaled to other batch sizes by the predictor).
// Any other set: the rule's model (the truth profile's predictor, or a pair rule of
// dl_truth.h; a pair rule also answers the measured pairs, from which it is built), times a
// hidden factor per (set of classes, member class) that also tilts with the member's batch size:
//   f = 1 + error * u + (error / 2) * v * log2(batch / b0),  u, v uniform in [-1, 1],
// drawn once from the seed, f at least 0.05. So the error of any predictor depends on the set
// and on the batch size, and one measurement does not teach it everything.
class TruthModel final : public policy::InterferenceModel {
 public:
  // `pair_rule` (a pair rule built on `truth`), or none for the predictor rule.
  TruthModel(const policy::WorkloadProfile& truth, double error, std::uint64_t seed,
             std::optional<PairRuleInterference> pair_rule)
      : base_(truth), pair_rule_(std::move(pair_rule)), error_(error), seed_(seed) {}

  void Predict(std::span<const policy::Member> members, std::span<double> slowdown) const override {
    const bool measured = base_.Measured(members);
    if (pair_rule_ && !(measured && members.size() > 2)) {
      pair_rule_->Predict(members, slowdown);
    } else {
      base_.Predict(members, slowdown);
    }
    if (measured || members.size() < 2 || error_ == 0) return;
    std::vector<const ClassProfile*> classes;
    for (const auto& m : members) classes.push_back(m.cls);
    const std::string key = policy::SetKey(classes);
    for (std::size_t k = 0; k < members.size(); ++k) {
      const ClassProfile* c = members[k].cls;
      if (c == nullptr) continue;
      const auto [u, v] = Factor(key, c->name);
      const double tilt = std::log2(static_cast<double>(std::max(members[k].batch, 1)) /
                                    static_cast<double>(c->default_batch));
      const double f = std::max(0.05, 1.0 + error_ * u + 0.5 * error_ * v * tilt);
      slowdown[k] = std::max(1.0, slowdown[k] * f);
    }
  }

 private:
  std::pair<double, double> Factor(const std::string& key, const std::string& member) const {
    auto [it, inserted] = cache_.emplace(std::make_pair(key, member), std::make_pair(0.0, 0.0));
    if (inserted) {
      core::Rng rng(seed_, "truth:" + key + ":" + member);
      const double u = 2.0 * rng.Unit() - 1.0;
      it->second = {u, 2.0 * rng.Unit() - 1.0};
    }
    return it->second;
  }

  policy::ProfileInterference base_;
  std::optional<PairRuleInterference> pair_rule_;
  double error_;
  std::uint64_t seed_;
  mutable std::map<std::pair<std::string, std::string>, std::pair<double, double>> cache_;
};

// A standard normal draw (Box-Muller), written here for identical results everywhere.
inline double Normal(core::Rng& rng) {
  const double u1 = 1.0 - rng.Unit();  // (0, 1]
  const double u2 = rng.Unit();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

enum class JobState : std::uint8_t { kNotArrived, kQueued, kRunning, kDone };

// One job. The first block is the simulator's hidden truth: no policy or tuner reads it (they
// see JobSnapshot and the measurements a window reports, built from the second block).
struct Job {
  const JobSpec* spec = nullptr;
  const ClassProfile* truth = nullptr;  // the class as the simulated GPUs run it
  double work = 0;         // useful samples to the target: the class's, times the job's spread
  double noise_scale = 0;  // the job's true gradient noise scale
  // What a node coordinator observes and policies may see.
  const ClassProfile* cls = nullptr;  // the class in the policies' profile (a prior)
  double work_done_est = 0;           // samples processed, weighted by the estimated efficiency
  double noise_scale_est = 0;         // estimated from windows' gradients (0: none yet)
  int noise_scale_obs = 0;            // windows averaged into the estimate
  double observed_factor = 1;         // the noise of its last step-time report
  // Its progress since it last (re)started at its batch size, for the report's window mean:
  // (time, samples processed) at every rate change, oldest first, pruned to the last window.
  std::deque<std::pair<Micros, double>> progress;
  core::Request request;
  JobState state = JobState::kNotArrived;
  int gpu = -1;
  int batch = 0;
  int pending_batch = 0;  // 0: none; else applied at the next epoch boundary
  int batch_changes = 0;
  double done = 0;  // useful samples, as of `updated`
  double raw = 0;   // samples processed, as of `updated`
  double rate = 0;
  double raw_rate = 0;
  Micros updated = 0;
  Micros paused_until = 0;  // > now: in a reconfiguration pause
  std::uint64_t version = 0;
  Micros start = -1;
  Micros finish = -1;
  double solo_s = 0;  // the class prior's solo time: the shortest-first queue key
  std::size_t segment = 0;
  // With record_observations: its measured step times while alone on its GPU, per batch size:
  // (sum of measured step seconds x steps, steps).
  std::map<int, std::pair<double, double>> solo_measured;

  int effective_batch() const { return pending_batch > 0 ? pending_batch : batch; }
};

// A running job reports its mean step time over this many steps (the report's noise is
// measure_noise / sqrt(kReportSteps)).
inline constexpr double kReportSteps = 20;

// Samples the job has processed by `now` (it runs at raw_rate since `updated`).
inline double RawAt(const Job& j, Micros now) {
  return j.raw + j.raw_rate * (static_cast<double>(now - j.updated) / 1e6);
}

// The job's mean step time (s) over its last kReportSteps steps at its batch size, or over the
// steps since it (re)started there when fewer; 0 before its first whole step or while paused.
// Its progress is piecewise linear between the breakpoints (rates change only there).
inline double ReportedStep(const Job& j, Micros now) {
  if (j.progress.empty() || j.batch <= 0 || j.raw_rate <= 0) return 0;
  const double t_now = static_cast<double>(now) / 1e6;
  const double raw_now = RawAt(j, now);
  const double window = kReportSteps * j.batch;
  double t_end = t_now;
  double r_end = raw_now;
  for (auto it = j.progress.rbegin(); it != j.progress.rend(); ++it) {
    const double t = static_cast<double>(it->first) / 1e6;
    const double r = it->second;
    if (raw_now - r >= window && r_end > r) {
      const double t_start = t + (raw_now - window - r) / (r_end - r) * (t_end - t);
      return (t_now - t_start) / kReportSteps;
    }
    t_end = t;
    r_end = r;
  }
  const double steps = (raw_now - j.progress.front().second) / j.batch;
  if (steps < 1) return 0;
  return (t_now - static_cast<double>(j.progress.front().first) / 1e6) / steps;
}

// Whether the job's report window (its last kReportSteps steps) lies wholly after its rate last
// changed (a companion came or left, its batch changed): the report measures the set as it is.
inline bool ReportSteady(const Job& j, Micros now) {
  if (j.progress.empty() || j.batch <= 0 || j.raw_rate <= 0) return false;
  return RawAt(j, now) - j.progress.back().second >= kReportSteps * j.batch;
}

struct Gpu {
  core::NodeIndex node = 0;
  int index = 0;
  std::vector<int> jobs;  // in placement order
  std::unique_ptr<policy::TuningSession> session;
  std::vector<int> session_jobs;
  int newcomer = -1;
  // Measurement window of the session's current step.
  bool window_pending = false;
  bool window_open = false;
  int window_job = -1;
  int window_steps = 0;
  double window_target_raw = 0;
  Micros window_start = 0;
  std::vector<double> window_raw_start;
  std::vector<int> window_batches;
  // With record_observations: whether no job was paused when the window opened, and each
  // job's batch_changes then (a change inside the window disturbs it).
  bool window_clean = false;
  std::vector<int> window_changes;
  // With record_observations: the job running alone here since the last Reprice (-1: none),
  // its samples processed then and its batch size.
  int solo_job = -1;
  double solo_raw = 0;
  int solo_batch = 0;
  Micros locked_since = -1;
  // Accounting.
  Micros last = 0;
  double util = 0;           // since `last`
  bool occupied = false;     // since `last`
  double util_integral = 0;  // util * seconds
  double busy_integral = 0;  // seconds with a job
};

struct Event {
  Micros t = 0;
  std::uint64_t seq = 0;
  int job = 0;
  std::uint64_t version = 0;  // 0: arrival
  bool operator>(const Event& o) const { return std::tie(t, seq) > std::tie(o.t, o.seq); }
};

// RunDl's inputs: valid profiles, a cluster and options in range, jobs of known classes.
core::Result<void> CheckDlRun(const policy::WorkloadProfile& profile,
                              const std::vector<JobSpec>& jobs, const DlSimOptions& options,
                              const policy::WorkloadProfile& truth);

}  // namespace gpumux::sim::dl_state
