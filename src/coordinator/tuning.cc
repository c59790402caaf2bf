// The Coordinator's tuning sessions: a GPU's group changes, a session starts, each step's
// batches become targets, windows open and close. The tuner's computations go through the
// tuning runner (coordinator.h); their results are applied only to the group they were for.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "gpumux/coordinator/coordinator.h"
#include "src/coordinator/coordinator_state.h"

namespace gpumux::coordinator {

void Coordinator::Invalidate(Group& g) {
  g.generation->store(++generations_);
  g.computing = false;
}

void Coordinator::Changed(const std::string& gpu, const std::string& newcomer) {
  Group& g = GroupOf(gpu);
  if (g.session || g.computing) {
    log_.Info("jobs changed during tuning; the session starts over", {{"gpu", gpu}});
  }
  EndSession(g);
  if (g.members.empty()) {
    if (sink_ != nullptr) {
      sink_->Write(Key("nodes/" + KeySegment(options_.node) + "/gpus/" + KeySegment(gpu)),
                   std::nullopt);
    }
    groups_.erase(gpu);
    return;
  }
  // A stored assignment for exactly this set of jobs (after a restart) is used as it is.
  if (!g.restored.empty()) {
    std::vector<std::string> a = g.members;
    std::vector<std::string> b;
    for (const auto& [job, batch] : g.restored) b.push_back(job);
    std::sort(a.begin(), a.end());
    if (a == b) {
      for (const auto& [job, batch] : g.restored) jobs_.at(job)->target = batch;
      g.state = g.members.size() == 1 ? "solo" : "tuned";
      StoreGroup(g);
      return;
    }
    g.restored.clear();
  }
  std::vector<policy::TuneJob> group;
  bool tunable = tuner_ != nullptr;
  for (const auto& m : g.members) {
    const Job& j = *jobs_.at(m);
    tunable = tunable && j.cls != nullptr;
    group.push_back({j.cls, j.batch, j.reg.memory_mib, m == newcomer, j.noise_scale});
  }
  if (!tunable) {
    g.state = tuner_ == nullptr ? (g.members.size() == 1 ? "solo" : "tuned") : "untuned";
    StoreGroup(g);
    return;
  }
  g.session_jobs = g.members;
  g.state = "measuring";
  RunTuning(g, [this, group = std::move(group)]() mutable {
    Computed out;
    out.started = true;
    out.session = tuner_->Start(std::move(group), model_, rng_);
    if (out.session) out.step = out.session->Next();
    if (out.session && out.step.final) out.tuner_state = TunerState();
    return out;
  });
}

void Coordinator::RunTuning(Group& g, std::function<Computed()> work) {
  g.computing = true;
  TuningWork compute = [this, gpu = g.gpu, generation = g.generation->load(), live = g.generation,
                        work = std::move(work)]() -> std::function<void()> {
    if (live->load() != generation) return {};  // the group changed before this ran: no work
    auto out = std::make_shared<Computed>(work());
    return [this, gpu, generation, out] { ApplyTuning(gpu, generation, *out); };
  };
  if (run_tuning_) {
    run_tuning_(std::move(compute));
  } else if (auto apply = compute()) {
    apply();
  }
}

void Coordinator::ApplyTuning(const std::string& gpu, std::uint64_t generation, Computed& out) {
  auto it = groups_.find(gpu);
  if (it == groups_.end() || it->second->generation->load() != generation) return;  // stale
  Group& g = *it->second;
  g.computing = false;
  if (!out.tuner_state.empty() && sink_ != nullptr) {
    sink_->Write(Key("nodes/" + KeySegment(options_.node) + "/tuner"), out.tuner_state);
  }
  if (out.started && !out.session) {  // nothing the tuner would change
    g.session_jobs.clear();
    g.state = g.members.size() == 1 ? "solo" : "tuned";
    StoreGroup(g);
    return;
  }
  g.session = std::move(out.session);
  if (out.started) {
    ++g.sessions;
    ++sessions_started_;
    log_.Info("tuning started", {{"gpu", gpu},
                                 {"jobs", std::to_string(g.members.size())},
                                 {"tuner", std::string(tuner_->name())}});
  }
  ApplyStep(g, out.step);
}

void Coordinator::ApplyStep(Group& g, const policy::TuneStep& step) {
  std::string targets;
  for (std::size_t k = 0; k < g.session_jobs.size() && k < step.batches.size(); ++k) {
    Job& j = *jobs_.at(g.session_jobs[k]);
    const int b = WithinBounds(j.reg, step.batches[k]);
    j.target = b;
    j.adopted = j.batch == b && j.since_change > options_.warmup_steps;
    j.window_sum = 0;
    j.window_n = 0;
    j.skip_next_report = false;
    targets += (targets.empty() ? "" : " ") + j.reg.job + "=" + std::to_string(b);
    StoreJob(j);
  }
  if (step.final) {
    log_.Info("batch sizes set", {{"gpu", g.gpu}, {"state", "tuned"}, {"targets", targets}});
    EndSession(g);
    g.state = g.members.size() == 1 ? "solo" : "tuned";
    StoreGroup(g);
    return;
  }
  g.window_steps = std::max(step.measure_minibatches, options_.window_steps);
  g.window_open = false;
  g.step_started = now_();
  log_.Info("batch sizes set", {{"gpu", g.gpu},
                                {"state", "measuring"},
                                {"targets", targets},
                                {"window_steps", std::to_string(g.window_steps)}});
  StoreGroup(g);
  MaybeOpenWindow(g);
}

void Coordinator::MaybeOpenWindow(Group& g) {
  for (const auto& m : g.session_jobs) {
    if (!jobs_.at(m)->adopted) return;
  }
  g.window_open = true;
  for (const auto& m : g.session_jobs) {
    Job& j = *jobs_.at(m);
    j.window_sum = 0;
    j.window_n = 0;
    j.skip_next_report = true;
  }
}

void Coordinator::CloseWindow(Group& g, bool timed_out) {
  std::vector<int> batches;
  std::vector<double> step_s, noise;
  bool all_measured = true;
  for (const auto& m : g.session_jobs) {
    const Job& j = *jobs_.at(m);
    double s = 0;
    if (j.window_n > 0) {
      s = j.window_sum / j.window_n;
      batches.push_back(j.target);
    } else {
      all_measured = false;
      batches.push_back(j.batch);
      s = MeanOf(j.recent);
      if (s <= 0 && j.cls != nullptr) s = j.cls->StepSeconds(j.batch);
      if (s <= 0) s = 1;
    }
    step_s.push_back(s);
    noise.push_back(j.noise_scale);
  }
  ++g.windows;
  ++windows_closed_;
  if (timed_out) {
    log_.Warn(
        "measurement window timed out; jobs that did not answer are observed at their "
        "latest step times",
        {{"gpu", g.gpu}});
  }
  if (all_measured && g.session_jobs.size() >= 2) RecordObservation(g, step_s);
  g.window_open = false;
  RunTuning(g, [this, session = std::move(g.session), batches = std::move(batches),
                step_s = std::move(step_s), noise = std::move(noise)]() {
    session->Observe(batches, step_s, noise);
    Computed out;
    out.step = session->Next();
    out.session = session;
    if (out.step.final) out.tuner_state = TunerState();
    return out;
  });
}

void Coordinator::EndSession(Group& g) {
  g.session.reset();
  g.session_jobs.clear();
  g.window_open = false;
  Invalidate(g);
}

std::string Coordinator::TunerState() const {
  const auto* joint = dynamic_cast<const policy::JointTuner*>(tuner_.get());
  if (joint == nullptr) return {};
  nlohmann::json v = nlohmann::json::array();
  for (const auto& c : joint->Corrections()) {
    v.push_back({{"set", c.set_key}, {"member", c.member}, {"ratio", c.ratio}});
  }
  return v.dump();
}

}  // namespace gpumux::coordinator
