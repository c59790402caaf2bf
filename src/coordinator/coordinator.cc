#include "gpumux/coordinator/coordinator.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>

#include "gpumux/core/json.h"
#include "gpumux/core/time.h"
#include "src/coordinator/coordinator_state.h"
#include "src/coordinator/json_fields.h"

namespace gpumux::coordinator {

namespace {

using Json = nlohmann::json;

constexpr std::size_t kRecentSteps = 50;

core::Error Invalid(std::string message) {
  return core::Error{core::ErrorCode::kInvalidArgument, std::move(message)};
}

std::string UtcNow() { return core::FormatRfc3339(std::time(nullptr)); }

std::string JoinInts(const std::vector<int>& v) {
  std::string out;
  for (int x : v) {
    if (!out.empty()) out += '+';
    out += std::to_string(x);
  }
  return out;
}

std::string JoinStrings(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& x : v) out += (out.empty() ? "" : ",") + x;
  return out;
}

}  // namespace

std::string KeySegment(std::string_view name) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (char c : name) {
    const auto u = static_cast<unsigned char>(c);
    if (u == '/' || u == '%' || u <= 0x20 || u >= 0x7f) {
      out += '%';
      out += kHex[u >> 4];
      out += kHex[u & 15];
    } else {
      out += c;
    }
  }
  return out;
}

Coordinator::Coordinator(CoordinatorOptions options, const policy::WorkloadProfile& profile,
                         StoreSink* sink, std::function<Clock::time_point()> now, core::Logger log)
    : options_(std::move(options)),
      profile_(&profile),
      model_(profile),
      sink_(sink),
      now_(std::move(now)),
      log_(std::move(log)),
      rng_(options_.seed, "coordinator-tuner") {
  if (options_.make_tuner) {
    tuner_ = options_.make_tuner();
  } else if (auto t = policy::MakeTuner(options_.tuner)) {
    tuner_ = std::move(*t);
  }
  if (!now_) now_ = [] { return Clock::now(); };
}

Coordinator::~Coordinator() = default;

std::string Coordinator::Key(std::string_view rest) const {
  std::string key = options_.prefix;
  key += rest;
  return key;
}

Coordinator::Job* Coordinator::FindJob(std::string_view id) {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : it->second.get();
}

Coordinator::Group& Coordinator::GroupOf(const std::string& gpu) {
  auto& g = groups_[gpu];
  if (!g) {
    g = std::make_unique<Group>();
    g->gpu = gpu;
  }
  return *g;
}

core::Result<Reply> Coordinator::Register(const Registration& given, const Caller& caller) {
  Registration r = given;
  if (auto bad = CheckIds(r)) return tl::unexpected(*bad);
  if (auto refused = CheckCaller(r, caller)) return tl::unexpected(*refused);
  if (options_.resolve_gpus) {
    if (auto granted = options_.resolve_gpus(r.job); granted && *granted != r.gpus) {
      log_.Warn(
          "job names GPUs its grant does not give it; the grant's are used",
          {{"job", r.job}, {"named", JoinStrings(r.gpus)}, {"granted", JoinStrings(*granted)}});
      r.gpus = std::move(*granted);
    }
  }
  if (auto bad = CheckFields(r)) return tl::unexpected(*bad);
  if (options_.admit) {
    if (auto refused = options_.admit(r, caller)) {
      return tl::unexpected(core::Error{core::ErrorCode::kPermissionDenied, *refused});
    }
  }
  const std::string gpu = r.gpus.size() == 1 ? r.gpus.front() : std::string();
  Job* j = FindJob(r.job);
  // With kPods, CheckCaller proved that the id names the caller's own pod: a pod recreated
  // under the same name takes its jobs over. Otherwise only the job's owner may replace it.
  if (j != nullptr && options_.identity != CoordinatorOptions::Identity::kPods) {
    if (auto denied = CheckOwner(*j, caller)) return tl::unexpected(*denied);
  }
  if (auto full = CheckLimits(r, gpu, caller)) return tl::unexpected(*full);
  const std::string owner = caller.Principal();
  const bool same_place = j != nullptr && j->gpu == gpu && j->reg.cls == r.cls;
  if (j != nullptr && !same_place) Remove(r.job, "registered again elsewhere");
  if (same_place) {
    // A job coming back (after a coordinator restart, or its own 404): keep its target, within
    // the bounds it gives now (a lower max_batch after running out of memory at the old one).
    j->reg = r;
    j->target = WithinBounds(r, j->target);
    j->batch = r.batch_size;
    j->last_seen = now_();
    j->seen_unix = UnixNow();
    if (!caller.trusted() || j->owner.empty()) j->owner = owner;
    if (j->noise_scale == 0) j->noise_scale = r.noise_scale;
    StoreJob(*j);
    return ReplyFor(*j);
  }
  auto job = std::make_unique<Job>();
  job->reg = r;
  job->owner = owner;
  job->cls = profile_->Find(r.cls);
  job->gpu = gpu;
  job->batch = job->target = r.batch_size;
  job->last_seen = now_();
  job->seen_unix = UnixNow();
  job->noise_scale = r.noise_scale;
  Job& ref = *job;
  jobs_.emplace(r.job, std::move(job));
  log_.Info("job registered",
            {{"job", r.job},
             {"caller", caller.LogName()},
             {"class", r.cls + (ref.cls == nullptr ? " (not in the profile: never tuned)" : "")},
             {"batch_size", std::to_string(r.batch_size)},
             {"gpu", gpu.empty() ? (r.gpus.empty() ? "none" : "several") : gpu}});
  StoreJob(ref);
  if (!gpu.empty()) {
    Group& g = GroupOf(gpu);
    g.members.push_back(r.job);
    Changed(gpu, r.job);
  }
  return ReplyFor(ref);
}

core::Result<Reply> Coordinator::Report(std::string_view id, std::span<const StepSample> steps,
                                        double noise_scale, const Caller& caller) {
  auto found = JobFor(id, caller);
  if (!found) return tl::unexpected(found.error());
  Job* j = *found;
  for (const StepSample& s : steps) {
    if (s.batch < 1 || s.batch > policy::kMaxProfileBatch || !(s.seconds > 0) ||
        !std::isfinite(s.seconds) || s.seconds > policy::kMaxStepSeconds) {
      return tl::unexpected(
          Invalid("steps: each step is [batch_size >= 1, seconds > 0 and <= 86400]"));
    }
  }
  if (!(noise_scale >= 0) || !std::isfinite(noise_scale)) {
    return tl::unexpected(Invalid("noise_scale: must be a finite number >= 0"));
  }
  j->last_seen = now_();
  if (noise_scale > 0) j->noise_scale = noise_scale;
  // The store's "seen" is kept within a third of the job timeout, so that a restart can tell
  // the jobs that are gone from those that are alive.
  const auto timeout_s = std::chrono::duration_cast<std::chrono::seconds>(options_.job_timeout);
  j->seen_unix = UnixNow();
  if (j->seen_unix - j->stored_seen >= std::max<std::int64_t>(1, timeout_s.count() / 3)) {
    StoreJob(*j);
  }
  Group* g = j->gpu.empty() ? nullptr : groups_.at(j->gpu).get();
  const bool alone = g != nullptr && g->members.size() == 1;
  const bool in_window = g != nullptr && g->session && g->window_open;
  const bool count = in_window && !j->skip_next_report;
  if (in_window) j->skip_next_report = false;
  for (const StepSample& s : steps) {
    ++j->steps_total;
    if (s.batch != j->batch) {
      j->batch = s.batch;
      j->since_change = 0;
      j->recent.clear();
    }
    if (++j->since_change <= options_.warmup_steps) continue;
    j->recent.push_back(s.seconds);
    if (j->recent.size() > kRecentSteps) j->recent.pop_front();
    if (alone) {
      auto& [sum, n] = j->solo[s.batch];
      sum += s.seconds;
      ++n;
    }
    if (s.batch == j->target) {
      j->adopted = true;
      if (count) {
        j->window_sum += s.seconds;
        ++j->window_n;
      }
    }
  }
  if (g != nullptr && g->session) {
    if (!g->window_open) {
      MaybeOpenWindow(*g);
    } else {
      bool done = true;
      for (const auto& m : g->session_jobs) done = done && jobs_.at(m)->window_n >= g->window_steps;
      if (done) CloseWindow(*g, false);
    }
  }
  return ReplyFor(*j);
}

core::Result<void> Coordinator::Leave(std::string_view id, const Caller& caller) {
  if (auto found = JobFor(id, caller); !found) return tl::unexpected(found.error());
  Remove(std::string(id), "left");
  return {};
}

void Coordinator::PodGone(std::string_view ns_pod) {
  std::string prefix(ns_pod);
  prefix += '/';
  std::vector<std::string> ids;
  for (auto it = jobs_.lower_bound(prefix); it != jobs_.end() && it->first.rfind(prefix, 0) == 0;
       ++it) {
    ids.push_back(it->first);
  }
  for (const auto& id : ids) Remove(id, "left: its pod is gone");
}

void Coordinator::GpuVacated(std::string_view uuid, std::string_view why) {
  auto it = groups_.find(uuid);
  if (it == groups_.end()) return;
  const std::vector<std::string> ids = it->second->members;
  for (const auto& id : ids) Remove(id, why);
}

void Coordinator::Remove(const std::string& id, std::string_view why) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return;
  const std::string gpu = it->second->gpu;
  jobs_.erase(it);
  log_.Info("job left", {{"job", id}, {"reason", std::string(why)}});
  if (sink_ != nullptr)
    sink_->Write(Key("nodes/" + KeySegment(options_.node) + "/jobs/" + KeySegment(id)),
                 std::nullopt);
  if (gpu.empty()) return;
  Group& g = GroupOf(gpu);
  g.members.erase(std::remove(g.members.begin(), g.members.end(), id), g.members.end());
  Changed(gpu);
}

double Coordinator::SoloReference(const Job& j, int batch, bool* measured) const {
  *measured = false;
  if (j.cls == nullptr) return 0;
  // The job's own solo measurement closest to `batch`, scaled along the profile's curve.
  const std::pair<double, std::int64_t>* best = nullptr;
  int best_batch = 0;
  for (const auto& [b, sn] : j.solo) {
    if (sn.second < 3) continue;
    if (best == nullptr || std::abs(b - batch) < std::abs(best_batch - batch)) {
      best = &sn;
      best_batch = b;
    }
  }
  if (best != nullptr) {
    *measured = true;
    const double own = best->first / static_cast<double>(best->second);
    return own * j.cls->StepSeconds(batch) / j.cls->StepSeconds(best_batch);
  }
  return j.cls->StepSeconds(batch);
}

void Coordinator::RecordObservation(const Group& g, std::span<const double> step_s) {
  policy::Observation o;
  bool all_solo_measured = true;
  for (std::size_t k = 0; k < g.session_jobs.size(); ++k) {
    const Job& j = *jobs_.at(g.session_jobs[k]);
    if (j.cls == nullptr) return;
    bool measured = false;
    const double solo = SoloReference(j, j.target, &measured);
    if (solo <= 0) return;
    all_solo_measured = all_solo_measured && measured;
    o.classes.push_back(j.cls->name);
    o.batches.push_back(j.target);
    o.slowdown.push_back(std::clamp(step_s[k] / solo, 1.0, policy::kMaxMeasuredSlowdown));
  }
  o.count = 1;
  o.node = options_.node;
  o.gpu_model = options_.gpu_model;
  o.solo = all_solo_measured ? "measured" : "profile";
  o.updated = UtcNow();
  o = policy::Canonical(std::move(o));
  if (!policy::CheckObservation(o)) return;
  if (auto plausible = policy::CheckPlausible(o); !plausible) {
    log_.Warn("window not recorded",
              {{"gpu", g.gpu}, {"why", plausible.error().message}, {"solo", o.solo}});
    return;
  }
  std::string set;
  for (const auto& c : o.classes) set += (set.empty() ? "" : "+") + c;
  const std::string batch_key = JoinInts(o.batches);
  std::string slowdowns;
  for (double v : o.slowdown) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%s%.3f", slowdowns.empty() ? "" : " ", v);
    slowdowns += buf;
  }
  log_.Info("window measured", {{"gpu", g.gpu},
                                {"set", set},
                                {"batch_sizes", batch_key},
                                {"slowdown", slowdowns},
                                {"solo", o.solo}});
  auto it = observed_.find({set, batch_key});
  if (it == observed_.end()) {
    it = observed_.emplace(std::make_pair(set, batch_key), o).first;
  } else if (it->second.solo == "measured" && o.solo != "measured") {
    return;  // a mean of measured windows is not diluted by profile-relative ones
  } else if ((o.solo == "measured" && it->second.solo != "measured") ||
             it->second.gpu_model != o.gpu_model) {
    it->second = o;  // better evidence, or another GPU (a moved store): start again
  } else if (auto merged = policy::MergeObservations(it->second, o)) {
    it->second = std::move(*merged);
  } else {
    it->second = o;  // a stored one we cannot merge with (another shape): start again
  }
  if (sink_ == nullptr) return;
  sink_->Write(ObservationKey(set, batch_key), policy::SerializeObservation(it->second));
}

std::string Coordinator::ObservationKey(const std::string& set, const std::string& batches) const {
  return Key("observations/" + KeySegment(set) + "/" + batches + "/" + KeySegment(options_.node));
}

Reply Coordinator::ReplyFor(const Job& j) const {
  Reply r;
  r.batch_size = j.target;
  r.report_every_s = options_.report_every_s;
  if (j.gpu.empty()) {
    r.state = "untuned";
  } else {
    r.state = groups_.at(j.gpu)->state;
  }
  return r;
}

void Coordinator::Tick() {
  const auto now = now_();
  std::vector<std::string> stale;
  for (const auto& [id, j] : jobs_) {
    if (now - j->last_seen > options_.job_timeout) stale.push_back(id);
  }
  for (const auto& id : stale) Remove(id, "stopped reporting (timed out)");
  std::vector<std::string> late;
  for (const auto& [gpu, g] : groups_) {
    if (g->session && now - g->step_started > options_.window_timeout) late.push_back(gpu);
  }
  for (const auto& gpu : late) {
    auto it = groups_.find(gpu);
    if (it != groups_.end() && it->second->session) CloseWindow(*it->second, true);
  }
}

std::int64_t Coordinator::UnixNow() const {
  return options_.unix_now ? options_.unix_now() : static_cast<std::int64_t>(std::time(nullptr));
}

void Coordinator::StoreJob(Job& j) {
  if (sink_ == nullptr) return;
  j.stored_seen = j.seen_unix;
  Json v{{"job", j.reg.job},
         {"owner", j.owner},
         {"seen", j.stored_seen},
         {"class", j.reg.cls},
         {"batch_size", j.batch},
         {"target_batch", j.target},
         {"gpus", j.reg.gpus},
         {"pid", j.reg.pid},
         {"min_batch", j.reg.min_batch},
         {"max_batch", j.reg.max_batch},
         {"memory_mib", j.reg.memory_mib},
         {"noise_scale", j.noise_scale}};
  sink_->Write(Key("nodes/" + KeySegment(options_.node) + "/jobs/" + KeySegment(j.reg.job)),
               v.dump());
}

void Coordinator::StoreGroup(const Group& g) {
  if (sink_ == nullptr) return;
  Json assignment = Json::object();
  for (const auto& m : g.members) assignment[m] = jobs_.at(m)->target;
  Json v{{"jobs", g.members},
         {"state", g.state},
         {"assignment", assignment},
         {"tuner", tuner_ ? std::string(tuner_->name()) : "none"},
         {"updated", UtcNow()}};
  sink_->Write(Key("nodes/" + KeySegment(options_.node) + "/gpus/" + KeySegment(g.gpu)), v.dump());
}

namespace {

using ObservedMeans = std::map<std::pair<std::string, std::string>, policy::Observation>;

// Whether the store's `key` is an observation of this node: under `prefix` (the store's
// observations/), ending in `own` ("/<node>").
bool IsOwnObservation(const std::string& key, const std::string& prefix, const std::string& own) {
  return key.rfind(prefix, 0) == 0 && key.size() > own.size() &&
         key.compare(key.size() - own.size(), own.size(), own) == 0;
}

// Brings back this node's stored observation into `observed` by (set, batches), its running
// mean that later windows keep adding to. One that does not parse or is out of range is logged
// and skipped.
void RestoreObservation(const std::string& key, const std::string& value, ObservedMeans& observed,
                        const core::Logger& log) {
  auto o = policy::ParseObservation(value, key);
  if (!o || !policy::CheckObservation(*o)) {
    log.Warn("store: skipping a key",
             {{"key", key}, {"why", o ? "out of range" : o.error().message}});
    return;
  }
  std::string set;
  for (const auto& c : o->classes) set += (set.empty() ? "" : "+") + c;
  observed[{set, JoinInts(o->batches)}] = std::move(*o);
}

// Teaches `joint` the stored corrections (StoreTuner). Throws Json::exception when one is
// malformed (those before it are learned).
void LearnStoredCorrections(const Json& v, policy::JointTuner& joint) {
  for (const auto& c : v) {
    joint.Learn(c.at("set").get<std::string>(), c.at("member").get<std::string>(),
                c.at("ratio").get<double>());
  }
}

// A stored group (StoreGroup): its jobs and, when it was tuned, its assignment job -> batch
// (batches outside 1..kMaxProfileBatch left out); why not when a field has the wrong type.
struct StoredGroup {
  std::vector<std::string> jobs;
  std::map<std::string, int> tuned;
};
std::optional<std::string> ReadStoredGroup(const Json& v, StoredGroup* g) {
  if (!v.is_object()) return "must be a JSON object";
  std::string state;
  if (auto bad = ReadString(v, "state", &state, kOptional)) return bad;
  if (v.contains("jobs") && !v["jobs"].is_null()) {
    if (!v["jobs"].is_array()) return "jobs: must be an array of job ids";
    for (const Json& j : v["jobs"]) {
      if (!j.is_string()) return "jobs: every entry must be a string";
      g->jobs.push_back(j.get<std::string>());
    }
  }
  if (state != "tuned" || !v.contains("assignment") || !v["assignment"].is_object()) {
    return std::nullopt;
  }
  const Json& assignment = v["assignment"];
  for (const auto& [job, batch] : assignment.items()) {
    int b = 0;
    if (ReadIntegerValue(batch, job, &b) || b < 1 || b > policy::kMaxProfileBatch) continue;
    g->tuned[job] = b;
  }
  return std::nullopt;
}

}  // namespace

Coordinator::Restored Coordinator::RestoreJob(const std::string& key, const Json& v) {
  // Read as a registration is (the same fields, types and ranges): a store another program
  // wrote, or an older gpumux, must not put in a job the protocol would refuse.
  Registration r;
  std::string owner;
  std::int64_t seen = 0;
  int target = 0;
  std::optional<std::string> bad = ReadRegistration(v, &r);
  if (!bad) bad = ReadString(v, "owner", &owner, kOptional);
  if (!bad) bad = ReadInteger(v, "seen", &seen, kOptional);
  if (!bad && seen < 0) bad = "seen: must be >= 0 (unix seconds)";
  if (!bad) bad = ReadInteger(v, "target_batch", &target, kOptional);
  if (!bad && target != 0 && (target < 1 || target > policy::kMaxProfileBatch)) {
    bad = "target_batch: must be 1 to " + std::to_string(policy::kMaxProfileBatch);
  }
  if (!bad) {
    if (auto e = CheckIds(r); e) bad = e->message;
  }
  if (bad) {
    log_.Warn("store: skipping a key", {{"key", key}, {"why", *bad}});
    return Restored::kSkipped;
  }
  if (FindJob(r.job) != nullptr) return Restored::kSkipped;
  const std::int64_t timeout_s =
      std::chrono::duration_cast<std::chrono::seconds>(options_.job_timeout).count();
  const bool stale = seen > 0 && UnixNow() - seen > timeout_s;
  // A GPU the node no longer has (replaced, or another backend): the job went with it.
  const bool gone = !std::all_of(r.gpus.begin(), r.gpus.end(),
                                 [this](const std::string& g) { return OnThisNode(g); });
  if (stale || gone) {
    if (sink_ != nullptr) sink_->Write(key, std::nullopt);
    return stale ? Restored::kStale : Restored::kGpuGone;
  }
  if (auto e = CheckFields(r); e) {
    log_.Warn("store: skipping a key", {{"key", key}, {"why", e->message}});
    return Restored::kSkipped;
  }
  const std::string gpu = r.gpus.size() == 1 ? r.gpus.front() : std::string();
  const auto group = groups_.find(gpu);
  const bool over =  // left by a run with higher limits
      jobs_.size() >= static_cast<std::size_t>(options_.max_jobs) ||
      (!gpu.empty() && group != groups_.end() &&
       group->second->members.size() >= static_cast<std::size_t>(options_.max_jobs_per_gpu));
  if (over) {
    if (sink_ != nullptr) sink_->Write(key, std::nullopt);
    return Restored::kOverLimits;
  }
  auto job = std::make_unique<Job>();
  job->reg = r;
  job->owner = owner;
  job->seen_unix = job->stored_seen = seen;
  job->cls = profile_->Find(r.cls);
  job->gpu = gpu;
  job->batch = r.batch_size;
  job->target = target != 0 ? target : r.batch_size;
  job->last_seen = now_();
  job->noise_scale = r.noise_scale;
  if (!gpu.empty()) GroupOf(gpu).members.push_back(r.job);
  jobs_.emplace(r.job, std::move(job));
  return Restored::kRestored;
}

void Coordinator::Restore(std::span<const std::pair<std::string, std::string>> stored) {
  const std::string node_prefix = Key("nodes/" + KeySegment(options_.node) + "/");
  const std::string observations = Key("observations/");
  const std::string own = "/" + KeySegment(options_.node);
  std::map<std::string, Json> groups;
  std::map<Restored, int> counts;
  for (const auto& [key, value] : stored) {
    if (IsOwnObservation(key, observations, own)) {
      RestoreObservation(key, value, observed_, log_);
      continue;
    }
    if (key.rfind(node_prefix, 0) != 0) continue;
    const std::string rest = key.substr(node_prefix.size());
    auto parsed = core::ParseJson(value, "");
    if (!parsed) {
      log_.Warn("store: skipping a key", {{"key", key}, {"why", parsed.error().message}});
      continue;
    }
    const Json& v = *parsed;
    try {
      if (rest.rfind("jobs/", 0) == 0) {
        ++counts[RestoreJob(key, v)];
      } else if (rest.rfind("gpus/", 0) == 0) {
        groups[key] = v;
      } else if (rest == "tuner") {
        auto* joint = dynamic_cast<policy::JointTuner*>(tuner_.get());
        if (joint == nullptr) continue;
        LearnStoredCorrections(v, *joint);
      }
    } catch (const Json::exception& e) {
      log_.Warn("store: skipping a key", {{"key", key}, {"why", e.what()}});
    }
  }
  // Registration order is lost across the store's key order: members sorted by id.
  for (auto& [gpu, g] : groups_) std::sort(g->members.begin(), g->members.end());
  for (const auto& [key, v] : groups) {
    StoredGroup stored_group;
    if (auto bad = ReadStoredGroup(v, &stored_group)) {
      log_.Warn("store: skipping a key", {{"key", key}, {"why", *bad}});
      continue;
    }
    std::string gpu;
    for (const auto& m : stored_group.jobs) {
      const Job* j = FindJob(m);
      if (j != nullptr) gpu = j->gpu;
    }
    auto it = groups_.find(gpu);
    if (it == groups_.end()) continue;
    for (const auto& [job, batch] : stored_group.tuned) it->second->restored[job] = batch;
  }
  std::vector<std::string> gpus;
  for (const auto& [gpu, g] : groups_) gpus.push_back(gpu);
  for (const auto& gpu : gpus) Changed(gpu);
  const int jobs = counts[Restored::kRestored], stale = counts[Restored::kStale],
            over = counts[Restored::kOverLimits];
  if (jobs > 0) {
    log_.Info("restored from the store",
              {{"jobs", std::to_string(jobs)}, {"gpus", std::to_string(gpus.size())}});
  }
  if (over > 0) {
    log_.Warn("stored jobs dropped: beyond --max-jobs or --max-jobs-per-gpu",
              {{"jobs", std::to_string(over)},
               {"max_jobs", std::to_string(options_.max_jobs)},
               {"max_jobs_per_gpu", std::to_string(options_.max_jobs_per_gpu)}});
  }
  if (stale > 0) {
    log_.Info("stored jobs dropped: not seen for longer than the job timeout",
              {{"jobs", std::to_string(stale)}});
  }
  if (const int gone = counts[Restored::kGpuGone]; gone > 0) {
    log_.Info("stored jobs dropped: their GPU is not on this node any more",
              {{"jobs", std::to_string(gone)}});
  }
}

std::vector<GpuView> Coordinator::State(const Caller& caller) const {
  // A process on the node sees only its own jobs; the node and TCP peers (operators: the
  // listener is on loopback) see all.
  const bool all = caller.trusted() || caller.kind != Caller::Kind::kProcess;
  const std::string principal = caller.Principal();
  const auto shown = [&](const Job& j) { return all || j.owner == principal; };
  std::vector<GpuView> out;
  auto view = [&](const Job& j) {
    JobView v;
    v.job = j.reg.job;
    v.cls = j.reg.cls;
    v.gpu = j.gpu;
    v.batch_size = j.batch;
    v.target_batch = j.target;
    v.step_s = MeanOf(j.recent);
    v.samples_per_s = v.step_s > 0 ? j.batch / v.step_s : 0;
    bool measured = false;
    v.solo_step_s = SoloReference(j, j.batch, &measured);
    v.slowdown = v.step_s > 0 && v.solo_step_s > 0 ? v.step_s / v.solo_step_s : 0;
    v.steps = j.steps_total;
    return v;
  };
  for (const auto& [gpu, g] : groups_) {
    GpuView gv;
    gv.uuid = gpu;
    gv.state = g->state;
    gv.sessions = g->sessions;
    gv.windows = g->windows;
    for (const auto& m : g->members) {
      if (shown(*jobs_.at(m))) gv.jobs.push_back(view(*jobs_.at(m)));
    }
    if (gv.jobs.empty() && !all) continue;
    out.push_back(std::move(gv));
  }
  GpuView loose;
  loose.state = "untuned";
  for (const auto& [id, j] : jobs_) {
    if (j->gpu.empty() && shown(*j)) loose.jobs.push_back(view(*j));
  }
  if (!loose.jobs.empty()) out.push_back(std::move(loose));
  return out;
}

}  // namespace gpumux::coordinator
