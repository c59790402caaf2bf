#include "gpumux/sim/dl_sim.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <queue>
#include <set>
#include <tuple>

#include "gpumux/core/check.h"
#include "gpumux/core/ledger.h"
#include "gpumux/core/rng.h"
#include "gpumux/policy/engine.h"
#include "gpumux/policy/registry.h"
#include "gpumux/policy/tuner.h"
#include "src/sim/dl_sim_state.h"

namespace gpumux::sim {
namespace {

using core::Micros;
using policy::ClassProfile;

constexpr double kUsPerS = 1e6;

using dl_state::Event;
using dl_state::Gpu;
using dl_state::Job;
using dl_state::JobState;
using dl_state::kReportSteps;
using dl_state::Normal;
using dl_state::TruthModel;

class Simulator;

class View final : public policy::JobView {
 public:
  explicit View(const Simulator& sim) : sim_(&sim) {}
  std::optional<policy::JobSnapshot> Job(core::TenantIndex t) const override;
  int QueuedAhead() const override { return ahead_; }

  int ahead_ = 0;

 private:
  const Simulator* sim_;
};

class Simulator {
 public:
  Simulator(const policy::WorkloadProfile& profile, const policy::WorkloadProfile& truth,
            const std::vector<JobSpec>& specs, const DlSimOptions& options)
      : profile_(profile),
        truth_profile_(truth),
        options_(options),
        belief_(profile),
        truth_(truth, options.model_error,
               options.truth_seed != 0 ? options.truth_seed : options.seed,
               PairRuleFor(truth, options.truth_model).value_or(std::nullopt)),
        view_(*this),
        policy_rng_(options.seed, "policy"),
        measure_rng_(options.seed, "measure"),
        tuner_rng_(options.seed, "tuner"),
        report_rng_(options.seed, "report"),
        observe_rng_(options.seed, "observe") {
    for (const JobSpec& s : specs) {
      Job j;
      j.spec = &s;
      j.cls = profile.Find(s.cls);
      j.truth = truth.Find(s.cls);
      GPUMUX_CHECK(j.cls != nullptr && j.truth != nullptr, "job classes are validated by RunDl");
      // Hidden per-job draws, each from its own stream so that one option does not shift the
      // others' draws: log-normal around the class's value, mean preserved.
      core::Rng rng(options.seed, "job:" + s.id);
      const double ws = options.work_spread;
      const double ns = options.noise_scale_spread;
      j.work = j.truth->WorkSamples() * std::exp(ws * Normal(rng) - 0.5 * ws * ws);
      j.noise_scale = j.truth->noise_scale * std::exp(ns * Normal(rng) - 0.5 * ns * ns);
      j.solo_s = j.cls->SoloSeconds();
      j.request.name = s.id;
      j.request.gpu_count = 1;
      j.request.gpu_milli = 1;  // co-located jobs share compute; memory is what is reserved
      j.request.gpu_mib = s.gpu_mib;
      j.request.workload_class = s.cls;
      jobs_.push_back(std::move(j));
    }
  }

  core::Result<DlResult> Run() {
    if (auto ok = Setup(); !ok) return tl::unexpected(ok.error());
    for (std::size_t i = 0; i < jobs_.size(); ++i) {
      Push(jobs_[i].spec->submit_us, static_cast<int>(i), 0);
    }
    bool need_pass = false;
    while (!events_.empty()) {
      const Event ev = events_.top();
      events_.pop();
      now_ = ev.t;
      ++result_.events;
      Job& j = jobs_[static_cast<std::size_t>(ev.job)];
      if (ev.version == 0) {
        j.state = JobState::kQueued;
        queue_.insert(QueueKey(ev.job));
        need_pass = true;
      } else if (ev.version == j.version && j.state == JobState::kRunning) {
        need_pass = HandleJobEvent(ev.job) || need_pass;
      }
      if (clock_error_) return tl::unexpected(*clock_error_);
      need_pass = need_pass || pass_requested_;
      pass_requested_ = false;
      if (need_pass && (events_.empty() || events_.top().t != now_)) {
        Schedule();
        need_pass = pass_requested_;
        pass_requested_ = false;
      }
      if (clock_error_) return tl::unexpected(*clock_error_);
      if (options_.check_invariants) ledger_->CheckInvariants();
    }
    for (const Job& j : jobs_) {
      if (j.state != JobState::kDone) {
        return core::MakeError(core::ErrorCode::kFailedPrecondition,
                               "job '" + j.spec->id + "' never ran: no GPU can take it");
      }
    }
    Finish();
    return std::move(result_);
  }

  const Job* JobOfTenant(core::TenantIndex t) const {
    const auto i = static_cast<std::size_t>(t);
    if (t < 0 || i >= tenant_job_.size()) return nullptr;
    return &jobs_[static_cast<std::size_t>(tenant_job_[i])];
  }
  const Gpu& gpu(int g) const { return gpus_[static_cast<std::size_t>(g)]; }
  Micros now() const { return now_; }

 private:
  core::Result<void> Setup() {
    std::vector<core::NodeSpec> nodes;
    for (int n = 0; n < options_.nodes; ++n) {
      core::NodeSpec spec;
      spec.name = "node-" + std::to_string(n + 1);
      spec.cpu_milli = 1000 * 1000;
      spec.memory_mib = 1024 * 1024;
      spec.max_pods = 1000;
      for (int i = 0; i < options_.gpus_per_node; ++i) {
        core::GpuSpec g;
        g.index = i;
        g.uuid = "GPU-sim-" + std::to_string(n + 1) + "-" + std::to_string(i);
        g.model = profile_.gpu_model.empty() ? "GPU" : profile_.gpu_model;
        g.memory_mib = profile_.gpu_memory_mib;
        spec.gpus.push_back(std::move(g));
      }
      nodes.push_back(std::move(spec));
    }
    if (options_.nodes <= 0 || options_.gpus_per_node <= 0 || options_.max_jobs_per_gpu <= 0) {
      return core::MakeError(core::ErrorCode::kInvalidArgument,
                             "nodes, GPUs per node and jobs per GPU must be positive");
    }
    auto cluster = core::Cluster::Build(std::move(nodes));
    if (!cluster) return tl::unexpected(cluster.error());
    cluster_ = std::make_unique<core::Cluster>(std::move(*cluster));
    ledger_ = std::make_unique<core::Ledger>(*cluster_);
    for (core::NodeIndex n = 0; n < cluster_->size(); ++n) {
      for (int i = 0; i < options_.gpus_per_node; ++i) {
        Gpu g;
        g.node = n;
        g.index = i;
        gpus_.push_back(std::move(g));
      }
    }
    policy::PolicyContext context;
    context.profile = &profile_;
    context.interference = &belief_;
    context.jobs = &view_;
    context.colocation.max_jobs_per_gpu = options_.max_jobs_per_gpu;
    context.colocation.work_spread = options_.work_spread;
    context.knobs = options_.knobs;
    auto made = policy::BuiltinPolicies().Make(options_.policy, context);
    if (!made) return tl::unexpected(made.error());
    policy_ = std::move(*made);
    traits_ = policy_->colocation();
    std::string tuner = options_.tuner;
    if (tuner == "auto") tuner = traits_ != nullptr ? traits_->tuner : "none";
    auto t = policy::MakeTuner(tuner);
    if (!t) return tl::unexpected(t.error());
    tuner_ = std::move(*t);
    if (options_.queue == "auto") {
      shortest_first_ =
          traits_ != nullptr && traits_->queue_order == policy::QueueOrder::kShortestRemaining;
    } else if (options_.queue == "fifo" || options_.queue == "shortest") {
      shortest_first_ = options_.queue == "shortest";
    } else {
      return core::MakeError(core::ErrorCode::kInvalidArgument,
                             "queue '" + options_.queue + "': expected auto, fifo or shortest");
    }
    result_.policy = options_.policy;
    result_.tuner = tuner;
    result_.queue = shortest_first_ ? "shortest" : "fifo";
    result_.seed = options_.seed;
    std::vector<std::int64_t> ranks(static_cast<std::size_t>(cluster_->size()));
    std::iota(ranks.begin(), ranks.end(), 0);
    engine_ = std::make_unique<policy::Engine>(*ledger_, *policy_, ranks, policy_rng_);
    for (Job& j : jobs_) {
      if (j.cls->MemoryMib(j.cls->default_batch) > profile_.gpu_memory_mib ||
          j.spec->gpu_mib > profile_.gpu_memory_mib) {
        return core::MakeError(core::ErrorCode::kInvalidArgument,
                               "job '" + j.spec->id + "' needs more GPU memory than a GPU has");
      }
    }
    return {};
  }

  using QueueEntry = std::tuple<double, Micros, int>;
  QueueEntry QueueKey(int job) const {
    const Job& j = jobs_[static_cast<std::size_t>(job)];
    return {shortest_first_ ? j.solo_s : 0.0, j.spec->submit_us, job};
  }

  void Push(Micros t, int job, std::uint64_t version) {
    if (t > kDlClockLimitUs) {
      PastTheClock(job);
      return;
    }
    events_.push(Event{t, next_seq_++, job, version});
  }

  // Records (the first) run past the clock's end; Run stops at the next event.
  void PastTheClock(int job) {
    if (clock_error_) return;
    const Job& j = J(job);
    clock_error_ = core::Error{
        core::ErrorCode::kFailedPrecondition,
        "job '" + j.spec->id + "' (class " + j.spec->cls +
            ") would run past the simulator's clock limit of 2^62 microseconds (about 146,000 "
            "years of simulated time): its work, or its wait, is too long"};
  }

  Job& J(int i) { return jobs_[static_cast<std::size_t>(i)]; }
  Gpu& G(int g) { return gpus_[static_cast<std::size_t>(g)]; }

  void Advance(Job& j) {
    const double dt = static_cast<double>(now_ - j.updated) / kUsPerS;
    j.done = std::min(j.work, j.done + j.rate * dt);
    j.raw += j.raw_rate * dt;
    j.work_done_est += j.raw_rate * dt * j.cls->Efficiency(j.batch, j.noise_scale_est);
    j.updated = now_;
  }

  bool Paused(const Job& j) const { return j.paused_until > now_; }

  // Recomputes the rates of every job on GPU g from the true interference of its active jobs.
  void Reprice(int g) {
    Gpu& gpu = G(g);
    const double span = static_cast<double>(now_ - gpu.last) / kUsPerS;
    gpu.util_integral += gpu.util * span;
    gpu.busy_integral += (gpu.occupied ? 1.0 : 0.0) * span;
    gpu.last = now_;
    std::vector<policy::Member> members;
    std::vector<int> active;
    for (int ji : gpu.jobs) {
      Job& j = J(ji);
      Advance(j);
      if (!Paused(j)) {
        members.push_back({j.truth, j.batch});
        active.push_back(ji);
      }
      j.rate = 0;
      j.raw_rate = 0;
    }
    if (Observing()) {
      if (gpu.solo_job >= 0) MeasureSolo(J(gpu.solo_job), gpu, span);
      const bool alone = gpu.jobs.size() == 1 && active.size() == 1;
      gpu.solo_job = alone ? active.front() : -1;
      gpu.solo_raw = alone ? J(active.front()).raw : 0;
      gpu.solo_batch = alone ? J(active.front()).batch : 0;
    }
    std::vector<double> slowdown(members.size());
    if (!members.empty()) truth_.Predict(members, slowdown);
    double busy = 0;
    const double report_sd = options_.measure_noise / std::sqrt(kReportSteps);
    for (std::size_t k = 0; k < active.size(); ++k) {
      Job& j = J(active[k]);
      const double step = j.truth->StepSeconds(j.batch) * slowdown[k];
      j.raw_rate = j.batch / step;
      j.rate = j.raw_rate * j.truth->Efficiency(j.batch, j.noise_scale);
      j.observed_factor = std::max(0.05, 1.0 + report_sd * Normal(report_rng_));
      RecordProgress(j);
      busy += j.truth->GpuBusy(j.batch);
    }
    gpu.util = std::min(1.0, busy);
    gpu.occupied = !gpu.jobs.empty();
    for (int ji : gpu.jobs) Reschedule(ji);
  }

  // A breakpoint of the job's progress (its rate changes now), keeping one at or before the
  // start of the report window (the last kReportSteps steps).
  void RecordProgress(Job& j) {
    if (j.progress.empty() || j.progress.back().first != now_) {
      j.progress.emplace_back(now_, j.raw);
    } else {
      j.progress.back().second = j.raw;
    }
    const double window_start = j.raw - kReportSteps * j.batch;
    while (j.progress.size() > 1 && j.progress[1].second <= window_start) j.progress.pop_front();
  }

  double EpochPosition(const Job& j) const {
    return j.raw / static_cast<double>(j.truth->dataset_samples);
  }

  void Reschedule(int ji) {
    Job& j = J(ji);
    ++j.version;
    double dt = std::numeric_limits<double>::infinity();
    if (Paused(j)) {
      Push(j.paused_until, ji, j.version);
      return;
    }
    if (j.rate <= 0) return;
    dt = (j.work - j.done) / j.rate;
    const Gpu& gpu = G(j.gpu);
    if (gpu.window_open && gpu.window_job == ji) {
      dt = std::min(dt, (gpu.window_target_raw - j.raw) / j.raw_rate);
    }
    if (j.pending_batch > 0) {
      const double next = std::floor(EpochPosition(j) + 1e-9) + 1.0;
      dt =
          std::min(dt, (next * static_cast<double>(j.truth->dataset_samples) - j.raw) / j.raw_rate);
    }
    const double us = std::ceil(std::max(dt, 0.0) * kUsPerS);
    if (!(us < static_cast<double>(kDlClockLimitUs - now_))) {  // also NaN
      PastTheClock(ji);
      return;
    }
    Push(now_ + std::max<Micros>(static_cast<Micros>(us), 1), ji, j.version);
  }

  // Returns true when a scheduling pass is due.
  bool HandleJobEvent(int ji) {
    Job& j = J(ji);
    const int g = j.gpu;
    Gpu& gpu = G(g);
    Advance(j);
    if (j.paused_until > 0 && j.paused_until <= now_) {
      j.paused_until = 0;
      Reprice(g);
      if (gpu.window_pending && gpu.window_job == ji) OpenWindow(g);
      return false;
    }
    if (j.done >= j.work * (1.0 - 1e-12)) {
      Complete(ji);
      return true;
    }
    if (gpu.window_open && gpu.window_job == ji &&
        j.raw >= gpu.window_target_raw - 1e-6 * std::max(1.0, gpu.window_target_raw)) {
      CloseWindow(g);
      return false;
    }
    if (j.pending_batch > 0) {
      const double pos = EpochPosition(j);
      if (std::abs(pos - std::round(pos)) < 1e-7 && pos > 0.5) {
        const int b = j.pending_batch;
        j.pending_batch = 0;
        ChangeBatch(j, b);
        Reprice(g);
        return false;
      }
    }
    Reschedule(ji);  // rounding left us just short: try again
    return false;
  }

  void ChangeBatch(Job& j, int b) {
    if (b == j.batch) return;
    j.batch = b;
    j.progress.clear();  // its step-time report starts over at the new batch size
    ++j.batch_changes;
    const auto pause = static_cast<Micros>(std::llround(options_.reconfigure_s * kUsPerS));
    if (pause > 0) {
      j.paused_until = now_ + pause;
      result_.metrics.paused_job_s += options_.reconfigure_s;
    }
  }

  void Place(int ji, const core::Placement& p, const core::Request& adapted) {
    Job& j = J(ji);
    auto t = ledger_->Assign(j.spec->id, adapted, p);
    GPUMUX_CHECK(t.has_value(), "the engine's decision must fit the ledger");
    if (tenant_job_.size() <= static_cast<std::size_t>(*t)) {
      tenant_job_.resize(static_cast<std::size_t>(*t) + 1, -1);
    }
    tenant_job_[static_cast<std::size_t>(*t)] = ji;
    const int g = cluster_->gpu_offset(p.node) + p.gpus.front();
    j.gpu = g;
    j.state = JobState::kRunning;
    j.start = now_;
    j.batch = j.cls->default_batch;
    j.updated = now_;
    G(g).jobs.push_back(ji);
    if (options_.record_timeline) {
      j.segment = result_.timeline.size();
      result_.timeline.push_back({g, j.spec->id, j.spec->cls, now_, -1});
    }
    Reprice(g);
    StartTuning(g, ji);
  }

  void Complete(int ji) {
    Job& j = J(ji);
    const int g = j.gpu;
    Gpu& gpu = G(g);
    j.state = JobState::kDone;
    j.finish = now_;
    j.done = j.work;
    j.rate = j.raw_rate = 0;
    auto released = ledger_->Release(j.spec->id);
    GPUMUX_CHECK(released.has_value(), "a running job is in the ledger");
    gpu.jobs.erase(std::find(gpu.jobs.begin(), gpu.jobs.end(), ji));
    if (options_.record_timeline) result_.timeline[j.segment].end_us = now_;
    const bool in_session =
        gpu.session &&
        std::find(gpu.session_jobs.begin(), gpu.session_jobs.end(), ji) != gpu.session_jobs.end();
    if (in_session) EndSession(g);
    Reprice(g);
    if (tuner_ && tuner_->RetunesOnDeparture() && !gpu.jobs.empty() && !gpu.session) {
      StartTuning(g, -1);
    }
  }

  void StartTuning(int g, int newcomer) {
    if (!tuner_) return;
    Gpu& gpu = G(g);
    if (gpu.session) return;
    std::vector<policy::TuneJob> group;
    for (int ji : gpu.jobs) {
      const Job& j = J(ji);
      group.push_back(
          {j.cls, j.effective_batch(), j.spec->gpu_mib, ji == newcomer, j.noise_scale_est});
    }
    gpu.session = tuner_->Start(std::move(group), belief_, tuner_rng_);
    if (!gpu.session) return;
    gpu.session_jobs = gpu.jobs;
    gpu.newcomer = newcomer;
    gpu.locked_since = now_;
    ++result_.metrics.tuning_sessions;
    StepSession(g);
  }

  void StepSession(int g) {
    Gpu& gpu = G(g);
    const policy::TuneStep step = gpu.session->Next();
    GPUMUX_CHECK(step.batches.size() == gpu.session_jobs.size(), "one batch per session job");
    for (std::size_t k = 0; k < step.batches.size(); ++k) {
      const int ji = gpu.session_jobs[k];
      Job& j = J(ji);
      const int b = step.batches[k];
      if (ji == gpu.newcomer) {
        Advance(j);
        ChangeBatch(j, b);
      } else {
        j.pending_batch = b == j.batch ? 0 : b;
      }
    }
    if (step.final) {
      EndSession(g);
      Reprice(g);
      return;
    }
    gpu.window_job = gpu.newcomer >= 0 ? gpu.newcomer : gpu.session_jobs.front();
    gpu.window_steps = std::max(1, step.measure_minibatches);
    gpu.window_pending = true;
    Reprice(g);
    if (!Paused(J(gpu.window_job))) OpenWindow(g);
  }

  void OpenWindow(int g) {
    Gpu& gpu = G(g);
    gpu.window_pending = false;
    gpu.window_open = true;
    gpu.window_start = now_;
    gpu.window_raw_start.clear();
    gpu.window_batches.clear();
    gpu.window_clean = true;
    gpu.window_changes.clear();
    for (int ji : gpu.session_jobs) {
      Job& j = J(ji);
      Advance(j);
      gpu.window_raw_start.push_back(j.raw);
      gpu.window_batches.push_back(j.batch);
      gpu.window_clean = gpu.window_clean && !Paused(j);
      gpu.window_changes.push_back(j.batch_changes);
    }
    const Job& w = J(gpu.window_job);
    gpu.window_target_raw = w.raw + static_cast<double>(gpu.window_steps) * w.batch;
    ++result_.metrics.measurement_windows;
    Reschedule(gpu.window_job);
  }

  void CloseWindow(int g) {
    Gpu& gpu = G(g);
    gpu.window_open = false;
    const double elapsed = static_cast<double>(now_ - gpu.window_start) / kUsPerS;
    std::vector<double> measured;
    std::vector<double> noise_scale;
    bool clean = gpu.window_clean && gpu.session_jobs.size() >= 2;
    for (std::size_t k = 0; k < gpu.session_jobs.size(); ++k) {
      Job& j = J(gpu.session_jobs[k]);
      Advance(j);
      const double steps = (j.raw - gpu.window_raw_start[k]) / gpu.window_batches[k];
      clean = clean && steps >= 1 && j.batch_changes == gpu.window_changes[k];
      double step_s = 0;
      if (steps >= 0.5) {
        step_s = elapsed / steps;
      } else {
        // It barely ran (e.g. paused): report its step time at the current setting.
        step_s = j.raw_rate > 0 ? j.batch / j.raw_rate : j.truth->StepSeconds(j.batch);
      }
      const double sd = options_.measure_noise / std::sqrt(std::max(steps, 1.0));
      step_s *= std::max(0.05, 1.0 + sd * Normal(measure_rng_));
      measured.push_back(step_s);
      ObserveNoiseScale(j, std::max(steps, 1.0));
      noise_scale.push_back(j.noise_scale_est);
    }
    if (Observing() && clean) RecordObservation(gpu, measured);
    gpu.session->Observe(gpu.window_batches, measured, noise_scale);
    StepSession(g);
  }

  // The job ran alone on `gpu` for the last `span` seconds at gpu.solo_batch: what a
  // coordinator measures of it, a mean step time with the windows' noise.
  bool Observing() const { return options_.record_observations || options_.learn; }

  void MeasureSolo(Job& j, const Gpu& gpu, double span) {
    const double steps = (j.raw - gpu.solo_raw) / gpu.solo_batch;
    if (!(steps > 0) || !(span > 0)) return;
    const double sd = options_.measure_noise / std::sqrt(std::max(steps, 1.0));
    const double step_s = span / steps * std::max(0.05, 1.0 + sd * Normal(observe_rng_));
    auto& [sum, n] = j.solo_measured[gpu.solo_batch];
    sum += step_s * steps;
    n += steps;
  }

  // What a coordinator knows of the job's solo step time at `batch` (docs/COORDINATOR.md):
  // its own solo measurement nearest in batch size (at least 3 steps), scaled along the
  // profile's step-time curve; else the profile's. `measured` says which.
  double SoloReference(const Job& j, int batch, bool& measured) const {
    const std::pair<double, double>* best = nullptr;
    int best_batch = 0;
    for (const auto& [b, sn] : j.solo_measured) {
      if (sn.second < 3) continue;
      if (best == nullptr || std::abs(b - batch) < std::abs(best_batch - batch)) {
        best = &sn;
        best_batch = b;
      }
    }
    measured = best != nullptr;
    if (best == nullptr) return j.cls->StepSeconds(batch);
    return best->first / best->second * j.cls->StepSeconds(batch) / j.cls->StepSeconds(best_batch);
  }

  void RecordObservation(const Gpu& gpu, std::span<const double> step_s) {
    policy::Observation o;
    bool all_measured = true;
    std::vector<policy::Member> members;
    for (std::size_t k = 0; k < gpu.session_jobs.size(); ++k) {
      const Job& j = J(gpu.session_jobs[k]);
      const int batch = gpu.window_batches[k];
      bool measured = false;
      const double solo = SoloReference(j, batch, measured);
      all_measured = all_measured && measured;
      o.classes.push_back(j.cls->name);
      o.batches.push_back(batch);
      o.slowdown.push_back(std::clamp(step_s[k] / solo, 1.0, policy::kMaxMeasuredSlowdown));
      members.push_back({j.cls, batch});
    }
    std::vector<double> predicted(members.size());
    belief_.Predict(members, predicted);
    auto& by_size = result_.belief_error_by_size;
    if (by_size.size() <= members.size()) by_size.resize(members.size() + 1);
    for (std::size_t k = 0; k < members.size(); ++k) {
      result_.belief_abs_error += std::abs(predicted[k] - o.slowdown[k]);
      ++result_.belief_error_members;
      by_size[members.size()].abs += std::abs(predicted[k] - o.slowdown[k]);
      by_size[members.size()].signed_sum += predicted[k] - o.slowdown[k];
      ++by_size[members.size()].members;
    }
    o = policy::Canonical(std::move(o));
    o.count = 1;
    o.node = "simulator";
    o.gpu_model = truth_profile_.gpu_model;
    o.solo = all_measured ? "measured" : "profile";
    if (options_.learn) {
      belief_.Observe(o);
      belief_.Refresh();
      result_.learned_sets = static_cast<std::int64_t>(belief_.observed());
    }
    if (!options_.record_observations) return;
    auto key = std::make_pair(o.classes, o.batches);
    auto it = observed_.find(key);
    if (it == observed_.end()) {
      observed_.emplace(std::move(key), std::move(o));
      return;
    }
    auto merged = policy::MergeObservations(it->second, o);
    GPUMUX_CHECK(merged.has_value(), "observations of one key merge");
    it->second = std::move(*merged);
  }

  // A window's estimate of the job's gradient noise scale (Pollux estimates it from the
  // gradients' variance): the truth times log-normal noise with sd 3 x measure_noise /
  // sqrt(steps) (a noise-scale estimate is far noisier than a step time), averaged in log space
  // with the job's earlier estimates.
  void ObserveNoiseScale(Job& j, double steps) {
    const double sd = 3.0 * options_.measure_noise / std::sqrt(steps);
    const double log_obs = std::log(j.noise_scale) + sd * Normal(measure_rng_);
    const double log_prev = j.noise_scale_obs > 0 ? std::log(j.noise_scale_est) : 0.0;
    const double n = static_cast<double>(j.noise_scale_obs);
    j.noise_scale_est = std::exp((log_prev * n + log_obs) / (n + 1.0));
    ++j.noise_scale_obs;
  }

  void EndSession(int g) {
    Gpu& gpu = G(g);
    gpu.session.reset();
    gpu.session_jobs.clear();
    gpu.newcomer = -1;
    gpu.window_pending = gpu.window_open = false;
    gpu.window_job = -1;
    if (gpu.locked_since >= 0) {
      result_.metrics.locked_gpu_s += static_cast<double>(now_ - gpu.locked_since) / kUsPerS;
    }
    gpu.locked_since = -1;
    pass_requested_ = true;
  }

  // Whether any GPU could take another job at all (cheap pre-check for the pass).
  // A GPU is open when the ledger still offers compute and memory on it (an exclusively held
  // GPU offers none), it is not locked by tuning, and it holds fewer jobs than a co-location
  // policy is allowed to stack.
  bool AnyOpenGpu(core::MiB smallest) const {
    for (const Gpu& gpu : gpus_) {
      if (gpu.session) continue;
      if (traits_ != nullptr && static_cast<int>(gpu.jobs.size()) >= options_.max_jobs_per_gpu) {
        continue;
      }
      const core::NodeView node = ledger_->Node(gpu.node);
      const auto i = static_cast<std::size_t>(gpu.index);
      if (node.gpu_free_milli[i] > 0 && node.gpu_free_mib[i] >= smallest) return true;
    }
    return false;
  }

  void Schedule() {
    if (queue_.empty()) return;
    core::MiB smallest = profile_.gpu_memory_mib;
    for (const auto& e : queue_) smallest = std::min(smallest, J(std::get<2>(e)).spec->gpu_mib);
    if (!AnyOpenGpu(smallest)) return;
    view_.ahead_ = 0;
    for (auto it = queue_.begin(); it != queue_.end();) {
      const int ji = std::get<2>(*it);
      policy::Decision d = engine_->Decide(J(ji).request);
      if (d.placement) {
        it = queue_.erase(it);
        Place(ji, *d.placement, d.request);
        if (!AnyOpenGpu(smallest)) break;
      } else {
        if (d.declined) ++result_.metrics.declined;
        ++view_.ahead_;
        ++it;
      }
    }
  }

  void Finish() {
    DlMetrics& m = result_.metrics;
    Micros first = std::numeric_limits<Micros>::max();
    Micros last = 0;
    std::vector<double> jct;
    double queue_sum = 0;
    for (const Job& j : jobs_) {
      DlJobResult r;
      r.id = j.spec->id;
      r.cls = j.spec->cls;
      r.submit_us = j.spec->submit_us;
      r.start_us = j.start;
      r.finish_us = j.finish;
      const Gpu& gpu = G(j.gpu);
      r.gpu = cluster_->node(gpu.node).name + "/" + std::to_string(gpu.index);
      r.final_batch = j.batch;
      r.batch_changes = j.batch_changes;
      first = std::min(first, r.submit_us);
      last = std::max(last, r.finish_us);
      jct.push_back(static_cast<double>(r.jct_us()) / kUsPerS);
      queue_sum += static_cast<double>(r.queue_us()) / kUsPerS;
      result_.jobs.push_back(std::move(r));
    }
    now_ = last;
    for (std::size_t g = 0; g < gpus_.size(); ++g) Reprice(static_cast<int>(g));
    const double n = static_cast<double>(jct.size());
    m.avg_jct_s = std::accumulate(jct.begin(), jct.end(), 0.0) / n;
    std::sort(jct.begin(), jct.end());
    m.median_jct_s = Percentile(jct, 50);
    m.p95_jct_s = Percentile(jct, 95);
    m.makespan_s = static_cast<double>(last - first) / kUsPerS;
    m.avg_queue_s = queue_sum / n;
    double util = 0, busy = 0;
    for (const Gpu& gpu : gpus_) {
      util += gpu.util_integral;
      busy += gpu.busy_integral;
    }
    // The integrals start at time 0; the window is [first submit, last finish].
    const double window = static_cast<double>(gpus_.size()) * m.makespan_s;
    m.gpu_util = window > 0 ? util / window : 0;
    m.gpu_busy = window > 0 ? busy / window : 0;
    for (auto& [key, o] : observed_) result_.observations.push_back(std::move(o));
  }

  const policy::WorkloadProfile& profile_;
  const policy::WorkloadProfile& truth_profile_;
  DlSimOptions options_;
  // What the policies and tuners believe: the profile, plus what they learn with options_.learn.
  policy::LearningInterference belief_;
  TruthModel truth_;
  View view_;
  core::Rng policy_rng_;
  core::Rng measure_rng_;
  core::Rng tuner_rng_;
  core::Rng report_rng_;   // the noise of the step times jobs report to policies
  core::Rng observe_rng_;  // the noise of solo measurements (record_observations only)
  std::map<std::pair<std::vector<std::string>, std::vector<int>>, policy::Observation> observed_;
  std::unique_ptr<core::Cluster> cluster_;
  std::unique_ptr<core::Ledger> ledger_;
  std::unique_ptr<policy::Policy> policy_;
  const policy::ColocationTraits* traits_ = nullptr;
  bool shortest_first_ = false;  // the queue discipline (DlSimOptions::queue resolved)
  std::unique_ptr<policy::Tuner> tuner_;
  std::unique_ptr<policy::Engine> engine_;
  std::vector<Job> jobs_;
  std::vector<Gpu> gpus_;
  std::vector<int> tenant_job_;
  std::set<QueueEntry> queue_;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events_;
  std::uint64_t next_seq_ = 0;
  Micros now_ = 0;
  bool pass_requested_ = false;
  std::optional<core::Error> clock_error_;
  DlResult result_;
};

std::optional<policy::JobSnapshot> View::Job(core::TenantIndex t) const {
  const dl_state::Job* j = sim_->JobOfTenant(t);
  if (j == nullptr || j->state != JobState::kRunning) return std::nullopt;
  policy::JobSnapshot s;
  // Only observations: the class prior, the progress counter, a noisy step-time report and
  // the noise-scale estimate. Never j->work, j->noise_scale, j->rate or the truth's slowdowns.
  s.cls = j->cls;
  s.batch = j->effective_batch();
  s.memory_limit = j->spec->gpu_mib;
  const double dt = static_cast<double>(sim_->now() - j->updated) / kUsPerS;
  s.work_done =
      j->work_done_est + j->raw_rate * dt * j->cls->Efficiency(j->batch, j->noise_scale_est);
  s.observed_step_s = dl_state::ReportedStep(*j, sim_->now()) * j->observed_factor;
  s.observed_steady = dl_state::ReportSteady(*j, sim_->now());
  s.noise_scale = j->noise_scale_est;
  s.tuning = static_cast<bool>(sim_->gpu(j->gpu).session);
  return s;
}

}  // namespace

double Percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  const double rank = std::ceil(p / 100.0 * static_cast<double>(sorted.size()));
  const auto i =
      static_cast<std::size_t>(std::clamp(rank, 1.0, static_cast<double>(sorted.size())));
  return sorted[i - 1];
}

core::Result<DlResult> RunDl(const policy::WorkloadProfile& profile,
                             const std::vector<JobSpec>& jobs, const DlSimOptions& options,
                             const policy::WorkloadProfile* truth) {
  if (truth == nullptr) truth = &profile;
  if (auto ok = dl_state::CheckDlRun(profile, jobs, options, *truth); !ok) {
    return tl::unexpected(ok.error());
  }
  Simulator sim(profile, *truth, jobs, options);
  return sim.Run();
}

}  // namespace gpumux::sim
