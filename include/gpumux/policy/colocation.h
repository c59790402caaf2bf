// What co-location policies (first-fit, iadeep, gpumux) see beyond the ledger: the running
// state of the jobs, and the traits a driver (simulator, coordinator) must honour for them.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "gpumux/core/ledger.h"
#include "gpumux/policy/interference.h"

namespace gpumux::policy {

// The observable state of one placed job: exactly what a node coordinator can report, and
// nothing a real scheduler could not know. A job's true length, its true statistical
// efficiency and the GPUs' true interference are not here: a driver (the simulator) keeps them
// to itself, so a policy cannot read them. Remaining work is the policy's estimate
// (EstimatedRemainingWork) from the class prior and the progress so far.
struct JobSnapshot {
  const ClassProfile* cls = nullptr;  // the class as the policy's profile describes it (a
                                      // prior, not the job's truth); nullptr: unknown class
  int batch = 0;
  core::MiB memory_limit = 0;
  // Useful samples done so far, as the job reports it: samples processed (steps x batch, an
  // exact counter) weighted by the efficiency its estimated noise scale gives each batch size.
  double work_done = 0;
  // Its mean step time (s) over the last report window: a measurement, noisy (0 = none yet,
  // e.g. just placed or pausing to change its batch size).
  double observed_step_s = 0;
  // Whether that whole window ran with the GPU's current set of jobs at their current batch
  // sizes (a coordinator knows when a GPU's set last changed): only such a report measures the
  // set as it is now.
  bool observed_steady = false;
  double noise_scale = 0;  // its gradient noise scale estimated so far (0 = none: the prior)
  bool tuning = false;     // its GPU is in a tuning session
};

// Useful samples per second the job's last report shows: batch / observed step time x the
// efficiency of its batch size under its estimated noise scale; 0 without a report or class.
double ObservedRate(const JobSnapshot& job);

// The expected remaining work of a job whose class prior is `prior_mean` useful samples, when
// job lengths spread log-normally around the prior (`spread` = sd of log(length / prior);
// mean preserved) and `done` samples are done: E[W - done | W > done]. A job past its prior
// mean is expected to run on (the longer it ran, the longer it is likely to be). spread 0: the
// prior minus what is done, at least 5 % of the prior (the job has not finished, so the prior
// was short).
double EstimatedRemainingWork(double prior_mean, double spread, double done);

// The estimated remaining work of a placed job (its class prior, `spread`, its work_done).
double EstimatedRemainingWork(const JobSnapshot& job, double spread);

// Read-only job state provided by the driver. Valid during one Engine::Decide call.
class JobView {
 public:
  virtual ~JobView() = default;
  // The job placed as ledger tenant `t`; nullopt when the driver knows nothing of it.
  virtual std::optional<JobSnapshot> Job(core::TenantIndex t) const = 0;
  // How many queued jobs the driver will offer placement before the request being decided.
  virtual int QueuedAhead() const = 0;
};

enum class QueueOrder : std::uint8_t {
  kArrival,            // FIFO (stock Kubernetes)
  kShortestRemaining,  // least predicted solo time first (ties: arrival)
};

// What a driver must do for a co-location policy.
struct ColocationTraits {
  QueueOrder queue_order = QueueOrder::kArrival;
  std::string tuner = "none";  // a name for MakeTuner (whether it re-tunes when a companion
                               // leaves is the tuner's: Tuner::RetunesOnDeparture)
};

// The tenants on each GPU of `node` (index = GPU index on the node), in arrival order.
std::vector<std::vector<core::TenantIndex>> TenantsPerGpu(const core::Ledger& ledger,
                                                          const core::NodeView& node);

// The interference members of a GPU's tenants plus, optionally, a newcomer. Tenants the view
// does not know become unknown-class members at batch 0.
struct GpuGroup {
  std::vector<Member> members;
  std::vector<JobSnapshot> jobs;
  bool tuning = false;
};
GpuGroup GroupOf(const JobView* view, std::span<const core::TenantIndex> tenants);

// Shared settings of the co-location policies.
struct ColocationOptions {
  int max_jobs_per_gpu = 3;  // IADeep profiles pairs and triples; all sharing policies honour it
  // How job lengths spread around their class prior (sd of log(length / prior)): a population
  // statistic a scheduler learns from its history, not any job's length.
  double work_spread = 0;
};

}  // namespace gpumux::policy
