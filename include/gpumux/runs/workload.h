// Kubernetes objects for trace-driven workloads: what `gpumux jobgen --format k8s` writes and
// `gpumux submit` reads. One object per job, a Pod or a batch/v1 Job with one container:
//
//   metadata.labels       gpumux.io/run: <run>            (submit selects and watches by it)
//   metadata.annotations  gpumux.io/job: <job id>         (the job list's id: the record's key)
//                         gpumux.io/submit-at-s: "12.5"   (seconds after the run's start)
//                         gpumux.io/workload-class: vgg16 (read by the co-location policies)
//                         gpumux.io/gpu-model: "T4,A10"   (acceptable GPU models, when given)
//                         + the item's own (e.g. gpumux.io/duration-s)
//   spec.schedulerName    gpumux-scheduler
//   resources.limits      gpumux.io/gpu: N            whole GPUs (also a trace's 1000 milli-GPU)
//                         gpumux.io/gpu-milli: K      a share of one GPU's compute (K < 1000)
//                         gpumux.io/gpu-mem: U        GPU memory in units of gpu_mem_unit_mib,
//                                                     rounded up (8704 MiB -> 9 at 1024)
//   resources.requests    cpu, memory                 when the item asks for them
// A Job (ManifestKind::kJob) carries the same labels and annotations on itself and on its pod
// template, backoffLimit 0 and restartPolicy Never: one pod, run once, as the job list means.
// The extender reads exactly these resources and annotations (kube/objects.h, DecodePod).
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gpumux/core/quantity.h"
#include "gpumux/core/request.h"
#include "gpumux/core/result.h"

namespace gpumux::runs {

inline constexpr std::string_view kLabelRun = "gpumux.io/run";
inline constexpr std::string_view kAnnotationJob = "gpumux.io/job";
inline constexpr std::string_view kAnnotationSubmitAt = "gpumux.io/submit-at-s";
// How long a trace pod ran, in seconds; its container sleeps that long (read through the
// downward API, so that `gpumux submit --time-scale` can scale it).
inline constexpr std::string_view kAnnotationDuration = "gpumux.io/duration-s";
// The duration as the trace gives it, kept when submit scales kAnnotationDuration.
inline constexpr std::string_view kAnnotationTraceDuration = "gpumux.io/trace-duration-s";
inline constexpr std::string_view kSchedulerName = "gpumux-scheduler";

struct WorkloadItem {
  std::string job;             // the job's id in its list, e.g. "j0001" or "openb-pod-0017"
  core::Micros submit_us = 0;  // arrival, after the run's start
  // What the one container asks for: gpu_count, gpu_milli, gpu_mib (per GPU), sharing,
  // gpu_models, workload_class, cpu_milli and memory_mib (requests; 0 = none). `name` unused.
  core::Request request;
  std::vector<std::string> command;
  std::map<std::string, std::string> annotations;  // added to the object's (and template's)
  // Environment variables set from the pod's own annotations (downward API): name -> key.
  std::vector<std::pair<std::string, std::string>> env_from_annotations;
  // A host folder mounted at the same path (the node coordinator's socket folder); "" = none.
  std::string host_dir;
};

enum class ManifestKind : std::uint8_t { kPod, kJob };

struct ManifestOptions {
  ManifestKind kind = ManifestKind::kPod;
  std::string scheduler_name = std::string(kSchedulerName);
  std::string image;
  std::string container_name = "main";
  std::string name_prefix;               // object name = prefix + the job id made a valid name
  std::string run;                       // gpumux.io/run label; "" = none (submit adds its own)
  std::int64_t gpu_mem_unit_mib = 1024;  // = kDefaultGpuMemUnitMib, the daemons' default
};

// The object name for a job id: prefix + id, lower-cased, every character that may not appear
// in a name replaced by '-', trimmed to start and end with a letter or digit. Error when nothing
// is left or the name is longer than a Job's 63 characters.
core::Result<std::string> ObjectName(std::string_view prefix, std::string_view job);

// A label value (kLabelRun): 1..63 of [A-Za-z0-9._-], starting and ending alphanumeric.
bool IsLabelValue(std::string_view value);

// The Pod or Job for one item. Errors name the job: a GPU request outside the ranges the
// extender accepts (gpu_milli over 1000, a negative amount), a unit outside
// 1..kMaxGpuMemUnitMib, no image, a bad run label, a name that cannot be made.
core::Result<nlohmann::json> MakeManifest(const WorkloadItem& item, const ManifestOptions& options);

// The objects of every item, in order; error when two jobs get the same name.
core::Result<std::vector<nlohmann::json>> MakeManifests(const std::vector<WorkloadItem>& items,
                                                        const ManifestOptions& options);

}  // namespace gpumux::runs
