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

// The observable state of one placed job (what a node coordinator can report).
struct JobSnapshot {
  const ClassProfile* cls = nullptr;  // nullptr: unknown class
  int batch = 0;
  core::MiB memory_limit = 0;
  double remaining_work = 0;  // useful samples still to do
  double observed_rate = 0;   // useful samples per second, as last measured (0 = not yet)
  bool tuning = false;        // its GPU is in a tuning session
};

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
  std::string tuner = "none";        // a name for MakeTuner
  bool retune_on_departure = false;  // start a tuning session when a companion leaves
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
};

}  // namespace gpumux::policy
