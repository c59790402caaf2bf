// Tuners: choose the batch size of every job on a shared GPU so that the group progresses
// fastest, paying for the measurements they take.
//
// A tuner runs as a session driven by whoever owns time (the simulator, or the node
// coordinator): Next() says which batch sizes to run and for how many minibatches to measure
// them; the driver runs them (charging the reconfiguration and measurement time) and reports
// the measured step times with Observe(); a step with `final` set ends the session.
// The driver, not the tuner, decides when a batch change takes effect (the simulator applies a
// newcomer's changes at once and a running job's at its next epoch boundary).
//
// Built-in tuners:
//  * `iadeep` (IADeep, SC'23): tunes only the newly placed job. It probes 5 batch sizes from
//    its candidates (0.67 b0 .. 2 b0, 33 values): the smallest, middle and largest, then two
//    chosen by GP-LCB (Gaussian process, RBF kernel over log batch size, exploration weight
//    kappa = 1) on the measured score, each over `probe_minibatches` minibatches; it keeps the
//    probe with the best measured score. Score = the newcomer's measured goodput relative to
//    its solo goodput at b0 (slowdown and statistical efficiency in one number; the efficiency
//    from the job's estimated noise scale, never a true one).
//  * `joint` (gpumux): tunes every job in the group together by coordinate ascent on the
//    predicted sum of normalised goodputs, sum_k goodput_k(b) / solo_goodput_k(b0k), then
//    measures the chosen setting once for a few minibatches; the measured / predicted step-time
//    ratio of each class in that set is remembered and corrects later predictions for the same
//    set (so one cheap measurement keeps paying).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gpumux/core/quantity.h"
#include "gpumux/core/result.h"
#include "gpumux/core/rng.h"
#include "gpumux/policy/interference.h"

namespace gpumux::policy {

struct TuneJob {
  const ClassProfile* cls = nullptr;  // never null for a tuned job
  int batch = 0;                      // current batch size
  core::MiB memory_limit = 0;         // the job's GPU memory grant (0 = unlimited)
  bool newcomer = false;              // just placed: the job IADeep tunes
  double noise_scale = 0;             // estimated gradient noise scale (0 = the class's prior)
};

struct TuneStep {
  std::vector<int> batches;     // one per job of the group, in the session's order
  int measure_minibatches = 0;  // > 0: run and report step times before the next step
  bool final = false;           // apply and end the session
};

class TuningSession {
 public:
  virtual ~TuningSession() = default;
  virtual TuneStep Next() = 0;
  // The batch sizes that actually ran during the measurement window of the last step (a
  // running job's change may still wait for its epoch boundary), each job's mean step time
  // (seconds) over that window, and each job's gradient noise scale as estimated from its
  // gradients so far (Pollux's estimator; empty, or 0 for a job, = no estimate).
  virtual void Observe(std::span<const int> batches, std::span<const double> step_s,
                       std::span<const double> noise_scale) = 0;
};

// Contract: Start() returns nullptr when there is nothing to tune (no job the tuner would
// change). Sessions borrow the tuner and the model; both must outlive them.
// A tuner object serves one driver and is not thread-safe (it may learn across sessions).
class Tuner {
 public:
  virtual ~Tuner() = default;
  virtual std::string_view name() const = 0;
  virtual std::unique_ptr<TuningSession> Start(std::vector<TuneJob> group,
                                               const InterferenceModel& model, core::Rng& rng) = 0;
  // Whether a GPU's jobs are tuned again when one of them leaves (the node coordinator tunes
  // whenever a GPU's set of jobs changes). A property of the tuner, not of the placement policy,
  // so that every policy run with the same tuner gets the same lever (issue 31).
  virtual bool RetunesOnDeparture() const { return false; }
};

// Normalised group progress: sum over jobs of goodput(b) / solo goodput at b0, with the
// slowdowns from `model` multiplied by `correction` (one factor per job; empty = all 1).
double GroupProgress(const InterferenceModel& model, std::span<const Member> members,
                     std::span<const double> correction = {});

// Coordinate ascent over each job's candidate batch sizes (candidates[k] non-empty), starting
// from `start`, maximising GroupProgress. Deterministic; at most `rounds` sweeps. `noise_scale`
// (empty, or one per job; 0 = the class's) is each job's estimated gradient noise scale.
std::vector<int> OptimiseBatches(const InterferenceModel& model,
                                 std::span<const ClassProfile* const> classes,
                                 std::span<const std::vector<int>> candidates,
                                 std::vector<int> start, std::span<const double> correction = {},
                                 int rounds = 4, std::span<const double> noise_scale = {});

struct IadeepTunerOptions {
  int probes = 5;
  int probe_minibatches = 10;  // "a few minibatches" per probe
  double kappa = 1.0;          // GP-LCB exploration weight
};

class IadeepTuner final : public Tuner {
 public:
  explicit IadeepTuner(IadeepTunerOptions options = {}) : options_(options) {}
  std::string_view name() const override { return "iadeep"; }
  std::unique_ptr<TuningSession> Start(std::vector<TuneJob> group, const InterferenceModel& model,
                                       core::Rng& rng) override;

 private:
  IadeepTunerOptions options_;
};

struct JointTunerOptions {
  int measure_minibatches = 3;
};

class JointTuner final : public Tuner {
 public:
  explicit JointTuner(JointTunerOptions options = {}) : options_(options) {}
  std::string_view name() const override { return "joint"; }
  bool RetunesOnDeparture() const override { return true; }
  std::unique_ptr<TuningSession> Start(std::vector<TuneJob> group, const InterferenceModel& model,
                                       core::Rng& rng) override;
  // Learned measured/predicted step-time ratio for class `member` in the set `classes`
  // (sorted names joined by '+'), 1 when never measured.
  double Correction(const std::string& set_key, const std::string& member) const;
  bool Knows(const std::string& set_key, const std::string& member) const;
  void Learn(const std::string& set_key, const std::string& member, double ratio);
  // Everything learned, in key order (the node coordinator stores it and learns it back).
  struct Learned {
    std::string set_key, member;
    double ratio = 1;
  };
  std::vector<Learned> Corrections() const;

 private:
  JointTunerOptions options_;
  std::map<std::pair<std::string, std::string>, double> correction_;
};

// The tuner registry, described once like the policies' (registry.h): the simulator, the
// coordinator and their flags read it.
struct TunerEntry {
  std::string name;                              // "joint"
  std::string summary;                           // one line for --help
  std::function<std::unique_ptr<Tuner>()> make;  // "none" makes nullptr: no tuning
};
const std::vector<TunerEntry>& BuiltinTuners();  // none, iadeep, joint
core::Result<std::unique_ptr<Tuner>> MakeTuner(std::string_view name);
std::vector<std::string> TunerNames();
// "none (no tuning), iadeep (IADeep's: ...), joint (...)": the names and summaries for --help.
std::string TunersHelp();

// Sorted class names joined by '+', e.g. "lstm+vgg16": the key of a co-located set.
std::string SetKey(std::span<const ClassProfile* const> classes);

}  // namespace gpumux::policy
