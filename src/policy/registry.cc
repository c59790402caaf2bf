#include "gpumux/policy/registry.h"

#include "gpumux/policy/best_fit.h"
#include "gpumux/policy/binpack_spread.h"
#include "gpumux/policy/dot_product.h"
#include "gpumux/policy/exclusive.h"
#include "gpumux/policy/fgd.h"
#include "gpumux/policy/fgd_sat.h"
#include "gpumux/policy/first_fit.h"
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

Registry MakeBuiltins() {
  Registry r;
  r.Add("random", "a uniformly random feasible node, random GPU (FGD study: Random)",
        Simple<RandomPolicy>());
  r.Add("dotprod", "smallest dot product of free and requested CPU/GPU (FGD study: DotProd)",
        Simple<DotProductPolicy>());
  r.Add("gpu-clustering", "keep same-shaped GPU requests together (FGD study: GpuClustering)",
        Simple<GpuClusteringPolicy>());
  r.Add("gpu-packing", "fill partly used GPUs, then used nodes (FGD study: GpuPacking)",
        Simple<GpuPackingPolicy>());
  r.Add("best-fit", "least leftover CPU and GPU (FGD study: BestFit)", Simple<BestFitPolicy>());
  r.Add("fgd", "fragmentation gradient descent (FGD study: FGD)",
        [](const PolicyContext& c) { return std::make_unique<FgdPolicy>(c.typical_pods); });
  r.Add("exclusive", "whole GPUs only, never shared (stock Kubernetes nvidia.com/gpu)",
        Simple<ExclusivePolicy>());
  r.Add("binpack", "fill the most loaded node and GPU first (GPU compute and memory)",
        Simple<BinpackPolicy>());
  r.Add("spread", "the least loaded node and GPU first (GPU compute and memory)",
        Simple<SpreadPolicy>());
  r.Add("fgd-sat",
        "FGD plus the GPU compute that repeated typical pods would strand (CPU included)",
        [](const PolicyContext& c) { return std::make_unique<FgdSatPolicy>(c.typical_pods); });
  r.Add("fgd-sat-reserve",
        "fgd-sat, and while idle GPUs are scarce (under a tenth) they are kept for whole-GPU "
        "pods: a share that would strand a remainder on one waits (admission control)",
        [](const PolicyContext& c) {
          return std::make_unique<FgdSatPolicy>(c.typical_pods, c.reserve_idle_fraction);
        });
  r.Add("first-fit", "AntMan-like packing: the first GPU with the memory, FIFO, no tuning",
        WithContext<FirstFitPolicy>());
  r.Add("iadeep",
        "IADeep (SC'23): idle GPU first, else least predicted interference; "
        "tunes the newcomer",
        WithContext<IadeepPolicy>());
  r.Add("gpumux",
        "gpumux: least added completion time of all jobs involved, waits rather "
        "than pair badly, shortest job first, joint tuning",
        WithContext<InterferenceAwarePolicy>());
  return r;
}

}  // namespace

void Registry::Add(std::string name, std::string summary, PolicyFactory make) {
  entries_.push_back({std::move(name), std::move(summary), std::move(make)});
}

const PolicyEntry* Registry::Find(std::string_view name) const {
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

core::Result<std::unique_ptr<Policy>> Registry::Make(std::string_view name,
                                                     const PolicyContext& context) const {
  if (const PolicyEntry* e = Find(name)) return e->make(context);
  std::string known;
  for (const auto& e : entries_) known += (known.empty() ? "" : ", ") + e.name;
  return core::MakeError(core::ErrorCode::kNotFound,
                         "unknown policy '" + std::string(name) + "' (known: " + known + ")");
}

const Registry& BuiltinPolicies() {
  static const Registry registry = MakeBuiltins();
  return registry;
}

std::vector<std::string> FgdStudyPolicies() {
  return {"random", "dotprod", "gpu-clustering", "gpu-packing", "best-fit", "fgd"};
}

}  // namespace gpumux::policy
