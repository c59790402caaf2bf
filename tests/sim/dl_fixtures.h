// Shared inputs of the JCT simulator tests: a tiny profile whose numbers make every completion
// time computable by hand, job builders, and checks that hold for every run of the simulator.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "gpumux/policy/workload_profile.h"
#include "gpumux/sim/dl_sim.h"
#include "gpumux/sim/dl_workload.h"

namespace gpumux::sim::dl_testing {

inline constexpr double kBeta = 0.25;  // companion overhead of the tiny profile (exact in binary)

// One class with a single solo point: batch 100, 0.1 s per step, 1000 MiB, busy `busy`, noise
// scale so large that the efficiency of any batch near b0 is 1 within 1e-7; 1000 samples per
// epoch. Solo goodput 1000 samples/s, so solo time = 1000 * epochs / 1000 = epochs seconds.
inline policy::ClassProfile TinyClass(std::string name, double epochs, double busy) {
  policy::ClassProfile c;
  c.name = std::move(name);
  c.solo = {{100, 0.1, 1000, busy}};
  c.default_batch = 100;
  c.noise_scale = 1e9;
  c.dataset_samples = 1000;
  c.target_epochs = epochs;
  return c;
}

// "short": 2 epochs (work 2000 samples, solo 2 s), busy 0.5; "long": 4 epochs (solo 4 s), busy
// 0.5; "heavy": 2 epochs (solo 2 s), busy 0.75. GPUs of 16384 MiB.
//  * short + long on one GPU: busy 0.5 + 0.5 = 1 <= 1, so no stretch; each slows by exactly
//    1 + beta = 1.25 (800 samples/s).
//  * heavy + heavy: 0.75/(0.25 + 0.75x) * 2 = 1 gives x = 5/3; s = (0.25 + 1.25) * 1.25 = 1.875.
inline policy::WorkloadProfile TinyProfile() {
  policy::WorkloadProfile p;
  p.name = "tiny";
  p.gpu_model = "Test GPU";
  p.gpu_memory_mib = 16384;
  p.companion_overhead = kBeta;
  p.classes = {TinyClass("short", 2, 0.5), TinyClass("long", 4, 0.5), TinyClass("heavy", 2, 0.75)};
  return p;
}

inline JobSpec Job(std::string id, std::string cls, double submit_s, core::MiB gpu_mib = 4096) {
  JobSpec j;
  j.id = std::move(id);
  j.cls = std::move(cls);
  j.submit_us = static_cast<core::Micros>(submit_s * 1e6 + 0.5);
  j.gpu_mib = gpu_mib;
  return j;
}

// gpumux's first embedded profile (5 classes, assumed busy fractions): the tests below were
// written against its classes and numbers, which stay fixed (the default profile may change).
inline const policy::WorkloadProfile& Assumed5Profile() {
  return *EmbeddedProfile("iadeep5-assumed");
}

// `count` jobs of `mix` generated for `profile` at load 2 (busy: they share GPUs and get tuned).
inline std::vector<JobSpec> Generated(const policy::WorkloadProfile& profile, std::uint64_t seed,
                                      const std::string& mix = "uniform", int count = 60) {
  JobGenOptions g;
  auto parsed = ParseMix(mix, profile);
  EXPECT_TRUE(parsed.has_value());
  if (parsed) g.mix = *parsed;
  g.count = count;
  g.load = 2;
  g.seed = seed;
  auto jobs = GenerateJobs(g, profile);
  EXPECT_TRUE(jobs.has_value()) << jobs.error().message;
  return jobs ? *jobs : std::vector<JobSpec>{};
}

// One GPU (one node of one GPU), no hidden model error, every job exactly its class (no work
// or noise-scale spread), no tuning, invariants checked.
inline DlSimOptions OneGpu(std::string policy) {
  DlSimOptions o;
  o.policy = std::move(policy);
  o.tuner = "none";
  o.nodes = 1;
  o.gpus_per_node = 1;
  o.model_error = 0;
  o.work_spread = 0;
  o.noise_scale_spread = 0;
  o.check_invariants = true;
  return o;
}

inline core::Micros Us(double seconds) { return static_cast<core::Micros>(seconds * 1e6 + 0.5); }

// The job named `id` in a result (a test failure, and the first job, if absent).
inline const DlJobResult& JobIn(const DlResult& r, const std::string& id) {
  for (const auto& j : r.jobs) {
    if (j.id == id) return j;
  }
  ADD_FAILURE() << "no job '" << id << "' in the result";
  return r.jobs.front();
}

// Checks what every run must satisfy: every job placed and finished, in job-list order; one
// timeline segment per job matching its start, finish and GPU; at no instant more than
// `max_per_gpu` segments on one GPU; JCT never below the class's solo time (sharing only slows
// a job down and b0 has the best solo goodput); makespan and metrics consistent.
inline void ExpectConsistent(const DlResult& r, const std::vector<JobSpec>& jobs,
                             const policy::WorkloadProfile& profile, const DlSimOptions& options,
                             int max_per_gpu) {
  ASSERT_EQ(r.jobs.size(), jobs.size());
  ASSERT_EQ(r.timeline.size(), jobs.size()) << "one segment per job: jobs never migrate";
  std::map<std::string, const DlSegment*> segment;
  for (const auto& s : r.timeline) {
    EXPECT_TRUE(segment.emplace(s.job, &s).second) << "two segments for " << s.job;
  }
  core::Micros first = jobs.front().submit_us;
  core::Micros last = 0;
  double max_jct = 0;
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    const DlJobResult& j = r.jobs[i];
    SCOPED_TRACE(j.id);
    EXPECT_EQ(j.id, jobs[i].id) << "results in job-list order";
    EXPECT_EQ(j.cls, jobs[i].cls);
    EXPECT_EQ(j.submit_us, jobs[i].submit_us);
    EXPECT_GE(j.start_us, j.submit_us);
    EXPECT_GT(j.finish_us, j.start_us);
    EXPECT_GT(j.final_batch, 0);
    EXPECT_GE(j.batch_changes, 0);
    const policy::ClassProfile* c = profile.Find(j.cls);
    ASSERT_NE(c, nullptr);
    EXPECT_GE(static_cast<double>(j.jct_us()), c->SoloSeconds() * 1e6 * (1 - 1e-9) - 1)
        << "no job beats its solo time";
    first = std::min(first, j.submit_us);
    last = std::max(last, j.finish_us);
    max_jct = std::max(max_jct, static_cast<double>(j.jct_us()) / 1e6);
    auto it = segment.find(j.id);
    ASSERT_NE(it, segment.end());
    const DlSegment& s = *it->second;
    EXPECT_EQ(s.cls, j.cls);
    EXPECT_EQ(s.start_us, j.start_us);
    EXPECT_EQ(s.end_us, j.finish_us);
    const int node = s.gpu / options.gpus_per_node;
    const int index = s.gpu % options.gpus_per_node;
    EXPECT_EQ(j.gpu, "node-" + std::to_string(node + 1) + "/" + std::to_string(index));
  }
  // Occupancy per GPU: half-open [start, end), so a job leaving and one arriving at the same
  // instant do not overlap.
  std::map<int, std::vector<std::pair<core::Micros, int>>> edges;
  for (const auto& s : r.timeline) {
    EXPECT_GE(s.gpu, 0);
    EXPECT_LT(s.gpu, options.nodes * options.gpus_per_node);
    edges[s.gpu].push_back({s.start_us, +1});
    edges[s.gpu].push_back({s.end_us, -1});
  }
  for (auto& [gpu, e] : edges) {
    std::sort(e.begin(), e.end());  // at equal times the departure (-1) sorts first
    int n = 0;
    for (const auto& [t, d] : e) {
      n += d;
      EXPECT_LE(n, max_per_gpu) << "GPU " << gpu << " at " << t << " us";
      EXPECT_GE(n, 0);
    }
  }
  const DlMetrics& m = r.metrics;
  EXPECT_DOUBLE_EQ(m.makespan_s, static_cast<double>(last - first) / 1e6);
  EXPECT_GE(m.makespan_s + 1e-9, max_jct);
  EXPECT_LE(m.median_jct_s, m.p95_jct_s);
  EXPECT_GE(m.avg_queue_s, 0);
  EXPECT_GT(m.gpu_busy, 0);
  EXPECT_LE(m.gpu_busy, 1 + 1e-12);
  EXPECT_GT(m.gpu_util, 0);
  EXPECT_LE(m.gpu_util, m.gpu_busy + 1e-12) << "a GPU runs kernels only while it holds a job";
  EXPECT_GE(m.measurement_windows, 0);
  EXPECT_GE(m.paused_job_s, 0);
  EXPECT_GE(m.locked_gpu_s, 0);
  EXPECT_GT(r.events, 0);
}

}  // namespace gpumux::sim::dl_testing
