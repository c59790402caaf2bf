#include "gpumux/policy/interference.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>

#include "gpumux/core/check.h"

namespace gpumux::policy {
namespace {

double BusyOf(const Member& m) { return m.cls != nullptr ? m.cls->GpuBusy(m.batch) : 1.0; }

// Whether `set` holds the same classes as `members` (as multisets); if so, the position in
// `set` of each member. Members of a repeated class are matched to entries of their own batch
// size first, so {c@200, c@100} finds the c@200 entry for the first member. `exact` tells
// whether every member's batch equals its entry's.
bool MatchClasses(const MeasuredSet& set, std::span<const Member> members,
                  std::vector<std::size_t>& position, bool& exact) {
  if (set.classes.size() != members.size()) return false;
  std::vector<bool> used(set.classes.size(), false);
  position.assign(members.size(), 0);
  std::vector<bool> placed(members.size(), false);
  for (int pass = 0; pass < 2; ++pass) {  // pass 0: same class and batch; pass 1: same class
    for (std::size_t k = 0; k < members.size(); ++k) {
      if (placed[k]) continue;
      if (members[k].cls == nullptr) return false;
      for (std::size_t j = 0; j < set.classes.size(); ++j) {
        if (used[j] || set.classes[j] != members[k].cls->name) continue;
        if (pass == 0 && set.batches[j] != members[k].batch) continue;
        used[j] = true;
        placed[k] = true;
        position[k] = j;
        break;
      }
    }
  }
  exact = true;
  for (std::size_t k = 0; k < members.size(); ++k) {
    if (!placed[k]) return false;
    exact = exact && set.batches[position[k]] == members[k].batch;
  }
  return true;
}

}  // namespace

ProfileInterference::ProfileInterference(const WorkloadProfile& profile) : profile_(&profile) {
  for (std::size_t i = 0; i < profile.measured.size(); ++i) {
    const MeasuredSet& set = profile.measured[i];
    std::vector<std::string> key = set.classes;
    std::sort(key.begin(), key.end());
    sets_[std::move(key)].push_back(i);
    std::vector<std::pair<std::string, int>> exact;
    for (std::size_t k = 0; k < set.classes.size() && k < set.batches.size(); ++k) {
      exact.emplace_back(set.classes[k], set.batches[k]);
    }
    std::sort(exact.begin(), exact.end());
    exact_.try_emplace(std::move(exact), i);  // the first in profile order
  }
}

ProfileInterference::Candidates ProfileInterference::SetsOf(std::span<const Member> members) const {
  Candidates c;
  if (sets_.empty() || members.size() > kMaxMeasuredMembers) return c;
  std::array<std::pair<std::string_view, int>, kMaxMeasuredMembers> pairs;
  std::array<std::string_view, kMaxMeasuredMembers> names;
  for (std::size_t k = 0; k < members.size(); ++k) {
    if (members[k].cls == nullptr) return c;
    pairs[k] = {members[k].cls->name, members[k].batch};
  }
  const std::span<std::pair<std::string_view, int>> exact(pairs.data(), members.size());
  std::sort(exact.begin(), exact.end());
  for (std::size_t k = 0; k < members.size(); ++k) names[k] = exact[k].first;
  const auto it = sets_.find(std::span<const std::string_view>(names.data(), members.size()));
  if (it == sets_.end()) return c;
  c.same_classes = &it->second;
  if (const auto e = exact_.find(exact); e != exact_.end()) {
    c.exact = e->second;
    c.has_exact = true;
  }
  return c;
}

double ProfileInterference::Stretch(std::span<const double> busy) {
  const double total = std::accumulate(busy.begin(), busy.end(), 0.0);
  if (total <= 1.0) return 1.0;
  // f(x) = sum g/(h + x g) with h + g = 1, i.e. sum b/((1 - b) + x b), falls with x;
  // f(1) = total > 1 and f(n) <= sum b/(n b) = 1, so the root lies in [1, n].
  auto f = [&](double x) {
    double s = 0;
    for (double b : busy) s += b / ((1.0 - b) + x * b);
    return s;
  };
  double lo = 1.0;
  double hi = static_cast<double>(busy.size());
  for (int i = 0; i < 60; ++i) {
    const double mid = 0.5 * (lo + hi);
    if (f(mid) > 1.0) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return hi;
}

void ProfileInterference::PredictFromBusyTime(std::span<const Member> members,
                                              std::span<double> slowdown) const {
  GPUMUX_CHECK(members.size() == slowdown.size(), "one slowdown per member");
  const std::size_t n = members.size();
  if (n == 1) {
    slowdown[0] = 1.0;
    return;
  }
  double busy_buf[8];
  std::vector<double> busy_vec;
  std::span<double> busy;
  if (n <= 8) {
    busy = std::span<double>(busy_buf, n);
  } else {
    busy_vec.resize(n);
    busy = busy_vec;
  }
  for (std::size_t k = 0; k < n; ++k) busy[k] = BusyOf(members[k]);
  const double x = Stretch(busy);
  const double companions = static_cast<double>(n - 1);
  for (std::size_t k = 0; k < n; ++k) {
    const double overhead = 1.0 + profile_->CompanionOverhead(members[k].cls) * companions;
    slowdown[k] = ((1.0 - busy[k]) + x * busy[k]) * overhead;
  }
}

void ProfileInterference::Predict(std::span<const Member> members,
                                  std::span<double> slowdown) const {
  GPUMUX_CHECK(members.size() == slowdown.size(), "one slowdown per member");
  PredictFromBusyTime(members, slowdown);
  if (members.size() < 2) return;
  // Rule 1 (the first set at the members' batch sizes) wins over rule 2 (the first set with
  // the same classes).
  const Candidates candidates = SetsOf(members);
  if (candidates.same_classes == nullptr) return;
  const MeasuredSet* chosen =
      &profile_
           ->measured[candidates.has_exact ? candidates.exact : candidates.same_classes->front()];
  std::vector<std::size_t> chosen_position;
  bool exact = false;
  const bool matched = MatchClasses(*chosen, members, chosen_position, exact);
  GPUMUX_CHECK(matched && exact == candidates.has_exact, "the index agrees with MatchClasses");
  // Measured slowdowns, scaled by the predictor from the measured batch sizes to the actual
  // ones (a factor of exactly 1 when they are equal).
  std::vector<Member> at_measured(members.begin(), members.end());
  for (std::size_t k = 0; k < members.size(); ++k) {
    at_measured[k].batch = chosen->batches[chosen_position[k]];
  }
  std::vector<double> predicted_at_measured(members.size());
  PredictFromBusyTime(at_measured, predicted_at_measured);
  for (std::size_t k = 0; k < members.size(); ++k) {
    const double measured = chosen->slowdown[chosen_position[k]];
    slowdown[k] = std::max(1.0, measured * slowdown[k] / predicted_at_measured[k]);
  }
}

bool ProfileInterference::Measured(std::span<const Member> members) const {
  if (members.size() < 2) return false;
  return SetsOf(members).same_classes != nullptr;
}

void ReportSums::Put(std::uint64_t key, std::size_t bucket, double a, double b) {
  if (bucket >= a_.size()) {
    a_.resize(bucket + 1, 0.0);
    b_.resize(bucket + 1, 0.0);
  }
  const Entry e{bucket, a, b};
  auto [it, inserted] = entries_.try_emplace(key, e);
  if (!inserted) {
    a_[it->second.bucket] -= it->second.a;
    b_[it->second.bucket] -= it->second.b;
    it->second = e;
  } else {
    order_.push_back(key);
    if (order_.size() > kMaxReportEntries) {
      const auto old = entries_.find(order_.front());
      a_[old->second.bucket] -= old->second.a;
      b_[old->second.bucket] -= old->second.b;
      entries_.erase(old);
      order_.pop_front();
    }
  }
  a_[bucket] += a;
  b_[bucket] += b;
}

namespace {

// Whether any member with a known class reported a slowdown.
bool AnyReport(std::span<const Member> members, std::span<const double> reported) {
  for (std::size_t k = 0; k < members.size(); ++k) {
    if (reported[k] > 0 && members[k].cls != nullptr) return true;
  }
  return false;
}

}  // namespace

bool HedgedInterference::Validated(std::span<const Member> members) const {
  return members.size() <= validated_ || members.size() < 3 || base_->Measured(members);
}

void HedgedInterference::PredictRange(std::span<const Member> members, std::span<double> lo,
                                      std::span<double> hi) const {
  GPUMUX_CHECK(members.size() == lo.size() && members.size() == hi.size(), "one range per member");
  base_->Predict(members, hi);
  std::copy(hi.begin(), hi.end(), lo.begin());
  if (Validated(members)) return;
  std::array<double, 2> pair_slowdown{};
  for (std::size_t k = 0; k < members.size(); ++k) {
    double worst = 1.0;
    for (std::size_t j = 0; j < members.size(); ++j) {
      if (j == k) continue;
      const std::array<Member, 2> pair{members[k], members[j]};
      base_->Predict(pair, pair_slowdown);
      worst = std::max(worst, pair_slowdown[0]);
    }
    lo[k] = worst;
    hi[k] = std::max(hi[k], worst);
  }
}

void HedgedInterference::Predict(std::span<const Member> members,
                                 std::span<double> slowdown) const {
  GPUMUX_CHECK(members.size() == slowdown.size(), "one slowdown per member");
  if (members.size() <= validated_ || members.size() < 3) {
    base_->Predict(members, slowdown);
    return;
  }
  std::vector<double> lo(members.size());
  PredictRange(members, lo, slowdown);
  for (std::size_t k = 0; k < members.size(); ++k) {
    slowdown[k] = lo[k] + position_ * (slowdown[k] - lo[k]);
  }
}

void HedgedInterference::Report(std::uint64_t key, std::span<const Member> members,
                                std::span<const double> reported) {
  GPUMUX_CHECK(members.size() == reported.size(), "one report per member");
  if (learn_ == kLearnNone || !AnyReport(members, reported) || Validated(members)) return;
  std::vector<double> lo(members.size());
  std::vector<double> hi(members.size());
  PredictRange(members, lo, hi);
  double above = 0;
  double width = 0;
  for (std::size_t k = 0; k < members.size(); ++k) {
    if (!(reported[k] > 0) || members[k].cls == nullptr) continue;
    above += reported[k] - lo[k];
    width += hi[k] - lo[k];
  }
  if (width <= 0) return;
  sums_.Put(key, 0, above, width);
  const double p = std::clamp((sums_.a(0) + prior_ * kHedgePrior) / (sums_.b(0) + kHedgePrior),
                              learn_ == kLearnCautious ? prior_ : 0.0, 1.0);
  if (std::abs(p - position_) > 0.02) {
    position_ = p;
    ++version_;
  }
}

void CalibratedInterference::Report(std::uint64_t key, std::span<const Member> members,
                                    std::span<const double> reported) {
  GPUMUX_CHECK(members.size() == reported.size(), "one report per member");
  if (members.size() < 2 || !AnyReport(members, reported) || base_->Measured(members)) return;
  std::vector<double> predicted(members.size());
  base_->Predict(members, predicted);
  double excess_reported = 0;
  double excess_predicted = 0;
  for (std::size_t k = 0; k < members.size(); ++k) {
    if (!(reported[k] > 0) || members[k].cls == nullptr) continue;
    excess_reported += std::max(0.0, reported[k] - 1.0);
    excess_predicted += std::max(0.0, predicted[k] - 1.0);
  }
  if (excess_predicted <= 0 && excess_reported <= 0) return;
  sums_.Put(key, members.size(), excess_reported, excess_predicted);
  factor_at_version_.resize(sums_.buckets(), 1.0);
  bool moved = false;
  for (std::size_t n = 2; n < sums_.buckets(); ++n) {
    moved = moved || std::abs(Factor(n) / factor_at_version_[n] - 1.0) > 0.01;
  }
  if (moved) {
    for (std::size_t n = 2; n < sums_.buckets(); ++n) factor_at_version_[n] = Factor(n);
    ++version_;
  }
}

double CalibratedInterference::Factor(std::size_t n) const {
  return (std::max(0.0, sums_.a(n)) + kCalibrationPrior) /
         (std::max(0.0, sums_.b(n)) + kCalibrationPrior);
}

void CalibratedInterference::Predict(std::span<const Member> members,
                                     std::span<double> slowdown) const {
  base_->Predict(members, slowdown);
  if (members.size() < 2 || base_->Measured(members)) return;
  const double c =
      factor_at_version_.size() > members.size() ? factor_at_version_[members.size()] : 1.0;
  for (double& s : slowdown) s = 1.0 + c * (s - 1.0);
}

void Goodput(const InterferenceModel& model, std::span<const Member> members,
             std::span<double> goodput) {
  GPUMUX_CHECK(members.size() == goodput.size(), "one goodput per member");
  model.Predict(members, goodput);  // slowdowns, overwritten below
  for (std::size_t k = 0; k < members.size(); ++k) {
    const Member& m = members[k];
    if (m.cls == nullptr || m.batch <= 0) {
      goodput[k] = 0;
      continue;
    }
    goodput[k] = m.cls->SoloGoodput(m.batch, m.noise_scale) / goodput[k];
  }
}

}  // namespace gpumux::policy
