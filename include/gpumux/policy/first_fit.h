// `first-fit`: AntMan-like packing, the IADeep paper's baseline. A job goes to the first GPU
// (nodes in rank order, GPUs in index order) with enough free memory and fewer than
// max_jobs_per_gpu jobs; interference is not considered and nothing is tuned. Queue: FIFO.
//
// Worked example: GPUs 0..3 of the first node hold 3, 1, 0, 2 jobs (limit 3), all with memory
// to spare: a new job goes to GPU 1.
#pragma once

#include "gpumux/policy/gpu_scoring.h"

namespace gpumux::policy {

class FirstFitPolicy final : public GpuScoringPolicy {
 public:
  explicit FirstFitPolicy(const PolicyContext& context) : GpuScoringPolicy(context) {}
  std::string_view name() const override { return "first-fit"; }
  const ColocationTraits* colocation() const override { return &traits_; }

 protected:
  std::optional<double> GpuScore(const Cycle&, const GpuGroup&, const Member&) override {
    return 0.0;  // every acceptable GPU is equal: the lowest index wins
  }

 private:
  ColocationTraits traits_{QueueOrder::kArrival, "none"};
};

}  // namespace gpumux::policy
