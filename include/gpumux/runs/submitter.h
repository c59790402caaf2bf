// `gpumux submit`: creates a workload's objects against the API server at their arrival times
// (scaled), watches their pods and records submit / scheduled / start / finish of every job as
// it happens (runs/run_record.h), the way IADeep's submit_tasks.py drives a cluster, with the
// record a simulator's report can be built from.
//
//   PrepareSubmission  manifests -> objects to create: kind, namespace, arrival, job id, and
//                      the run label on each object and pod template (pure; no I/O)
//   Submitter::Run     run line -> watch the run's pods (a reflector per namespace, label
//                      selector gpumux.io/run=RUN) -> create each object when due -> (with
//                      kWaitForPods) until every job has finished -> end line
//
// Thread safety: Run is called once; Progress() may be called from any thread meanwhile.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include "gpumux/core/quantity.h"
#include "gpumux/core/result.h"
#include "gpumux/kube/api_client.h"
#include "gpumux/runs/run_record.h"

namespace gpumux::runs {

// One object to create.
struct SubmitObject {
  nlohmann::json object;  // as it is POSTed: run label and job annotation set, duration scaled
  std::string kind;       // "Pod" | "Job"
  std::string name;
  std::string ns;
  std::string job;         // gpumux.io/job, else the name
  std::string cls;         // gpumux.io/workload-class ("" when none)
  core::Micros at_us = 0;  // gpumux.io/submit-at-s (0 when absent): after the run's start
  int backoff_limit = 0;   // a Job's spec.backoffLimit (Kubernetes' default 6 when unset)
};

struct PrepareOptions {
  std::string run;  // the gpumux.io/run label set on every object and pod template
  // -n/--namespace as given ("" = not given: an object's own namespace, else default_ns).
  std::string ns;
  std::string default_ns = "default";  // the kubeconfig context's namespace
  // Multiplies gpumux.io/duration-s (what a trace pod sleeps), keeping the trace's value in
  // gpumux.io/trace-duration-s; arrivals are scaled by the Submitter.
  double time_scale = 1;
};

// Checks and prepares `objects` (from `source`), sorted by arrival (ties keep the input order).
// Only v1 Pods and batch/v1 Jobs; each needs metadata.name; a namespace that differs from a
// given -n is refused (as kubectl does); gpumux.io/submit-at-s must be seconds >= 0 (at most 6
// decimals); two objects of one kind, namespace and name, or two with one job id, are refused.
// Errors name the source and the object: "jobs.yaml: object 3 (Pod j0003): ...".
core::Result<std::vector<SubmitObject>> PrepareSubmission(std::vector<nlohmann::json> objects,
                                                          const PrepareOptions& options,
                                                          const std::string& source);

enum class WaitMode : std::uint8_t { kNoWait, kWaitForPods };
enum class FailMode : std::uint8_t { kContinue, kFailFast };

struct SubmitOptions {
  std::string run;
  std::string label;      // what the report calls this run (e.g. the extender's policy)
  std::string source;     // where the manifests came from (recorded)
  double time_scale = 1;  // arrival x time_scale = when the object is created
  WaitMode wait = WaitMode::kNoWait;
  std::chrono::milliseconds wait_timeout{0};  // after the last create; 0 = no limit
  FailMode fail = FailMode::kContinue;
  // A create that gets no answer, 429, 500, 502, 503 or 504 is tried again (0.5 s, 1 s, 2 s
  // apart, create_retries times); after such a retry, AlreadyExists for an object carrying this
  // run's label is its own success.
  int create_retries = 3;
  // How long Run waits for the first list of the run's pods before it creates anything.
  std::chrono::milliseconds sync_timeout{10000};
  std::string gpumux_version;
};

// A snapshot for the progress display (per job).
struct SubmitProgress {
  std::size_t total = 0;
  std::size_t submitted = 0;
  std::size_t errors = 0;
  std::size_t running = 0;  // started, not finished
  std::size_t succeeded = 0;
  std::size_t failed = 0;  // finished Failed, or deleted before finishing
  double elapsed_s = 0;
  double next_due_s = -1;  // seconds until the next create; -1 when none is left
  bool submitting = true;  // false once every object was tried (or submitting stopped)
};

struct SubmitSummary {
  std::string end_reason;  // finished, submitted, interrupted, timeout, fail-fast
  std::size_t submitted = 0, errors = 0, succeeded = 0, failed = 0, unfinished = 0;
  std::vector<std::string> unfinished_jobs;  // with --wait: the jobs still not finished
};

class Submitter {
 public:
  // `api` and `record` must outlive the submitter; `log` (may be empty) gets one line per
  // failed create and per watch problem.
  Submitter(kube::KubeApi& api, std::vector<SubmitObject> objects, SubmitOptions options,
            RecordWriter& record, std::function<void(std::string_view)> log);
  ~Submitter();
  Submitter(const Submitter&) = delete;
  Submitter& operator=(const Submitter&) = delete;

  // Submits and records. `stop_submitting` ends the creates (what is created stays watched
  // while waiting); `stop_all` ends everything at once. Error only when the record cannot be
  // written (the run then stops).
  core::Result<SubmitSummary> Run(std::stop_token stop_submitting, std::stop_token stop_all);

  SubmitProgress Progress() const;

 private:
  struct JobState;
  struct PodState;
  struct Watches;
  // How a run ended; kRecordFailed ends it with the record's error.
  enum class Ending : std::uint8_t {
    kSubmitted,
    kFinished,
    kFailFast,
    kInterrupted,
    kTimedOut,
    kRecordFailed
  };

  // The steps of Run.
  core::Result<void> RecordRunLine(const std::set<std::string>& namespaces);
  std::unique_ptr<Watches> Watch(const std::set<std::string>& namespaces, std::stop_token stop_all);
  Ending SubmitAll(std::stop_token stop_submitting, std::stop_token stop_all);
  Ending WaitForPods(Ending submitting, std::stop_token stop_all);
  core::Result<SubmitSummary> Summarise(Ending ending);

  core::Result<void> Record(nlohmann::ordered_json line);
  double Now() const;
  // Creates one object (with retries); records submit or error. False when the record failed.
  bool Create(std::size_t index, double due_t, std::stop_token stop);
  void OnPods(std::vector<nlohmann::json> items, const std::string& ns);
  void OnPodEvent(const kube::WatchEvent& event);
  // Callers hold mu_.
  void ObservePod(const nlohmann::json& pod, bool deleted);
  JobState* JobOfPod(const nlohmann::json& pod);
  bool AllDone() const;

  kube::KubeApi& api_;
  std::vector<SubmitObject> objects_;
  SubmitOptions options_;
  RecordWriter& record_;
  std::function<void(std::string_view)> log_;
  std::chrono::steady_clock::time_point start_;

  mutable std::mutex mu_;
  std::condition_variable_any cv_;                         // job states changed, a record failure
  std::map<std::string, std::unique_ptr<JobState>> jobs_;  // by job id
  std::map<std::string, std::string> job_of_name_;         // "Kind/ns/name" -> job id
  std::map<std::string, PodState> pods_;                   // "ns/name" -> state
  std::size_t tried_ = 0;  // objects whose create finished (either way)
  std::size_t submitted_ = 0;
  std::size_t errors_ = 0;
  double next_due_s_ = 0;
  bool submitting_ = true;
  std::string record_error_;
};

}  // namespace gpumux::runs
