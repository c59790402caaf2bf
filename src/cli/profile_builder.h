// What `gpumux profile` measures, turned into a workload profile (pure: no processes, no I/O).
//
// A run is one example process's --json summary (docs/COORDINATOR.md, "Training examples").
//  * Solo point of class c at batch b: step_s = the median, over repeats, of each run's median
//    step time; memory_mib = the largest run's peak (rounded up); gpu_busy = 1 - (mean data
//    phase / mean step time), clamped to [0.01, 1] (the data phase is the host-side part of a
//    step; on a CPU the "GPU" is the CPU and the busy fraction is the compute fraction).
//  * A co-located set (members started together): each member's steps are kept only when they
//    ran while every member was running (from the per-step end times t_end); slowdown = the
//    median over repeats of (median kept step time / the member's solo step_s at its batch).
//    Below 1 (measurement noise) it is clamped to 1 and counted.
// Worked example: solo resnet at 32 runs 20.0 and 22.0 ms (medians of two repeats) -> 21.0 ms;
// co-located with lstm it runs 31.5 ms -> slowdown 1.5.
#pragma once

#include <string>
#include <vector>

#include "gpumux/core/result.h"
#include "gpumux/policy/workload_profile.h"

namespace gpumux::cli {

struct ExampleRun {
  std::string cls;
  int batch = 0;
  std::vector<double> step_s, data_s, t_end;  // t_end: wall-clock end of each step (s)
  double memory_mib = 0;
  double device_memory_mib = 0;  // the device's total memory (host memory on a CPU)
  std::string device, device_name, torch, python;
};

// Parses one --json line; the error names `source` and the field.
core::Result<ExampleRun> ParseExampleRun(const std::string& line, const std::string& source);

double Median(std::vector<double> v);  // 0 for an empty vector

struct SoloMeasurement {
  std::string cls;
  int batch = 0;
  std::vector<ExampleRun> repeats;
};
struct SetMeasurement {
  std::vector<std::vector<ExampleRun>> repeats;  // per repeat, one run per member
};

struct ClassDefaults {  // what the examples cannot measure
  int default_batch = 0;
  double noise_scale = 0;
  std::int64_t dataset_samples = 0;
  double target_epochs = 0;
  std::string source;  // where these came from
};

struct ProfileInputs {
  std::string name, device_name;
  core::MiB device_memory_mib = 0;
  std::vector<std::string> classes;
  std::vector<ClassDefaults> defaults;  // one per class
  std::vector<SoloMeasurement> solo;
  std::vector<SetMeasurement> sets;
};

struct BuiltProfile {
  policy::WorkloadProfile profile;
  int clamped_slowdowns = 0;  // co-located medians below 1, set to 1
  int discarded_steps = 0;    // co-located steps outside the members' overlap
};

// Error when a class has no solo point or a set member has no solo point at its batch, or
// the result fails WorkloadProfile::Validate.
core::Result<BuiltProfile> BuildProfile(const ProfileInputs& in);

}  // namespace gpumux::cli
