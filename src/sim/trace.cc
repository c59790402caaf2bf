#include "gpumux/sim/trace.h"

#include <algorithm>
#include <set>
#include <sstream>
#include <unordered_set>

#include "gpumux/io/csv.h"
#include "src/sim/input_file.h"

extern "C" {
extern const char gpumux_embedded_nodes_begin[];
extern const char gpumux_embedded_nodes_end[];
extern const char gpumux_embedded_pods_begin[];
extern const char gpumux_embedded_pods_end[];
extern const char gpumux_embedded_expected_begin[];
extern const char gpumux_embedded_expected_end[];
}

namespace gpumux::sim {

using io::CsvReader;
namespace {

template <typename T>
core::Result<T> Fail(const CsvReader& csv, const std::string& what) {
  return tl::unexpected(csv.ErrorHere(what));
}

std::vector<std::string> SplitModels(std::string_view spec) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= spec.size()) {
    std::size_t bar = spec.find('|', start);
    if (bar == std::string_view::npos) bar = spec.size();
    if (bar > start) out.emplace_back(spec.substr(start, bar - start));
    start = bar + 1;
  }
  return out;
}

// Column `column` of the current row as an integer in lo..hi. The error names the row's
// owner ("node 'n1': "), the column and the range: "column 'gpu': 65 is outside 0..64 (the
// GPUs a node may have)".
core::Result<std::int64_t> IntIn(const CsvReader& csv, const std::string& owner, const char* column,
                                 std::int64_t lo, std::int64_t hi, const char* what) {
  auto v = csv.Int(column);
  if (!v) return tl::unexpected(v.error());
  if (*v < lo || *v > hi) {
    return Fail<std::int64_t>(csv, owner + "column '" + column + "': " + std::to_string(*v) +
                                       " is outside " + std::to_string(lo) + ".." +
                                       std::to_string(hi) + " (" + what + ")");
  }
  return *v;
}

// The cpu_milli and memory_mib columns, which node and pod rows share (a pod cannot ask more
// than a node may have).
core::Result<std::pair<std::int64_t, std::int64_t>> CpuAndMemory(const CsvReader& csv,
                                                                 const std::string& owner) {
  auto cpu =
      IntIn(csv, owner, "cpu_milli", 0, core::kMaxNodeCpuMilli, "the milli-CPU a node may have");
  if (!cpu) return tl::unexpected(cpu.error());
  auto mem = IntIn(csv, owner, "memory_mib", 0, kMaxTraceMemoryMib, "the MiB a node may have");
  if (!mem) return tl::unexpected(mem.error());
  return std::pair{*cpu, *mem};
}

// Reads `path` whole and parses it with parse(stream, path).
template <typename T, typename Parse>
core::Result<T> LoadFile(const std::string& path, Parse parse) {
  auto text = ReadSimInput(path);
  if (!text) return tl::unexpected(text.error());
  ViewStream in(*text);
  return parse(in, path);
}

}  // namespace

core::MiB TraceGpuMemory(std::string_view model) {
  if (model == "T4" || model == "P100" || model == "V100M16") return 16384;
  if (model == "V100M32") return 32768;
  if (model == "A10") return 24576;
  return 0;
}

core::Result<std::vector<core::NodeSpec>> ParseNodeList(std::istream& in,
                                                        const std::string& source) {
  using R = std::vector<core::NodeSpec>;
  CsvReader csv(in, source);
  if (auto h = csv.ReadHeader({"sn", "cpu_milli", "memory_mib", "gpu", "model"}); !h) {
    return tl::unexpected(h.error());
  }
  std::vector<core::NodeSpec> nodes;
  std::unordered_set<std::string> names;
  while (true) {
    auto more = csv.Next();
    if (!more) return tl::unexpected(more.error());
    if (!*more) break;
    core::NodeSpec n;
    n.name = std::string(csv.Field("sn"));
    if (n.name.empty()) return Fail<R>(csv, "empty node name (column 'sn')");
    if (!names.insert(n.name).second) return Fail<R>(csv, "node '" + n.name + "' listed twice");
    if (nodes.size() == kMaxTraceNodes) {
      return Fail<R>(csv, "more than " + std::to_string(kMaxTraceNodes) +
                              " nodes (the most a node list may hold)");
    }
    const std::string owner = "node '" + n.name + "': ";
    auto cpu_mem = CpuAndMemory(csv, owner);
    if (!cpu_mem) return tl::unexpected(cpu_mem.error());
    const auto [cpu, mem] = *cpu_mem;
    auto gpus = IntIn(csv, owner, "gpu", 0, core::kMaxGpusPerNode, "the GPUs a node may have");
    if (!gpus) return tl::unexpected(gpus.error());
    const std::string model(csv.Field("model"));
    if (*gpus > 0 && model.empty()) return Fail<R>(csv, "node has GPUs but no model");
    n.cpu_milli = cpu;
    n.memory_mib = mem;
    n.max_pods = kTraceMaxPods;
    if (!model.empty()) n.labels["gpu-card-model"] = model;
    for (int i = 0; i < static_cast<int>(*gpus); ++i) {
      n.gpus.push_back(core::GpuSpec{i, "GPU-sim-" + n.name + "-" + std::to_string(i), model,
                                     TraceGpuMemory(model), core::GpuHealth::kHealthy});
    }
    nodes.push_back(std::move(n));
  }
  if (nodes.empty()) {
    return core::MakeError(core::ErrorCode::kInvalidArgument, source + ": no nodes");
  }
  return nodes;
}

namespace {

// An optional time column of the current row in whole seconds, 0..kMaxTraceSeconds; -1 when
// the column is absent or the field empty.
core::Result<std::int64_t> TimeColumn(const CsvReader& csv, const std::string& owner,
                                      const char* column) {
  if (!csv.HasColumn(column) || csv.Field(column).empty()) return -1;
  return IntIn(csv, owner, column, 0, kMaxTraceSeconds, "seconds from the trace's start");
}

// The pods of a pod list; with `times`, also their creation, deletion and scheduled times
// (creation_time required).
core::Result<std::vector<TracePod>> ParsePods(std::istream& in, const std::string& source,
                                              bool times) {
  using R = std::vector<TracePod>;
  CsvReader csv(in, source);
  std::vector<std::string> required = {"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"};
  if (times) required.push_back("creation_time");
  if (auto h = csv.ReadHeader(required); !h) return tl::unexpected(h.error());
  const bool has_spec = csv.HasColumn("gpu_spec");
  std::vector<TracePod> pods;
  std::unordered_set<std::string> names;
  while (true) {
    auto more = csv.Next();
    if (!more) return tl::unexpected(more.error());
    if (!*more) break;
    if (pods.size() == kMaxTracePods) {
      return Fail<R>(csv, "more than " + std::to_string(kMaxTracePods) +
                              " pods (the most a pod list may hold)");
    }
    TracePod pod;
    core::Request& r = pod.request;
    r.name = std::string(csv.Field("name"));
    if (r.name.empty()) return Fail<R>(csv, "empty pod name");
    if (!names.insert(r.name).second) return Fail<R>(csv, "pod '" + r.name + "' listed twice");
    const std::string owner = "pod '" + r.name + "': ";
    auto cpu_mem = CpuAndMemory(csv, owner);
    if (!cpu_mem) return tl::unexpected(cpu_mem.error());
    const auto [cpu, mem] = *cpu_mem;
    auto num_gpu =
        IntIn(csv, owner, "num_gpu", 0, core::kMaxGpusPerNode, "the GPUs a node may have");
    if (!num_gpu) return tl::unexpected(num_gpu.error());
    auto milli = IntIn(csv, owner, "gpu_milli", 0, core::kMilliPerGpu,
                       "milli-GPU per GPU: 1000 is a whole GPU");
    if (!milli) return tl::unexpected(milli.error());
    r.cpu_milli = cpu == 0 ? 100 : cpu;
    r.memory_mib = mem;
    if (*num_gpu > 0 && *milli > 0) {
      r.gpu_count = static_cast<int>(*num_gpu);
      r.gpu_milli = *milli;
      if (has_spec) r.gpu_models = SplitModels(csv.Field("gpu_spec"));
    }
    if (times) {
      auto creation = TimeColumn(csv, owner, "creation_time");
      if (!creation) return tl::unexpected(creation.error());
      if (*creation < 0) return Fail<R>(csv, owner + "column 'creation_time' is empty");
      auto deletion = TimeColumn(csv, owner, "deletion_time");
      if (!deletion) return tl::unexpected(deletion.error());
      auto scheduled = TimeColumn(csv, owner, "scheduled_time");
      if (!scheduled) return tl::unexpected(scheduled.error());
      if (*deletion >= 0 && *deletion < *creation) {
        return Fail<R>(csv, owner + "deleted at " + std::to_string(*deletion) +
                                " s, before its creation at " + std::to_string(*creation) + " s");
      }
      if (*scheduled >= 0 && *scheduled < *creation) {
        return Fail<R>(csv, owner + "scheduled at " + std::to_string(*scheduled) +
                                " s, before its creation at " + std::to_string(*creation) + " s");
      }
      pod.creation_s = *creation;
      pod.deletion_s = *deletion;
      pod.scheduled_s = *scheduled;
    }
    pods.push_back(std::move(pod));
  }
  if (pods.empty()) {
    return core::MakeError(core::ErrorCode::kInvalidArgument, source + ": no pods");
  }
  return pods;
}

}  // namespace

core::Result<std::vector<core::Request>> ParsePodList(std::istream& in, const std::string& source) {
  auto pods = ParsePods(in, source, /*times=*/false);
  if (!pods) return tl::unexpected(pods.error());
  std::vector<core::Request> out;
  out.reserve(pods->size());
  for (TracePod& p : *pods) out.push_back(std::move(p.request));
  return out;
}

core::Result<std::vector<TracePod>> ParseTimedPodList(std::istream& in, const std::string& source) {
  return ParsePods(in, source, /*times=*/true);
}

std::int64_t TracePod::RunSeconds() const {
  if (deletion_s < 0) return -1;
  return deletion_s - (scheduled_s >= 0 ? scheduled_s : creation_s);
}

core::Result<std::vector<core::NodeSpec>> LoadNodeList(const std::string& path) {
  return LoadFile<std::vector<core::NodeSpec>>(
      path, [](std::istream& in, const std::string& source) { return ParseNodeList(in, source); });
}

core::Result<std::vector<core::Request>> LoadPodList(const std::string& path) {
  return LoadFile<std::vector<core::Request>>(
      path, [](std::istream& in, const std::string& source) { return ParsePodList(in, source); });
}

core::Result<std::vector<TracePod>> LoadTimedPodList(const std::string& path) {
  return LoadFile<std::vector<TracePod>>(path, [](std::istream& in, const std::string& source) {
    return ParseTimedPodList(in, source);
  });
}

std::string_view EmbeddedNodeList() {
  return {gpumux_embedded_nodes_begin,
          static_cast<std::size_t>(gpumux_embedded_nodes_end - gpumux_embedded_nodes_begin)};
}
std::string_view EmbeddedPodList() {
  return {gpumux_embedded_pods_begin,
          static_cast<std::size_t>(gpumux_embedded_pods_end - gpumux_embedded_pods_begin)};
}
std::string_view EmbeddedExpectedAlloc() {
  return {gpumux_embedded_expected_begin,
          static_cast<std::size_t>(gpumux_embedded_expected_end - gpumux_embedded_expected_begin)};
}

AbsentModels PodsAskingForAbsentModels(std::span<const core::Request> pods,
                                       std::span<const core::NodeSpec> nodes) {
  std::set<std::string_view> present;
  for (const core::NodeSpec& n : nodes) {
    for (const core::GpuSpec& g : n.gpus) present.insert(g.model);
  }
  AbsentModels absent;
  std::set<std::string> models;
  for (const core::Request& r : pods) {
    if (r.gpu_models.empty()) continue;  // any model, or a CPU-only pod
    const bool placeable = std::any_of(r.gpu_models.begin(), r.gpu_models.end(),
                                       [&](const std::string& m) { return present.count(m) > 0; });
    if (placeable) continue;
    ++absent.pods;
    models.insert(r.gpu_models.begin(), r.gpu_models.end());
  }
  absent.models.assign(models.begin(), models.end());
  return absent;
}

std::string TraceStem(std::string_view path) {
  const std::size_t slash = path.find_last_of('/');
  std::string_view base = slash == std::string_view::npos ? path : path.substr(slash + 1);
  if (base.size() > 4 && base.substr(base.size() - 4) == ".csv") base.remove_suffix(4);
  return std::string(base);
}

core::Result<std::vector<core::NodeSpec>> NodeListOrEmbedded(const std::string& path) {
  if (!path.empty()) return LoadNodeList(path);
  std::istringstream in{std::string(EmbeddedNodeList())};
  return ParseNodeList(in, "<embedded " + std::string(kEmbeddedNodeListName) + ">");
}

core::Result<std::vector<core::Request>> PodListOrEmbedded(const std::string& path) {
  if (!path.empty()) return LoadPodList(path);
  std::istringstream in{std::string(EmbeddedPodList())};
  return ParsePodList(in, "<embedded " + std::string(kEmbeddedPodListName) + ">");
}

core::Result<std::vector<TracePod>> TimedPodListOrEmbedded(const std::string& path) {
  if (!path.empty()) return LoadTimedPodList(path);
  std::istringstream in{std::string(EmbeddedPodList())};
  return ParseTimedPodList(in, "<embedded " + std::string(kEmbeddedPodListName) + ">");
}

std::string PodListName(const std::string& path) {
  return path.empty() ? std::string(kEmbeddedPodListName) : TraceStem(path);
}

}  // namespace gpumux::sim
