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
};

class ProfileInterference final : public InterferenceModel {
 public:
  // The profile must outlive the model and not change meanwhile.
  explicit ProfileInterference(const WorkloadProfile& profile);
  void Predict(std::span<const Member> members, std::span<double> slowdown) const override;
  // The busy-time predictor alone (rule 3), for tests and for scaling measured sets.
  void PredictFromBusyTime(std::span<const Member> members, std::span<double> slowdown) const;
  // Whether the profile has a measured set with exactly these classes (rule 1 or 2 applies).
  bool Measured(std::span<const Member> members) const;
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

// Progress of each member in useful samples per second on a GPU shared by `members`:
// batch / (t(batch) * s) * E(batch). Unknown classes get 0.
void Goodput(const InterferenceModel& model, std::span<const Member> members,
             std::span<double> goodput);

}  // namespace gpumux::policy
