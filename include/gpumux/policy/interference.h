// Interference models: the slowdown each job suffers when a set of jobs shares one GPU.
//
// Slowdown s_k = (step time of job k in the set) / (its solo step time at the same batch), >= 1.
//
// ProfileInterference answers from a WorkloadProfile:
//  1. A measured set with the same classes at the same batch sizes: the measured slowdowns.
//  2. A measured set with the same classes at other batch sizes: the measured slowdowns scaled
//     by predicted(actual batches) / predicted(measured batches).
//  3. Otherwise the busy-time predictor below.
// Predictor (assumptions, stated once here):
//  * A step of job k is a host phase h_k (data loading, Python, launches; the GPU idles for k)
//    followed by a GPU phase g_k; busy_k = g_k / (h_k + g_k) comes from the profile.
//  * Jobs sharing a GPU are time-sliced: host phases overlap freely, GPU phases share the SMs.
//    If the busy fractions sum to at most 1, GPU phases fit into each other's gaps (stretch
//    x = 1). Otherwise every GPU phase stretches by the same x > 1 such that the GPU is exactly
//    saturated:  sum_k g_k / (h_k + x g_k) = 1  (solved by bisection on [1, n]; unique since
//    the left side falls with x and is at most 1 at x = n).
//  * Each companion adds a fixed overhead factor (1 + beta) for what the busy-time view
//    ignores (context switches, cache and memory-bandwidth contention); beta_k is member k's
//    class's own companion_overhead if it has one, else the profile's.
//    s_k = (h_k + x g_k) / (h_k + g_k) * (1 + beta_k * (n - 1))
//  * An unknown class is assumed GPU-bound (busy = 1): the pessimistic guess, never a random one.
// Worked example (beta = 0.05): two jobs with busy 0.9 and 0.6 (unit steps): 0.9/(0.1+0.9x) +
// 0.6/(0.4+0.6x) = 1 gives x = 1.649; s = 1.584*1.05 = 1.663 and 1.389*1.05 = 1.459. Two jobs
// with busy 0.4 and 0.55: sum 0.95 <= 1, so x = 1 and both slow down by 1.05 only.
// Measured sets are indexed by their class multiset when the model is built (O(sets)), so a
// prediction costs O(sets with the members' classes), not O(all sets): profiles with learned
// observations hold thousands.
// Thread safety: Predict is const and safe to call concurrently.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gpumux/policy/workload_profile.h"

namespace gpumux::policy {

// One job on a GPU: its class (nullptr = unknown class) and batch size.
struct Member {
  const ClassProfile* cls = nullptr;
  int batch = 0;
  // The job's gradient noise scale as its owner knows it (an estimate from observed gradients;
  // 0 = the class's prior). Only goodput uses it; slowdowns do not depend on it.
  double noise_scale = 0;
};

class InterferenceModel {
 public:
  virtual ~InterferenceModel() = default;
  // Writes the slowdown of each member of `members` (all sharing one GPU) into `slowdown`
  // (same size). A single member gets 1. Cost: O(n log n) plus a bisection when n > 1.
  virtual void Predict(std::span<const Member> members, std::span<double> slowdown) const = 0;
  // Whether the answer for these members' classes rests on a measured set (not the predictor).
  virtual bool Measured(std::span<const Member> /*members*/) const { return false; }
  // Changes whenever the model's answers may have changed (a model that learns within a run):
  // callers that remember answers drop them when it moves.
  virtual std::uint64_t Version() const { return 0; }
};

class ProfileInterference final : public InterferenceModel {
 public:
  // The profile must outlive the model and not change meanwhile.
  explicit ProfileInterference(const WorkloadProfile& profile);
  void Predict(std::span<const Member> members, std::span<double> slowdown) const override;
  // The busy-time predictor alone (rule 3), for tests and for scaling measured sets.
  void PredictFromBusyTime(std::span<const Member> members, std::span<double> slowdown) const;
  // Whether the profile has a measured set with exactly these classes (rule 1 or 2 applies).
  bool Measured(std::span<const Member> members) const override;
  // The GPU stretch x of the predictor for the given busy fractions (1 when they sum <= 1).
  static double Stretch(std::span<const double> busy);

 private:
  // Sorted class names (or (name, batch) pairs), compared with sorted views of them, so that
  // a lookup allocates nothing.
  struct SortedLess {
    using is_transparent = void;
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const {
      return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end(), Less{});
    }
    struct Less {
      template <typename X, typename Y>
      bool operator()(const X& x, const Y& y) const {
        if constexpr (requires { x.first; }) {
          return x.first < y.first || (!(y.first < x.first) && x.second < y.second);
        } else {
          return x < y;
        }
      }
    };
  };
  struct Candidates {
    const std::vector<std::size_t>* same_classes = nullptr;  // in profile order
    std::size_t exact = 0;                                   // valid when has_exact
    bool has_exact = false;
  };
  // The measured sets with the members' classes (as multisets, by name): all of them in
  // profile order, and the first one at the members' batch sizes too.
  Candidates SetsOf(std::span<const Member> members) const;

  const WorkloadProfile* profile_;
  std::map<std::vector<std::string>, std::vector<std::size_t>, SortedLess> sets_;
  std::map<std::vector<std::pair<std::string, int>>, std::size_t, SortedLess> exact_;
};

// What running jobs reported, one entry per key (a GPU's set: its latest report replaces its
// earlier ones), at most kMaxReportEntries entries (the oldest go first), summed per bucket:
// two sums, a (what was reported) and b (what it is compared with), so that a caller's
// estimate is a ratio of sums over the sets seen.
inline constexpr std::size_t kMaxReportEntries = 4096;
class ReportSums {
 public:
  void Put(std::uint64_t key, std::size_t bucket, double a, double b);
  double a(std::size_t bucket) const { return bucket < a_.size() ? a_[bucket] : 0.0; }
  double b(std::size_t bucket) const { return bucket < b_.size() ? b_[bucket] : 0.0; }
  std::size_t buckets() const { return a_.size(); }

 private:
  struct Entry {
    std::size_t bucket = 0;
    double a = 0;
    double b = 0;
  };
  std::map<std::uint64_t, Entry> entries_;
  std::deque<std::uint64_t> order_;  // keys, oldest first
  std::vector<double> a_, b_;
};

// A model that says how sure it is about sets larger than its predictor was validated on.
// The busy-time predictor is fitted to, and cross-validated on, pairs only (data/README.md:
// leave-one-pair-out error); for three or more jobs it extrapolates, and an independent
// measurement of triples showed it over-predicting them by a large factor (issue 31). So for a
// set of more than `validated_members` jobs that the base model has not measured, a member's
// slowdown is known only to lie in a range:
//   lo = its slowdown beside its worst companion alone (the base model's pair answer: another
//        companion never speeds a job up),
//   hi = the base model's answer for the whole set (at least lo),
// and Predict answers lo + position * (hi - lo). position 0.5 (the midpoint) is the
// minimax-regret point for a decision whose cost is linear in the slowdown: whichever value in
// the range is true, the decision made at the midpoint is off by at most half the range.
// position 1 is the base model unchanged (the ablation). Sets the base model measured (learned
// observations too) and sets of at most validated_members jobs are the base model's answer.
// Worked example: three jobs whose pair slowdowns for member k are 1.3 and 1.2 and whose set
// prediction for k is 2.1: range [1.3, 2.1], Predict 1.7.
//
// With `learn`, the position is a prior that evidence moves: Report gives the slowdowns the
// members of a running set reported (their step time over their solo one), and for the sets
// the range applies to, the position becomes
//   p = (sum (reported - lo) + prior * w) / (sum (hi - lo) + w),   w = kHedgePrior,
// over the members of every set reported (each set's latest report): where in their ranges the
// sets seen so far really were. Sets seen stand for sets not yet seen of any size beyond the
// validated one. kLearnCautious clamps p to [prior, 1]: evidence that such sets are as dear as
// the predictor says makes the estimate more cautious, evidence that they are cheaper never
// makes it bolder than the prior (docs/SIMULATOR.md measured acting on it both ways: it packed
// more and lost margin under both pair rules); kLearnBoth clamps to [0, 1]. Version moves when p
// moved by more than 0.02 since the last move; Predict uses p as of that move.
// Worked example: prior 0.5, one triple whose three members' ranges are [1.3, 2.1] each
// reported 2.0, 2.1 and 1.9: p = (0.7 + 0.8 + 0.6 + 0.5) / (2.4 + 1) = 0.76.
inline constexpr double kHedgePrior = 1.0;
enum HedgeLearning : int { kLearnNone = 0, kLearnCautious = 1, kLearnBoth = 2 };
class HedgedInterference final : public InterferenceModel {
 public:
  // `base` must outlive this model.
  HedgedInterference(const InterferenceModel& base, std::size_t validated_members, double position,
                     HedgeLearning learn = kLearnNone)
      : base_(&base),
        validated_(validated_members),
        prior_(position),
        position_(position),
        learn_(learn) {}
  void Predict(std::span<const Member> members, std::span<double> slowdown) const override;
  // The range of each member's slowdown (lo == hi where the base model's answer is taken).
  void PredictRange(std::span<const Member> members, std::span<double> lo,
                    std::span<double> hi) const;
  bool Measured(std::span<const Member> members) const override { return base_->Measured(members); }
  std::uint64_t Version() const override { return base_->Version() * 1'000'003 + version_; }
  // The members of one GPU's set (`key` identifies it) and each one's reported slowdown (0 = no
  // report: the member is left out). Ignored without learning or for sets the range skips.
  void Report(std::uint64_t key, std::span<const Member> members, std::span<const double> reported);
  // The position Predict uses, and whether reports move it.
  double Position() const { return position_; }
  bool Learns() const { return learn_ != kLearnNone; }

 private:
  // Whether members' slowdowns are the base model's answer (no range).
  bool Validated(std::span<const Member> members) const;

  const InterferenceModel* base_;
  std::size_t validated_;
  double prior_;
  double position_;
  HedgeLearning learn_;
  ReportSums sums_;  // bucket 0: sum (reported - lo), sum (hi - lo)
  std::uint64_t version_ = 0;
};

// A model corrected by what running jobs report: their step times. A job sharing a GPU reports
// its mean step time (JobSnapshot::observed_step_s); over its solo step time at that batch (the
// profile's) it is the slowdown the GPU gives it. For each set size n, the reported extra
// slowdowns (s - 1) are summed against the base model's predictions for the same members, and
// an unmeasured set of n jobs is predicted as s = 1 + c_n (s_base - 1) with
//   c_n = (reported_n + w) / (predicted_n + w),   w = kCalibrationPrior,
// so that with no reports c_n = 1 (the base model) and with many it is their ratio. This learns
// within a run from the reports a scheduler gets with or without a tuner (the node coordinator
// relays them), and it generalises: a few triples seen early correct every unmeasured triple
// later. Measured sets (learned observations too) stay the base model's answer.
// Each GPU's set is one entry of a ReportSums. Version moves when a factor moved by more than
// 1 % since the last move, so callers remembering answers drop them only then; Predict uses
// the factors as of that move (Factor is the current estimate).
// Worked example: two triples reported extra slowdowns summing to 1.2 where the base model
// predicted 3.0: c_3 = (1.2 + 1) / (3.0 + 1) = 0.55, so a triple member predicted at 2.0 is
// now predicted at 1 + 0.55 * 1.0 = 1.55.
inline constexpr double kCalibrationPrior = 1.0;
class CalibratedInterference final : public InterferenceModel {
 public:
  // `base` must outlive this model.
  explicit CalibratedInterference(const InterferenceModel& base) : base_(&base) {}
  // The members of one GPU's set (`key` identifies it) and each one's reported slowdown (0 = no
  // report: the member is left out).
  void Report(std::uint64_t key, std::span<const Member> members, std::span<const double> reported);
  void Predict(std::span<const Member> members, std::span<double> slowdown) const override;
  bool Measured(std::span<const Member> members) const override { return base_->Measured(members); }
  std::uint64_t Version() const override { return base_->Version() * 1'000'003 + version_; }
  double Factor(std::size_t n) const;

 private:
  const InterferenceModel* base_;
  ReportSums sums_;  // bucket n: sum of reported and of predicted extra slowdowns of n-job sets
  std::vector<double> factor_at_version_;
  std::uint64_t version_ = 0;
};

// Progress of each member in useful samples per second on a GPU shared by `members`:
// batch / (t(batch) * s) * E(batch). Unknown classes get 0.
void Goodput(const InterferenceModel& model, std::span<const Member> members,
             std::span<double> goodput);

}  // namespace gpumux::policy
