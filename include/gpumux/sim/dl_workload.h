// Deep-learning training workloads for the JCT simulator: the profile file, job lists (CSV)
// and the job generator behind `gpumux jobgen`.
//
// Job list CSV (header required, one job per row):
//   job,class,submit_s,gpu_mib
//   j0001,vgg16,0.000000,6144
// `submit_s` is seconds from the start with at most 6 decimals (exact microseconds);
// `gpu_mib` is the job's GPU memory request (its batch size can only grow within it).
#pragma once

#include <cstdint>
#include <istream>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "gpumux/core/quantity.h"
#include "gpumux/core/result.h"
#include "gpumux/policy/workload_profile.h"

namespace gpumux::sim {

// Parses a profile (JSON; format in docs and data/dl_profile_default.json). `source` names the
// input in errors, which also name the offending field.
core::Result<policy::WorkloadProfile> ParseProfile(std::string_view json, const std::string& source);
core::Result<policy::WorkloadProfile> LoadProfile(const std::string& path);
// The embedded default: five IADeep classes on an RTX 3090 (data/dl_profile_default.json).
const policy::WorkloadProfile& DefaultProfile();
std::string_view DefaultProfileJson();

struct JobSpec {
  std::string id;
  std::string cls;
  core::Micros submit_us = 0;
  core::MiB gpu_mib = 0;
};

// Reads a job list; every class must exist in `profile`, ids must be unique, submit times
// non-decreasing is not required (the simulator orders by time, then by row).
core::Result<std::vector<JobSpec>> ReadJobs(std::istream& in, const std::string& source,
                                            const policy::WorkloadProfile& profile);
core::Result<std::vector<JobSpec>> LoadJobs(const std::string& path,
                                            const policy::WorkloadProfile& profile);
void WriteJobs(std::ostream& out, const std::vector<JobSpec>& jobs);

struct ClassWeight {
  std::string cls;
  double weight = 0;
};

// Named class mixes: "iadeep" (the paper's 0.212 vgg16 / resnet50 / squeezenet, 0.182 neumf /
// lstm), "conv-heavy" (mostly vgg16 and resnet50) and "light" (mostly squeezenet, neumf,
// lstm). Or an explicit "vgg16=0.5,lstm=0.5".
core::Result<std::vector<ClassWeight>> ParseMix(std::string_view text,
                                                const policy::WorkloadProfile& profile);
std::vector<std::string> MixNames();

enum class ArrivalKind : std::uint8_t {
  kBursty,   // hyperexponential gaps (bursts of short gaps, then long ones), mean 1/rate
  kPoisson,  // exponential gaps, mean 1/rate
  kFile,     // submit times (seconds, one per line) from a file, in order
};

struct JobGenOptions {
  std::vector<ClassWeight> mix;
  int count = 300;
  ArrivalKind arrival = ArrivalKind::kBursty;
  double rate_per_s = 300.0 / 4000.0;  // IADeep: 300 jobs in about 4,000 s
  std::vector<core::Micros> submit_times;  // for kFile
  double load = 1.0;         // divides every gap (2 = twice as many jobs per second)
  core::MiB min_gpu_mib = 3 * 1024;
  core::MiB max_gpu_mib = 7 * 1024;
  std::uint64_t seed = 42;
};

// Deterministic in (options, profile). Each job's class is drawn from the mix; its memory
// request is a whole number of GiB drawn uniformly from [min, max], raised to what the class
// needs at its default batch size. The same seed at another load gives the same jobs with
// compressed gaps.
core::Result<std::vector<JobSpec>> GenerateJobs(const JobGenOptions& options,
                                                const policy::WorkloadProfile& profile);
// Submit times (seconds, one per line; '#' comments allowed) for ArrivalKind::kFile.
core::Result<std::vector<core::Micros>> LoadSubmitTimes(const std::string& path);

// "12.5" -> 12500000 us. Error unless a non-negative decimal with at most 6 decimals.
core::Result<core::Micros> ParseSeconds(std::string_view text);
std::string FormatSeconds(core::Micros us);  // 12500000 -> "12.500000"

}  // namespace gpumux::sim
