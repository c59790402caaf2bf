#include "gpumux/policy/share_pairing.h"

#include <glpk.h>

#include <algorithm>
#include <limits>
#include <map>
#include <memory>
#include <vector>

#include "gpumux/core/check.h"
#include "gpumux/policy/lp_environment.h"

namespace gpumux::policy {
namespace {

constexpr std::size_t kSlots = static_cast<std::size_t>(core::kMilliPerGpu) + 1;

// Unbounded knapsack over (size, price): best[f] = the most that items fitting in f are worth,
// and last[f] the size of an item in one best filling (0: none).
struct Knapsack {
  std::array<double, kSlots> best{};
  std::array<core::MilliGpu, kSlots> last{};
};

Knapsack Fill(const std::vector<core::MilliGpu>& sizes, const std::vector<double>& prices) {
  Knapsack k;
  for (std::size_t f = 1; f < kSlots; ++f) {
    k.best[f] = k.best[f - 1];
    k.last[f] = 0;
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      const auto s = static_cast<std::size_t>(sizes[i]);
      if (s > f) continue;
      const double v = prices[i] + k.best[f - s];
      if (v > k.best[f] + 1e-12) {
        k.best[f] = v;
        k.last[f] = sizes[i];
      }
    }
  }
  return k;
}

struct ProblemDeleter {
  void operator()(glp_prob* p) const { glp_delete_prob(p); }
};

}  // namespace

SharePrices SharePrices::FromTypical(std::span<const TypicalPod> typical) {
  std::map<core::MilliGpu, double> weight;
  for (const TypicalPod& p : typical) {
    if (p.gpu_count == 1 && p.gpu_milli > 0 && p.gpu_milli < core::kMilliPerGpu) {
      weight[p.gpu_milli] += p.weight;
    }
  }
  SharePrices out;
  if (weight.empty()) return out;
  std::vector<core::MilliGpu> sizes;
  for (const auto& [s, w] : weight) sizes.push_back(s);
  const int n = static_cast<int>(sizes.size());

  // The dual LP, its rows (ways to fill a GPU) added as the knapsack finds them violated.
  const LpEnvironmentRelease environment;  // policies are made on the simulator's worker threads
  std::unique_ptr<glp_prob, ProblemDeleter> lp(glp_create_prob());
  glp_set_obj_dir(lp.get(), GLP_MAX);
  glp_add_cols(lp.get(), n);
  int col = 1;
  for (const auto& [s, w] : weight) {
    glp_set_col_bnds(lp.get(), col, GLP_LO, 0.0, 0.0);
    glp_set_obj_coef(lp.get(), col, w);
    ++col;
  }
  auto add_row = [&](const std::vector<int>& counts) {
    std::vector<int> idx{0};
    std::vector<double> val{0.0};
    for (int i = 0; i < n; ++i) {
      if (counts[static_cast<std::size_t>(i)] == 0) continue;
      idx.push_back(i + 1);
      val.push_back(counts[static_cast<std::size_t>(i)]);
    }
    const int row = glp_add_rows(lp.get(), 1);
    glp_set_row_bnds(lp.get(), row, GLP_UP, 0.0, 1.0);
    glp_set_mat_row(lp.get(), row, static_cast<int>(idx.size()) - 1, idx.data(), val.data());
  };
  for (int i = 0; i < n; ++i) {
    std::vector<int> counts(static_cast<std::size_t>(n), 0);
    counts[static_cast<std::size_t>(i)] =
        static_cast<int>(core::kMilliPerGpu / sizes[static_cast<std::size_t>(i)]);
    add_row(counts);
  }
  glp_smcp params;
  glp_init_smcp(&params);
  params.msg_lev = GLP_MSG_OFF;
  std::vector<double> prices(static_cast<std::size_t>(n), 0.0);
  constexpr int kMaxRounds = 10000;
  for (int round = 0; round < kMaxRounds; ++round) {
    GPUMUX_CHECK(glp_simplex(lp.get(), &params) == 0 && glp_get_status(lp.get()) == GLP_OPT,
                 "the share-pricing LP has no optimum");
    for (int i = 0; i < n; ++i) {
      prices[static_cast<std::size_t>(i)] = glp_get_col_prim(lp.get(), i + 1);
    }
    const Knapsack k = Fill(sizes, prices);
    if (k.best[kSlots - 1] <= 1.0 + 1e-6) break;  // GLPK keeps rows to 1e-7
    std::vector<int> counts(static_cast<std::size_t>(n), 0);
    for (auto f = static_cast<std::size_t>(core::kMilliPerGpu); f > 0;) {
      if (k.last[f] == 0) {
        --f;
        continue;
      }
      const auto it = std::lower_bound(sizes.begin(), sizes.end(), k.last[f]);
      ++counts[static_cast<std::size_t>(it - sizes.begin())];
      f -= static_cast<std::size_t>(k.last[f]);
    }
    add_row(counts);
  }
  out.value_ = Fill(sizes, prices).best;
  out.min_cpu_upto_.fill(std::numeric_limits<core::MilliCpu>::max());
  for (const TypicalPod& p : typical) {
    if (p.gpu_count != 1 || p.gpu_milli <= 0 || p.gpu_milli >= core::kMilliPerGpu) continue;
    for (auto f = static_cast<std::size_t>(p.gpu_milli); f < kSlots; ++f) {
      out.min_cpu_upto_[f] = std::min(out.min_cpu_upto_[f], p.cpu_milli);
    }
  }
  return out;
}

double SharePrices::GapValue(core::MilliGpu free) const {
  GPUMUX_CHECK(free >= 0 && free <= core::kMilliPerGpu, "free milli outside a GPU");
  return value_[static_cast<std::size_t>(free)];
}

double SharePrices::Loss(core::MilliGpu free, core::MilliGpu share, core::MilliCpu cpu_before,
                         core::MilliCpu cpu_after) const {
  if (share <= 0 || free > core::kMilliPerGpu || share > free) return 0.0;
  const auto f = static_cast<std::size_t>(free);
  const auto s = static_cast<std::size_t>(share);
  const double before = cpu_before >= min_cpu_upto_[f] ? value_[f] : 0.0;
  const double after = cpu_after >= min_cpu_upto_[f - s] ? value_[f - s] : 0.0;
  return std::max(0.0, before - value_[s] - after);
}

}  // namespace gpumux::policy
