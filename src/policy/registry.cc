#include "gpumux/policy/registry.h"

#include <cmath>
#include <cstdio>

#include "gpumux/core/check.h"
#include "gpumux/policy/best_fit.h"
#include "gpumux/policy/binpack_spread.h"
#include "gpumux/policy/dot_product.h"
#include "gpumux/policy/exclusive.h"
#include "gpumux/policy/fgd.h"
#include "gpumux/policy/fgd_sat.h"
#include "gpumux/policy/first_fit.h"
#include "gpumux/policy/first_node.h"
#include "gpumux/policy/gpu_clustering.h"
#include "gpumux/policy/gpu_packing.h"
#include "gpumux/policy/iadeep.h"
#include "gpumux/policy/interference_aware.h"
#include "gpumux/policy/random_policy.h"

namespace gpumux::policy {
namespace {

template <typename P>
PolicyFactory Simple() {
  return [](const PolicyContext&) { return std::make_unique<P>(); };
}

template <typename P>
PolicyFactory WithContext() {
  return [](const PolicyContext& c) { return std::make_unique<P>(c); };
}

Knob BeyondPairs() {
  return {"beyond-pairs",
          "beyondPairs",
          "least-delay: its estimate of a set of three or more jobs nobody measured, between the "
          "slowdown beside the worst companion alone (0) and the busy-time predictor (1); 0.5 is "
          "the minimax-regret midpoint",
          0,
          1,
          /*min_exclusive=*/false,
          /*integer=*/false,
          InterferenceAwarePolicy::kDefaultBeyondPairs};
}

Knob SaturatedBusy() {
  return {"saturated-busy",
          "saturatedBusy",
          "least-delay: a GPU whose jobs' predicted busy fractions sum to this or more takes no "
          "one else (16 = no such guard)",
          0,
          16,
          /*min_exclusive=*/true,
          /*integer=*/false,
          InterferenceAwarePolicy::kDefaultSaturatedBusy};
}

Knob MinGain() {
  return {"min-gain",
          "minGain",
          "least-delay: a GPU takes another job only if its jobs then do at least this much more "
          "work per second, in solo-GPU equivalents (0 = no such guard)",
          0,
          1,
          /*min_exclusive=*/false,
          /*integer=*/false,
          InterferenceAwarePolicy::kDefaultMinGain};
}

Knob Calibrate() {
  return {"calibrate",
          "calibrate",
          "least-delay: 1 = correct its predictions by the slowdowns running jobs report (per set "
          "size; measured to cost p95, see docs/SIMULATOR.md), 0 = predict from the profile "
          "alone",
          0,
          1,
          /*min_exclusive=*/false,
          /*integer=*/true,
          InterferenceAwarePolicy::kDefaultCalibrate};
}

Knob HedgeLearn() {
  return {"hedge-learn",
          "hedgeLearn",
          "least-delay: move its beyond-pairs estimate by where the sets it has seen really fell "
          "in their ranges (the step times running jobs report; beyond-pairs is then the prior): "
          "1 = only toward the predictor (more cautious), 2 = both ways, 0 = keep it fixed",
          0,
          2,
          /*min_exclusive=*/false,
          /*integer=*/true,
          InterferenceAwarePolicy::kDefaultHedgeLearn};
}

Knob ReserveIdleFraction() {
  return {"reserve-idle-fraction",
          "reserveIdleFraction",
          "fgd-sat-reserve: keep idle GPUs for whole-GPU pods while fewer than this fraction of "
          "all GPUs are idle",
          0,
          1,
          /*min_exclusive=*/true,
          /*integer=*/false,
          FgdSatPolicy::kDefaultReserveIdleFraction};
}

Knob ReserveMaxWaitSeconds() {
  return {"reserve-max-wait-seconds",
          "reserveMaxWaitSeconds",
          "fgd-sat-reserve: a pod waits for a reservation at most this long (0: no limit); "
          "older pods are placed wherever they fit",
          0,
          86'400,
          /*min_exclusive=*/false,
          /*integer=*/true,
          FgdSatPolicy::kDefaultMaxWaitSeconds};
}

// long function: the registry itself: one entry per policy
Registry MakeBuiltins() {
  Registry r;
  // The FGD study's six, in its order (solid lines).
  r.Add({"random",
         "a uniformly random feasible node, random GPU (FGD study: Random)",
         "a feasible node and GPU drawn at random.",
         Workload::kPods,
         Family::kFgdStudy,
         "#56B4E9",
         false,
         false,
         {},
         Simple<RandomPolicy>()});
  r.Add({"dotprod",
         "smallest dot product of free and requested CPU/GPU (FGD study: DotProd)",
         "the node whose free CPU and GPU align least with the request (Tetris' dot product).",
         Workload::kPods,
         Family::kFgdStudy,
         "#E69F00",
         false,
         false,
         {},
         Simple<DotProductPolicy>()});
  r.Add({"gpu-clustering",
         "keep same-shaped GPU requests together (FGD study: GpuClustering)",
         "nodes already holding requests of the same GPU shape first.",
         Workload::kPods,
         Family::kFgdStudy,
         "#CC79A7",
         false,
         false,
         {},
         Simple<GpuClusteringPolicy>()});
  r.Add({"gpu-packing",
         "fill partly used GPUs, then used nodes (FGD study: GpuPacking)",
         "partly used GPUs first, then used nodes, then idle ones.",
         Workload::kPods,
         Family::kFgdStudy,
         "#009E73",
         false,
         false,
         {},
         Simple<GpuPackingPolicy>()});
  r.Add({"best-fit",
         "least leftover CPU and GPU (FGD study: BestFit)",
         "the node left with the least free CPU and GPU after the placement.",
         Workload::kPods,
         Family::kFgdStudy,
         "#0072B2",
         false,
         false,
         {},
         Simple<BestFitPolicy>()});
  r.Add({"fgd",
         "fragmentation gradient descent (FGD study: FGD)",
         "the placement that grows the cluster's expected GPU fragmentation least, measured "
         "against the workload's typical pods (Weng et al., ATC '23).",
         Workload::kPods,
         Family::kFgdStudy,
         "#D55E00",
         true,
         false,
         {},
         [](const PolicyContext& c) { return std::make_unique<FgdPolicy>(c.typical_pods); }});
  // Other packing policies (dashed).
  r.Add({"exclusive",
         "whole GPUs only, never shared (stock Kubernetes nvidia.com/gpu)",
         "one job per GPU, first come first served: what stock Kubernetes does with whole-GPU "
         "requests (nvidia.com/gpu). The baseline without sharing.",
         Workload::kBoth,
         Family::kPacking,
         "#000000",
         false,
         false,
         {},
         Simple<ExclusivePolicy>()});
  r.Add({"binpack",
         "fill the most loaded node and GPU first (GPU compute and memory)",
         "the most loaded node and GPU that fit (GPU compute and memory).",
         Workload::kPods,
         Family::kPacking,
         "#882255",
         false,
         false,
         {},
         Simple<BinpackPolicy>()});
  r.Add({"spread",
         "the least loaded node and GPU first (GPU compute and memory)",
         "the least loaded node and GPU (GPU compute and memory).",
         Workload::kPods,
         Family::kPacking,
         "#332288",
         false,
         false,
         {},
         Simple<SpreadPolicy>()});
  r.Add({"fgd-sat",
         "FGD plus the GPU compute that repeated typical pods would strand (CPU included)",
         "FGD, plus the GPU compute that repeated typical pods would leave stranded on the node "
         "once it saturates (its CPU included).",
         Workload::kPods,
         Family::kPacking,
         "#999933",
         true,
         false,
         {},
         [](const PolicyContext& c) { return std::make_unique<FgdSatPolicy>(c.typical_pods); }});
  r.Add({"fgd-sat-reserve",
         "fgd-sat, and while idle GPUs are scarce (under a tenth) they are kept for whole-GPU "
         "pods: a share that would strand a remainder on one waits (admission control)",
         "fgd-sat; while idle GPUs are scarce they are kept for whole-GPU pods, and a share that "
         "would strand a remainder on one waits (at most its wait limit).",
         Workload::kPods,
         Family::kPacking,
         "#EE3377",
         true,
         false,
         {ReserveIdleFraction(), ReserveMaxWaitSeconds()},
         [](const PolicyContext& c) {
           return std::make_unique<FgdSatPolicy>(
               c.typical_pods, c.knob("reserve-idle-fraction"),
               static_cast<std::int64_t>(c.knob("reserve-max-wait-seconds")));
         }});
  r.Add({"fgd-sat-keep",
         "fgd-sat, keeping the nodes with the most CPU for their GPU count whole for the pods "
         "that need all their GPUs",
         "fgd-sat; a node whose GPUs are all idle and whose CPU is above the 90th percentile of "
         "the nodes with as many GPUs is taken by a smaller pod only when nothing else fits.",
         Workload::kPods,
         Family::kPacking,
         "#777777",
         true,
         false,
         {},
         [](const PolicyContext& c) {
           return std::make_unique<FgdSatPolicy>(c.typical_pods, 0, 0, /*keep_rare_nodes=*/true);
         },
         /*compared=*/false});
  r.Add({"fgd-sat-pair",
         "fgd-sat-keep, and a share goes to the GPU where it strands the least of what the "
         "typical shares could still fill (priced by the cutting-stock LP's duals)",
         "fgd-sat-keep; a share goes to the GPU where it loses the least of what the typical "
         "shares could still fill there (their prices from the cutting-stock LP, CPU included), "
         "FGD's score deciding between equal losses.",
         Workload::kPods,
         Family::kPacking,
         "#33A02C",
         true,
         false,
         {},
         [](const PolicyContext& c) {
           return std::make_unique<FgdSatPolicy>(c.typical_pods, 0, 0, /*keep_rare_nodes=*/true,
                                                 /*pair_shares=*/true);
         }});
  r.Add({"first-node",
         "First-Fit: the first node in rank order that fits, lowest-indexed GPUs",
         "the first node that fits, in rank order (First-Fit): the floor of packing policies.",
         Workload::kPods,
         Family::kPacking,
         "#44AA99",
         false,
         false,
         {},
         Simple<FirstNodePolicy>(),
         /*compared=*/false});
  // Co-location of training jobs (dash-dot).
  r.Add({"first-fit",
         "AntMan-like packing: the first GPU with the memory, FIFO, no tuning",
         "AntMan-like packing: a job goes to the first GPU with enough free memory, up to the "
         "co-location limit, without looking at interference; no batch-size tuning.",
         Workload::kTrainingJobs,
         Family::kColocation,
         "#009E73",
         false,
         true,
         {},
         WithContext<FirstFitPolicy>()});
  r.Add({"iadeep",
         "IADeep (SC'23): idle GPU first, else least predicted interference; tunes the newcomer",
         "a re-implementation of IADeep (SC'23): an idle GPU first, else the GPU with the least "
         "predicted interference; tunes the newcomer's batch size.",
         Workload::kTrainingJobs,
         Family::kColocation,
         "#0072B2",
         false,
         true,
         {},
         WithContext<IadeepPolicy>()});
  r.Add({"least-delay",
         "gpumux's: least added completion time of all jobs involved, waits rather than pair "
         "badly, shortest job first, joint tuning (was named \"gpumux\")",
         "gpumux's own policy: the GPU that adds the least completion time over all the jobs "
         "involved; a job waits rather than pair badly; shortest job first; tunes the batch "
         "sizes of all the jobs on the GPU together.",
         Workload::kTrainingJobs,
         Family::kColocation,
         "#D55E00",
         false,
         true,
         {BeyondPairs(), HedgeLearn(), SaturatedBusy(), MinGain(), Calibrate()},
         WithContext<InterferenceAwarePolicy>()});
  return r;
}

std::string FormatBound(double v, bool integer) {
  char buf[32];
  std::snprintf(buf, sizeof buf, integer ? "%.0f" : "%g", v);
  return buf;
}

}  // namespace

std::string_view WorkloadName(Workload workload) {
  switch (workload) {
    case Workload::kPods:
      return "pods";
    case Workload::kTrainingJobs:
      return "training jobs";
    case Workload::kBoth:
      return "both";
  }
  return "unknown";
}

std::optional<std::string> Knob::Check(double value) const {
  const bool in_range =
      std::isfinite(value) && (min_exclusive ? value > min : value >= min) && value <= max;
  if (in_range && (!integer || value == std::floor(value))) return std::nullopt;
  if (in_range) return "--" + name + " must be a whole number";
  if (min_exclusive) {
    return "--" + name + " must be in (" + FormatBound(min, integer) + ", " +
           FormatBound(max, integer) + "]";
  }
  return "--" + name + " must be in " + FormatBound(min, integer) + ".." +
         FormatBound(max, integer);
}

double PolicyContext::knob(std::string_view name) const {
  const auto it = knobs.find(name);
  GPUMUX_CHECK(it != knobs.end(), "a policy asked for a knob it does not declare");
  return it->second;
}

const Knob* PolicyEntry::FindKnob(std::string_view knob) const {
  for (const Knob& k : knobs) {
    if (k.name == knob) return &k;
  }
  return nullptr;
}

void Registry::Add(PolicyEntry entry) { entries_.push_back(std::move(entry)); }

std::string_view Registry::Canonical(std::string_view name) {
  // The training-job policy was called "gpumux" until its name collided with the product's in
  // every report ("gpumux vs iadeep"); the old name stays accepted.
  if (name == "gpumux") return "least-delay";
  return name;
}

const PolicyEntry* Registry::Find(std::string_view name) const {
  name = Canonical(name);
  for (const auto& e : entries_) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

std::vector<std::string> Registry::names() const {
  std::vector<std::string> out;
  for (const auto& e : entries_) out.push_back(e.name);
  return out;
}

std::vector<std::string> Registry::names(Workload workload) const {
  std::vector<std::string> out;
  for (const auto& e : entries_) {
    if (e.For(workload)) out.push_back(e.name);
  }
  return out;
}

std::vector<std::string> Registry::compared(Workload workload) const {
  std::vector<std::string> out;
  for (const auto& e : entries_) {
    if (e.For(workload) && e.compared) out.push_back(e.name);
  }
  return out;
}

std::vector<std::string> Registry::names(Family family) const {
  std::vector<std::string> out;
  for (const auto& e : entries_) {
    if (e.family == family) out.push_back(e.name);
  }
  return out;
}

std::vector<const Knob*> Registry::knobs() const {
  std::vector<const Knob*> out;
  for (const auto& e : entries_) {
    for (const Knob& k : e.knobs) {
      bool seen = false;
      for (const Knob* o : out) seen = seen || o->name == k.name;
      if (!seen) out.push_back(&k);
    }
  }
  return out;
}

std::string Registry::PoliciesWithKnob(std::string_view name) const {
  std::vector<std::string> with;
  for (const auto& e : entries_) {
    if (e.FindKnob(name) != nullptr) with.push_back(e.name);
  }
  std::string out;
  for (std::size_t i = 0; i < with.size(); ++i) {
    out += (i == 0 ? "" : (i + 1 == with.size() ? " and " : ", ")) + with[i];
  }
  return out;
}

std::string Registry::KnownNames() const {
  std::string known;
  for (const auto& e : entries_) known += (known.empty() ? "" : ", ") + e.name;
  return known;
}

core::Result<std::unique_ptr<Policy>> Registry::Make(std::string_view name,
                                                     const PolicyContext& context) const {
  const PolicyEntry* e = Find(name);
  if (e == nullptr) {
    return core::MakeError(core::ErrorCode::kNotFound, "unknown policy '" + std::string(name) +
                                                           "' (known: " + KnownNames() + ")");
  }
  if (e->knobs.empty()) return e->make(context);
  PolicyContext with_defaults = context;
  for (const Knob& k : e->knobs) with_defaults.knobs.try_emplace(k.name, k.default_value);
  return e->make(with_defaults);
}

const Registry& BuiltinPolicies() {
  static const Registry registry = MakeBuiltins();
  return registry;
}

std::vector<std::string> FgdStudyPolicies() { return BuiltinPolicies().names(Family::kFgdStudy); }

}  // namespace gpumux::policy
