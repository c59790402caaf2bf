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

core::Result<std::vector<SubmitObject>> PrepareSubmission(std::vector<json> objects,
                                                          const PrepareOptions& o,
                                                          const std::string& source) {
  std::vector<SubmitObject> out;
  std::set<std::string> names;
  std::map<std::string, std::string> job_ids;  // job -> where
  if (!IsLabelValue(o.run)) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "the run name '" + o.run +
                         "' is not a label value (1..63 letters, digits, '-', '_' or '.', "
                         "starting and ending with a letter or digit)");
  }
  for (std::size_t i = 0; i < objects.size(); ++i) {
    json& object = objects[i];
    SubmitObject s;
    s.kind = kube::JsonString(object, "kind");
    const std::string api_version = kube::JsonString(object, "apiVersion");
    const std::string name = [&] {
      const json* m = kube::JsonChild(object, "metadata");
      return m == nullptr ? std::string() : kube::JsonString(*m, "name");
    }();
    const std::string where = source + ": object " + std::to_string(i + 1) + " (" +
                              (s.kind.empty() ? std::string("no kind") : s.kind) +
                              (name.empty() ? std::string() : " " + name) + ")";
    auto bad = [&](const std::string& what) {
      return MakeError(ErrorCode::kInvalidArgument, where + ": " + what);
    };
    if (!((s.kind == "Pod" && api_version == "v1") ||
          (s.kind == "Job" && api_version == "batch/v1"))) {
      return bad("only Pods (apiVersion v1) and Jobs (batch/v1) can be submitted, not " +
                 (s.kind.empty() ? std::string("an object without kind") : s.kind) + " (" +
                 (api_version.empty() ? std::string("no apiVersion") : api_version) + ")");
    }
    std::string error;
    json* metadata = ObjectChild(object, "metadata", error);
    if (metadata == nullptr) return bad(error);
    if (name.empty())
      return bad("no metadata.name (generateName is not enough: the record names jobs)");
    s.name = name;
    const std::string own_ns = kube::JsonString(*metadata, "namespace");
    if (!o.ns.empty() && !own_ns.empty() && own_ns != o.ns) {
      return bad("its namespace " + own_ns + " is not the one given (-n " + o.ns + ")");
    }
    s.ns = !own_ns.empty() ? own_ns : !o.ns.empty() ? o.ns : o.default_ns;
    (*metadata)["namespace"] = s.ns;

    // The pod's metadata: the object's own, or the Job's pod template's.
    json* pod_metadata = metadata;
    if (s.kind == "Job") {
      json* spec = ObjectChild(object, "spec", error);
      if (spec == nullptr) return bad(error);
      json* tmpl = ObjectChild(*spec, "template", error);
      if (tmpl == nullptr) return bad("spec." + error);
      pod_metadata = ObjectChild(*tmpl, "metadata", error);
      if (pod_metadata == nullptr) return bad("spec.template." + error);
      s.backoff_limit = kDefaultBackoffLimit;
      if (const json* limit = kube::JsonChild(*spec, "backoffLimit"); limit != nullptr) {
        if (!limit->is_number_integer() || limit->get<std::int64_t>() < 0 ||
            limit->get<std::int64_t>() > 1'000'000) {
          return bad("spec.backoffLimit is not an integer 0..1000000");
        }
        s.backoff_limit = limit->get<int>();
      }
    }
    // An annotation of the object, else of its pod template.
    auto annotation = [&](std::string_view key) {
      std::string v = Annotation(object, key);
      if (v.empty() && s.kind == "Job") v = Annotation(object["spec"]["template"], key);
      return v;
    };
    const std::string at = annotation(kAnnotationSubmitAt);
    if (!at.empty()) {
      auto us = ParseSecondsText(at);
      if (!us) {
        return bad("annotation " + std::string(kAnnotationSubmitAt) + " '" + at +
                   "' is not seconds >= 0 (at most 12 digits and 6 decimals)");
      }
      s.at_us = *us;
    }
    s.job = annotation(kAnnotationJob);
    if (s.job.empty()) s.job = s.name;
    s.cls = annotation(kube::kAnnotationWorkloadClass);

    // Labels and annotations on the object and on the pods it makes.
    for (json* m : {metadata, pod_metadata}) {
      json* labels = ObjectChild(*m, "labels", error);
      if (labels == nullptr) return bad("metadata." + error);
      (*labels)[std::string(kLabelRun)] = o.run;
      json* annotations = ObjectChild(*m, "annotations", error);
      if (annotations == nullptr) return bad("metadata." + error);
      (*annotations)[std::string(kAnnotationJob)] = s.job;
      const std::string duration =
          kube::JsonString(*annotations, std::string(kAnnotationDuration).c_str());
      if (duration.empty() || o.time_scale == 1) continue;
      std::string trace =
          kube::JsonString(*annotations, std::string(kAnnotationTraceDuration).c_str());
      if (trace.empty()) trace = duration;
      auto us = ParseSecondsText(trace);
      if (!us) {
        return bad("annotation " + std::string(kAnnotationDuration) + " '" + trace +
                   "' is not seconds >= 0");
      }
      (*annotations)[std::string(kAnnotationTraceDuration)] = trace;
      (*annotations)[std::string(kAnnotationDuration)] =
          ShortSeconds(static_cast<double>(*us) / 1e6 * o.time_scale);
    }
    if (!names.insert(s.kind + "/" + s.ns + "/" + s.name).second) {
      return bad("a second " + s.kind + " named " + s.ns + "/" + s.name);
    }
    if (auto [it, fresh] = job_ids.emplace(s.job, where); !fresh) {
      return bad("job '" + s.job + "' is also " + it->second.substr(source.size() + 2));
    }
    s.object = std::move(object);
    out.push_back(std::move(s));
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
  json gpus = json::array();
  if (const std::string text = Annotation(pod, kube::kAnnotationGrant); !text.empty()) {
    if (auto grant = kube::DecodeGrant(text); grant) {
      std::set<std::string> seen;
      for (const kube::ContainerGrant& c : grant->containers) {
        for (const kube::GrantedGpu& g : c.gpus) {
          std::string id = grant->node + "/" + std::to_string(g.index);
          if (seen.insert(id).second) gpus.push_back(id);
        }
      }
    }
  }
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
  if (!ps.scheduled && status != nullptr) {
    if (const json* conditions = kube::JsonChild(*status, "conditions");
        conditions != nullptr && conditions->is_array()) {
      for (const json& c : *conditions) {
        if (kube::JsonString(c, "type") != "PodScheduled" ||
            kube::JsonString(c, "status") != "False")
          continue;
        const std::string message = kube::JsonString(c, "message");
        if (message == ps.waiting) break;
        ps.waiting = message;
        auto l = line("unschedulable");
        l["reason"] = kube::JsonString(c, "reason");
        l["message"] = message;
        (void)Record(std::move(l));
        break;
      }
    }
  }
  // The first container's running or terminated state.
  std::string started_at, finished_at, reason, message;
  std::optional<std::int64_t> exit_code;
  bool container_running = false;
  if (status != nullptr) {
    if (const json* cs = kube::JsonChild(*status, "containerStatuses");
        cs != nullptr && cs->is_array()) {
      for (const json& c : *cs) {
        const json* state = kube::JsonChild(c, "state");
        if (state == nullptr) continue;
        if (const json* running = kube::JsonChild(*state, "running"); running != nullptr) {
          container_running = true;
          if (started_at.empty()) started_at = kube::JsonString(*running, "startedAt");
        }
        if (const json* done = kube::JsonChild(*state, "terminated"); done != nullptr) {
          if (started_at.empty()) started_at = kube::JsonString(*done, "startedAt");
          finished_at = std::max(finished_at, kube::JsonString(*done, "finishedAt"));
          if (reason.empty()) reason = kube::JsonString(*done, "reason");
          if (message.empty()) message = kube::JsonString(*done, "message");
          if (const json* code = kube::JsonChild(*done, "exitCode");
              code != nullptr && code->is_number_integer() &&
              (!exit_code || code->get<std::int64_t>() != 0)) {
            exit_code = code->get<std::int64_t>();
          }
        }
      }
    }
    // The pod's own reason (Evicted, UnexpectedAdmissionError, ...) says more.
    if (const std::string r = kube::JsonString(*status, "reason"); !r.empty()) reason = r;
    if (const std::string m = kube::JsonString(*status, "message"); !m.empty()) message = m;
  }
  const bool ended = phase == "Succeeded" || phase == "Failed";
  if ((phase == "Running" || container_running || ended) && !ps.started) {
    ps.started = true;
    double start_t = t;
    // Seen only once it had ended (a short container): its start from its own duration.
    if (ended && !started_at.empty() && !finished_at.empty()) {
      auto s = core::ParseRfc3339(started_at);
      auto f = core::ParseRfc3339(finished_at);
      if (s && f && *f >= *s) start_t = std::max(0.0, t - static_cast<double>(*f - *s));
    }
    auto l = RecordLine("start", start_t);
    l["job"] = object.job;
    l["pod"] = name;
    l["node"] = node;
    l["gpus"] = gpus;
    if (!started_at.empty()) l["started_at"] = started_at;
    (void)Record(std::move(l));
    job->started = true;
  }
  if (ended && !ps.finished) {
    ps.finished = true;
    auto l = line("finish");
    l["node"] = node;
    l["phase"] = phase;
    l["reason"] = reason;
    l["message"] = message;
    if (exit_code) l["exit_code"] = *exit_code;
    if (!finished_at.empty()) l["finished_at"] = finished_at;
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

core::Result<SubmitSummary> Submitter::Run(std::stop_token stop_submitting,
                                           std::stop_token stop_all) {
  start_ = Clock::now();
  std::set<std::string> namespaces;
  for (const SubmitObject& o : objects_) namespaces.insert(o.ns);
  std::string ns_text;
  for (const auto& ns : namespaces) ns_text += (ns_text.empty() ? "" : ",") + ns;
  {
    auto run = RecordLine("run", 0);
    run["version"] = kRunRecordVersion;
    run["run"] = options_.run;
    run["label"] = options_.label;
    run["namespace"] = ns_text;
    run["time_scale"] = options_.time_scale;
    run["started_at"] =
        core::FormatRfc3339Millis(core::UnixMillis(std::chrono::system_clock::now()));
    run["source"] = options_.source;
    run["objects"] = objects_.size();
    if (!options_.gpumux_version.empty()) run["gpumux"] = options_.gpumux_version;
    std::lock_guard lock(mu_);
    if (auto ok = Record(std::move(run)); !ok) return tl::unexpected(ok.error());
  }
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
  std::vector<std::unique_ptr<kube::Reflector>> reflectors;
  std::vector<std::jthread> watchers;
  const std::string selector = kube::QueryEscape(std::string(kLabelRun) + "=" + options_.run);
  for (const std::string& ns : namespaces) {
    kube::ReflectorHandler handler;
    handler.replace = [this, ns](std::vector<json> items) { OnPods(std::move(items), ns); };
    handler.event = [this](const kube::WatchEvent& e) { OnPodEvent(e); };
    handler.log = [this](std::string_view line) {
      if (log_) log_("watch: " + std::string(line));
    };
    reflectors.push_back(std::make_unique<kube::Reflector>(
        api_, "/api/v1/namespaces/" + ns + "/pods?labelSelector=" + selector, std::move(handler)));
    kube::Reflector* r = reflectors.back().get();
    watchers.emplace_back([r](std::stop_token stop) { r->Run(stop); });
  }
  auto synced = [&] {
    return std::all_of(reflectors.begin(), reflectors.end(),
                       [](const auto& r) { return r->synced(); });
  };
  const auto sync_deadline = Clock::now() + options_.sync_timeout;
  while (!synced() && Clock::now() < sync_deadline && !stop_all.stop_requested()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (!synced() && log_) {
    log_("the pods of run " + options_.run +
         " are not listed yet; creating anyway (the watch "
         "keeps trying)");
  }

  SubmitSummary summary;
  bool fail_fast = false;
  bool interrupted = false;
  bool timed_out = false;
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
      if (!record_error_.empty()) break;
    }
    if (stop_submitting.stop_requested() || stop_all.stop_requested()) {
      interrupted = true;
      break;
    }
    if (!Create(i, due_t, stop_all)) break;
    if (options_.fail == FailMode::kFailFast) {
      std::lock_guard lock(mu_);
      if (errors_ > 0) {
        fail_fast = true;
        break;
      }
    }
  }
  {
    std::unique_lock lock(mu_);
    submitting_ = false;
    if (options_.wait == WaitMode::kWaitForPods && !fail_fast && record_error_.empty()) {
      auto done = [&] { return AllDone() || stop_all.stop_requested() || !record_error_.empty(); };
      if (options_.wait_timeout.count() > 0) {
        timed_out = !cv_.wait_for(lock, options_.wait_timeout, done);
      } else {
        cv_.wait(lock, done);
      }
      if (stop_all.stop_requested()) interrupted = true;
    }
  }
  for (auto& w : watchers) w.request_stop();
  watchers.clear();  // joins
  std::lock_guard lock(mu_);
  if (!record_error_.empty()) {
    return MakeError(ErrorCode::kIo, "the record could not be written: " + record_error_);
  }
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
  summary.end_reason = fail_fast                                 ? "fail-fast"
                       : interrupted                             ? "interrupted"
                       : timed_out                               ? "timeout"
                       : options_.wait == WaitMode::kWaitForPods ? "finished"
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

}  // namespace gpumux::runs
