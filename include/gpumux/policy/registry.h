// The explicit policy registry: one entry per policy describes it once — its name, what it is
// for, how reports draw it, what it needs, the numbers it can be tuned by — and makes it. The
// CLI's flags and lists, the extender's settings, help texts, report palettes and legends, and
// the tests read the entries; none keeps a list of its own. Adding a policy is one entry in
// BuiltinPolicies() (registry.cc); nothing registers itself statically.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gpumux/core/result.h"
#include "gpumux/policy/colocation.h"
#include "gpumux/policy/fragmentation.h"
#include "gpumux/policy/policy.h"

namespace gpumux::policy {

// Which workload a policy places.
enum class Workload : std::uint8_t {
  kPods,          // pods asking for whole GPUs or shares (the FGD study, `gpumux simulate`)
  kTrainingJobs,  // training jobs co-located by interference (`gpumux simulate --workload dl`)
  kBoth,          // either (exclusive: the baseline of both)
};
std::string_view WorkloadName(Workload workload);  // "pods", "training jobs", "both"

// The family a policy belongs to: the dash of its line in every report.
enum class Family : std::uint8_t {
  kFgdStudy,    // the six policies of the FGD study (solid)
  kPacking,     // other pod packing policies (dashed)
  kColocation,  // co-location of training jobs (dash-dot)
};

// A number a policy can be tuned by: a flag of `gpumux simulate` and `gpumux extender`
// (--<name>), a key of the extender's settings file (<config_key>), and PolicyContext::knobs[name]
// for the policy itself. Several policies may share a knob (same name, same meaning).
struct Knob {
  std::string name;        // "reserve-idle-fraction"
  std::string config_key;  // "reserveIdleFraction"
  std::string help;        // one line for --help
  double min = 0;
  double max = 0;
  bool min_exclusive = false;  // (min, max] rather than [min, max]
  bool integer = false;
  double default_value = 0;
  // Error text when `value` is outside the range ("--reserve-idle-fraction must be in (0, 1]").
  std::optional<std::string> Check(double value) const;
};

// What a policy may need to be built. Policies take what they need and ignore the rest.
struct PolicyContext {
  // Typical pods of the workload, for fragmentation-aware policies (needs_typical_pods).
  std::vector<TypicalPod> typical_pods;
  // Knob values by Knob::name; Registry::Make fills in the defaults of the policy's knobs.
  std::map<std::string, double, std::less<>> knobs;
  // For co-location policies (needs_profile): the workload profile and the interference model
  // built on it (borrowed; both outlive the policy), the driver's job view (may be null: every
  // tenant is then an unknown, GPU-bound job) and shared settings.
  const WorkloadProfile* profile = nullptr;
  const InterferenceModel* interference = nullptr;
  const JobView* jobs = nullptr;
  ColocationOptions colocation;

  // The value of knob `name` (aborts when absent: Registry::Make puts every knob of the policy).
  double knob(std::string_view name) const;
};

using PolicyFactory = std::function<std::unique_ptr<Policy>(const PolicyContext&)>;

struct PolicyEntry {
  std::string name;
  std::string summary;      // one line, for `gpumux policies` and --help
  std::string explanation;  // a sentence or two, for the reports' legends
  Workload workload = Workload::kPods;
  Family family = Family::kPacking;
  std::string colour;               // "#RRGGBB", its colour in every report (sim/report_palette.h)
  bool needs_typical_pods = false;  // scores fragmentation against typical pods (--typical-pods)
  bool needs_profile = false;       // places training jobs with a workload profile (--profile)
  std::vector<Knob> knobs;
  PolicyFactory make;
  // In the default comparison (`gpumux simulate` without --policy, `make demo`, the README's
  // tables); false for a policy kept as an example or an experiment, which `--policy all` and
  // its name still run.
  bool compared = true;

  bool For(Workload w) const { return workload == w || workload == Workload::kBoth; }
  const Knob* FindKnob(std::string_view knob) const;
};

class Registry {
 public:
  void Add(PolicyEntry entry);
  // Error (listing the known names) if `name` is unknown. The policy's knobs missing from
  // `context.knobs` are given their defaults.
  core::Result<std::unique_ptr<Policy>> Make(std::string_view name,
                                             const PolicyContext& context) const;
  // A renamed policy's old name finds its entry too (see Canonical).
  const PolicyEntry* Find(std::string_view name) const;
  // The current name of a renamed policy ("gpumux" -> "least-delay"); any other name as given.
  // Commands label results with the current name, so reports never show the old one.
  static std::string_view Canonical(std::string_view name);
  const std::vector<PolicyEntry>& entries() const { return entries_; }
  std::vector<std::string> names() const;
  std::vector<std::string> names(Workload workload) const;     // those For(workload), in order
  std::vector<std::string> compared(Workload workload) const;  // of those, the compared ones
  std::vector<std::string> names(Family family) const;
  // Every knob of every policy, once per name, in entry order.
  std::vector<const Knob*> knobs() const;
  // The policies that have knob `name`, as "fgd-sat-reserve" or "a, b and c".
  std::string PoliciesWithKnob(std::string_view name) const;
  // "name, name, ..." of every policy (for errors).
  std::string KnownNames() const;

 private:
  std::vector<PolicyEntry> entries_;
};

// Every built-in policy, in a stable order: the six of the FGD study first, then the rest.
const Registry& BuiltinPolicies();

// The FGD study's six policies, in the study's order (01-Random ... 06-FGD).
std::vector<std::string> FgdStudyPolicies();

}  // namespace gpumux::policy
