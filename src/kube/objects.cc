#include "gpumux/kube/objects.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "gpumux/core/json.h"
#include "gpumux/core/shown.h"
#include "gpumux/core/time.h"
#include "gpumux/kube/enforcement.h"

namespace gpumux::kube {
namespace {

using core::ErrorCode;
using core::MakeError;
using nlohmann::json;

// A quantity given as a JSON string ("8192") or number (8192), times `scale`. A JSON integer
// whose product does not fit int64 is an error, not an overflow.
core::Result<std::int64_t> QuantityOf(const json& value, std::int64_t scale) {
  if (value.is_string()) return ParseQuantity(value.get_ref<const std::string&>(), scale);
  if (value.is_number_integer()) {
    const auto too_large = [&] {
      return MakeError(ErrorCode::kInvalidArgument,
                       "bad quantity " + core::JsonSummary(value) + ": too large");
    };
    // In the value's own JSON type: get<int64_t> would wrap one above INT64_MAX.
    const auto number = core::JsonIntIn(value, std::numeric_limits<std::int64_t>::min(),
                                        std::numeric_limits<std::int64_t>::max());
    std::int64_t scaled = 0;
    if (!number || __builtin_mul_overflow(*number, scale, &scaled)) return too_large();
    return scaled;
  }
  if (value.is_number()) return ParseQuantity(value.dump(), scale);
  return MakeError(ErrorCode::kInvalidArgument, "not a quantity: " + core::JsonSummary(value));
}

std::vector<std::string> SplitModels(std::string_view text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t end = text.find(',', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view part = text.substr(start, end - start);
    while (!part.empty() && part.front() == ' ') part.remove_prefix(1);
    while (!part.empty() && part.back() == ' ') part.remove_suffix(1);
    if (!part.empty()) out.emplace_back(part);
    start = end + 1;
  }
  return out;
}

}  // namespace

core::Result<ContainerAmounts> ReadContainerAmounts(const nlohmann::json& container,
                                                    const std::string& where,
                                                    std::int64_t gpu_mem_unit_mib) {
  ContainerAmounts a;
  const json* resources = JsonChild(container, "resources");
  if (resources == nullptr) return a;
  for (const char* section : {"limits", "requests"}) {
    const json* list = JsonChild(*resources, section);
    if (list == nullptr || !list->is_object()) continue;
    const std::pair<std::string_view, std::int64_t*> fields[] = {
        {kResourceGpu, &a.gpu}, {kResourceGpuMem, &a.mem}, {kResourceGpuMilli, &a.milli}};
    bool found_here = false;
    for (const auto& [name, target] : fields) {
      const auto it = list->find(std::string(name));
      if (it == list->end()) continue;
      auto q = QuantityOf(*it, 1);
      if (!q) {
        return MakeError(
            ErrorCode::kInvalidArgument,
            where + " " + section + "[" + std::string(name) + "]: " + q.error().message);
      }
      if (*q < 0) {
        return MakeError(ErrorCode::kInvalidArgument,
                         where + " " + section + "[" + std::string(name) + "] is negative");
      }
      if (target == &a.mem && *q > std::numeric_limits<std::int64_t>::max() / gpu_mem_unit_mib) {
        std::string message = where + " " + section + "[" + std::string(name) + "]: ";
        message += std::to_string(*q);
        message += " units of ";
        message += std::to_string(gpu_mem_unit_mib);
        message += " MiB is too large";
        return MakeError(ErrorCode::kInvalidArgument, std::move(message));
      }
      *target = target == &a.mem ? *q * gpu_mem_unit_mib : *q;
      found_here = true;
    }
    if (found_here) {
      a.any = true;
      break;  // limits win; requests only when no limit names a gpumux resource
    }
  }
  return a;
}

namespace {

core::Result<core::Request> RequestOf(const ContainerAmounts& a, const std::string& where,
                                      bool* milli_requested) {
  core::Request r;
  r.name = where;
  if (a.milli > core::kMilliPerGpu) {
    return MakeError(ErrorCode::kInvalidArgument,
                     where + ": gpumux.io/gpu-milli is " + std::to_string(a.milli) +
                         ", above one GPU (1000); ask for whole GPUs with gpumux.io/gpu");
  }
  // A huge count is still a valid request (it fits nowhere); keep it in int range.
  r.gpu_count = static_cast<int>(std::min<std::int64_t>(a.gpu, 1 << 20));
  const bool share = a.mem > 0 || a.milli > 0;
  *milli_requested = a.milli > 0;
  if (a.gpu > 0 && !share) {
    r.sharing = core::GpuSharing::kExclusive;
    r.gpu_milli = core::kMilliPerGpu;
    return r;
  }
  if (a.gpu == 0) r.gpu_count = 1;
  r.sharing = core::GpuSharing::kShared;
  r.gpu_milli = a.milli > 0 ? a.milli : 1;  // memory only: compute is not reserved
  r.gpu_mib = a.mem;
  return r;
}

}  // namespace

core::Result<std::int64_t> ParseQuantity(std::string_view text, std::int64_t scale) {
  const std::string original(text);
  auto bad = [&](const char* why) {
    return MakeError(ErrorCode::kInvalidArgument, "bad quantity \"" + original + "\": " + why);
  };
  if (text.empty()) return bad("empty");
  std::size_t i = 0;
  bool negative = false;
  if (text[i] == '+' || text[i] == '-') {
    negative = text[i] == '-';
    ++i;
  }
  const std::size_t number_start = i;
  while (i < text.size() && ((text[i] >= '0' && text[i] <= '9') || text[i] == '.')) ++i;
  if (i == number_start) return bad("no number");
  std::string number(text.substr(number_start, i - number_start));
  if (std::count(number.begin(), number.end(), '.') > 1) return bad("two decimal points");
  if (number.find_first_of("0123456789") == std::string::npos) return bad("no digits");
  long double value = std::strtold(number.c_str(), nullptr);
  const std::string_view suffix = text.substr(i);
  long double multiplier = 1;
  if (suffix.empty()) {
  } else if (suffix == "m") {
    multiplier = 1e-3L;
  } else if (suffix == "k") {
    multiplier = 1e3L;
  } else if (suffix == "M") {
    multiplier = 1e6L;
  } else if (suffix == "G") {
    multiplier = 1e9L;
  } else if (suffix == "T") {
    multiplier = 1e12L;
  } else if (suffix == "P") {
    multiplier = 1e15L;
  } else if (suffix == "E") {
    multiplier = 1e18L;
  } else if (suffix == "Ki") {
    multiplier = 1024.0L;
  } else if (suffix == "Mi") {
    multiplier = 1048576.0L;
  } else if (suffix == "Gi") {
    multiplier = 1073741824.0L;
  } else if (suffix == "Ti") {
    multiplier = 1099511627776.0L;
  } else if (suffix == "Pi") {
    multiplier = 1125899906842624.0L;
  } else if (suffix == "Ei") {
    multiplier = 1152921504606846976.0L;
  } else if (suffix[0] == 'e' || suffix[0] == 'E') {
    // An optional sign and digits only (std::stoi alone would also skip blanks).
    const std::string_view digits = suffix.size() > 1 && (suffix[1] == '+' || suffix[1] == '-')
                                        ? suffix.substr(2)
                                        : suffix.substr(1);
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string_view::npos) {
      return bad("bad exponent");
    }
    std::size_t consumed = 0;
    int exponent = 0;
    try {
      exponent = std::stoi(std::string(suffix.substr(1)), &consumed);
    } catch (...) {
      return bad("bad exponent");
    }
    if (consumed != suffix.size() - 1 || exponent > 30 || exponent < -30)
      return bad("bad exponent");
    multiplier = std::pow(10.0L, static_cast<long double>(exponent));
  } else {
    return bad("unknown suffix");
  }
  const long double scaled = value * multiplier * static_cast<long double>(scale);
  if (!(scaled <= 9.0e18L)) return bad("too large");  // also catches inf and NaN
  // Round up, as Kubernetes does for milli-units (1.0001 cpu -> 1001m); tolerate float noise.
  const long double rounded = std::ceil(scaled - 1e-9L);
  const auto result = static_cast<std::int64_t>(rounded);
  return negative ? -result : result;
}

namespace {

// What a pod's annotations add to each of its container requests.
struct RequestHints {
  std::string models;          // gpumux.io/gpu-model: the models allowed, comma separated
  std::string workload_class;  // gpumux.io/workload-class
  core::Enforcement required = core::kEnforcesNothing;  // gpumux.io/require-enforcement
  std::string required_error;                           // the annotation does not read
};

// Reads the pod's annotations: its grant into `p` (or p.grant_error when unreadable), and the
// hints for its requests.
RequestHints ReadPodAnnotations(const json& metadata, PodInfo& p) {
  RequestHints hints;
  const json* annotations = JsonChild(metadata, "annotations");
  if (annotations == nullptr) return hints;
  hints.models = JsonString(*annotations, std::string(kAnnotationGpuModel).c_str());
  hints.workload_class = JsonString(*annotations, std::string(kAnnotationWorkloadClass).c_str());
  if (const json* r = JsonChild(*annotations, std::string(kAnnotationRequireEnforcement).c_str());
      r != nullptr) {
    const std::string where = "annotation " + std::string(kAnnotationRequireEnforcement);
    auto bits = r->is_string() ? ParseRequiredEnforcement(r->get_ref<const std::string&>(), where)
                               : core::MakeError(core::ErrorCode::kInvalidArgument,
                                                 where + " is not a string");
    hints.required = bits.value_or(core::kEnforcesNothing);
    if (!bits) hints.required_error = bits.error().message;
  }
  if (const json* g = JsonChild(*annotations, std::string(kAnnotationGrant).c_str());
      g != nullptr) {
    if (!g->is_string()) {
      p.grant_error = "annotation gpumux.io/grant is not a string";
    } else if (auto grant = DecodeGrant(g->get_ref<const std::string&>()); grant) {
      p.grant = std::move(*grant);
    } else {
      p.grant_error = grant.error().message;
    }
  }
  return hints;
}

// The request error of a pod whose init containers ask for gpumux resources (or have amounts
// that do not read), naming the first; "" when none does.
std::string InitContainersError(const json& spec, std::int64_t gpu_mem_unit_mib) {
  const json* init = JsonChild(spec, "initContainers");
  if (init == nullptr || !init->is_array()) return "";
  for (const json& c : *init) {
    auto a = ReadContainerAmounts(c, "init container " + JsonString(c, "name"), gpu_mem_unit_mib);
    if (!a || a->any) {
      return "init container \"" + JsonString(c, "name") +
             "\" asks for gpumux resources; only regular containers may";
    }
  }
  return "";
}

// The variables through which the device plugin hands a container its grant and its limits:
// the kubelet puts a pod's own env after the plugin's, so a pod that set one would override it
// (NVIDIA_VISIBLE_DEVICES=all widens the grant; a CUDA_MPS_ or HAMi-core variable lifts a
// limit). A name ending in '_' stands for every name it begins (CUDA_DEVICE_MEMORY_LIMIT_0).
constexpr std::string_view kGrantVariables[] = {"NVIDIA_VISIBLE_DEVICES",
                                                "CUDA_MPS_PIPE_DIRECTORY",
                                                "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
                                                "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
                                                "CUDA_DEVICE_MEMORY_LIMIT",
                                                "CUDA_DEVICE_MEMORY_LIMIT_",
                                                "CUDA_DEVICE_SM_LIMIT",
                                                "CUDA_DEVICE_SM_LIMIT_",
                                                "CUDA_DEVICE_MEMORY_SHARED_CACHE",
                                                "CUDA_DISABLE_CONTROL"};

bool IsGrantVariable(std::string_view name) {
  for (std::string_view v : kGrantVariables) {
    if (v.back() == '_' ? name.size() > v.size() && name.substr(0, v.size()) == v : name == v) {
      return true;
    }
  }
  return false;
}

// A pod asking gpumux for GPUs must not set a grant variable itself (kGrantVariables). The
// first container that sets one; "" when none does.
std::string OwnVisibleDevicesError(const json& spec) {
  for (const char* list : {"initContainers", "containers"}) {
    const json* cs = JsonChild(spec, list);
    if (cs == nullptr || !cs->is_array()) continue;
    for (const json& c : *cs) {
      const json* env = JsonChild(c, "env");
      if (env == nullptr || !env->is_array()) continue;
      for (const json& e : *env) {
        const std::string name = JsonString(e, "name");
        if (!IsGrantVariable(name)) continue;
        return std::string(list == std::string_view("containers") ? "container"
                                                                  : "init container") +
               " \"" + JsonString(c, "name") + "\" sets " + core::Shown(name, 64) +
               " itself; gpumux sets it from the pod's grant (remove it from the pod's env)";
      }
    }
  }
  return "";
}

}  // namespace

core::Result<PodInfo> DecodePod(const nlohmann::json& pod, std::int64_t gpu_mem_unit_mib) {
  if (gpu_mem_unit_mib < 1 || gpu_mem_unit_mib > kMaxGpuMemUnitMib) {
    std::string message = "the gpumux.io/gpu-mem unit must be 1..";
    message += std::to_string(kMaxGpuMemUnitMib);
    message += " MiB, not ";
    message += std::to_string(gpu_mem_unit_mib);
    return MakeError(ErrorCode::kInvalidArgument, std::move(message));
  }
  const json* metadata = JsonChild(pod, "metadata");
  if (metadata == nullptr || !metadata->is_object()) {
    return MakeError(ErrorCode::kInvalidArgument, "pod has no metadata");
  }
  PodInfo p;
  p.name = JsonString(*metadata, "name");
  p.ns = JsonString(*metadata, "namespace");
  p.uid = JsonString(*metadata, "uid");
  if (p.name.empty()) return MakeError(ErrorCode::kInvalidArgument, "pod has no metadata.name");
  if (p.ns.empty()) p.ns = "default";
  if (p.uid.empty()) {
    return MakeError(ErrorCode::kInvalidArgument, "pod " + p.Key() + " has no metadata.uid");
  }
  p.deleting = JsonChild(*metadata, "deletionTimestamp") != nullptr;
  if (const std::string created = JsonString(*metadata, "creationTimestamp"); !created.empty()) {
    if (auto t = core::ParseRfc3339(created)) p.created_unix_s = *t;
  }
  const RequestHints hints = ReadPodAnnotations(*metadata, p);
  if (const json* status = JsonChild(pod, "status"); status != nullptr)
    p.phase = JsonString(*status, "phase");
  const json* spec = JsonChild(pod, "spec");
  if (spec == nullptr) return p;
  p.node_name = JsonString(*spec, "nodeName");
  p.request_error = InitContainersError(*spec, gpu_mem_unit_mib);
  if (!p.request_error.empty()) return p;
  const json* containers = JsonChild(*spec, "containers");
  if (containers == nullptr || !containers->is_array()) return p;
  for (const json& c : *containers) {
    const std::string name = JsonString(c, "name");
    const std::string where = "container \"" + name + "\"";
    auto amounts = ReadContainerAmounts(c, where, gpu_mem_unit_mib);
    if (!amounts) {
      p.request_error = amounts.error().message;
      p.containers.clear();
      return p;
    }
    if (!amounts->any || (amounts->gpu == 0 && amounts->mem == 0 && amounts->milli == 0)) continue;
    ContainerRequest cr;
    cr.container = name;
    auto request = RequestOf(*amounts, p.Key() + "/" + name, &cr.milli_requested);
    if (!request) {
      p.request_error = request.error().message;
      p.containers.clear();
      return p;
    }
    cr.request = std::move(*request);
    cr.request.gpu_models = SplitModels(hints.models);
    cr.request.workload_class = hints.workload_class;
    cr.request.required_enforcement = hints.required;
    p.containers.push_back(std::move(cr));
  }
  if (!p.containers.empty()) {
    p.request_error =
        hints.required_error.empty() ? OwnVisibleDevicesError(*spec) : hints.required_error;
    if (!p.request_error.empty()) p.containers.clear();
  }
  return p;
}

namespace {

// The gpumux.io/gpus annotation as a JSON array (not yet checked element by element).
core::Result<json> GpuListOf(const json& annotation) {
  const std::string where = "annotation gpumux.io/gpus";
  if (!annotation.is_string()) {
    return MakeError(ErrorCode::kInvalidArgument, where + " is not a string");
  }
  auto doc = core::ParseJson(annotation.get_ref<const std::string&>(), where);
  if (!doc) return tl::unexpected(doc.error());
  if (!doc->is_array()) {
    return MakeError(ErrorCode::kInvalidArgument, where + ": not a JSON array");
  }
  return doc;
}

// Also the enforcement record of each GPU (enforcement.h) into `enforcement`, in index order.
core::Result<std::vector<core::GpuSpec>> GpusFromList(const json& doc, const NodeDefaults& defaults,
                                                      std::vector<GpuEnforcement>& enforcement) {
  const std::string where = "annotation gpumux.io/gpus";
  std::vector<core::GpuSpec> gpus;
  std::vector<GpuEnforcement> records;
  for (std::size_t i = 0; i < doc.size(); ++i) {
    const json& g = doc[i];
    const std::string gw = where + "[" + std::to_string(i) + "]";
    if (!g.is_object()) return MakeError(ErrorCode::kInvalidArgument, gw + ": not an object");
    core::GpuSpec spec;
    const json* index = JsonChild(g, "index");
    if (index == nullptr || !index->is_number_integer() || index->get<std::int64_t>() < 0 ||
        index->get<std::int64_t>() > 1024) {
      return MakeError(ErrorCode::kInvalidArgument, gw + ": \"index\" must be an integer 0..1024");
    }
    spec.index = index->get<int>();
    spec.uuid = JsonString(g, "uuid");
    spec.model = JsonString(g, "model");
    if (spec.model.empty()) spec.model = defaults.gpu_model;
    const json* memory = JsonChild(g, "memory_mib");
    if (memory == nullptr || !memory->is_number_integer() || memory->get<std::int64_t>() < 0 ||
        memory->get<std::int64_t>() > core::kMaxGpuMemoryMib) {
      return MakeError(ErrorCode::kInvalidArgument, gw + ": \"memory_mib\" must be an integer 0.." +
                                                        std::to_string(core::kMaxGpuMemoryMib));
    }
    spec.memory_mib = memory->get<core::MiB>();
    const std::string health = JsonString(g, "health");
    if (health.empty() || health == "Healthy") {
      spec.health = core::GpuHealth::kHealthy;
    } else if (health == "Unhealthy") {
      spec.health = core::GpuHealth::kUnhealthy;
    } else {
      return MakeError(ErrorCode::kInvalidArgument,
                       gw + ": \"health\" must be Healthy or Unhealthy, not \"" + health + "\"");
    }
    records.push_back(EnforcementFromJson(JsonChild(g, "enforcement")));
    spec.enforces = records.back().Bits();
    gpus.push_back(std::move(spec));
  }
  std::vector<std::size_t> order(gpus.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return gpus[a].index < gpus[b].index; });
  std::vector<core::GpuSpec> sorted;
  enforcement.clear();
  for (std::size_t i = 0; i < order.size(); ++i) {
    if (gpus[order[i]].index != static_cast<int>(i)) {
      return MakeError(ErrorCode::kInvalidArgument, where + ": GPU indices must be 0.." +
                                                        std::to_string(gpus.size() - 1) +
                                                        " without gaps or repeats");
    }
    sorted.push_back(std::move(gpus[order[i]]));
    enforcement.push_back(std::move(records[order[i]]));
  }
  return sorted;
}

// "1024": a positive decimal integer of at most kMaxGpuMemUnitMib.
core::Result<std::int64_t> GpuMemUnitFromAnnotation(const json& value) {
  std::string where = "annotation ";
  where += kAnnotationGpuMemUnit;
  if (!value.is_string()) return MakeError(ErrorCode::kInvalidArgument, where + " is not a string");
  const std::string& text = value.get_ref<const std::string&>();
  const bool digits = !text.empty() && text.size() <= 8 &&
                      text.find_first_not_of("0123456789") == std::string::npos;
  const std::int64_t unit = digits ? std::stoll(text) : 0;
  if (unit < 1 || unit > kMaxGpuMemUnitMib) {
    std::string message = where + ": \"" + text + "\" is not a whole number of MiB in 1..";
    message += std::to_string(kMaxGpuMemUnitMib);
    return MakeError(ErrorCode::kInvalidArgument, std::move(message));
  }
  return unit;
}

}  // namespace

namespace {

// "status.allocatable.cpu", or status.allocatable["gpumux.io/gpu"] for names with dots.
std::string NodeFieldName(const char* section, std::string_view field) {
  std::string out = "status.";
  out += section;
  if (field.find_first_of("./") == std::string_view::npos) {
    out += '.';
    out += field;
  } else {
    out += "[\"";
    out += field;
    out += "\"]";
  }
  return out;
}

// A node's resource list entry (status.allocatable or status.capacity): absent, or a
// non-negative quantity times `scale`, else an error naming the node and the field.
class NodeQuantities {
 public:
  NodeQuantities(const std::string& node, const json* list, const char* section)
      : node_(node), list_(list), section_(section) {}

  core::Result<std::optional<std::int64_t>> Read(std::string_view field, std::int64_t scale) const {
    const json* value = list_ != nullptr ? JsonChild(*list_, std::string(field).c_str()) : nullptr;
    if (value == nullptr) return std::nullopt;
    auto q = QuantityOf(*value, scale);
    if (!q) return Error(field, ": " + q.error().message);
    if (*q < 0) return Error(field, " is " + core::JsonSummary(*value) + ", a negative quantity");
    return *q;
  }
  // `field` is above `limit`: "... is <value>, more than the <limit> <unit> a node may have".
  tl::unexpected<core::Error> TooMuch(std::string_view field, std::int64_t limit,
                                      const char* unit) const {
    const json* value = JsonChild(*list_, std::string(field).c_str());
    return Error(field, " is " + core::JsonSummary(*value) + ", more than the " +
                            std::to_string(limit) + " " + unit + " a node may have");
  }

 private:
  tl::unexpected<core::Error> Error(std::string_view field, const std::string& what) const {
    return MakeError(ErrorCode::kInvalidArgument,
                     "node " + node_ + ": " + NodeFieldName(section_, field) + what);
  }
  const std::string& node_;
  const json* list_;
  const char* section_;
};

// A node's resource list: status.allocatable, else status.capacity; list is null when the
// node has neither. Error when the list is not an object.
struct ResourceList {
  const json* list;
  const char* section;  // "allocatable" or "capacity"
};
core::Result<ResourceList> NodeResources(const json& node, const std::string& name) {
  const json* status = JsonChild(node, "status");
  ResourceList resources{status != nullptr ? JsonChild(*status, "allocatable") : nullptr,
                         "allocatable"};
  if (resources.list == nullptr && status != nullptr) {
    resources.list = JsonChild(*status, "capacity");
    resources.section = "capacity";
  }
  if (resources.list != nullptr && !resources.list->is_object()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "node " + name + ": status." + resources.section + " is not an object");
  }
  return resources;
}

// Reads the node's CPU, memory and pod count into `spec`; returns its gpumux.io/gpu count
// (empty when absent), read but not yet checked against the most a node may have.
core::Result<std::optional<std::int64_t>> ReadNodeCapacity(const NodeQuantities& quantities,
                                                           core::NodeSpec& spec) {
  auto cpu = quantities.Read("cpu", 1000);
  if (!cpu) return tl::unexpected(cpu.error());
  if (cpu->value_or(0) > core::kMaxNodeCpuMilli) {
    return quantities.TooMuch("cpu", core::kMaxNodeCpuMilli, "milli-CPU");
  }
  spec.cpu_milli = cpu->value_or(0);
  auto memory = quantities.Read("memory", 1);
  if (!memory) return tl::unexpected(memory.error());
  spec.memory_mib = memory->value_or(0) / (1024 * 1024);
  auto pods = quantities.Read("pods", 1);
  if (!pods) return tl::unexpected(pods.error());
  // Kubernetes' default when absent; beyond 2^20 pods, the count means "no limit" to us.
  spec.max_pods = static_cast<int>(std::min<std::int64_t>(pods->value_or(110), 1 << 20));
  return quantities.Read(kResourceGpu, 1);
}

// Reads the device plugin's annotations other than the GPU list (`annotations` may be null):
// the gpu-mem unit (or gpu_mem_unit_error) and the plugin's state.
void ReadDevicePluginAnnotations(const json* annotations, NodeInfo& info) {
  if (annotations == nullptr) return;
  if (const json* unit = JsonChild(*annotations, std::string(kAnnotationGpuMemUnit).c_str());
      unit != nullptr) {
    auto parsed = GpuMemUnitFromAnnotation(*unit);
    if (parsed) {
      info.gpu_mem_unit_mib = *parsed;
    } else {
      info.gpu_mem_unit_error = parsed.error().message;
    }
  }
  if (const json* state = JsonChild(*annotations, "gpumux.io/device-plugin"); state != nullptr) {
    info.device_plugin_state =
        state->is_string() ? state->get<std::string>() : core::JsonSummary(*state);
  }
}

// The node's GPUs from its gpumux.io/gpus annotation `gpus`. A malformed list leaves the node
// without GPUs (gpus_error); a well-formed one naming more GPUs than a node may have describes
// a node gpumux cannot model: the node is refused.
core::Result<void> GpusFromAnnotation(const json& gpus, const NodeDefaults& defaults,
                                      NodeInfo& info) {
  auto list = GpuListOf(gpus);
  if (list && list->size() > static_cast<std::size_t>(core::kMaxGpusPerNode)) {
    std::string message = "node " + info.spec.name + ": gpumux.io/gpus lists ";
    message += std::to_string(list->size());
    message += " GPUs, more than the ";
    message += std::to_string(core::kMaxGpusPerNode);
    message += " a node may have";
    return MakeError(ErrorCode::kInvalidArgument, std::move(message));
  }
  auto parsed = list ? GpusFromList(*list, defaults, info.enforcement)
                     : core::Result<std::vector<core::GpuSpec>>(tl::unexpected(list.error()));
  if (parsed) {
    info.spec.gpus = std::move(*parsed);
    info.gpus_from_annotation = true;
  } else {
    info.gpus_error = parsed.error().message;
  }
  return {};
}

// The node's `count` GPUs of its gpumux.io/gpu resource (no annotation lists them), each with
// the model and memory of `defaults`. Error when they are more than a node may have, or the
// default memory is out of range.
core::Result<void> GpusFromResource(std::int64_t count, const NodeQuantities& quantities,
                                    const NodeDefaults& defaults, NodeInfo& info) {
  if (count > core::kMaxGpusPerNode) {
    return quantities.TooMuch(kResourceGpu, core::kMaxGpusPerNode, "GPUs");
  }
  if (count > 0 &&
      (defaults.gpu_memory_mib < 0 || defaults.gpu_memory_mib > core::kMaxGpuMemoryMib)) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "node " + info.spec.name + ": the default GPU memory for nodes without " +
                         std::string(kAnnotationGpus) + " is " +
                         std::to_string(defaults.gpu_memory_mib) + " MiB, not in 0.." +
                         std::to_string(core::kMaxGpuMemoryMib));
  }
  for (std::int64_t i = 0; i < count; ++i) {
    core::GpuSpec g;
    g.index = static_cast<int>(i);
    g.model = defaults.gpu_model;
    g.memory_mib = defaults.gpu_memory_mib;
    info.spec.gpus.push_back(std::move(g));
  }
  return {};
}

}  // namespace

core::Result<NodeInfo> DecodeNode(const nlohmann::json& node, const NodeDefaults& defaults) {
  const json* metadata = JsonChild(node, "metadata");
  NodeInfo info;
  if (metadata != nullptr) info.spec.name = JsonString(*metadata, "name");
  if (info.spec.name.empty()) {
    return MakeError(ErrorCode::kInvalidArgument, "node has no metadata.name");
  }
  const std::string& name = info.spec.name;
  if (const json* labels = JsonChild(*metadata, "labels");
      labels != nullptr && labels->is_object()) {
    for (const auto& [k, v] : labels->items()) {
      if (v.is_string()) info.spec.labels.emplace(k, v.get<std::string>());
    }
  }
  if (const json* spec = JsonChild(node, "spec"); spec != nullptr) {
    const json* u = JsonChild(*spec, "unschedulable");
    info.unschedulable = u != nullptr && u->is_boolean() && u->get<bool>();
  }
  auto resources = NodeResources(node, name);
  if (!resources) return tl::unexpected(resources.error());
  const NodeQuantities quantities(name, resources->list, resources->section);
  auto gpu_count = ReadNodeCapacity(quantities, info.spec);
  if (!gpu_count) return tl::unexpected(gpu_count.error());

  const json* annotations = JsonChild(*metadata, "annotations");
  ReadDevicePluginAnnotations(annotations, info);
  const json* gpus = annotations != nullptr
                         ? JsonChild(*annotations, std::string(kAnnotationGpus).c_str())
                         : nullptr;
  auto added = gpus != nullptr
                   ? GpusFromAnnotation(*gpus, defaults, info)
                   : GpusFromResource(gpu_count->value_or(0), quantities, defaults, info);
  if (!added) return tl::unexpected(added.error());
  return info;
}

const json* JsonChild(const json& object, const char* key) {
  if (!object.is_object() || !object.contains(key)) return nullptr;
  const json& value = object.at(key);
  return value.is_null() ? nullptr : &value;
}

std::string JsonString(const json& object, const char* key) {
  const json* v = JsonChild(object, key);
  return v != nullptr && v->is_string() ? v->get<std::string>() : std::string();
}

}  // namespace gpumux::kube
