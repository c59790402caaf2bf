#include "gpumux/admission/translate.h"

#include <cmath>
#include <cstdlib>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "gpumux/core/json.h"
#include "gpumux/kube/base64.h"
#include "gpumux/kube/enforcement.h"
#include "gpumux/kube/objects.h"

namespace gpumux::admission {
namespace {

using nlohmann::json;

constexpr std::string_view kNvidiaGpu = "nvidia.com/gpu";
constexpr std::string_view kHamiMem = "nvidia.com/gpumem";
constexpr std::string_view kHamiCores = "nvidia.com/gpucores";
constexpr std::string_view kHamiMemPercent = "nvidia.com/gpumem-percentage";
constexpr std::string_view kGpushareMem = "aliyun.com/gpu-mem";
constexpr std::string_view kForeign[] = {kNvidiaGpu, kHamiMem, kHamiCores, kHamiMemPercent,
                                         kGpushareMem};
constexpr std::string_view kFractionAnnotations[] = {"gpu-fraction", "gpumux.io/gpu-fraction"};
constexpr const char* kFractionContainerAnnotation = "gpu-fraction-container-name";

// The foreign amounts one container asks for (limits, else requests) and what was written.
struct Foreign {
  std::optional<std::int64_t> gpu, mem, cores, mem_percent, gpushare;
  json written = json::object();  // name -> the value as the pod had it
  bool gpumux = false;            // it also names a gpumux.io resource
};

// A whole number from a quantity as the API server writes it ("2", 2); nullopt with `error`.
std::optional<std::int64_t> WholeNumber(const json& value, std::string_view name,
                                        const std::string& where, std::string& error) {
  std::string text;
  if (value.is_string()) {
    text = value.get<std::string>();
  } else if (value.is_number()) {
    text = value.dump();  // a scalar: its digits, in its own type (no wrap above INT64_MAX)
  }
  auto milli = kube::ParseQuantity(text, 1000);
  if (!milli || *milli < 0 || *milli % 1000 != 0) {
    error = where + ": " + std::string(name) + " is " + core::JsonSummary(value) +
            ", not a whole number";
    return std::nullopt;
  }
  return *milli / 1000;
}

std::optional<Foreign> ReadForeign(const json& container, const std::string& where,
                                   std::string& error) {
  Foreign f;
  const json* resources = kube::JsonChild(container, "resources");
  if (resources == nullptr) return f;
  for (const char* section : {"requests", "limits"}) {  // limits last: they win
    const json* map = kube::JsonChild(*resources, section);
    if (map == nullptr || !map->is_object()) continue;
    for (const auto& [key, value] : map->items()) {
      if (key.rfind("gpumux.io/", 0) == 0) f.gpumux = true;
      std::optional<std::int64_t>* slot = key == kNvidiaGpu        ? &f.gpu
                                          : key == kHamiMem        ? &f.mem
                                          : key == kHamiCores      ? &f.cores
                                          : key == kHamiMemPercent ? &f.mem_percent
                                          : key == kGpushareMem    ? &f.gpushare
                                                                   : nullptr;
      if (slot == nullptr) continue;
      *slot = WholeNumber(value, key, where, error);
      if (!*slot) return std::nullopt;
      f.written[key] = value;
    }
  }
  return f;
}

bool AsksForeign(const Foreign& f) { return !f.written.empty(); }

std::int64_t CeilDiv(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// gpumux's amounts for one container's foreign request; "" or the reason it is refused.
std::string GpumuxAmounts(const Foreign& f, const TranslateOptions& o, const std::string& where,
                          json& out) {
  if (f.gpumux) {
    return where + " asks for both gpumux.io and " + f.written.begin().key() +
           " resources: write one or the other";
  }
  if (f.mem_percent) {
    return where +
           ": nvidia.com/gpumem-percentage cannot be translated (the GPU's memory is "
           "unknown before the pod is placed): ask for nvidia.com/gpumem in MiB or "
           "gpumux.io/gpu-mem";
  }
  const bool hami = f.mem || f.cores;
  if (f.gpushare && (hami || f.gpu)) {
    return where + " mixes aliyun.com/gpu-mem with nvidia.com resources: write one of them";
  }
  if (f.cores && *f.cores > 100) {
    return where + ": nvidia.com/gpucores is " + std::to_string(*f.cores) +
           ", more than 100 (percent of one GPU)";
  }
  if (hami) {
    const std::int64_t gpus = f.gpu.value_or(1);
    if (gpus < 1) return where + ": nvidia.com/gpumem or gpucores with nvidia.com/gpu: 0";
    if (gpus > 1) out["gpumux.io/gpu"] = std::to_string(gpus);
    if (f.mem && *f.mem > 0)
      out["gpumux.io/gpu-mem"] = std::to_string(CeilDiv(*f.mem, o.gpu_mem_unit_mib));
    if (f.cores && *f.cores > 0) out["gpumux.io/gpu-milli"] = std::to_string(*f.cores * 10);
    if (out.empty()) out["gpumux.io/gpu"] = std::to_string(gpus);  // 0 MiB and 0 %: a whole GPU
  } else if (f.gpushare) {
    if (*f.gpushare > 0) {
      out["gpumux.io/gpu-mem"] =
          std::to_string(CeilDiv(*f.gpushare * o.gpushare_mem_unit_mib, o.gpu_mem_unit_mib));
    }
  } else if (f.gpu && *f.gpu > 0) {
    out["gpumux.io/gpu"] = std::to_string(*f.gpu);
  }
  return {};
}

// The container's resources with the foreign names replaced by `amounts` in limits and requests.
json Rewritten(const json& container, const json& amounts) {
  json resources = container.contains("resources") && container["resources"].is_object()
                       ? container["resources"]
                       : json::object();
  for (const char* section : {"limits", "requests"}) {
    json map = resources.contains(section) && resources[section].is_object() ? resources[section]
                                                                             : json::object();
    for (std::string_view name : kForeign) map.erase(std::string(name));
    for (const auto& [key, value] : amounts.items()) map[key] = value;
    if (map.empty()) {
      resources.erase(section);
    } else {
      resources[section] = std::move(map);
    }
  }
  return resources;
}

std::string Escape(std::string_view key) {  // RFC 6901
  std::string out;
  for (const char c : key) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

struct Fraction {
  double value = 0;
  std::string text, container;
};

// The pod's fraction annotation; "" or the reason it is refused.
std::string ReadFraction(const json& pod, std::optional<Fraction>& out) {
  const json* metadata = kube::JsonChild(pod, "metadata");
  const json* annotations =
      metadata == nullptr ? nullptr : kube::JsonChild(*metadata, "annotations");
  if (annotations == nullptr || !annotations->is_object()) return {};
  for (std::string_view name : kFractionAnnotations) {
    const std::string text = kube::JsonString(*annotations, std::string(name).c_str());
    if (text.empty()) continue;
    char* end = nullptr;
    const double value = std::strtod(text.c_str(), &end);
    if (end == text.c_str() || *end != '\0' || !(value > 0.0) || value > 1.0) {
      return "annotation " + std::string(name) + " is \"" + text + "\", not a number in (0, 1]";
    }
    out = Fraction{value, text, kube::JsonString(*annotations, kFractionContainerAnnotation)};
    return {};
  }
  return {};
}

void AddAnnotation(const json& pod, const json& record, json& patch) {
  const json* metadata = kube::JsonChild(pod, "metadata");
  const json* annotations =
      metadata == nullptr ? nullptr : kube::JsonChild(*metadata, "annotations");
  const std::string value = record.dump();
  if (metadata == nullptr || !metadata->is_object()) {  // not from an API server, but valid JSON
    patch.push_back({{"op", "add"},
                     {"path", "/metadata"},
                     {"value", {{"annotations", {{kAnnotationTranslatedFrom, value}}}}}});
  } else if (annotations == nullptr || !annotations->is_object()) {
    patch.push_back({{"op", "add"},
                     {"path", "/metadata/annotations"},
                     {"value", {{kAnnotationTranslatedFrom, value}}}});
  } else {
    patch.push_back({{"op", "add"},
                     {"path", "/metadata/annotations/" + Escape(kAnnotationTranslatedFrom)},
                     {"value", value}});
  }
}

// Why a pod with so many containers is not translated; "" when it has at most kMaxPodContainers.
std::string TooManyContainers(const json* spec) {
  std::size_t n = 0;
  for (const char* list : {"initContainers", "containers"}) {
    const json* cs = spec == nullptr ? nullptr : kube::JsonChild(*spec, list);
    if (cs != nullptr && cs->is_array()) n += cs->size();
  }
  if (n <= kMaxPodContainers) return "";
  return "the pod has " + std::to_string(n) + " containers; gpumux translates pods of at most " +
         std::to_string(kMaxPodContainers);
}

void SetScheduler(const json& pod, const TranslateOptions& o, json& record, json& patch) {
  const json* spec = kube::JsonChild(pod, "spec");
  const std::string current = spec == nullptr ? "" : kube::JsonString(*spec, "schedulerName");
  if (current.empty() || current == "default-scheduler") {
    record["schedulerName"] = current;
    patch.push_back({{"op", "add"}, {"path", "/spec/schedulerName"}, {"value", o.scheduler_name}});
  } else if (current != o.scheduler_name) {
    record["schedulerNameKept"] = current;
  }
}

}  // namespace

Translation TranslatePod(const json& pod, const TranslateOptions& o) {
  Translation t;
  const json* metadata = kube::JsonChild(pod, "metadata");
  const json* annotations =
      metadata == nullptr ? nullptr : kube::JsonChild(*metadata, "annotations");
  if (annotations != nullptr && annotations->contains(kAnnotationTranslatedFrom)) return t;
  std::optional<Fraction> fraction;
  if (std::string bad = ReadFraction(pod, fraction); !bad.empty()) {
    t.denied = bad;
    return t;
  }
  const json* spec = kube::JsonChild(pod, "spec");
  t.denied = TooManyContainers(spec);
  if (!t.denied.empty()) return t;
  bool fraction_placed = !fraction;
  json containers_record = json::object();
  for (const char* list : {"initContainers", "containers"}) {
    const json* containers = spec == nullptr ? nullptr : kube::JsonChild(*spec, list);
    if (containers == nullptr || !containers->is_array()) continue;
    for (std::size_t i = 0; i < containers->size(); ++i) {
      const json& c = (*containers)[i];
      const std::string name = kube::JsonString(c, "name");
      const std::string where = "container " + name;
      std::string error;
      auto foreign = ReadForeign(c, where, error);
      if (!foreign) {
        t.denied = error;
        return t;
      }
      json amounts = json::object();
      const bool fraction_here =
          !fraction_placed && std::string_view(list) == "containers" &&
          (fraction->container.empty() ? i == 0 : fraction->container == name);
      if (fraction_here) {
        fraction_placed = true;
        if (AsksForeign(*foreign) || foreign->gpumux) {
          t.denied =
              "the pod's gpu-fraction is for " + where + ", which asks for GPU resources itself";
          return t;
        }
        amounts["gpumux.io/gpu-milli"] =
            std::to_string(std::max<std::int64_t>(1, std::llround(fraction->value * 1000.0)));
        const auto mem = static_cast<std::int64_t>(
            std::floor(fraction->value * static_cast<double>(o.fraction_gpu_memory_mib) /
                       static_cast<double>(o.gpu_mem_unit_mib)));
        if (mem > 0) amounts["gpumux.io/gpu-mem"] = std::to_string(mem);
      } else if (AsksForeign(*foreign)) {
        if (std::string bad = GpumuxAmounts(*foreign, o, where, amounts); !bad.empty()) {
          t.denied = bad;
          return t;
        }
        containers_record[name] = foreign->written;
      } else {
        continue;
      }
      if (amounts.contains("gpumux.io/gpu-mem") || amounts.contains("gpumux.io/gpu-milli")) {
        t.shares.push_back(
            {name, amounts.contains("gpumux.io/gpu-mem"), amounts.contains("gpumux.io/gpu-milli")});
      }
      t.patch.push_back(
          {{"op", "add"},
           {"path", "/spec/" + std::string(list) + "/" + std::to_string(i) + "/resources"},
           {"value", Rewritten(c, amounts)}});
    }
  }
  if (!fraction_placed) {
    t.denied = "the pod's gpu-fraction names container \"" + fraction->container +
               "\" (gpu-fraction-container-name), which the pod does not have";
    return t;
  }
  if (t.patch.empty()) return t;
  if (!containers_record.empty()) t.record["containers"] = containers_record;
  if (fraction) {
    t.record["fraction"] = fraction->text;
    if (!fraction->container.empty()) t.record["fractionContainer"] = fraction->container;
  }
  SetScheduler(pod, o, t.record, t.patch);
  AddAnnotation(pod, t.record, t.patch);
  return t;
}

namespace {

constexpr std::size_t kMaxTerms = 8, kMaxExpressions = 32;

bool LabelKeyText(const std::string& s) {
  return !s.empty() && s.size() <= 317 &&
         s.find_first_not_of(
             "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._/-") ==
             std::string::npos;
}
bool LabelValueText(const std::string& s) {
  return s.size() <= 63 &&
         s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") ==
             std::string::npos;
}

// The string values of `list` (an array), or nullopt when one is not a label value.
std::optional<std::vector<std::string>> Values(const json* list) {
  std::vector<std::string> out;
  if (list == nullptr || !list->is_array() || list->size() > kMaxExpressions) return std::nullopt;
  for (const json& v : *list) {
    if (!v.is_string() || !LabelValueText(v.get<std::string>())) return std::nullopt;
    out.push_back(v.get<std::string>());
  }
  return out;
}

std::string Joined(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : ",") + s;
  return out;
}

// One nodeSelectorTerm as selectors added to `q`; false when it cannot be written.
bool AddTerm(const json& term, NodeQuery& q) {
  std::vector<std::string> labels, fields;
  if (const json* exprs = kube::JsonChild(term, "matchExpressions"); exprs != nullptr) {
    if (!exprs->is_array() || exprs->size() > kMaxExpressions) return false;
    for (const json& e : *exprs) {
      const std::string key = kube::JsonString(e, "key"), op = kube::JsonString(e, "operator");
      if (!LabelKeyText(key)) return false;
      auto values = Values(kube::JsonChild(e, "values"));
      if (op == "Exists") {
        labels.push_back(key);
      } else if (op == "DoesNotExist") {
        labels.push_back("!" + key);
      } else if ((op == "In" || op == "NotIn") && values && !values->empty()) {
        labels.push_back(key + (op == "In" ? " in (" : " notin (") + Joined(*values) + ")");
      } else {
        return false;  // Gt, Lt, or values that do not read
      }
    }
  }
  if (const json* exprs = kube::JsonChild(term, "matchFields"); exprs != nullptr) {
    if (!exprs->is_array() || exprs->size() > 1) return false;
    for (const json& e : *exprs) {
      const std::string op = kube::JsonString(e, "operator");
      auto values = Values(kube::JsonChild(e, "values"));
      if (kube::JsonString(e, "key") != "metadata.name" || !values || values->size() != 1 ||
          (op != "In" && op != "NotIn")) {
        return false;
      }
      fields.push_back("metadata.name" + std::string(op == "In" ? "=" : "!=") + values->front());
    }
  }
  if (labels.empty() && fields.empty()) return false;  // an empty term matches no node
  for (const std::string& l : labels) q.label_selector += (q.label_selector.empty() ? "" : ",") + l;
  for (const std::string& f : fields) q.field_selector += (q.field_selector.empty() ? "" : ",") + f;
  return true;
}

}  // namespace

std::optional<std::vector<NodeQuery>> NodeQueriesOf(const json& pod) {
  const json* spec = kube::JsonChild(pod, "spec");
  NodeQuery base;
  if (const json* selector = spec == nullptr ? nullptr : kube::JsonChild(*spec, "nodeSelector");
      selector != nullptr) {
    if (!selector->is_object() || selector->size() > kMaxExpressions) return std::nullopt;
    for (const auto& [k, v] : selector->items()) {
      if (!LabelKeyText(k) || !v.is_string() || !LabelValueText(v.get<std::string>())) {
        return std::nullopt;
      }
      base.label_selector +=
          (base.label_selector.empty() ? "" : ",") + k + "=" + v.get<std::string>();
    }
  }
  const json* affinity = spec == nullptr ? nullptr : kube::JsonChild(*spec, "affinity");
  const json* node = affinity == nullptr ? nullptr : kube::JsonChild(*affinity, "nodeAffinity");
  const json* required =
      node == nullptr ? nullptr
                      : kube::JsonChild(*node, "requiredDuringSchedulingIgnoredDuringExecution");
  const json* terms =
      required == nullptr ? nullptr : kube::JsonChild(*required, "nodeSelectorTerms");
  if (terms == nullptr) return std::vector<NodeQuery>{base};
  if (!terms->is_array() || terms->size() > kMaxTerms) return std::nullopt;
  std::vector<NodeQuery> out;
  for (const json& term : *terms) {
    NodeQuery q = base;
    if (!AddTerm(term, q)) return std::nullopt;
    out.push_back(std::move(q));
  }
  if (out.empty()) return std::nullopt;
  return out;
}

std::vector<std::string> EnforcementWarnings(const json& pod, const Translation& t,
                                             const NodeFinder& find) {
  std::vector<std::string> warnings;
  if (t.shares.empty() || !find) return warnings;
  const auto queries = NodeQueriesOf(pod);
  if (!queries) return warnings;
  // Whether some node the pod may run on has `label` (a selector term); nullopt: cannot tell.
  const auto any = [&](const std::string& label) -> std::optional<bool> {
    for (NodeQuery q : *queries) {
      q.label_selector = label + (q.label_selector.empty() ? "" : "," + q.label_selector);
      const std::optional<bool> found = find(q);
      if (!found || *found) return found;
    }
    return false;
  };
  const struct {
    bool TranslatedShare::*asks;
    std::string selector, what;
  } kinds[] = {{&TranslatedShare::memory, std::string(kube::kLabelMemoryEnforcement) + "=hard",
                "memory limits (a hard limit at its gpumux.io/gpu-mem)"},
               {&TranslatedShare::compute,
                std::string(kube::kLabelComputeEnforcement) + " in (mps-namespace,hami-core)",
                "compute limits (its gpumux.io/gpu-milli)"}};
  for (const auto& k : kinds) {
    std::string containers;
    for (const TranslatedShare& s : t.shares) {
      if (s.*(k.asks)) containers += (containers.empty() ? "\"" : ", \"") + s.container + "\"";
    }
    if (containers.empty()) continue;
    if (any(k.selector) == std::optional<bool>(false)) {
      warnings.push_back("gpumux: no node this pod may run on enforces " + k.what + " for " +
                         containers + ": the share is booked, not enforced (kubectl gpumux nodes)");
    }
  }
  return warnings;
}

core::Result<json> Review(const json& review, const TranslateOptions& options,
                          const NodeFinder& find) {
  const auto bad = [](const std::string& m) {
    return core::MakeError(core::ErrorCode::kInvalidArgument, m);
  };
  if (!review.is_object() || kube::JsonString(review, "apiVersion") != "admission.k8s.io/v1" ||
      kube::JsonString(review, "kind") != "AdmissionReview") {
    return bad("not an admission.k8s.io/v1 AdmissionReview");
  }
  const json* request = kube::JsonChild(review, "request");
  if (request == nullptr || !request->is_object()) return bad("the AdmissionReview has no request");
  const std::string uid = kube::JsonString(*request, "uid");
  if (uid.empty()) return bad("the AdmissionReview's request has no uid");
  json response = {{"uid", uid}, {"allowed", true}};
  const json* kind = kube::JsonChild(*request, "kind");
  const json* object = kube::JsonChild(*request, "object");
  const bool pod_create = kind != nullptr && kube::JsonString(*kind, "kind") == "Pod" &&
                          kube::JsonString(*kind, "group").empty() &&
                          kube::JsonString(*request, "operation") == "CREATE" &&
                          object != nullptr && object->is_object();
  if (pod_create) {
    const Translation t = TranslatePod(*object, options);
    if (!t.denied.empty()) {
      response["allowed"] = false;
      response["status"] = {
          {"code", 422}, {"reason", "Invalid"}, {"message", "gpumux webhook: " + t.denied}};
    } else if (!t.patch.empty()) {
      response["patchType"] = "JSONPatch";
      response["patch"] = kube::EncodeBase64(t.patch.dump());
      const std::vector<std::string> warnings = EnforcementWarnings(*object, t, find);
      if (!warnings.empty()) response["warnings"] = warnings;
    }
  }
  return json{{"apiVersion", "admission.k8s.io/v1"},
              {"kind", "AdmissionReview"},
              {"response", std::move(response)}};
}

}  // namespace gpumux::admission
