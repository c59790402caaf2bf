// The policies' knobs as command-line options (internal to the cli module): every knob of every
// registered policy (policy::Knob) becomes --<name> with its range and help, so that a command
// names no policy-specific flag of its own.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "gpumux/policy/registry.h"
#include "src/cli/options.h"

namespace gpumux::cli {

using KnobValues = std::map<std::string, double, std::less<>>;

// Whether only training-job policies declare knob `name`.
inline bool TrainingJobsKnob(std::string_view name) {
  bool any = false;
  for (const policy::PolicyEntry& e : policy::BuiltinPolicies().entries()) {
    if (e.FindKnob(name) == nullptr) continue;
    if (e.workload != policy::Workload::kTrainingJobs) return false;
    any = true;
  }
  return any;
}

// Adds --<knob> for every knob of the registry; a value given lands in `values[name]`. Its help
// group is `group`, or `training_jobs_group` (when not empty) for the knobs of training-job
// policies only.
inline void AddPolicyKnobs(CLI::App& cmd, KnobValues& values, const std::string& group,
                           const std::string& training_jobs_group = "") {
  for (const policy::Knob* k : policy::BuiltinPolicies().knobs()) {
    char def[32];
    std::snprintf(def, sizeof def, k->integer ? "%.0f" : "%g", k->default_value);
    CLI::Option* opt = cmd.add_option_function<double>(
        "--" + k->name, [&values, name = k->name](double v) { values[name] = v; },
        k->help + " [default: " + def + "]");
    // The range is checked with the values from a settings file (CheckPolicyKnobs), so that
    // both say the same; here only what is not a number at all is refused.
    opt->check(k->integer ? AnyInteger<std::int64_t>()
                          : NumberIn(-std::numeric_limits<double>::max(),
                                     std::numeric_limits<double>::max()));
    opt->group(!training_jobs_group.empty() && TrainingJobsKnob(k->name) ? training_jobs_group
                                                                         : group);
  }
}

// Every knob in `values` must be in its range and belong to one of `policies`; the error names
// the knob and the policies it belongs to.
inline std::optional<std::string> CheckPolicyKnobs(const KnobValues& values,
                                                   const std::vector<std::string>& policies) {
  const policy::Registry& registry = policy::BuiltinPolicies();
  for (const auto& [name, value] : values) {
    const policy::Knob* knob = nullptr;
    for (const policy::Knob* k : registry.knobs()) {
      if (k->name == name) knob = k;
    }
    if (knob == nullptr) return "unknown policy setting '" + name + "'";
    if (auto bad = knob->Check(value)) return bad;
    bool applies = false;
    for (const std::string& p : policies) {
      const policy::PolicyEntry* e = registry.Find(p);
      applies = applies || (e != nullptr && e->FindKnob(name) != nullptr);
    }
    if (!applies) {
      std::string given;
      for (const std::string& p : policies) given += (given.empty() ? "" : ",") + p;
      return "--" + name + " does not apply with --policy " + given + ": it is a setting of " +
             registry.PoliciesWithKnob(name);
    }
  }
  return std::nullopt;
}

}  // namespace gpumux::cli
