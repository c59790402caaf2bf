#include "gpumux/runs/submitter.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <optional>
#include <thread>

#include "gpumux/core/time.h"
#include "gpumux/kube/grant.h"
#include "gpumux/kube/objects.h"
#include "gpumux/kube/reflector.h"
#include "gpumux/runs/workload.h"

namespace gpumux::runs {
namespace {

using core::ErrorCode;
using core::MakeError;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

// The Kubernetes default of a Job's spec.backoffLimit.
constexpr int kDefaultBackoffLimit = 6;

json* Child(json& object, const char* key) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

// object[key] as an object, created when absent (error text when it is something else).
json* ObjectChild(json& object, const char* key, std::string& error) {
  json* child = Child(object, key);
  if (child == nullptr || child->is_null()) {
    object[key] = json::object();
    return &object[key];
  }
  if (!child->is_object()) {
    error = std::string(key) + " is not an object";
    return nullptr;
  }
  return child;
}

std::string Annotation(const json& object, std::string_view key) {
  const json* metadata = kube::JsonChild(object, "metadata");
  const json* annotations =
      metadata == nullptr ? nullptr : kube::JsonChild(*metadata, "annotations");
  if (annotations == nullptr) return {};
  return kube::JsonString(*annotations, std::string(key).c_str());
}

std::string Label(const json& object, const char* key) {
  const json* metadata = kube::JsonChild(object, "metadata");
  const json* labels = metadata == nullptr ? nullptr : kube::JsonChild(*metadata, "labels");
  return labels == nullptr ? std::string() : kube::JsonString(*labels, key);
}

// "12.5" -> 12500000 us: a decimal >= 0 with at most 6 decimals and 12 integer digits.
std::optional<core::Micros> ParseSecondsText(const std::string& text) {
  const std::size_t dot = text.find('.');
  const std::string whole = text.substr(0, dot);
  const std::string frac = dot == std::string::npos ? std::string() : text.substr(dot + 1);
  auto digits = [](const std::string& s) {
    return std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  if (whole.empty() || whole.size() > 12 || frac.size() > 6 || !digits(whole) || !digits(frac) ||
      (dot != std::string::npos && frac.empty())) {
    return std::nullopt;
  }
  core::Micros us = std::stoll(whole) * 1'000'000;
  if (!frac.empty()) us += std::stoll(frac + std::string(6 - frac.size(), '0'));
  return us;
}

// Seconds with at most 3 decimals, trailing zeros dropped: 1.5 -> "1.5", 2 -> "2".
std::string ShortSeconds(double s) {
  char text[64];
  std::snprintf(text, sizeof text, "%.3f", s);
  std::string out = text;
  while (out.back() == '0') out.pop_back();
  if (out.back() == '.') out.pop_back();
  return out;
}

bool Retryable(const kube::ApiError& e) {
  return e.http_status == 0 || e.http_status == 429 || e.http_status == 500 ||
         e.http_status == 502 || e.http_status == 503 || e.http_status == 504;
}

std::string CollectionPath(const SubmitObject& o) {
  if (o.kind == "Job") return "/apis/batch/v1/namespaces/" + o.ns + "/jobs";
  return "/api/v1/namespaces/" + o.ns + "/pods";
}

}  // namespace

// --- preparing -------------------------------------------------------------------------------

namespace {

// One object of a submission being prepared; errors name it (`where`).
class ObjectPrep {
 public:
  ObjectPrep(json& object, std::size_t i, const PrepareOptions& o, const std::string& source)
      : object_(object), o_(o) {
    s_.kind = kube::JsonString(object, "kind");
    if (const json* m = kube::JsonChild(object, "metadata"); m != nullptr) {
      s_.name = kube::JsonString(*m, "name");
    }
    where_ = source + ": object " + std::to_string(i + 1) + " (" +
             (s_.kind.empty() ? std::string("no kind") : s_.kind) +
             (s_.name.empty() ? std::string() : " " + s_.name) + ")";
  }

  const std::string& where() const { return where_; }

  core::Result<SubmitObject> Prepare() && {
    const std::string api_version = kube::JsonString(object_, "apiVersion");
    if (!((s_.kind == "Pod" && api_version == "v1") ||
          (s_.kind == "Job" && api_version == "batch/v1"))) {
      return Bad("only Pods (apiVersion v1) and Jobs (batch/v1) can be submitted, not " +
                 (s_.kind.empty() ? std::string("an object without kind") : s_.kind) + " (" +
                 (api_version.empty() ? std::string("no apiVersion") : api_version) + ")");
    }
    std::string error;
    json* metadata = ObjectChild(object_, "metadata", error);
    if (metadata == nullptr) return Bad(error);
    if (s_.name.empty()) {
      return Bad("no metadata.name (generateName is not enough: the record names jobs)");
    }
    if (auto ok = Namespace(*metadata); !ok) return tl::unexpected(ok.error());
    // The pod's metadata: the object's own, or the Job's pod template's.
    auto pod_metadata = s_.kind == "Job" ? JobTemplate() : core::Result<json*>(metadata);
    if (!pod_metadata) return tl::unexpected(pod_metadata.error());
    if (auto ok = ReadAnnotations(); !ok) return tl::unexpected(ok.error());
    for (json* m : {metadata, *pod_metadata}) {
      if (auto ok = Mark(*m); !ok) return tl::unexpected(ok.error());
    }
    s_.object = std::move(object_);
    return std::move(s_);
  }

 private:
  tl::unexpected<core::Error> Bad(const std::string& what) const {
    return tl::unexpected(core::Error{ErrorCode::kInvalidArgument, where_ + ": " + what});
  }

  core::Result<void> Namespace(json& metadata) {
    const std::string own_ns = kube::JsonString(metadata, "namespace");
    if (!o_.ns.empty() && !own_ns.empty() && own_ns != o_.ns) {
      return tl::unexpected(
          Bad("its namespace " + own_ns + " is not the one given (-n " + o_.ns + ")"));
    }
    s_.ns = !own_ns.empty() ? own_ns : !o_.ns.empty() ? o_.ns : o_.default_ns;
    metadata["namespace"] = s_.ns;
    return {};
  }

  // A Job's pod template's metadata; reads its backoff limit.
  core::Result<json*> JobTemplate() {
    std::string error;
    json* spec = ObjectChild(object_, "spec", error);
    if (spec == nullptr) return Bad(error);
    json* tmpl = ObjectChild(*spec, "template", error);
    if (tmpl == nullptr) return Bad("spec." + error);
    json* pod_metadata = ObjectChild(*tmpl, "metadata", error);
    if (pod_metadata == nullptr) return Bad("spec.template." + error);
    s_.backoff_limit = kDefaultBackoffLimit;
    if (const json* limit = kube::JsonChild(*spec, "backoffLimit"); limit != nullptr) {
      if (!limit->is_number_integer() || limit->get<std::int64_t>() < 0 ||
          limit->get<std::int64_t>() > 1'000'000) {
        return Bad("spec.backoffLimit is not an integer 0..1000000");
      }
      s_.backoff_limit = limit->get<int>();
    }
    return pod_metadata;
  }

  // An annotation of the object, else of its pod template.
  std::string AnnotationOf(std::string_view key) const {
    std::string v = Annotation(object_, key);
    if (v.empty() && s_.kind == "Job") v = Annotation(object_["spec"]["template"], key);
    return v;
  }

  // The submit time, the job's id and its workload class.
  core::Result<void> ReadAnnotations() {
    const std::string at = AnnotationOf(kAnnotationSubmitAt);
    if (!at.empty()) {
      auto us = ParseSecondsText(at);
      if (!us) {
        return Bad("annotation " + std::string(kAnnotationSubmitAt) + " '" + at +
                   "' is not seconds >= 0 (at most 12 digits and 6 decimals)");
      }
      s_.at_us = *us;
    }
    s_.job = AnnotationOf(kAnnotationJob);
    if (s_.job.empty()) s_.job = s_.name;
    s_.cls = AnnotationOf(kube::kAnnotationWorkloadClass);
    return {};
  }

  // The run's label and the job's annotation on `m` (the object's or its pods' metadata), and
  // the duration scaled by the run's time scale (the trace's kept beside it).
  core::Result<void> Mark(json& m) {
    std::string error;
    json* labels = ObjectChild(m, "labels", error);
    if (labels == nullptr) return Bad("metadata." + error);
    (*labels)[std::string(kLabelRun)] = o_.run;
    json* annotations = ObjectChild(m, "annotations", error);
    if (annotations == nullptr) return Bad("metadata." + error);
    (*annotations)[std::string(kAnnotationJob)] = s_.job;
    const std::string duration =
        kube::JsonString(*annotations, std::string(kAnnotationDuration).c_str());
    if (duration.empty() || o_.time_scale == 1) return {};
    std::string trace =
        kube::JsonString(*annotations, std::string(kAnnotationTraceDuration).c_str());
    if (trace.empty()) trace = duration;
    auto us = ParseSecondsText(trace);
    if (!us) {
      return Bad("annotation " + std::string(kAnnotationDuration) + " '" + trace +
                 "' is not seconds >= 0");
    }
    (*annotations)[std::string(kAnnotationTraceDuration)] = trace;
    (*annotations)[std::string(kAnnotationDuration)] =
        ShortSeconds(static_cast<double>(*us) / 1e6 * o_.time_scale);
    return {};
  }

  json& object_;
  const PrepareOptions& o_;
  SubmitObject s_;
  std::string where_;
};

}  // namespace

core::Result<std::vector<SubmitObject>> PrepareSubmission(std::vector<json> objects,
                                                          const PrepareOptions& o,
                                                          const std::string& source) {
  if (!IsLabelValue(o.run)) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "the run name '" + o.run +
                         "' is not a label value (1..63 letters, digits, '-', '_' or '.', "
                         "starting and ending with a letter or digit)");
  }
  std::vector<SubmitObject> out;
  std::set<std::string> names;
  std::map<std::string, std::string> job_ids;  // job -> where
  for (std::size_t i = 0; i < objects.size(); ++i) {
    ObjectPrep prep(objects[i], i, o, source);
    const std::string where = prep.where();
    auto s = std::move(prep).Prepare();
    if (!s) return tl::unexpected(s.error());
    auto bad = [&](const std::string& what) {
      return MakeError(ErrorCode::kInvalidArgument, where + ": " + what);
    };
    if (!names.insert(s->kind + "/" + s->ns + "/" + s->name).second) {
      return bad("a second " + s->kind + " named " + s->ns + "/" + s->name);
    }
    if (auto [it, fresh] = job_ids.emplace(s->job, where); !fresh) {
      return bad("job '" + s->job + "' is also " + it->second.substr(source.size() + 2));
    }
    out.push_back(std::move(*s));
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const SubmitObject& a, const SubmitObject& b) { return a.at_us < b.at_us; });
  return out;
}

// --- running ---------------------------------------------------------------------------------

struct Submitter::JobState {
  std::size_t index = 0;  // into objects_
  bool submitted = false;
  bool error = false;
  bool started = false;
  bool finished = false;  // succeeded, or failed for good
  bool succeeded = false;
  bool lost = false;  // its pod was deleted before it finished (a Pod's job)
  int failed_pods = 0;
};

struct Submitter::PodState {
  std::string job;
  bool scheduled = false;
  bool started = false;
  bool finished = false;
  bool deleted = false;
  std::string waiting;  // the last unschedulable message recorded
};

Submitter::Submitter(kube::KubeApi& api, std::vector<SubmitObject> objects, SubmitOptions options,
                     RecordWriter& record, std::function<void(std::string_view)> log)
    : api_(api),
      objects_(std::move(objects)),
      options_(std::move(options)),
      record_(record),
      log_(std::move(log)),
      start_(Clock::now()) {
  for (std::size_t i = 0; i < objects_.size(); ++i) {
    auto state = std::make_unique<JobState>();
    state->index = i;
    jobs_[objects_[i].job] = std::move(state);
    job_of_name_[objects_[i].kind + "/" + objects_[i].ns + "/" + objects_[i].name] =
        objects_[i].job;
  }
}

Submitter::~Submitter() = default;

double Submitter::Now() const {
  return std::chrono::duration<double>(Clock::now() - start_).count();
}

core::Result<void> Submitter::Record(nlohmann::ordered_json line) {
  auto ok = record_.Write(line);
  if (!ok && record_error_.empty()) {
    record_error_ = ok.error().message;
    cv_.notify_all();
  }
  return ok;
}

SubmitProgress Submitter::Progress() const {
  std::lock_guard lock(mu_);
  SubmitProgress p;
  p.total = objects_.size();
  p.submitted = submitted_;
  p.errors = errors_;
  for (const auto& [id, job] : jobs_) {
    if (job->succeeded) ++p.succeeded;
    if ((job->finished && !job->succeeded) || job->lost) ++p.failed;
    if (job->started && !job->finished && !job->lost) ++p.running;
  }
  p.elapsed_s = Now();
  p.submitting = submitting_;
  p.next_due_s =
      submitting_ && tried_ < objects_.size() ? std::max(0.0, next_due_s_ - p.elapsed_s) : -1;
  return p;
}

bool Submitter::AllDone() const {
  for (const auto& [id, job] : jobs_) {
    if (job->submitted && !job->finished && !job->lost) return false;
  }
  return true;
}

Submitter::JobState* Submitter::JobOfPod(const json& pod) {
  std::string job = Annotation(pod, kAnnotationJob);
  if (job.empty()) {
    const json* metadata = kube::JsonChild(pod, "metadata");
    const std::string ns =
        metadata == nullptr ? std::string() : kube::JsonString(*metadata, "namespace");
    std::string owner = Label(pod, "batch.kubernetes.io/job-name");
    if (owner.empty()) owner = Label(pod, "job-name");
    auto it = owner.empty() ? job_of_name_.end() : job_of_name_.find("Job/" + ns + "/" + owner);
    if (it == job_of_name_.end() && metadata != nullptr) {
      it = job_of_name_.find("Pod/" + ns + "/" + kube::JsonString(*metadata, "name"));
    }
    if (it == job_of_name_.end()) return nullptr;
    job = it->second;
  }
  auto it = jobs_.find(job);
  return it == jobs_.end() ? nullptr : it->second.get();
}

namespace {

// The GPUs of the pod's grant annotation, as "node/index".
json GrantedGpus(const json& pod) {
  json gpus = json::array();
  const std::string text = Annotation(pod, kube::kAnnotationGrant);
  if (text.empty()) return gpus;
  auto grant = kube::DecodeGrant(text);
  if (!grant) return gpus;
  std::set<std::string> seen;
  for (const kube::ContainerGrant& c : grant->containers) {
    for (const kube::GrantedGpu& g : c.gpus) {
      std::string id = grant->node + "/" + std::to_string(g.index);
      if (seen.insert(id).second) gpus.push_back(id);
    }
  }
  return gpus;
}

// The pod's PodScheduled condition when it is False (why it waits), else null.
const json* WaitCondition(const json* status) {
  if (status == nullptr) return nullptr;
  const json* conditions = kube::JsonChild(*status, "conditions");
  if (conditions == nullptr || !conditions->is_array()) return nullptr;
  for (const json& c : *conditions) {
    if (kube::JsonString(c, "type") == "PodScheduled" && kube::JsonString(c, "status") == "False") {
      return &c;
    }
  }
  return nullptr;
}

// What the pod's containers say: the first running or terminated state's start, the last
// finish, the first reason and message (the pod's own, when it has one, say more), and the
// first non-zero exit code.
struct ContainersSeen {
  std::string started_at, finished_at, reason, message;
  std::optional<std::int64_t> exit_code;
  bool running = false;
};

void SeeTerminated(const json& done, ContainersSeen& seen) {
  if (seen.started_at.empty()) seen.started_at = kube::JsonString(done, "startedAt");
  seen.finished_at = std::max(seen.finished_at, kube::JsonString(done, "finishedAt"));
  if (seen.reason.empty()) seen.reason = kube::JsonString(done, "reason");
  if (seen.message.empty()) seen.message = kube::JsonString(done, "message");
  if (const json* code = kube::JsonChild(done, "exitCode");
      code != nullptr && code->is_number_integer() &&
      (!seen.exit_code || code->get<std::int64_t>() != 0)) {
    seen.exit_code = code->get<std::int64_t>();
  }
}

ContainersSeen SeeContainers(const json* status) {
  ContainersSeen seen;
  if (status == nullptr) return seen;
  if (const json* cs = kube::JsonChild(*status, "containerStatuses");
      cs != nullptr && cs->is_array()) {
    for (const json& c : *cs) {
      const json* state = kube::JsonChild(c, "state");
      if (state == nullptr) continue;
      if (const json* running = kube::JsonChild(*state, "running"); running != nullptr) {
        seen.running = true;
        if (seen.started_at.empty()) seen.started_at = kube::JsonString(*running, "startedAt");
      }
      if (const json* done = kube::JsonChild(*state, "terminated"); done != nullptr) {
        SeeTerminated(*done, seen);
      }
    }
  }
  // The pod's own reason (Evicted, UnexpectedAdmissionError, ...) says more.
  if (const std::string r = kube::JsonString(*status, "reason"); !r.empty()) seen.reason = r;
  if (const std::string m = kube::JsonString(*status, "message"); !m.empty()) seen.message = m;
  return seen;
}

// When a pod first seen at `t` started: `t`, unless it was seen only once it had ended (a short
// container), then from its own duration.
double StartTime(double t, bool ended, const ContainersSeen& seen) {
  if (!ended || seen.started_at.empty() || seen.finished_at.empty()) return t;
  auto s = core::ParseRfc3339(seen.started_at);
  auto f = core::ParseRfc3339(seen.finished_at);
  if (s && f && *f >= *s) return std::max(0.0, t - static_cast<double>(*f - *s));
  return t;
}

}  // namespace

void Submitter::ObservePod(const json& pod, bool deleted) {
  JobState* job = JobOfPod(pod);
  if (job == nullptr) return;
  const SubmitObject& object = objects_[job->index];
  const json* metadata = kube::JsonChild(pod, "metadata");
  const std::string name =
      metadata == nullptr ? std::string() : kube::JsonString(*metadata, "name");
  const std::string ns =
      metadata == nullptr ? std::string() : kube::JsonString(*metadata, "namespace");
  PodState& ps = pods_[ns + "/" + name];
  ps.job = object.job;
  const double t = Now();
  auto line = [&](std::string_view event) {
    auto l = RecordLine(event, t);
    l["job"] = object.job;
    l["pod"] = name;
    return l;
  };
  if (deleted) {
    if (ps.finished || ps.deleted) return;
    ps.deleted = true;
    if (object.kind == "Pod") job->lost = true;
    (void)Record(line("deleted"));
    cv_.notify_all();
    return;
  }
  const json* spec = kube::JsonChild(pod, "spec");
  const std::string node = spec == nullptr ? std::string() : kube::JsonString(*spec, "nodeName");
  const json gpus = GrantedGpus(pod);
  if (!node.empty() && !ps.scheduled) {
    ps.scheduled = true;
    auto l = line("scheduled");
    l["node"] = node;
    l["gpus"] = gpus;
    (void)Record(std::move(l));
  }
  const json* status = kube::JsonChild(pod, "status");
  const std::string phase = status == nullptr ? std::string() : kube::JsonString(*status, "phase");
  // Why it waits: PodScheduled False (once per new message).
  if (const json* c = ps.scheduled ? nullptr : WaitCondition(status); c != nullptr) {
    if (const std::string message = kube::JsonString(*c, "message"); message != ps.waiting) {
      ps.waiting = message;
      auto l = line("unschedulable");
      l["reason"] = kube::JsonString(*c, "reason");
      l["message"] = message;
      (void)Record(std::move(l));
    }
  }
  const ContainersSeen seen = SeeContainers(status);
  const bool ended = phase == "Succeeded" || phase == "Failed";
  if ((phase == "Running" || seen.running || ended) && !ps.started) {
    ps.started = true;
    auto l = RecordLine("start", StartTime(t, ended, seen));
    l["job"] = object.job;
    l["pod"] = name;
    l["node"] = node;
    l["gpus"] = gpus;
    if (!seen.started_at.empty()) l["started_at"] = seen.started_at;
    (void)Record(std::move(l));
    job->started = true;
  }
  if (ended && !ps.finished) {
    ps.finished = true;
    auto l = line("finish");
    l["node"] = node;
    l["phase"] = phase;
    l["reason"] = seen.reason;
    l["message"] = seen.message;
    if (seen.exit_code) l["exit_code"] = *seen.exit_code;
    if (!seen.finished_at.empty()) l["finished_at"] = seen.finished_at;
    (void)Record(std::move(l));
    if (phase == "Succeeded") {
      job->succeeded = job->finished = true;
    } else if (!job->succeeded) {
      ++job->failed_pods;
      if (object.kind == "Pod" || job->failed_pods > object.backoff_limit) job->finished = true;
    }
    cv_.notify_all();
  }
}

void Submitter::OnPods(std::vector<json> items, const std::string& ns) {
  std::lock_guard lock(mu_);
  std::set<std::string> present;
  for (const json& pod : items) {
    const json* metadata = kube::JsonChild(pod, "metadata");
    if (metadata != nullptr) {
      present.insert(kube::JsonString(*metadata, "namespace") + "/" +
                     kube::JsonString(*metadata, "name"));
    }
    ObservePod(pod, false);
  }
  // Pods gone while the watch was away.
  for (auto& [key, ps] : pods_) {
    if (key.rfind(ns + "/", 0) != 0 || present.count(key) != 0) continue;
    if (ps.finished || ps.deleted) continue;
    const std::string name = key.substr(ns.size() + 1);
    json gone = {{"metadata",
                  {{"name", name},
                   {"namespace", ns},
                   {"annotations", {{std::string(kAnnotationJob), ps.job}}}}}};
    ObservePod(gone, true);
  }
}

void Submitter::OnPodEvent(const kube::WatchEvent& event) {
  std::lock_guard lock(mu_);
  ObservePod(event.object, event.type == "DELETED");
}

bool Submitter::Create(std::size_t index, double due_t, std::stop_token stop) {
  const SubmitObject& o = objects_[index];
  const std::string path = CollectionPath(o);
  const double sent = Now();
  std::optional<kube::ApiError> error;
  std::string uid;
  bool retried = false;
  for (int attempt = 0;; ++attempt) {
    auto created = api_.Post(path, o.object);
    if (created) {
      uid = kube::JsonString(created->value("metadata", json::object()), "uid");
      error.reset();
      break;
    }
    error = created.error();
    if (retried && error->http_status == 409 && error->reason == "AlreadyExists") {
      // The create that got no answer may have been applied: ours if it carries our run.
      auto existing = api_.Get(path + "/" + o.name);
      if (existing && Label(*existing, std::string(kLabelRun).c_str()) == options_.run) {
        uid = kube::JsonString(existing->value("metadata", json::object()), "uid");
        error.reset();
      }
      break;
    }
    if (!Retryable(*error) || attempt >= options_.create_retries || stop.stop_requested()) break;
    retried = true;
    if (log_) {
      log_(o.job + " (" + o.kind + " " + o.ns + "/" + o.name + "): " + error->ToString() +
           "; trying again");
    }
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, stop, std::chrono::milliseconds(500 << attempt), [] { return false; });
    if (stop.stop_requested()) break;
  }
  std::lock_guard lock(mu_);
  ++tried_;
  JobState& job = *jobs_[o.job];
  auto line = RecordLine(error ? "error" : "submit", sent);
  line["job"] = o.job;
  line["kind"] = o.kind;
  line["name"] = o.name;
  line["namespace"] = o.ns;
  if (error) {
    ++errors_;
    job.error = true;
    line["http_status"] = error->http_status;
    line["reason"] = error->reason;
    line["message"] = error->message;
    if (log_) log_(o.job + " (" + o.kind + " " + o.ns + "/" + o.name + "): " + error->ToString());
  } else {
    ++submitted_;
    job.submitted = true;
    line["uid"] = uid;
    line["class"] = o.cls;
    line["submit_at_s"] = static_cast<double>(o.at_us) / 1e6;
    line["due_t"] = std::round(due_t * 1e6) / 1e6;
    line["took_s"] = std::round((Now() - sent) * 1e6) / 1e6;
  }
  const bool ok = Record(std::move(line)).has_value();
  cv_.notify_all();
  return ok;
}

core::Result<void> Submitter::RecordRunLine(const std::set<std::string>& namespaces) {
  std::string ns_text;
  for (const auto& ns : namespaces) ns_text += (ns_text.empty() ? "" : ",") + ns;
  auto run = RecordLine("run", 0);
  run["version"] = kRunRecordVersion;
  run["run"] = options_.run;
  run["label"] = options_.label;
  run["namespace"] = ns_text;
  run["time_scale"] = options_.time_scale;
  run["started_at"] = core::FormatRfc3339Millis(core::UnixMillis(std::chrono::system_clock::now()));
  run["source"] = options_.source;
  run["objects"] = objects_.size();
  if (!options_.gpumux_version.empty()) run["gpumux"] = options_.gpumux_version;
  std::lock_guard lock(mu_);
  return Record(std::move(run));
}

// The watches of the run's pods, one per namespace, each on a thread of its own.
struct Submitter::Watches {
  std::vector<std::unique_ptr<kube::Reflector>> reflectors;
  std::vector<std::jthread> threads;

  bool Synced() const {
    return std::all_of(reflectors.begin(), reflectors.end(),
                       [](const auto& r) { return r->synced(); });
  }
  void Stop() {
    for (auto& t : threads) t.request_stop();
    threads.clear();  // joins
  }
};

std::unique_ptr<Submitter::Watches> Submitter::Watch(const std::set<std::string>& namespaces,
                                                     std::stop_token stop_all) {
  auto watches = std::make_unique<Watches>();
  const std::string selector = kube::QueryEscape(std::string(kLabelRun) + "=" + options_.run);
  for (const std::string& ns : namespaces) {
    kube::ReflectorHandler handler;
    handler.replace = [this, ns](std::vector<json> items) { OnPods(std::move(items), ns); };
    handler.event = [this](const kube::WatchEvent& e) { OnPodEvent(e); };
    handler.log = [this](std::string_view line) {
      if (log_) log_("watch: " + std::string(line));
    };
    watches->reflectors.push_back(std::make_unique<kube::Reflector>(
        api_, "/api/v1/namespaces/" + ns + "/pods?labelSelector=" + selector, std::move(handler)));
    kube::Reflector* r = watches->reflectors.back().get();
    watches->threads.emplace_back([r](std::stop_token stop) { r->Run(stop); });
  }
  const auto sync_deadline = Clock::now() + options_.sync_timeout;
  while (!watches->Synced() && Clock::now() < sync_deadline && !stop_all.stop_requested()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (!watches->Synced() && log_) {
    log_("the pods of run " + options_.run +
         " are not listed yet; creating anyway (the watch keeps trying)");
  }
  return watches;
}

Submitter::Ending Submitter::SubmitAll(std::stop_token stop_submitting, std::stop_token stop_all) {
  for (std::size_t i = 0; i < objects_.size(); ++i) {
    const double due_t = static_cast<double>(objects_[i].at_us) / 1e6 * options_.time_scale;
    {
      std::unique_lock lock(mu_);
      next_due_s_ = due_t;
      const auto deadline = start_ + std::chrono::duration_cast<Clock::duration>(
                                         std::chrono::duration<double>(due_t));
      cv_.wait_until(lock, deadline, [&] {
        return stop_submitting.stop_requested() || stop_all.stop_requested() ||
               !record_error_.empty();
      });
      if (!record_error_.empty()) return Ending::kRecordFailed;
    }
    if (stop_submitting.stop_requested() || stop_all.stop_requested()) return Ending::kInterrupted;
    if (!Create(i, due_t, stop_all)) return Ending::kRecordFailed;
    if (options_.fail == FailMode::kFailFast) {
      std::lock_guard lock(mu_);
      if (errors_ > 0) return Ending::kFailFast;
    }
  }
  return Ending::kSubmitted;
}

Submitter::Ending Submitter::WaitForPods(Ending submitting, std::stop_token stop_all) {
  std::unique_lock lock(mu_);
  submitting_ = false;
  if (options_.wait != WaitMode::kWaitForPods || submitting == Ending::kFailFast ||
      !record_error_.empty()) {
    return submitting;
  }
  auto done = [&] { return AllDone() || stop_all.stop_requested() || !record_error_.empty(); };
  bool timed_out = false;
  if (options_.wait_timeout.count() > 0) {
    timed_out = !cv_.wait_for(lock, options_.wait_timeout, done);
  } else {
    cv_.wait(lock, done);
  }
  if (stop_all.stop_requested()) return Ending::kInterrupted;
  if (submitting == Ending::kInterrupted) return submitting;
  return timed_out ? Ending::kTimedOut : Ending::kFinished;
}

core::Result<SubmitSummary> Submitter::Summarise(Ending ending) {
  std::lock_guard lock(mu_);
  if (!record_error_.empty()) {
    return MakeError(ErrorCode::kIo, "the record could not be written: " + record_error_);
  }
  SubmitSummary summary;
  summary.submitted = submitted_;
  summary.errors = errors_;
  for (const auto& [id, job] : jobs_) {
    if (!job->submitted) continue;
    if (job->succeeded) {
      ++summary.succeeded;
    } else if (job->finished || job->lost) {
      ++summary.failed;
    } else {
      ++summary.unfinished;
      summary.unfinished_jobs.push_back(id);
    }
  }
  summary.end_reason = ending == Ending::kFailFast      ? "fail-fast"
                       : ending == Ending::kInterrupted ? "interrupted"
                       : ending == Ending::kTimedOut    ? "timeout"
                       : ending == Ending::kFinished    ? "finished"
                                                        : "submitted";
  auto end = RecordLine("end", Now());
  end["reason"] = summary.end_reason;
  end["submitted"] = summary.submitted;
  end["errors"] = summary.errors;
  end["succeeded"] = summary.succeeded;
  end["failed"] = summary.failed;
  end["unfinished"] = summary.unfinished;
  if (auto ok = Record(std::move(end)); !ok) return tl::unexpected(ok.error());
  return summary;
}

core::Result<SubmitSummary> Submitter::Run(std::stop_token stop_submitting,
                                           std::stop_token stop_all) {
  start_ = Clock::now();
  std::set<std::string> namespaces;
  for (const SubmitObject& o : objects_) namespaces.insert(o.ns);
  if (auto ok = RecordRunLine(namespaces); !ok) return tl::unexpected(ok.error());
  // Wake the waits below when either token is stopped.
  std::stop_callback on_submit_stop(stop_submitting, [this] {
    std::lock_guard lock(mu_);
    cv_.notify_all();
  });
  std::stop_callback on_all_stop(stop_all, [this] {
    std::lock_guard lock(mu_);
    cv_.notify_all();
  });
  // Watch the run's pods from before the first create, so that no change is missed.
  auto watches = Watch(namespaces, stop_all);
  const Ending submitted = SubmitAll(stop_submitting, stop_all);
  const Ending ending = WaitForPods(submitted, stop_all);
  watches->Stop();
  return Summarise(ending);
}

}  // namespace gpumux::runs
