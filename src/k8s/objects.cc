#include "gpumux/k8s/objects.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

namespace gpumux::k8s {
namespace {

using core::ErrorCode;
using core::MakeError;
using nlohmann::json;

const json* Child(const json& object, const char* key) {
  if (!object.is_object() || !object.contains(key)) return nullptr;
  const json& value = object.at(key);
  return value.is_null() ? nullptr : &value;
}

std::string StringAt(const json& object, const char* key) {
  const json* v = Child(object, key);
  return v != nullptr && v->is_string() ? v->get<std::string>() : std::string();
}

// A quantity given as a JSON string ("8192") or number (8192).
core::Result<std::int64_t> QuantityOf(const json& value, std::int64_t scale) {
  if (value.is_string()) return ParseQuantity(value.get_ref<const std::string&>(), scale);
  if (value.is_number_integer()) return value.get<std::int64_t>() * scale;
  if (value.is_number()) return ParseQuantity(value.dump(), scale);
  return MakeError(ErrorCode::kInvalidArgument, "not a quantity: " + value.dump());
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
  const json* resources = Child(container, "resources");
  if (resources == nullptr) return a;
  for (const char* section : {"limits", "requests"}) {
    const json* list = Child(*resources, section);
    if (list == nullptr || !list->is_object()) continue;
    const std::pair<std::string_view, std::int64_t*> fields[] = {
        {kResourceGpu, &a.gpu}, {kResourceGpuMem, &a.mem}, {kResourceGpuMilli, &a.milli}};
    bool found_here = false;
    for (const auto& [name, target] : fields) {
      const auto it = list->find(std::string(name));
      if (it == list->end()) continue;
      auto q = QuantityOf(*it, 1);
      if (!q) {
        return MakeError(ErrorCode::kInvalidArgument,
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
    return MakeError(ErrorCode::kInvalidArgument,
                     "bad quantity \"" + original + "\": " + why);
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
    std::size_t consumed = 0;
    int exponent = 0;
    try {
      exponent = std::stoi(std::string(suffix.substr(1)), &consumed);
    } catch (...) {
      return bad("bad exponent");
    }
    if (consumed != suffix.size() - 1 || exponent > 30 || exponent < -30) return bad("bad exponent");
    multiplier = std::pow(10.0L, static_cast<long double>(exponent));
  } else {
    return bad("unknown suffix");
  }
  long double scaled = value * multiplier * static_cast<long double>(scale);
  if (scaled > 9.0e18L) return bad("too large");
  // Round up, as Kubernetes does for milli-units (1.0001 cpu -> 1001m); tolerate float noise.
  const long double rounded = std::ceil(scaled - 1e-9L);
  const auto result = static_cast<std::int64_t>(rounded);
  return negative ? -result : result;
}

core::Result<PodInfo> DecodePod(const nlohmann::json& pod, std::int64_t gpu_mem_unit_mib) {
  if (gpu_mem_unit_mib < 1 || gpu_mem_unit_mib > kMaxGpuMemUnitMib) {
    std::string message = "the gpumux.io/gpu-mem unit must be 1..";
    message += std::to_string(kMaxGpuMemUnitMib);
    message += " MiB, not ";
    message += std::to_string(gpu_mem_unit_mib);
    return MakeError(ErrorCode::kInvalidArgument, std::move(message));
  }
  const json* metadata = Child(pod, "metadata");
  if (metadata == nullptr || !metadata->is_object()) {
    return MakeError(ErrorCode::kInvalidArgument, "pod has no metadata");
  }
  PodInfo p;
  p.name = StringAt(*metadata, "name");
  p.ns = StringAt(*metadata, "namespace");
  p.uid = StringAt(*metadata, "uid");
  if (p.name.empty()) return MakeError(ErrorCode::kInvalidArgument, "pod has no metadata.name");
  if (p.ns.empty()) p.ns = "default";
  if (p.uid.empty()) {
    return MakeError(ErrorCode::kInvalidArgument, "pod " + p.Key() + " has no metadata.uid");
  }
  p.deleting = Child(*metadata, "deletionTimestamp") != nullptr;
  std::string models, workload_class;
  if (const json* annotations = Child(*metadata, "annotations"); annotations != nullptr) {
    models = StringAt(*annotations, std::string(kAnnotationGpuModel).c_str());
    workload_class = StringAt(*annotations, std::string(kAnnotationWorkloadClass).c_str());
    if (const json* g = Child(*annotations, std::string(kAnnotationGrant).c_str()); g != nullptr) {
      if (!g->is_string()) {
        p.grant_error = "annotation gpumux.io/grant is not a string";
      } else if (auto grant = DecodeGrant(g->get_ref<const std::string&>()); grant) {
        p.grant = std::move(*grant);
      } else {
        p.grant_error = grant.error().message;
      }
    }
  }
  if (const json* status = Child(pod, "status"); status != nullptr) p.phase = StringAt(*status, "phase");
  const json* spec = Child(pod, "spec");
  if (spec == nullptr) return p;
  p.node_name = StringAt(*spec, "nodeName");
  if (const json* init = Child(*spec, "initContainers"); init != nullptr && init->is_array()) {
    for (const json& c : *init) {
      auto a = ReadContainerAmounts(c, "init container " + StringAt(c, "name"), gpu_mem_unit_mib);
      if (!a || a->any) {
        p.request_error = "init container \"" + StringAt(c, "name") +
                          "\" asks for gpumux resources; only regular containers may";
        return p;
      }
    }
  }
  const json* containers = Child(*spec, "containers");
  if (containers == nullptr || !containers->is_array()) return p;
  for (const json& c : *containers) {
    const std::string name = StringAt(c, "name");
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
    cr.request.gpu_models = SplitModels(models);
    cr.request.workload_class = workload_class;
    p.containers.push_back(std::move(cr));
  }
  return p;
}

namespace {

core::Result<std::vector<core::GpuSpec>> GpusFromAnnotation(const std::string& text,
                                                            const NodeDefaults& defaults) {
  const std::string where = "annotation gpumux.io/gpus";
  const json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_array()) {
    return MakeError(ErrorCode::kInvalidArgument, where + ": not a JSON array");
  }
  std::vector<core::GpuSpec> gpus;
  for (std::size_t i = 0; i < doc.size(); ++i) {
    const json& g = doc[i];
    const std::string gw = where + "[" + std::to_string(i) + "]";
    if (!g.is_object()) return MakeError(ErrorCode::kInvalidArgument, gw + ": not an object");
    core::GpuSpec spec;
    const json* index = Child(g, "index");
    if (index == nullptr || !index->is_number_integer() || index->get<std::int64_t>() < 0 ||
        index->get<std::int64_t>() > 1024) {
      return MakeError(ErrorCode::kInvalidArgument, gw + ": \"index\" must be an integer 0..1024");
    }
    spec.index = index->get<int>();
    spec.uuid = StringAt(g, "uuid");
    spec.model = StringAt(g, "model");
    if (spec.model.empty()) spec.model = defaults.gpu_model;
    const json* memory = Child(g, "memory_mib");
    if (memory == nullptr || !memory->is_number_integer() || memory->get<std::int64_t>() < 0) {
      return MakeError(ErrorCode::kInvalidArgument,
                       gw + ": \"memory_mib\" must be a non-negative integer");
    }
    spec.memory_mib = memory->get<core::MiB>();
    const std::string health = StringAt(g, "health");
    if (health.empty() || health == "Healthy") {
      spec.health = core::GpuHealth::kHealthy;
    } else if (health == "Unhealthy") {
      spec.health = core::GpuHealth::kUnhealthy;
    } else {
      return MakeError(ErrorCode::kInvalidArgument,
                       gw + ": \"health\" must be Healthy or Unhealthy, not \"" + health + "\"");
    }
    gpus.push_back(std::move(spec));
  }
  std::sort(gpus.begin(), gpus.end(),
            [](const core::GpuSpec& a, const core::GpuSpec& b) { return a.index < b.index; });
  for (std::size_t i = 0; i < gpus.size(); ++i) {
    if (gpus[i].index != static_cast<int>(i)) {
      return MakeError(ErrorCode::kInvalidArgument,
                       where + ": GPU indices must be 0.." + std::to_string(gpus.size() - 1) +
                           " without gaps or repeats");
    }
  }
  return gpus;
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

core::Result<NodeInfo> DecodeNode(const nlohmann::json& node, const NodeDefaults& defaults) {
  const json* metadata = Child(node, "metadata");
  NodeInfo info;
  if (metadata != nullptr) info.spec.name = StringAt(*metadata, "name");
  if (info.spec.name.empty()) {
    return MakeError(ErrorCode::kInvalidArgument, "node has no metadata.name");
  }
  if (const json* labels = Child(*metadata, "labels"); labels != nullptr && labels->is_object()) {
    for (const auto& [k, v] : labels->items()) {
      if (v.is_string()) info.spec.labels.emplace(k, v.get<std::string>());
    }
  }
  if (const json* spec = Child(node, "spec"); spec != nullptr) {
    const json* u = Child(*spec, "unschedulable");
    info.unschedulable = u != nullptr && u->is_boolean() && u->get<bool>();
  }
  const json* status = Child(node, "status");
  const json* allocatable = status != nullptr ? Child(*status, "allocatable") : nullptr;
  if (allocatable == nullptr && status != nullptr) allocatable = Child(*status, "capacity");
  std::int64_t gpu_count = 0;
  info.spec.max_pods = 110;
  if (allocatable != nullptr && allocatable->is_object()) {
    if (const json* cpu = Child(*allocatable, "cpu"); cpu != nullptr) {
      if (auto q = QuantityOf(*cpu, 1000); q) info.spec.cpu_milli = *q;
    }
    if (const json* mem = Child(*allocatable, "memory"); mem != nullptr) {
      if (auto q = QuantityOf(*mem, 1); q) info.spec.memory_mib = *q / (1024 * 1024);
    }
    if (const json* pods = Child(*allocatable, "pods"); pods != nullptr) {
      if (auto q = QuantityOf(*pods, 1); q) info.spec.max_pods = static_cast<int>(std::clamp<std::int64_t>(*q, 0, 1 << 20));
    }
    if (const json* g = Child(*allocatable, std::string(kResourceGpu).c_str()); g != nullptr) {
      if (auto q = QuantityOf(*g, 1); q) gpu_count = std::clamp<std::int64_t>(*q, 0, 1024);
    }
  }
  const json* annotations = Child(*metadata, "annotations");
  if (const json* unit = annotations != nullptr
                             ? Child(*annotations, std::string(kAnnotationGpuMemUnit).c_str())
                             : nullptr;
      unit != nullptr) {
    auto parsed = GpuMemUnitFromAnnotation(*unit);
    if (parsed) {
      info.gpu_mem_unit_mib = *parsed;
    } else {
      info.gpu_mem_unit_error = parsed.error().message;
    }
  }
  const json* gpus = annotations != nullptr
                         ? Child(*annotations, std::string(kAnnotationGpus).c_str())
                         : nullptr;
  if (gpus != nullptr) {
    auto parsed = gpus->is_string()
                      ? GpusFromAnnotation(gpus->get_ref<const std::string&>(), defaults)
                      : core::Result<std::vector<core::GpuSpec>>(MakeError(
                            ErrorCode::kInvalidArgument, "annotation gpumux.io/gpus is not a string"));
    if (parsed) {
      info.spec.gpus = std::move(*parsed);
      info.gpus_from_annotation = true;
    } else {
      info.gpus_error = parsed.error().message;
    }
    return info;
  }
  for (std::int64_t i = 0; i < gpu_count; ++i) {
    core::GpuSpec g;
    g.index = static_cast<int>(i);
    g.model = defaults.gpu_model;
    g.memory_mib = defaults.gpu_memory_mib;
    info.spec.gpus.push_back(std::move(g));
  }
  return info;
}

}  // namespace gpumux::k8s
