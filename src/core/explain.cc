#include "gpumux/core/explain.h"

#include <algorithm>
#include <limits>

namespace gpumux::core {
namespace {

std::string Gpus(int n) { return std::to_string(n) + (n == 1 ? " GPU" : " GPUs"); }

// "memory limits", "compute limits", "memory and compute limits".
std::string Limits(Enforcement bits) {
  const bool memory = (bits & kEnforcesMemory) != 0, compute = (bits & kEnforcesCompute) != 0;
  return std::string(memory ? "memory" : "") + (memory && compute ? " and " : "") +
         (compute ? "compute" : "") + " limits";
}

std::string What(const Request& r) {
  if (r.sharing == GpuSharing::kExclusive) {
    std::string s = Gpus(r.gpu_count) + (r.gpu_count == 1 ? " to itself" : " to themselves");
    if (r.gpu_mib > 0) s += " with at least " + std::to_string(r.gpu_mib) + " MiB";
    return s;
  }
  std::string s = Gpus(r.gpu_count) + " with ";
  if (r.gpu_mib > 0) s += std::to_string(r.gpu_mib) + " MiB and ";
  s += std::to_string(r.gpu_milli) + " milli-GPU free";
  return s;
}

// The GPU that comes closest to taking `r` among those that could hold it (an acceptable
// model, healthy, memory_mib >= r.gpu_mib) but do not admit it now; -1 when there is none.
// Closeness: for an exclusive request, the fewest tenants; for a shared one, the smallest sum
// of the memory and compute shortfalls, each as a fraction of what is asked (a GPU 2048 MiB
// short of 8192 MiB with compute to spare is 0.25 away). Ties go to the lowest index.
int ClosestRefusingGpu(const NodeView& node, const Request& r, ModelMask models) {
  int closest = -1;
  double closest_gap = std::numeric_limits<double>::infinity();
  for (int i = 0; i < node.gpu_count(); ++i) {
    const auto g = static_cast<std::size_t>(i);
    if (((models >> node.gpu_model[g]) & 1U) == 0) continue;
    if (node.spec->gpus[g].health != GpuHealth::kHealthy) continue;
    if (r.sharing == GpuSharing::kShared &&
        (node.spec->gpus[g].enforces & r.required_enforcement) != r.required_enforcement) {
      continue;
    }
    if (node.spec->gpus[g].memory_mib < r.gpu_mib || GpuAdmits(node, i, r, models)) continue;
    double gap;
    if (r.sharing == GpuSharing::kExclusive) {
      gap = static_cast<double>(node.gpu_tenants[g]);
    } else {
      const double mib_short =
          r.gpu_mib > 0 ? static_cast<double>(std::max<MiB>(0, r.gpu_mib - node.gpu_free_mib[g])) /
                              static_cast<double>(r.gpu_mib)
                        : 0.0;
      const double milli_short =
          static_cast<double>(std::max<MilliGpu>(0, r.gpu_milli - node.gpu_free_milli[g])) /
          static_cast<double>(r.gpu_milli);
      gap = mib_short + milli_short;
    }
    if (gap < closest_gap) {
      closest_gap = gap;
      closest = i;
    }
  }
  return closest;
}

// How GPU `gpu` stands against `r`: " (2 tenants)" for an exclusive request, else what it has
// free and what it lacks: " (6144 MiB, 1000 milli free): 2048 MiB short".
std::string DescribeClosest(const NodeView& node, const Request& r, int gpu) {
  const auto g = static_cast<std::size_t>(gpu);
  if (r.sharing == GpuSharing::kExclusive) {
    return " (" + std::to_string(node.gpu_tenants[g]) + " tenant" +
           (node.gpu_tenants[g] == 1 ? "" : "s") + ")";
  }
  std::string out = " (" + std::to_string(node.gpu_free_mib[g]) + " MiB, " +
                    std::to_string(node.gpu_free_milli[g]) + " milli free)";
  std::string shortfall;
  if (node.gpu_free_mib[g] < r.gpu_mib) {
    shortfall = std::to_string(r.gpu_mib - node.gpu_free_mib[g]) + " MiB";
  }
  if (node.gpu_free_milli[g] < r.gpu_milli) {
    if (!shortfall.empty()) shortfall += " and ";
    shortfall += std::to_string(r.gpu_milli - node.gpu_free_milli[g]) + " milli-GPU";
  }
  if (node.gpu_free_milli[g] == 0 && node.gpu_tenants[g] > 0 && shortfall.empty()) {
    shortfall = "held exclusively";
  }
  if (!shortfall.empty()) out += ": " + shortfall + " short";
  return out;
}

}  // namespace

Misfit ExplainMisfit(const NodeView& node, const Request& r, ModelMask models) {
  if (node.cpu_free < r.cpu_milli) {
    return {true, "needs " + std::to_string(r.cpu_milli) + " milli-CPU, " +
                      std::to_string(node.cpu_free) + " free"};
  }
  if (node.memory_free < r.memory_mib) {
    return {true, "needs " + std::to_string(r.memory_mib) + " MiB of memory, " +
                      std::to_string(node.memory_free) + " free"};
  }
  if (node.pods_free < 1) return {true, "no free pod slot"};
  if (!r.wants_gpu()) return {true, "fits"};
  const int total = node.gpu_count();
  if (total == 0) return {false, "node has no gpumux GPUs"};
  if (total < r.gpu_count) {
    return {false, "needs " + Gpus(r.gpu_count) + ", node has " + std::to_string(total)};
  }
  int of_model = 0, healthy = 0, enforcing = 0, big_enough = 0, admitting = 0;
  const Enforcement required =
      r.sharing == GpuSharing::kShared ? r.required_enforcement : kEnforcesNothing;
  MiB largest = 0;
  for (int i = 0; i < total; ++i) {
    const auto g = static_cast<std::size_t>(i);
    if (((models >> node.gpu_model[g]) & 1U) == 0) continue;
    ++of_model;
    if (node.spec->gpus[g].health != GpuHealth::kHealthy) continue;
    ++healthy;
    if ((node.spec->gpus[g].enforces & required) != required) continue;
    ++enforcing;
    largest = std::max(largest, node.spec->gpus[g].memory_mib);
    if (node.spec->gpus[g].memory_mib >= r.gpu_mib) ++big_enough;
    if (GpuAdmits(node, i, r, models)) ++admitting;
  }
  if (of_model < r.gpu_count) {
    std::string wanted;
    for (const std::string& m : r.gpu_models) wanted += (wanted.empty() ? "" : ", ") + m;
    return {false, "needs " + Gpus(r.gpu_count) + " of model " + wanted + ", node has " +
                       std::to_string(of_model) + " (its GPUs are " + node.spec->gpus[0].model +
                       ")"};
  }
  if (healthy < r.gpu_count) {
    return {false, "needs " + Gpus(r.gpu_count) + ", " + std::to_string(healthy) + " of " +
                       std::to_string(of_model) + " are healthy"};
  }
  if (enforcing < r.gpu_count) {
    return {false, "needs " + Gpus(r.gpu_count) +
                       (r.gpu_count == 1 ? " that enforces " : " that enforce ") +
                       Limits(required) + ", " + std::to_string(enforcing) + " of " +
                       std::to_string(healthy) + " here " + (enforcing == 1 ? "does" : "do")};
  }
  if (big_enough < r.gpu_count) {
    return {false, "needs " + std::to_string(r.gpu_mib) + " MiB on one GPU, the largest here has " +
                       std::to_string(largest) + " MiB"};
  }
  // Resources are in use: name the closest GPU that does not admit the request.
  const int closest = ClosestRefusingGpu(node, r, models);
  std::string reason = "needs " + What(r);
  if (r.gpu_count > 1 || admitting > 0) {
    reason += "; " + std::to_string(admitting) + " of " + std::to_string(total) + " can take it";
  }
  if (closest >= 0) {
    reason += "; closest is GPU " + std::to_string(closest) + DescribeClosest(node, r, closest);
  }
  return {true, reason};
}

}  // namespace gpumux::core
