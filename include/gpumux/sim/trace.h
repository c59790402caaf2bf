// Trace input: the openb node and pod lists of Alibaba's GPU-sharing trace
// (cluster-trace-gpu-v2023).
//
// Node list columns: sn,cpu_milli,memory_mib,gpu,model.
// Pod list columns:  name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec (others ignored).
// Pods are converted as the FGD study's converter does: a GPU pod with gpu_milli 0 becomes
// CPU-only, CPU 0 becomes 100 milli (the Kubernetes non-zero default), gpu_spec is a
// "|"-separated list of acceptable models. Nodes get `max_pods` 1001
// and the label gpu-card-model. ParsePodList does not use creation and deletion times
// (arrival-only study): those columns, like any other extra column, are neither read nor
// checked; ParseTimedPodList reads them.
//
// Ranges (a row outside them is an error naming the source, line and column):
//   node: cpu_milli 0..core::kMaxNodeCpuMilli, memory_mib 0..kMaxTraceMemoryMib,
//         gpu 0..core::kMaxGpusPerNode (a model is required when gpu > 0);
//   pod:  cpu_milli 0..core::kMaxNodeCpuMilli, memory_mib 0..kMaxTraceMemoryMib,
//         num_gpu 0..core::kMaxGpusPerNode, gpu_milli 0..1000 (the study's converter clamped
//         values outside; none of its pod lists has one, so gpumux refuses them by name);
//   names non-empty and unique; at most kMaxTraceNodes nodes and kMaxTracePods pods.
// The parsers read from a stream and touch no file: they are what a fuzzer calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <istream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gpumux/core/cluster.h"
#include "gpumux/core/request.h"
#include "gpumux/core/result.h"

namespace gpumux::sim {

inline constexpr int kTraceMaxPods = 1001;

// The most nodes a node list may hold (the largest published clusters have a few thousand).
inline constexpr std::size_t kMaxTraceNodes = 100'000;
// The most pods a pod list may hold (the largest trace, 10^6 pods, fits five times).
inline constexpr std::size_t kMaxTracePods = 5'000'000;
// The most host memory a node or a pod may have or ask for: 2^40 MiB (1 EiB).
inline constexpr core::MiB kMaxTraceMemoryMib = core::MiB{1} << 40;

// GPU memory (MiB) gpumux assumes for a trace model name; 0 when unknown (see data/README.md).
core::MiB TraceGpuMemory(std::string_view model);

core::Result<std::vector<core::NodeSpec>> ParseNodeList(std::istream& in,
                                                        const std::string& source);
core::Result<std::vector<core::Request>> ParsePodList(std::istream& in, const std::string& source);

// The latest time a pod list's time columns may hold: 10^12 s (the v2023 trace spans 1.3 x 10^7).
inline constexpr std::int64_t kMaxTraceSeconds = 1'000'000'000'000;

// A pod with its times, for replaying a pod list on a cluster (`gpumux jobgen --format k8s
// --pods`): creation_time, deletion_time and scheduled_time in whole seconds from the trace's
// start (the columns of the v2023 pod lists); -1 when a column is absent or its field empty.
struct TracePod {
  core::Request request;  // as ParsePodList converts the row
  std::int64_t creation_s = -1;
  std::int64_t deletion_s = -1;
  std::int64_t scheduled_s = -1;
  // How long it ran: deletion - scheduled (deletion - creation when never scheduled); -1
  // without a deletion time. Pods still running at the trace's end have that end as deletion.
  std::int64_t RunSeconds() const;
};
// ParsePodList plus the time columns: creation_time is required (an error names the pod when
// it is empty); each time is in 0..kMaxTraceSeconds, and deletion and scheduled times are not
// before the creation (errors name the source, line, pod and column).
core::Result<std::vector<TracePod>> ParseTimedPodList(std::istream& in, const std::string& source);

// From files (read whole through io::ReadInputFile); errors name the path (and line).
core::Result<std::vector<core::NodeSpec>> LoadNodeList(const std::string& path);
core::Result<std::vector<core::Request>> LoadPodList(const std::string& path);
core::Result<std::vector<TracePod>> LoadTimedPodList(const std::string& path);

// The copies compiled into the binary (data/).
std::string_view EmbeddedNodeList();
std::string_view EmbeddedPodList();
std::string_view EmbeddedExpectedAlloc();
inline constexpr std::string_view kEmbeddedNodeListName = "openb_node_list_gpu_node";
inline constexpr std::string_view kEmbeddedPodListName = "openb_pod_list_default";

// The list at `path`, or the embedded one when `path` is empty (what every command's --nodes
// and --pods default to); errors name the file, or "<embedded NAME>".
core::Result<std::vector<core::NodeSpec>> NodeListOrEmbedded(const std::string& path);
core::Result<std::vector<core::Request>> PodListOrEmbedded(const std::string& path);
core::Result<std::vector<TracePod>> TimedPodListOrEmbedded(const std::string& path);
// The workload's name: the embedded list's, or TraceStem(path).
std::string PodListName(const std::string& path);

// The GPU pods whose gpu_spec names only models that no node has: they can never be placed.
struct AbsentModels {
  std::size_t pods = 0;             // how many such pods
  std::vector<std::string> models;  // the models they name, sorted
};
AbsentModels PodsAskingForAbsentModels(std::span<const core::Request> pods,
                                       std::span<const core::NodeSpec> nodes);

// "dir/openb_pod_list_gpushare40.csv" -> "openb_pod_list_gpushare40"
std::string TraceStem(std::string_view path);

}  // namespace gpumux::sim
