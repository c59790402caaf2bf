// The job-completion-time simulator for deep-learning training jobs sharing GPUs.
//
// Event-driven with integer microsecond time; events are ordered by (time, insertion counter)
// and a job's stale events are skipped by version, never by pointer. On every change on a GPU
// (arrival, departure, batch change, reconfiguration pause) the simulator advances the GPU's
// jobs to now, recomputes their rates from the "true" interference and reschedules their next
// events exactly: completion, epoch boundary (when a batch change waits for it), end of a
// reconfiguration pause, end of a tuning measurement window. No time stepping.
//
// Two profiles: the policies' (`profile`: what they believe) and the truth (what the simulated
// GPUs really do; by default the same profile). A job's progress rate =
// batch / (t_true(batch) * s_true) * E_job(batch) useful samples per second, where s_true is its
// slowdown among the jobs active on its GPU (jobs in a pause do not run): the truth profile's
// measured sets, else its predictor; on sets it has not measured, times a hidden factor around
// 1 (+-model_error, tilted by the batch size) per (set, member class), fixed from the seed.
// Each job's work and gradient noise scale are its class's (in the truth) times a hidden
// log-normal draw (work_spread, noise_scale_spread; means preserved).
// No oracle: policies and tuners never see the truth. Policies see policy::JobSnapshot (the
// class prior, the progress counter, a noisy step-time report, the noise-scale estimate);
// tuners get noisy step times and noise-scale estimates from their measurement windows.
//
// Placement runs through the one policy::Engine on a core::Ledger of `nodes` x
// `gpus_per_node` GPUs. A scheduling pass runs after an arrival, a departure or the end of a
// tuning session: the queue (FIFO, or shortest predicted solo time first when the policy says
// so) is offered in order; a job the policy declines stays queued. Policies without
// co-location traits (e.g. `exclusive`) run FIFO without tuning.
//
// Batch changes: a newcomer's (and a probed job's) change applies at once; a running job's at
// its next epoch boundary. Every change costs the job a reconfiguration pause. A GPU is
// locked for placement while a tuning session runs on it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "gpumux/core/quantity.h"
#include "gpumux/core/result.h"
#include "gpumux/policy/observations.h"
#include "gpumux/policy/workload_profile.h"
#include "gpumux/sim/dl_workload.h"

namespace gpumux::sim {

// The end of the simulator's clock: 2^62 microseconds (about 146,000 years). A run whose next
// event would come later (jobs far too slow for their work, or submitted too late) stops with
// an error naming the job, instead of overflowing the clock.
inline constexpr core::Micros kDlClockLimitUs = core::Micros{1} << 62;
// The most GPUs a simulated cluster may have.
inline constexpr int kMaxDlGpus = 100'000;
// The most jobs a policy may stack on one GPU.
inline constexpr int kMaxDlJobsPerGpu = 16;

// Ranges (RunDl refuses others): nodes x gpus_per_node 1..kMaxDlGpus, gpus_per_node
// 1..core::kMaxGpusPerNode, max_jobs_per_gpu 1..kMaxDlJobsPerGpu, reconfigure_s [0, 86400],
// measure_noise [0, 10], model_error [0, 1), work_spread and noise_scale_spread [0, 2].
struct DlSimOptions {
  std::string policy = "least-delay";
  std::string tuner = "auto";  // auto = the policy's own (none for policies without traits)
  // Queue discipline: auto = the policy's own; fifo = arrival order; shortest = least predicted
  // solo time of the job's class prior first (ties: arrival). Applied to every policy alike, so
  // that a comparison can hold the queue fixed and measure placement alone.
  std::string queue = "auto";
  int nodes = 5;
  int gpus_per_node = 4;  // IADeep: 20 RTX 3090
  int max_jobs_per_gpu = 3;
  double reconfigure_s = 3.0;  // pause of a job whose batch size changes (assumed)
  double measure_noise = 0.1;  // relative sd of one measured step time; a window of n
                               // steps reports the mean with sd measure_noise / sqrt(n)
  // How the simulated GPUs answer the sets the truth profile has not measured (dl_truth.h):
  // "predictor" (the truth profile's busy-time predictor: the policies' own model family),
  // "pair-max" or "pair-sum" (rules built from the truth's measured pairs alone).
  std::string truth_model = "predictor";
  double model_error = 0.1;         // hidden deviation of the true slowdowns from the truth's
                                    // predictor, on sets the truth profile has not measured
  double work_spread = 0.5;         // sd of log(job work / class work) (assumed; policies know
                                    // this spread, not any job's draw)
  double noise_scale_spread = 0.3;  // sd of log(job noise scale / class noise scale) (assumed)
  std::uint64_t seed = 42;
  // The seed of the truth's hidden factors (model_error); 0 = `seed`. Fixing it keeps the same
  // simulated GPUs across seeds (one cluster, other workloads), e.g. to learn observations on
  // some seeds and use them on others.
  std::uint64_t truth_seed = 0;
  bool record_timeline = true;
  // Record what node coordinators would have measured (DlResult::observations). Changes no
  // result: its noise comes from a random stream of its own.
  bool record_observations = false;
  // Learn within the run: the policies' and tuners' belief takes in every observation (what
  // record_observations records) as it is made, through policy::LearningInterference, the code
  // the extender uses for the store's observations. Windows exist only while a tuner measures
  // (as on a node coordinator), so with tuner "none" nothing is learned.
  bool learn = false;
  bool check_invariants = false;  // ledger invariants after every event (slow; for tests)
  // Policy settings (policy::Knob values by name; the policy's defaults for the others).
  std::map<std::string, double, std::less<>> knobs;
};

struct DlJobResult {
  std::string id;
  std::string cls;
  core::Micros submit_us = 0;
  core::Micros start_us = 0;  // first placed
  core::Micros finish_us = 0;
  std::string gpu;  // "node/index" of the GPU it ran on
  int final_batch = 0;
  int batch_changes = 0;
  core::Micros jct_us() const { return finish_us - submit_us; }
  core::Micros queue_us() const { return start_us - submit_us; }
};

// One job's stay on one GPU (the per-GPU timeline).
struct DlSegment {
  int gpu = 0;  // cluster-wide GPU number, node-major
  std::string job;
  std::string cls;
  core::Micros start_us = 0;
  core::Micros end_us = 0;
};

struct DlMetrics {
  double avg_jct_s = 0, median_jct_s = 0, p95_jct_s = 0;
  double makespan_s = 0;   // last finish - first submit
  double avg_queue_s = 0;  // mean queueing delay (submit -> first placement)
  double gpu_busy = 0;     // time-mean fraction of GPUs with at least one job
  double gpu_util = 0;     // time-mean of min(1, sum of active jobs' busy fractions)
  int tuning_sessions = 0;
  int measurement_windows = 0;
  double locked_gpu_s = 0;  // GPU-seconds locked by tuning
  double paused_job_s = 0;  // job-seconds lost to reconfiguration pauses
  int declined = 0;         // placements a policy declined (the job waited)
};

struct DlResult {
  std::string policy;
  std::string tuner;
  std::string queue;  // the queue discipline that ran: fifo or shortest
  double load = 1;
  std::uint64_t seed = 0;
  std::vector<DlJobResult> jobs;  // in job-list order
  std::vector<DlSegment> timeline;
  DlMetrics metrics;
  std::int64_t events = 0;
  // With record_observations: for every closed measurement window of two or more jobs that
  // ran undisturbed (nobody paused or changed batch size, every job ran at least one step),
  // what a coordinator measures: each job's mean step time in the window (the tuner's noisy
  // measurement) over its solo step time at that batch. The solo reference is the job's own
  // measurement while it was alone on its GPU (the nearest batch size with at least 3 steps,
  // with the same measurement noise, scaled along the profile's step-time curve), else the
  // profile's solo step time (solo "profile"). Combined per canonical (classes, batches):
  // count = windows; node "simulator", gpu_model the truth profile's. In key order.
  std::vector<policy::Observation> observations;
  // With record_observations: how well the policies' profile predicted those windows: the sum
  // over their members of |predicted slowdown - measured slowdown|, and how many members.
  double belief_abs_error = 0;
  std::int64_t belief_error_members = 0;
  // The same by set size (index = jobs in the window; 0 and 1 unused): the sum of |error|, the
  // sum of (predicted - measured) (positive: the belief over-predicted) and the members.
  struct BeliefError {
    double abs = 0;
    double signed_sum = 0;
    std::int64_t members = 0;
  };
  std::vector<BeliefError> belief_error_by_size;
  // With learn: the distinct co-locations (classes and batch sizes) the belief learned.
  std::int64_t learned_sets = 0;
  // A run measured on a cluster (dl_measured.h), not simulated: no tuner or queue of its own,
  // gpu_util not measured (NaN), and the timeline's lanes named by gpu_names ("node/index").
  bool measured = false;
  std::vector<std::string> gpu_names;
};

// Runs the jobs to completion; `truth` (nullptr = `profile`) is what the GPUs really do.
// Policies and tuners see `profile` only (e.g. a profile with learned observations added,
// policy::WithObservations), never the truth.
// Errors: an invalid profile, options outside their ranges, no jobs or more than kMaxDlJobs, a
// job of a class unknown to either profile, with a submit time outside 0..kMaxSubmitUs or no
// GPU memory, an unknown policy or tuner, a job that can never fit a GPU, and a run that would
// pass kDlClockLimitUs.
core::Result<DlResult> RunDl(const policy::WorkloadProfile& profile,
                             const std::vector<JobSpec>& jobs, const DlSimOptions& options,
                             const policy::WorkloadProfile* truth = nullptr);

// Nearest-rank percentile (p in (0, 100]) of sorted values; 0 for none.
double Percentile(const std::vector<double>& sorted, double p);

}  // namespace gpumux::sim
