#include "gpumux/sim/dl_truth.h"

#include <algorithm>
#include <cmath>

#include "gpumux/core/check.h"

namespace gpumux::sim {
namespace {

constexpr std::pair<TruthRule, std::string_view> kRuleNames[] = {
    {TruthRule::kPredictor, "predictor"},
    {TruthRule::kPairMax, "pair-max"},
    {TruthRule::kPairSum, "pair-sum"},
};

// busy(batch) / busy(default batch): how much busier on the GPU than at its default batch.
double BusyRatio(const policy::ClassProfile& c, int batch) {
  const double base = c.GpuBusy(c.default_batch);
  return base > 0 ? c.GpuBusy(std::max(batch, 1)) / base : 1.0;
}

}  // namespace

std::string_view TruthRuleName(TruthRule rule) {
  for (const auto& [r, name] : kRuleNames) {
    if (r == rule) return name;
  }
  return "?";
}

std::vector<std::string> TruthRuleNames() {
  std::vector<std::string> names;
  for (const auto& entry : kRuleNames) names.emplace_back(entry.second);
  return names;
}

core::Result<TruthRule> ParseTruthRule(std::string_view name) {
  for (const auto& [r, n] : kRuleNames) {
    if (n == name) return r;
  }
  return core::MakeError(
      core::ErrorCode::kInvalidArgument,
      "unknown truth model '" + std::string(name) + "' (known: predictor, pair-max, pair-sum)");
}

core::Result<PairRuleInterference> PairRuleInterference::Make(
    const policy::WorkloadProfile& profile, TruthRule rule) {
  if (rule == TruthRule::kPredictor) {
    return core::MakeError(core::ErrorCode::kInvalidArgument,
                           "the predictor truth is the profile's own predictor, not a pair rule");
  }
  PairRuleInterference m(profile, rule);
  const std::size_t n = profile.classes.size();
  m.n_ = n;
  std::vector<double> sum(n * n, 0.0);
  std::vector<int> count(n * n, 0);
  for (const policy::MeasuredSet& set : profile.measured) {
    if (set.classes.size() != 2 || set.slowdown.size() != 2) continue;
    const int a = m.Index(profile.Find(set.classes[0]));
    const int b = m.Index(profile.Find(set.classes[1]));
    if (a < 0 || b < 0) continue;
    const auto ab = static_cast<std::size_t>(a) * n + static_cast<std::size_t>(b);
    const auto ba = static_cast<std::size_t>(b) * n + static_cast<std::size_t>(a);
    sum[ab] += set.slowdown[0] - 1.0;
    sum[ba] += set.slowdown[1] - 1.0;
    ++count[ab];
    ++count[ba];
  }
  m.excess_.assign(n * n, 0.0);
  m.measured_.assign(n * n, 0);
  std::vector<double> row(n, 0.0), col(n, 0.0);
  std::vector<int> row_n(n, 0), col_n(n, 0);
  double total = 0;
  int cells = 0;
  for (std::size_t i = 0; i < n * n; ++i) {
    if (count[i] == 0) continue;
    const double e = sum[i] / count[i];
    m.excess_[i] = e;
    m.measured_[i] = 1;
    row[i / n] += e;
    ++row_n[i / n];
    col[i % n] += e;
    ++col_n[i % n];
    total += e;
    ++cells;
  }
  if (cells == 0) {
    return core::MakeError(core::ErrorCode::kInvalidArgument,
                           "truth model " + std::string(TruthRuleName(rule)) +
                               " needs measured pairs " + "in the truth profile, and " +
                               profile.name + " has none");
  }
  const double mean = total / cells;
  for (std::size_t k = 0; k < n; ++k) {
    row[k] = row_n[k] > 0 ? row[k] / row_n[k] : mean;
    col[k] = col_n[k] > 0 ? col[k] / col_n[k] : mean;
  }
  for (std::size_t i = 0; i < n * n; ++i) {
    if (!m.measured_[i]) m.excess_[i] = mean > 0 ? row[i / n] * col[i % n] / mean : 0.0;
    m.largest_ = std::max(m.largest_, m.excess_[i]);
  }
  return m;
}

int PairRuleInterference::Index(const policy::ClassProfile* c) const {
  if (c == nullptr || profile_->classes.empty()) return -1;
  const policy::ClassProfile* first = profile_->classes.data();
  if (c < first || c >= first + profile_->classes.size()) return -1;
  return static_cast<int>(c - first);
}

double PairRuleInterference::PairExcess(const policy::ClassProfile* k,
                                        const policy::ClassProfile* j) const {
  const int a = Index(k);
  const int b = Index(j);
  if (a < 0 || b < 0) return largest_;
  return excess_[static_cast<std::size_t>(a) * n_ + static_cast<std::size_t>(b)];
}

bool PairRuleInterference::PairMeasured(const policy::ClassProfile* k,
                                        const policy::ClassProfile* j) const {
  const int a = Index(k);
  const int b = Index(j);
  return a >= 0 && b >= 0 &&
         measured_[static_cast<std::size_t>(a) * n_ + static_cast<std::size_t>(b)];
}

void PairRuleInterference::Predict(std::span<const policy::Member> members,
                                   std::span<double> slowdown) const {
  GPUMUX_CHECK(members.size() == slowdown.size(), "one slowdown per member");
  const std::size_t n = members.size();
  for (std::size_t k = 0; k < n; ++k) {
    const policy::Member& mk = members[k];
    const double rho_k = mk.cls != nullptr ? BusyRatio(*mk.cls, mk.batch) : 1.0;
    double sum = 0;
    double worst = 0;
    for (std::size_t j = 0; j < n; ++j) {
      if (j == k) continue;
      const policy::Member& mj = members[j];
      const double rho_j = mj.cls != nullptr ? BusyRatio(*mj.cls, mj.batch) : 1.0;
      const double e = PairExcess(mk.cls, mj.cls) * std::sqrt(rho_k * rho_j);
      sum += e;
      worst = std::max(worst, e);
    }
    if (n < 2) {
      slowdown[k] = 1.0;
    } else if (rule_ == TruthRule::kPairSum) {
      slowdown[k] = 1.0 + sum;
    } else {
      slowdown[k] = (1.0 + worst) * (1.0 + kPairMaxGrowth * static_cast<double>(n - 2));
    }
    slowdown[k] = std::clamp(slowdown[k], 1.0, policy::kMaxMeasuredSlowdown);
  }
}

core::Result<std::optional<PairRuleInterference>> PairRuleFor(const policy::WorkloadProfile& truth,
                                                              std::string_view truth_model) {
  auto rule = ParseTruthRule(truth_model);
  if (!rule) return tl::unexpected(rule.error());
  if (*rule == TruthRule::kPredictor) return std::optional<PairRuleInterference>();
  auto made = PairRuleInterference::Make(truth, *rule);
  if (!made) return tl::unexpected(made.error());
  return std::optional<PairRuleInterference>(std::move(*made));
}

}  // namespace gpumux::sim
