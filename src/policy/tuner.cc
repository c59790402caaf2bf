#include "gpumux/policy/tuner.h"

#include <algorithm>
#include <cmath>

#include "gpumux/core/check.h"

namespace gpumux::policy {

double GroupProgress(const InterferenceModel& model, std::span<const Member> members,
                     std::span<const double> correction) {
  std::vector<double> slowdown(members.size());
  model.Predict(members, slowdown);
  double total = 0;
  for (std::size_t k = 0; k < members.size(); ++k) {
    const Member& m = members[k];
    if (m.cls == nullptr || m.batch <= 0) continue;
    const double c = correction.empty() ? 1.0 : correction[k];
    const double s = std::max(1.0, slowdown[k] * c);
    total +=
        m.cls->SoloGoodput(m.batch, m.noise_scale) / s / m.cls->SoloGoodput(m.cls->default_batch);
  }
  return total;
}

std::vector<int> OptimiseBatches(const InterferenceModel& model,
                                 std::span<const ClassProfile* const> classes,
                                 std::span<const std::vector<int>> candidates,
                                 std::vector<int> start, std::span<const double> correction,
                                 int rounds, std::span<const double> noise_scale) {
  const std::size_t n = classes.size();
  GPUMUX_CHECK(candidates.size() == n && start.size() == n, "one candidate list per job");
  GPUMUX_CHECK(noise_scale.empty() || noise_scale.size() == n, "one noise scale per job");
  std::vector<Member> members(n);
  for (std::size_t k = 0; k < n; ++k) {
    members[k] = {classes[k], start[k], noise_scale.empty() ? 0.0 : noise_scale[k]};
  }
  double best = GroupProgress(model, members, correction);
  for (int round = 0; round < rounds; ++round) {
    bool changed = false;
    for (std::size_t k = 0; k < n; ++k) {
      int best_batch = members[k].batch;
      for (int b : candidates[k]) {
        members[k].batch = b;
        const double v = GroupProgress(model, members, correction);
        if (v > best + 1e-12) {
          best = v;
          best_batch = b;
          changed = true;
        }
      }
      members[k].batch = best_batch;
    }
    if (!changed) break;
  }
  for (std::size_t k = 0; k < n; ++k) start[k] = members[k].batch;
  return start;
}

std::string SetKey(std::span<const ClassProfile* const> classes) {
  std::vector<std::string> names;
  for (const ClassProfile* c : classes) names.push_back(c != nullptr ? c->name : "?");
  std::sort(names.begin(), names.end());
  std::string key;
  for (const auto& n : names) key += (key.empty() ? "" : "+") + n;
  return key;
}

namespace {

// A Gaussian process over x in [0, 1] with an RBF kernel, fitted exactly (n is tiny).
class SmallGp {
 public:
  SmallGp(std::vector<double> x, std::vector<double> y, double length, double noise)
      : x_(std::move(x)), length_(length) {
    const std::size_t n = x_.size();
    mean_ = 0;
    for (double v : y) mean_ += v;
    mean_ /= static_cast<double>(n);
    // Cholesky of K + noise I.
    l_.assign(n * n, 0.0);
    for (std::size_t i = 0; i < n; ++i) {
      for (std::size_t j = 0; j <= i; ++j) {
        double s = Kernel(x_[i], x_[j]) + (i == j ? noise : 0.0);
        for (std::size_t k = 0; k < j; ++k) s -= l_[i * n + k] * l_[j * n + k];
        l_[i * n + j] = i == j ? std::sqrt(std::max(s, 1e-12)) : s / l_[j * n + j];
      }
    }
    alpha_ = std::move(y);
    for (double& a : alpha_) a -= mean_;
    Solve(alpha_);
  }

  // Posterior mean and standard deviation at x.
  std::pair<double, double> At(double x) const {
    const std::size_t n = x_.size();
    std::vector<double> k(n);
    for (std::size_t i = 0; i < n; ++i) k[i] = Kernel(x, x_[i]);
    double mu = mean_;
    for (std::size_t i = 0; i < n; ++i) mu += k[i] * alpha_[i];
    std::vector<double> v = k;
    ForwardSubstitute(v);
    double var = 1.0;
    for (double e : v) var -= e * e;
    return {mu, std::sqrt(std::max(var, 0.0))};
  }

 private:
  double Kernel(double a, double b) const {
    const double d = (a - b) / length_;
    return std::exp(-0.5 * d * d);
  }
  void ForwardSubstitute(std::vector<double>& v) const {
    const std::size_t n = x_.size();
    for (std::size_t i = 0; i < n; ++i) {
      for (std::size_t k = 0; k < i; ++k) v[i] -= l_[i * n + k] * v[k];
      v[i] /= l_[i * n + i];
    }
  }
  void Solve(std::vector<double>& v) const {  // (L L^T)^-1 v
    ForwardSubstitute(v);
    const std::size_t n = x_.size();
    for (std::size_t i = n; i-- > 0;) {
      for (std::size_t k = i + 1; k < n; ++k) v[i] -= l_[k * n + i] * v[k];
      v[i] /= l_[i * n + i];
    }
  }

  std::vector<double> x_;
  double length_;
  double mean_ = 0;
  std::vector<double> l_;
  std::vector<double> alpha_;
};

class IadeepSession final : public TuningSession {
 public:
  IadeepSession(std::vector<TuneJob> group, std::size_t newcomer, std::vector<int> candidates,
                IadeepTunerOptions options)
      : group_(std::move(group)),
        newcomer_(newcomer),
        candidates_(std::move(candidates)),
        options_(options) {}

  TuneStep Next() override {
    TuneStep step;
    for (const auto& j : group_) step.batches.push_back(j.batch);
    const int probes = std::min<int>(options_.probes, static_cast<int>(candidates_.size()));
    if (static_cast<int>(tried_.size()) >= probes) {
      // Keep the probe with the best measured score (ties: the earlier probe).
      std::size_t best = 0;
      for (std::size_t i = 1; i < tried_.size(); ++i) {
        if (score_[i] > score_[best]) best = i;
      }
      step.batches[newcomer_] = candidates_[tried_[best]];
      step.final = true;
      return step;
    }
    pending_ = PickProbe();
    step.batches[newcomer_] = candidates_[pending_];
    step.measure_minibatches = options_.probe_minibatches;
    return step;
  }

  void Observe(std::span<const int> batches, std::span<const double> step_s,
               std::span<const double> noise_scale) override {
    const ClassProfile& c = *group_[newcomer_].cls;
    const int b = batches[newcomer_];
    if (!noise_scale.empty() && noise_scale[newcomer_] > 0) {
      group_[newcomer_].noise_scale = noise_scale[newcomer_];
    }
    const double goodput =
        static_cast<double>(b) / step_s[newcomer_] * c.Efficiency(b, group_[newcomer_].noise_scale);
    tried_.push_back(pending_);
    score_.push_back(goodput / c.SoloGoodput(c.default_batch));
  }

 private:
  double X(std::size_t i) const {
    return candidates_.size() < 2
               ? 0.0
               : static_cast<double>(i) / static_cast<double>(candidates_.size() - 1);
  }
  bool Tried(std::size_t i) const {
    return std::find(tried_.begin(), tried_.end(), i) != tried_.end();
  }
  std::size_t PickProbe() const {
    const std::size_t last = candidates_.size() - 1;
    // The first three probes span the range: smallest, middle, largest.
    const std::size_t seeds[3] = {0, last / 2, last};
    for (std::size_t s : seeds) {
      if (!Tried(s)) return s;
    }
    std::vector<double> x;
    for (std::size_t i : tried_) x.push_back(X(i));
    const SmallGp gp(x, score_, 0.25, 1e-4);
    std::size_t best = 0;
    double best_ucb = -1e300;
    for (std::size_t i = 0; i <= last; ++i) {
      if (Tried(i)) continue;
      // GP-LCB on the cost -score, i.e. the largest mean + kappa * sd of the score.
      const auto [mu, sd] = gp.At(X(i));
      const double ucb = mu + options_.kappa * sd;
      if (ucb > best_ucb) {
        best_ucb = ucb;
        best = i;
      }
    }
    return best;
  }

  std::vector<TuneJob> group_;
  std::size_t newcomer_;
  std::vector<int> candidates_;
  IadeepTunerOptions options_;
  std::vector<std::size_t> tried_;
  std::vector<double> score_;
  std::size_t pending_ = 0;
};

class JointSession final : public TuningSession {
 public:
  JointSession(JointTuner& tuner, std::vector<TuneJob> group, const InterferenceModel& model,
               std::vector<std::vector<int>> candidates, JointTunerOptions options)
      : tuner_(&tuner),
        group_(std::move(group)),
        model_(&model),
        candidates_(std::move(candidates)),
        options_(options) {
    for (const auto& j : group_) {
      classes_.push_back(j.cls);
      noise_scale_.push_back(j.noise_scale);
    }
    key_ = SetKey(classes_);
    learned_ = true;
    for (const auto* c : classes_) {
      const double v = tuner_->Correction(key_, c->name);
      correction_.push_back(v);
      learned_ = learned_ && tuner_->Knows(key_, c->name);
    }
  }

  TuneStep Next() override {
    TuneStep step;
    std::vector<int> start;
    for (const auto& j : group_) start.push_back(j.batch);
    step.batches =
        OptimiseBatches(*model_, classes_, candidates_, start, correction_, 4, noise_scale_);
    if (!learned_ && !measured_) {
      step.measure_minibatches = options_.measure_minibatches;
    } else {
      step.final = true;
    }
    return step;
  }

  void Observe(std::span<const int> batches, std::span<const double> step_s,
               std::span<const double> noise_scale) override {
    measured_ = true;
    for (std::size_t k = 0; k < noise_scale.size() && k < noise_scale_.size(); ++k) {
      if (noise_scale[k] > 0) noise_scale_[k] = noise_scale[k];
    }
    std::vector<Member> members;
    for (std::size_t k = 0; k < group_.size(); ++k) members.push_back({classes_[k], batches[k]});
    std::vector<double> slowdown(members.size());
    model_->Predict(members, slowdown);
    for (std::size_t k = 0; k < members.size(); ++k) {
      const double predicted = classes_[k]->StepSeconds(batches[k]) * slowdown[k];
      const double ratio = step_s[k] / predicted;
      tuner_->Learn(key_, classes_[k]->name, ratio);
      correction_[k] = tuner_->Correction(key_, classes_[k]->name);
    }
  }

 private:
  JointTuner* tuner_;
  std::vector<TuneJob> group_;
  const InterferenceModel* model_;
  std::vector<std::vector<int>> candidates_;
  JointTunerOptions options_;
  std::vector<const ClassProfile*> classes_;
  std::string key_;
  std::vector<double> correction_;
  std::vector<double> noise_scale_;  // per job: the estimate (0 = the class's prior)
  bool learned_ = false;
  bool measured_ = false;
};

}  // namespace

std::unique_ptr<TuningSession> IadeepTuner::Start(std::vector<TuneJob> group,
                                                  const InterferenceModel& /*model*/,
                                                  core::Rng& /*rng*/) {
  for (std::size_t k = 0; k < group.size(); ++k) {
    if (!group[k].newcomer || group[k].cls == nullptr) continue;
    // IADeep tunes only when the newcomer shares its GPU.
    if (group.size() < 2) return nullptr;
    std::vector<int> candidates = BatchCandidates(*group[k].cls, group[k].memory_limit);
    if (candidates.size() < 2) return nullptr;
    return std::make_unique<IadeepSession>(std::move(group), k, std::move(candidates), options_);
  }
  return nullptr;
}

std::unique_ptr<TuningSession> JointTuner::Start(std::vector<TuneJob> group,
                                                 const InterferenceModel& model,
                                                 core::Rng& /*rng*/) {
  if (group.empty()) return nullptr;
  std::vector<std::vector<int>> candidates;
  bool any_choice = false;
  for (const auto& j : group) {
    if (j.cls == nullptr) return nullptr;  // an unknown class cannot be tuned or predicted
    candidates.push_back(BatchCandidates(*j.cls, j.memory_limit));
    if (candidates.back().empty()) candidates.back().push_back(j.batch);
    any_choice = any_choice || candidates.back().size() > 1;
  }
  if (!any_choice) return nullptr;
  return std::make_unique<JointSession>(*this, std::move(group), model, std::move(candidates),
                                        options_);
}

double JointTuner::Correction(const std::string& set_key, const std::string& member) const {
  auto it = correction_.find({set_key, member});
  return it == correction_.end() ? 1.0 : it->second;
}

bool JointTuner::Knows(const std::string& set_key, const std::string& member) const {
  return correction_.count({set_key, member}) > 0;
}

void JointTuner::Learn(const std::string& set_key, const std::string& member, double ratio) {
  auto [it, inserted] = correction_.emplace(std::make_pair(set_key, member), ratio);
  if (!inserted) it->second = 0.5 * (it->second + ratio);
}

std::vector<JointTuner::Learned> JointTuner::Corrections() const {
  std::vector<Learned> out;
  for (const auto& [key, ratio] : correction_) out.push_back({key.first, key.second, ratio});
  return out;
}

const std::vector<TunerEntry>& BuiltinTuners() {
  static const std::vector<TunerEntry> tuners{
      {"none", "no tuning: every job keeps its batch size", [] { return nullptr; }},
      {"iadeep", "IADeep's: tunes the newcomer only, against the model's prediction",
       [] { return std::make_unique<IadeepTuner>(); }},
      {"joint", "gpumux's: tunes every job on the GPU together over measured windows",
       [] { return std::make_unique<JointTuner>(); }},
  };
  return tuners;
}

core::Result<std::unique_ptr<Tuner>> MakeTuner(std::string_view name) {
  for (const TunerEntry& e : BuiltinTuners()) {
    if (e.name == name) return e.make();
  }
  std::string known;
  for (const TunerEntry& e : BuiltinTuners()) known += (known.empty() ? "" : ", ") + e.name;
  return core::MakeError(core::ErrorCode::kNotFound,
                         "unknown tuner '" + std::string(name) + "' (known: " + known + ")");
}

std::vector<std::string> TunerNames() {
  std::vector<std::string> names;
  for (const TunerEntry& e : BuiltinTuners()) names.push_back(e.name);
  return names;
}

std::string TunersHelp() {
  std::string help;
  for (const TunerEntry& e : BuiltinTuners()) {
    help += (help.empty() ? "" : "; ") + e.name + " (" + e.summary + ")";
  }
  return help;
}

}  // namespace gpumux::policy
