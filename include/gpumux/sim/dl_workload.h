// Deep-learning training workloads for the JCT simulator: the profile file, job lists (CSV)
// and the job generator behind `gpumux jobgen`.
//
// Job list CSV (header required, one job per row):
//   job,class,submit_s,gpu_mib
//   j0001,vgg16,0.000000,6144
// `submit_s` is seconds from the start with at most 6 decimals (exact microseconds) and at most
// 12 integer digits (kMaxSubmitUs); `gpu_mib` is the job's GPU memory request, 1..the profile's
// GPU memory (its batch size can only grow within it). At most kMaxDlJobs rows.
//
// Every parser here reads a string or a stream and touches no file (what a fuzzer calls):
// ParseProfile, ReadJobs, ParseSubmitTimes, ParseSeconds, ParseMix.
#pragma once

#include <cstddef>
#include <cstdint>
#include <istream>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "gpumux/core/quantity.h"
#include "gpumux/core/result.h"
#include "gpumux/policy/workload_profile.h"

namespace gpumux::sim {

// The largest submit time a job list holds, 999999999999.999999 s (about 31,700 years): what
// 12 integer digits and 6 decimals write, and far inside the simulator's clock.
inline constexpr core::Micros kMaxSubmitUs = 999'999'999'999'999'999;
// The most jobs a job list, a generation or a submit-time file may hold.
inline constexpr std::size_t kMaxDlJobs = 1'000'000;
// The largest profile file read (the default profile is 5 KB).
inline constexpr std::size_t kMaxProfileBytes = std::size_t{16} << 20;

// Parses a profile (JSON; format in docs and data/dl_profile_iadeep_fitted.json). `source`
// names the input in errors, which also name the offending field.
core::Result<policy::WorkloadProfile> ParseProfile(std::string_view json,
                                                   const std::string& source);
// Reads `path` (at most kMaxProfileBytes) and parses it; errors name the path.
core::Result<policy::WorkloadProfile> LoadProfile(const std::string& path);
// Embedded profiles (data/, compiled in; data/README.md says what is measured, fitted, assumed):
//  * iadeep-fitted: the 8 models IADeep measured on an RTX 3090, its solo figures, the
//    interference predictor fitted to its measured pairs, no measured sets (the default belief);
//  * iadeep-measured: the same plus the 31 measured pairs as per-job slowdowns (the default
//    truth: what the simulated GPUs do);
//  * iadeep5-assumed: gpumux's first profile (5 classes, busy fractions assumed, lstm's and
//    resnet50's solo figures copies of other models' in IADeep's table); kept for comparison
//    and for job lists written for it.
inline constexpr std::string_view kDefaultProfileName = "iadeep-fitted";
inline constexpr std::string_view kDefaultTruthProfileName = "iadeep-measured";
std::vector<std::string> EmbeddedProfileNames();
const policy::WorkloadProfile* EmbeddedProfile(std::string_view name);  // nullptr: no such name
std::optional<std::string_view> EmbeddedProfileJson(std::string_view name);
const policy::WorkloadProfile& DefaultProfile();       // iadeep-fitted
const policy::WorkloadProfile& DefaultTruthProfile();  // iadeep-measured
std::string_view DefaultProfileJson();
// An embedded profile's name, else a file (LoadProfile).
core::Result<policy::WorkloadProfile> ProfileByNameOrPath(const std::string& name_or_path);

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

// What a load factor does to a job list: every submit time divided by `load` (finite, > 0),
// rounded to the nearest microsecond (halves away from zero). Error naming the job and its
// submit time when one would pass kMaxSubmitUs (a tiny load stretches time).
core::Result<std::vector<JobSpec>> ScaleSubmitTimes(std::vector<JobSpec> jobs, double load);

struct ClassWeight {
  std::string cls;
  double weight = 0;
};

// Named class mixes: "uniform" (every class of the profile alike), "iadeep" (the IADeep paper's
// 0.212 vgg16 / resnet50 / squeezenet, 0.182 neumf / lstm: the iadeep5-assumed profile's
// classes), "conv-heavy" (every class, the convolutional networks vgg16, vgg19, resnet50,
// resnet152, alexnet 3 times as likely) and "light" (every class, squeezenet, googlenet, neumf,
// adgcl, lstm 3 times as likely). Or an explicit "vgg16=0.5,alexnet=0.5".
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
  double rate_per_s = 300.0 / 4000.0;      // IADeep: 300 jobs in about 4,000 s
  std::vector<core::Micros> submit_times;  // for kFile
  double load = 1.0;                       // divides every gap (2 = twice as many jobs per second)
  core::MiB min_gpu_mib = 3 * 1024;
  core::MiB max_gpu_mib = 7 * 1024;
  std::uint64_t seed = 42;
  // How errors name the rate and the load (the CLI passes its flags).
  std::string rate_name = "rate_per_s";
  std::string load_name = "load";
};

// Deterministic in (options, profile). Each job's class is drawn from the mix; its memory
// request is a whole number of GiB drawn uniformly from [min, max], raised to what the class
// needs at its default batch size. The same seed at another load gives the same jobs with
// compressed gaps. Errors: count outside 1..kMaxDlJobs, a rate or load not finite and > 0,
// memory outside 1..core::kMaxGpuMemoryMib, a bad mix, and a job whose submit time would pass
// kMaxSubmitUs (a rate and load that space jobs too far apart; the message names both).
core::Result<std::vector<JobSpec>> GenerateJobs(const JobGenOptions& options,
                                                const policy::WorkloadProfile& profile);
// Submit times (seconds as ParseSeconds reads them, one per line, not decreasing; '#' comments
// and blank lines allowed; at most kMaxDlJobs) for ArrivalKind::kFile. Errors name source:line.
core::Result<std::vector<core::Micros>> ParseSubmitTimes(std::istream& in,
                                                         const std::string& source);
core::Result<std::vector<core::Micros>> LoadSubmitTimes(const std::string& path);

// "12.5" -> 12500000 us. Error unless a non-negative decimal with at most 6 decimals.
core::Result<core::Micros> ParseSeconds(std::string_view text);
std::string FormatSeconds(core::Micros us);  // 12500000 -> "12.500000"

}  // namespace gpumux::sim
