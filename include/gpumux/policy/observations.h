// Learned interference observations: what node coordinators measure when jobs share a GPU
// (docs/COORDINATOR.md, "Observation"), and how they join a workload profile.
//
// An observation says: these classes, at these batch sizes, sharing one GPU, ran `slowdown`
// times slower each than alone (co-located step time / solo step time at the same batch),
// averaged over `count` measurement windows on one node. The node coordinator keeps one per
// (set, batches, node) in the store (`/gpumux/observations/<set>/<batches>/<node>`) and folds
// each new window in with MergeObservations; the extender (--observations-from) and the
// simulator (--observations) add them to a profile's measured sets with WithObservations.
//
// Canonical order: members sorted by class name, then batch size, slowdowns permuted with
// them (what the coordinator writes). Two observations describe the same co-location when
// their canonical classes and batches are equal.
//
// Thread safety: pure functions over values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gpumux/core/result.h"
#include "gpumux/policy/interference.h"
#include "gpumux/policy/workload_profile.h"

namespace gpumux::policy {

// The most windows one observation may claim (a window a second for 100 years is 3e9).
inline constexpr std::int64_t kMaxObservationCount = std::int64_t{1} << 50;
// The most observations one file or store read may hold.
inline constexpr std::size_t kMaxObservations = 1'000'000;
// n jobs time-sliced on one GPU each get at least about 1/n of it, so each runs at most about n
// times slower than alone; memory and cache contention add to that, hence a factor of 2 of
// room. A member slower than kPlausibleSlowdownPerJob x n is taken as a wrong solo reference (a
// loaded host measured against another machine's profile) or a forgery, and never learned.
inline constexpr double kPlausibleSlowdownPerJob = 2.0;
// A window whose solo reference was the profile's step time ("solo": "profile") compares a step
// time on one host with a solo time measured on another machine: in a mean with windows whose
// solo times were measured on the node, it weighs a quarter of one of those.
inline constexpr double kProfileRelativeWeight = 0.25;

struct Observation {
  std::vector<std::string> classes;
  std::vector<int> batches;      // one per class
  std::vector<double> slowdown;  // one per class, >= 1
  std::int64_t count = 0;        // measurement windows averaged (>= 1)
  std::string node;              // where it was measured ("" = unknown)
  std::string gpu_model;         // the GPU it ran on ("" = unknown)
  // "measured": every member's solo reference was its own solo measurement; "profile": at
  // least one came from the profile's solo step time. "" = not said.
  std::string solo;
  std::string updated;  // ISO 8601 UTC of the last window ("" = not said)
};

// Sorts the members by (class, batch), permuting the slowdowns. O(n log n).
Observation Canonical(Observation o);

// Whether `o` is well formed: 2..kMaxMeasuredMembers members, as many batches and slowdowns
// as classes, batches 1..kMaxProfileBatch, slowdowns in [1, kMaxMeasuredSlowdown], count
// 1..kMaxObservationCount. The error names the field and the value.
core::Result<void> CheckObservation(const Observation& o);

// Whether every member's slowdown is at most kPlausibleSlowdownPerJob x the members; the error
// names the member and the bound ("slowdown 1000 of lstm@32 is above 4 for 2 jobs ...").
core::Result<void> CheckPlausible(const Observation& o);

// The running mean of two observations of the same co-location (canonical classes and
// batches equal; else kInvalidArgument): slowdown = count-weighted mean, count = the sum,
// node and gpu_model of `a` (else of `b` when `a`'s are empty), solo "profile" if either is,
// updated = the later. The result is canonical. Both must pass CheckObservation.
// Worked example: a = {1.2, 1.4} x 3 windows, b = {1.6, 1.0} x 1 window:
// {(3*1.2 + 1.6)/4, (3*1.4 + 1.0)/4} = {1.3, 1.3} x 4 windows.
core::Result<Observation> MergeObservations(const Observation& a, const Observation& b);

// JSON (docs/COORDINATOR.md): {"classes": [...], "batches": [...], "slowdown": [...],
// "count": N, "node": "...", "gpu_model": "...", "solo": "measured", "updated": "..."}.
// classes, batches, slowdown and count are required; the strings may be absent (empty).
// Parsing checks the JSON types and that the three arrays have one entry per class; ranges
// are left to CheckObservation (WithObservations skips and counts what fails it). Errors name
// `source` (a file, a store key), the observation's index in an array, and the field.
core::Result<Observation> ParseObservation(std::string_view json_text, const std::string& source);
// A JSON array of observations (at most kMaxObservations).
core::Result<std::vector<Observation>> ParseObservations(std::string_view json_text,
                                                         const std::string& source);
// One JSON object, keys in the order above; empty strings are left out. Round-trips through
// ParseObservation (doubles are written with 17 significant digits).
std::string SerializeObservation(const Observation& o);
// A JSON array, one observation per line.
std::string SerializeObservations(std::span<const Observation> observations);

struct ObservationSummary {
  std::size_t read = 0;              // observations given
  std::size_t used = 0;              // observations that went into the profile
  std::size_t unknown_class = 0;     // skipped: a class the profile does not have
  std::size_t out_of_range = 0;      // skipped: CheckObservation failed
  std::size_t over_limit = 0;        // skipped: kMaxMeasuredSets reached (fewest windows first)
  std::size_t implausible = 0;       // skipped: CheckPlausible failed
  std::size_t profile_relative = 0;  // skipped: "solo": "profile" with measured_only
  std::size_t other_gpu = 0;         // skipped: measured on another GPU model
  std::size_t too_few = 0;           // left out: their set has fewer windows than min_count
  std::size_t sets_replaced = 0;     // profile sets replaced by an observed set
  std::size_t sets_added = 0;        // observed sets added
  std::int64_t windows = 0;          // windows behind the observed sets in the result
  std::size_t nodes = 0;             // distinct nodes behind them
  std::vector<std::string> skipped;  // why, for the first kMaxSkippedReasons skipped ones
  std::size_t observed_sets() const { return sets_replaced + sets_added; }
  // "57 observations: 40 observed sets (3 replace profile sets), 1234 windows on 4 nodes;
  // skipped 2 (1 unknown class, 1 out of range)"
  std::string Describe() const;
};
inline constexpr std::size_t kMaxSkippedReasons = 8;

struct ObservationOptions {
  // Observed sets with fewer windows (after combining nodes) are left out as too few to trust
  // (counted in too_few). 1 = use everything.
  std::int64_t min_count = 1;
  // Leave out the observations whose solo reference was the profile's ("solo": "profile";
  // counted in profile_relative); by default they are used at kProfileRelativeWeight. Those
  // that do not say ("") count as measured.
  bool measured_only = false;
  // When not empty, observations measured on another GPU model are left out (other_gpu); those
  // that do not name a model are used.
  std::string gpu_model;
};

// The profile with the observations added to its measured sets. Observations of the same
// canonical (classes, batches) from several nodes are combined by count-weighted mean (after
// leaving out the implausible ones, and the profile-relative and other-GPU ones per `options`;
// a profile-relative one weighs kProfileRelativeWeight of its windows); a
// combined set replaces a profile set with the same classes and batches (compared in
// canonical order), else it is added after the profile's sets, the sets with the most windows
// first (ties: canonical classes, then batches), so that rule 2 of ProfileInterference (the
// first set with the same classes, scaled to the batch sizes) prefers the best-measured one.
// Each observed set's source reads "observed: N windows on M nodes". Observations naming a
// class the profile lacks, or failing CheckObservation, are skipped and counted in `summary`
// (may be null). The result passes WorkloadProfile::Validate when `profile` does.
// Cost: O(k log k + k n) for k observations and n profile sets.
WorkloadProfile WithObservations(const WorkloadProfile& profile,
                                 std::span<const Observation> observations,
                                 ObservationSummary* summary = nullptr,
                                 const ObservationOptions& options = {});

// A belief that learns within a run: a profile plus the observations made so far, joined exactly
// as the extender joins a store's (WithObservations with the same options), so that what a
// simulated policy learns from its own co-locations and what a real one learns from the node
// coordinators go through the same code. Observe folds a window in (MergeObservations per
// canonical key); Refresh rebuilds the model when something new came (O(k log k + k n) for k
// observed keys); Version moves with every rebuild, so that callers remembering answers drop
// them. Observations the profile cannot use (unknown class, implausible) are skipped as
// WithObservations skips them.
// Thread safety: Observe and Refresh need exclusive access; Predict is const.
class LearningInterference final : public InterferenceModel {
 public:
  // `profile` must outlive the model.
  explicit LearningInterference(const WorkloadProfile& profile, ObservationOptions options = {});
  // `o` must pass CheckObservation.
  void Observe(const Observation& o);
  void Refresh();
  void Predict(std::span<const Member> members, std::span<double> slowdown) const override {
    model_->Predict(members, slowdown);
  }
  bool Measured(std::span<const Member> members) const override {
    return model_->Measured(members);
  }
  std::uint64_t Version() const override { return version_; }
  // The profile with what was learned (as of the last Refresh).
  const WorkloadProfile& profile() const { return *learned_; }
  // How many distinct co-locations (classes and batch sizes) were observed.
  std::size_t observed() const { return seen_.size(); }

 private:
  const WorkloadProfile* base_;
  ObservationOptions options_;
  std::map<std::pair<std::vector<std::string>, std::vector<int>>, Observation> seen_;
  std::unique_ptr<WorkloadProfile> learned_;  // a stable address for model_
  std::unique_ptr<ProfileInterference> model_;
  bool stale_ = false;
  std::uint64_t version_ = 0;
};

}  // namespace gpumux::policy
