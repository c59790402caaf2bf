// GPU fragmentation as the FGD study (Weng et al., USENIX ATC'23) defines it.
//
// The workload is summarised by "typical pods": the most common request shapes of the pod
// list, weighted by how often they occur. A node's fragmentation for one typical pod p is the
// free GPU compute that p could not use there:
//   * p asks no GPU, or the node's GPU model is not acceptable to p  -> all free milli-GPU R;
//   * p fits (at least k_p GPUs with free >= milli_p, and free CPU >= cpu_p)
//       -> the free milli on GPUs with free < milli_p (too small a remnant for p);
//   * otherwise (p's GPUs or CPU do not fit)                         -> R.
// F(n) = sum_p w_p * frag_p(n); the cluster's fragmentation is the sum over nodes.
//
// Worked example: a node with 8 CPU cores free and GPUs free = {1000, 300, 0}, R = 1300.
// Typical pods: a = (4 cores, 500 milli, 1 GPU, w 0.5), b = (16 cores, 1000 milli, 1 GPU,
// w 0.3), c = (2 cores, CPU-only, w 0.2).
//   frag_a = 300 (a fits on GPU 0; GPU 1's 300 is too small for a; GPU 2 has nothing)
//   frag_b = 1300 (b needs 16 cores, only 8 free)
//   frag_c = 1300 (CPU-only pods count every free GPU milli as a fragment)
//   F = 0.5*300 + 0.3*1300 + 0.2*1300 = 800.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "gpumux/core/cluster.h"
#include "gpumux/core/request.h"

namespace gpumux::policy {

struct TypicalPod {
  core::MilliCpu cpu_milli = 0;
  core::MilliGpu gpu_milli = 0;  // per GPU; 0 = CPU-only
  int gpu_count = 0;
  std::string models;                            // "|"-joined acceptable models, "" = any
  core::ModelMask model_mask = core::kAnyModel;  // resolved against a cluster
  std::int64_t count = 0;                        // pods of this shape in the workload
  double weight = 0;  // count / (pods covered by all typical pods), summing to 1
};

struct TypicalPodOptions {
  // Keep the smallest prefix of shapes covering at least this percentage of all pods.
  int popularity_threshold_pct = 95;
};

// Groups `pods` by (cpu, gpu milli, gpu count, model list), sorts the groups by count
// (descending; ties: larger cpu, larger milli, larger count, larger model string first) and
// keeps the smallest prefix whose pods reach the threshold percentage of all pods. Memory is not
// part of the key. O(P log P).
std::vector<TypicalPod> ComputeTypicalPods(std::span<const core::Request> pods,
                                           const core::Cluster& cluster,
                                           TypicalPodOptions options = {});

// F(n) for a (possibly hypothetical) node state: free CPU, free milli per GPU, and the node's
// GPU model (its first GPU's). O(|typical| * |gpus|).
double NodeFragmentation(core::MilliCpu cpu_free, std::span<const core::MilliGpu> gpu_free,
                         core::ModelId model, std::span<const TypicalPod> typical);

}  // namespace gpumux::policy
