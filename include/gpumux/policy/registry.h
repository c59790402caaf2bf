// The explicit policy registry: name -> factory. Adding a policy is one line in
// BuiltinPolicies() (registry.cc); nothing registers itself statically.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "gpumux/core/result.h"
#include "gpumux/policy/colocation.h"
#include "gpumux/policy/fgd_sat.h"
#include "gpumux/policy/fragmentation.h"
#include "gpumux/policy/policy.h"

namespace gpumux::policy {

// What a policy may need to be built. Policies take what they need and ignore the rest.
struct PolicyContext {
  // Typical pods of the workload, for fragmentation-aware policies (fgd).
  std::vector<TypicalPod> typical_pods;
  // fgd-sat-reserve only: reserve idle GPUs for whole-GPU pods while fewer than this fraction
  // of the cluster's GPUs are idle (fgd_sat.h), in (0, 1].
  double reserve_idle_fraction = FgdSatPolicy::kDefaultReserveIdleFraction;
  // For co-location policies (first-fit, iadeep, gpumux): the workload profile and the
  // interference model built on it (borrowed; both outlive the policy), the driver's job view
  // (may be null: every tenant is then an unknown, GPU-bound job) and shared settings.
  const WorkloadProfile* profile = nullptr;
  const InterferenceModel* interference = nullptr;
  const JobView* jobs = nullptr;
  ColocationOptions colocation;
};

using PolicyFactory = std::function<std::unique_ptr<Policy>(const PolicyContext&)>;

struct PolicyEntry {
  std::string name;
  std::string summary;  // one line, for --help and reports
  PolicyFactory make;
};

class Registry {
 public:
  void Add(std::string name, std::string summary, PolicyFactory make);
  // Error (listing the known names) if `name` is unknown.
  core::Result<std::unique_ptr<Policy>> Make(std::string_view name,
                                             const PolicyContext& context) const;
  const PolicyEntry* Find(std::string_view name) const;
  const std::vector<PolicyEntry>& entries() const { return entries_; }
  std::vector<std::string> names() const;

 private:
  std::vector<PolicyEntry> entries_;
};

// Every built-in policy, in a stable order: the six of the FGD study first, then the rest.
const Registry& BuiltinPolicies();

// The FGD study's six policies, in the study's order (01-Random ... 06-FGD).
std::vector<std::string> FgdStudyPolicies();

}  // namespace gpumux::policy
