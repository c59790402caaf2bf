// Truths for the JCT simulator that are not the policies' belief: model families for the sets a
// truth profile has not measured, independent of the busy-time predictor (interference.h).
//
// The simulated GPUs answer every co-location from the truth profile: a measured set gives its
// measured slowdowns; a set nobody measured needs a model. With the "predictor" truth (the
// default) that model is the truth profile's busy-time predictor, the very form the policies
// believe: on unmeasured sets the world agrees with the belief up to the hidden error, so a
// result under it rests on the predictor being right. The pair rules below are built from the
// measured pairs alone (no busy fractions, no companion overhead), so they disagree with the
// predictor wherever it was never checked, in opposite directions:
//  * pair-sum (additive excess, the classic pairwise interference model): a member's extra
//    slowdown is the sum of what each companion alone costs it,
//      s_k = 1 + sum_{j != k} e(k|j);
//    sets of three or more cost more than the predictor says.
//  * pair-max (worst companion): a member suffers its worst companion, and each further one adds
//    kPairMaxGrowth,
//      s_k = (1 + max_{j != k} e(k|j)) * (1 + kPairMaxGrowth * (n - 2));
//    sets of three or more cost less than the predictor says (what an independent measurement of
//    triples showed of the pair-fitted predictor: issue 31).
// e(k|j), the extra slowdown of a k job beside one j job, is the measured pair's (s_k - 1), taken
// as measured at both classes' default batch sizes. A pair nobody measured gets a rank-one fill
// of the measured ones: e(k|j) = row_k * col_j / mean, with row_k the mean extra slowdown k
// suffers over its measured pairs, col_j the mean j inflicts, and mean the mean of all (a class
// without measured pairs takes the mean for its row or column). Batch sizes other than the
// default scale the extra slowdown by sqrt(rho_k rho_j), rho = busy(batch) / busy(default batch)
// of the class's solo table: a job busier on the GPU suffers and inflicts more (an assumption,
// stated; the hidden batch tilt of the simulator's model error comes on top).
// Worked example (illustrative numbers, default batches): a job k whose pairs give e(k|j1) = 0.8
// and e(k|j2) = 0.3, sharing a GPU with j1 and j2, runs (1 + 0.8) * 1.05 = 1.89 times slower
// than alone under pair-max and 1 + 0.8 + 0.3 = 2.1 times under pair-sum.
// Thread safety: Predict is const and safe to call concurrently.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gpumux/core/result.h"
#include "gpumux/policy/interference.h"
#include "gpumux/policy/workload_profile.h"

namespace gpumux::sim {

// What each further companion beyond the first adds under pair-max (assumed).
inline constexpr double kPairMaxGrowth = 0.05;

enum class TruthRule : std::uint8_t { kPredictor, kPairMax, kPairSum };

// "predictor", "pair-max", "pair-sum".
std::string_view TruthRuleName(TruthRule rule);
std::vector<std::string> TruthRuleNames();
core::Result<TruthRule> ParseTruthRule(std::string_view name);

class PairRuleInterference final : public policy::InterferenceModel {
 public:
  // The profile must outlive the model. Error when `rule` is kPredictor or the profile has no
  // measured pair (a set of two) of its own classes.
  static core::Result<PairRuleInterference> Make(const policy::WorkloadProfile& profile,
                                                 TruthRule rule);
  // Cost: O(n^2) for n members.
  void Predict(std::span<const policy::Member> members, std::span<double> slowdown) const override;
  // e(k|j) at the classes' default batch sizes (measured, else the rank-one fill); an unknown
  // class (nullptr) takes the largest e of the table.
  double PairExcess(const policy::ClassProfile* k, const policy::ClassProfile* j) const;
  // Whether e(k|j) was measured (not filled).
  bool PairMeasured(const policy::ClassProfile* k, const policy::ClassProfile* j) const;

 private:
  PairRuleInterference(const policy::WorkloadProfile& profile, TruthRule rule)
      : profile_(&profile), rule_(rule) {}
  int Index(const policy::ClassProfile* c) const;  // -1: not one of the profile's classes

  const policy::WorkloadProfile* profile_;
  TruthRule rule_;
  std::size_t n_ = 0;
  std::vector<double> excess_;  // n_ x n_, row = the member, column = its companion
  std::vector<char> measured_;
  double largest_ = 0;
};

// The pair rule a truth model names, built on `truth` (none for "predictor"); the error of
// ParseTruthRule or PairRuleInterference::Make otherwise.
core::Result<std::optional<PairRuleInterference>> PairRuleFor(const policy::WorkloadProfile& truth,
                                                              std::string_view truth_model);

}  // namespace gpumux::sim
