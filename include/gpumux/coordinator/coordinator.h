// The node coordinator's state machine: which jobs share which GPU, the tuning session of each
// GPU's group, the measurements, and what is kept in the store. No sockets and no threads: the
// daemon (server.h) feeds it requests and calls Tick(); tests drive it with a scripted clock.
//
// Contract (docs/COORDINATOR.md has the wire format and the key layout):
//  * Register/Report/Leave never wait on anything: they update memory, emit store writes to the
//    StoreSink (which must not block) and answer with the job's target batch size.
//  * When the set of jobs on a GPU changes, the running session (if any) is dropped and a new
//    one of the configured tuner (policy::MakeTuner: the simulator's code) starts with every
//    member. Each TuneStep's batches become the members' targets; the measurement window opens
//    once every member has reported a step at its target, and closes when each has reported
//    max(step.measure_minibatches, options.window_steps) steps at its target that ended after
//    the window opened, or at the window timeout, when a member that did not measure is
//    observed at its latest step time. Observe() gets the batches that ran and the mean step
//    times; a final step's batches stay the targets until the group changes.
//  * The tuner's computations (a session's start, and each step after a window) run through
//    the tuning runner (set_tuning_runner): the daemon runs them on a thread of their own, one
//    at a time, and applies each result under its lock only if the GPU's jobs have not changed
//    since it was asked for, so no request waits behind a computation. Without a runner they
//    run at once, inside the call that needs them (tests; the simulator's order of events).
//  * A group with a member of unknown class, or on several GPUs, is "untuned": served, never
//    tuned. A job that has not reported for options.job_timeout leaves.
//  * Every closed window of two or more jobs with known classes records an observation (each
//    member's slowdown against its solo step time) into the node's running means.
//  * Who may act for a job (caller.h): the principal that registered it, or the node's
//    administrator; with a membership source, a registration must come from the pod (or
//    container) that holds the GPU. A refusal is kPermissionDenied (403), or kUnavailable (503)
//    while the caller's pod is not known yet or a job limit is reached.
// Thread safety: none; the server serialises calls. A runner's computations touch only the
// tuner, its random stream and the session they compute, never the coordinator's other state.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gpumux/coordinator/caller.h"
#include "gpumux/core/log.h"
#include "gpumux/core/result.h"
#include "gpumux/core/rng.h"
#include "gpumux/kube/coordinator_status.h"
#include "gpumux/policy/interference.h"
#include "gpumux/policy/observations.h"
#include "gpumux/policy/tuner.h"
#include "gpumux/policy/workload_profile.h"

namespace gpumux::coordinator {

using Clock = std::chrono::steady_clock;

struct Registration;

struct CoordinatorOptions {
  std::string node = "localhost";
  std::string gpu_model;        // for observations ("" = unknown)
  std::string tuner = "joint";  // policy::MakeTuner name; "none" = never tune
  // Makes the tuner instead of policy::MakeTuner(tuner) when set (tests: a tuner that blocks).
  std::function<std::unique_ptr<policy::Tuner>()> make_tuner;
  std::string prefix = "/gpumux/";  // store key prefix
  int window_steps = 10;            // at least this many steps per measurement window
  int warmup_steps = 1;             // steps dropped after a job changes its batch size
  std::chrono::milliseconds window_timeout{30000};
  std::chrono::milliseconds job_timeout{30000};
  double report_every_s = 1.0;  // told to the jobs
  std::uint64_t seed = 1;       // the tuner's random stream (IADeep's GP-LCB draws)
  // The UUIDs of this node's GPUs (from the GPU backend); a registration naming another GPU
  // is refused. Empty = any GPU is accepted (no backend).
  std::vector<std::string> node_gpus;
  // The membership source (pod_grants.h): the GPUs a job holds according to its grant, which
  // win over what the job says; std::nullopt (or no function) = the job's own word.
  std::function<std::optional<std::vector<std::string>>(std::string_view job)> resolve_gpus;
  // A further check of a registration from an untrusted caller (the runtime hook's ledger:
  // does the caller's container reserve the GPUs it names?): a reason refuses it (403);
  // std::nullopt (or no function) admits it.
  std::function<std::optional<std::string>(const Registration&, const Caller&)> admit;
  // Who may register a job (an untrusted caller; the node's administrator always may):
  //   kOwner       anyone, and then only its principal acts for the job (no membership source);
  //   kPods        a process in the pod the job's id names ("namespace/pod/container", the
  //                pod found by `pod_of_uid`), whose grant gives that container a GPU here;
  //   kContainers  a process in a container (admit decides about its GPUs).
  // With kPods and kContainers a TCP caller may not register, report or leave.
  enum class Identity : std::uint8_t { kOwner, kPods, kContainers };
  Identity identity = Identity::kOwner;
  // kPods: "namespace/pod" of a pod UID bound to this node; std::nullopt = not known (yet).
  std::function<std::optional<std::string>(std::string_view pod_uid)> pod_of_uid;
  // Registrations beyond these are refused (kUnavailable, naming the limit): tuning cost grows
  // faster than linearly with the jobs sharing a GPU.
  int max_jobs_per_gpu = 16;
  int max_jobs = 512;
  // Jobs one principal (a pod, a container, a uid; all TCP peers are one) may hold, so that no
  // tenant takes the node's whole share; the node's administrator is not limited.
  int max_jobs_per_caller = 64;
  // Wall-clock seconds (for the store: a restart drops jobs not seen for job_timeout).
  std::function<std::int64_t()> unix_now;
};

// Where durable state goes. Implementations must not block the caller (the daemon queues the
// writes for a background writer); a value of std::nullopt deletes the key.
class StoreSink {
 public:
  virtual ~StoreSink() = default;
  virtual void Write(std::string key, std::optional<std::string> value) = 0;
};

struct Registration {
  std::string job;
  std::string cls;
  int batch_size = 0;
  std::vector<std::string> gpus;  // UUIDs
  std::int64_t pid = 0;
  int min_batch = 0, max_batch = 0;  // 0 = no bound
  core::MiB memory_mib = 0;          // the job's GPU memory grant (0 = unlimited)
  double noise_scale = 0;
};

struct StepSample {
  int batch = 0;
  double seconds = 0;
  double end_unix = 0;  // wall-clock end of the step (0 = unknown: counted as "just now")
};

struct Reply {
  int batch_size = 0;
  std::string state;  // the job's GPU's state: solo, measuring, tuned, untuned
  double report_every_s = 1.0;
};

// What /v1/state, /metrics and kubectl gpumux top show.
using kube::GpuView;
using kube::JobView;

// Errors for the wire: kInvalidArgument (400: the field is named), kNotFound (404).
class Coordinator {
 public:
  // The profile must outlive the coordinator; `sink` may be null (nothing stored).
  Coordinator(CoordinatorOptions options, const policy::WorkloadProfile& profile, StoreSink* sink,
              std::function<Clock::time_point()> now, core::Logger log);
  ~Coordinator();

  // Brings back what a previous run stored (the store's listings of prefix + "nodes/<node>/"
  // and prefix + "observations/"): jobs (alive until they time out), tuned assignments, the
  // tuner's learned corrections, and this node's observations (later windows add to their
  // counts). Values it cannot parse are logged and skipped; jobs beyond max_jobs or
  // max_jobs_per_gpu (a store left by a run with higher limits) are dropped and deleted.
  void Restore(std::span<const std::pair<std::string, std::string>> stored);

  // `caller`: who sent it, decided by the server from the connection (caller.h).
  core::Result<Reply> Register(const Registration& r, const Caller& caller = Caller::Node());
  core::Result<Reply> Report(std::string_view job, std::span<const StepSample> steps,
                             double noise_scale, const Caller& caller = Caller::Node());
  core::Result<void> Leave(std::string_view job, const Caller& caller = Caller::Node());
  // Every job of the pod "namespace/pod" leaves (the pod was deleted or ended).
  void PodGone(std::string_view ns_pod);
  // Every job on GPU `uuid` leaves, for `why` (no live reservation holds the GPU any more).
  void GpuVacated(std::string_view uuid, std::string_view why);
  // Timeouts (windows, jobs). Call a few times per second.
  void Tick();

  // Where state goes from now on (the daemon's store writer); null = nowhere.
  void set_sink(StoreSink* sink) { sink_ = sink; }

  // A tuning computation returns the function that applies its result (empty when the work
  // was stale and nothing was computed); the runner calls it under the lock that serialises
  // this coordinator's calls (it may drop both at shutdown).
  using TuningWork = std::function<std::function<void()>()>;
  using TuningRunner = std::function<void(TuningWork)>;
  // Where tuning computations run from now on; null = at once, inside the calling method.
  void set_tuning_runner(TuningRunner runner) { run_tuning_ = std::move(runner); }

  // Every GPU and job; for an untrusted unix-socket caller only its own jobs (and their GPUs).
  std::vector<GpuView> State(const Caller& caller = Caller::Node()) const;
  std::int64_t windows_closed() const { return windows_closed_; }
  std::int64_t sessions_started() const { return sessions_started_; }
  const CoordinatorOptions& options() const { return options_; }

 private:
  struct Job;
  struct Group;
  Job* FindJob(std::string_view id);
  Group& GroupOf(const std::string& gpu);
  // The job `id` when `caller` may act for it: kNotFound, kPermissionDenied.
  core::Result<Job*> JobFor(std::string_view id, const Caller& caller);
  std::optional<core::Error> CheckIds(const Registration& r) const;
  std::optional<core::Error> CheckFields(const Registration& r) const;
  // Whether `gpu` is one of this node's GPUs (any GPU is when the node's are not known).
  bool OnThisNode(const std::string& gpu) const;
  std::optional<core::Error> CheckCaller(const Registration& r, const Caller& caller) const;
  std::optional<core::Error> CheckOwner(const Job& j, const Caller& caller) const;
  enum class Restored : std::uint8_t { kRestored, kSkipped, kStale, kGpuGone, kOverLimits };
  // One stored job (Restore): kept, or dropped and its key deleted.
  Restored RestoreJob(const std::string& key, const nlohmann::json& v);
  std::optional<core::Error> CheckLimits(const Registration& r, const std::string& gpu,
                                         const Caller& caller) const;
  // The GPU's set of jobs changed; `newcomer` is the job that joined ("" when one left).
  void Changed(const std::string& gpu, const std::string& newcomer = {});
  struct Computed;
  // Runs `work` (which may touch only tuner_, rng_, model_ and the session it holds) through
  // the runner; its result is applied to the group of `g.gpu` if that group is unchanged.
  void RunTuning(Group& g, std::function<Computed()> work);
  void ApplyTuning(const std::string& gpu, std::uint64_t generation, Computed& out);
  void ApplyStep(Group& g, const policy::TuneStep& step);
  void MaybeOpenWindow(Group& g);
  void CloseWindow(Group& g, bool timed_out);
  void EndSession(Group& g);
  // The group's computations in flight are stale from now on.
  void Invalidate(Group& g);
  void Remove(const std::string& id, std::string_view why);
  void RecordObservation(const Group& g, std::span<const double> step_s);
  double SoloReference(const Job& j, int batch, bool* measured) const;
  Reply ReplyFor(const Job& j) const;
  void StoreJob(Job& j);
  std::int64_t UnixNow() const;
  void StoreGroup(const Group& g);
  // The tuner's learned corrections as stored ("" = nothing to store); on the runner's side.
  std::string TunerState() const;
  std::string Key(std::string_view rest) const;

  CoordinatorOptions options_;
  const policy::WorkloadProfile* profile_;
  policy::ProfileInterference model_;
  StoreSink* sink_;
  std::function<Clock::time_point()> now_;
  core::Logger log_;
  core::Rng rng_;
  std::unique_ptr<policy::Tuner> tuner_;
  std::map<std::string, std::unique_ptr<Job>, std::less<>> jobs_;
  std::map<std::string, std::unique_ptr<Group>, std::less<>> groups_;
  std::string ObservationKey(const std::string& set, const std::string& batches) const;
  // This node's running mean per (set, batches), as in the store.
  std::map<std::pair<std::string, std::string>, policy::Observation> observed_;
  std::int64_t windows_closed_ = 0;
  std::int64_t sessions_started_ = 0;
  std::uint64_t generations_ = 0;  // the last Group::generation value handed out
  TuningRunner run_tuning_;
};

// Percent-encodes '/', '%' and bytes outside printable ASCII: a name as one key segment.
std::string KeySegment(std::string_view name);

}  // namespace gpumux::coordinator
