#include "gpumux/runs/workload.h"

#include <algorithm>
#include <cctype>
#include <set>

#include "gpumux/kube/objects.h"

namespace gpumux::runs {
namespace {

using core::ErrorCode;
using core::MakeError;
using nlohmann::json;

bool Alnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

// 12500000 -> "12.5", 0 -> "0", 1 -> "0.000001".
std::string Seconds(core::Micros us) {
  std::string s = std::to_string(us / 1'000'000);
  const core::Micros frac = us % 1'000'000;
  if (frac != 0) {
    std::string digits = std::to_string(frac);
    digits.insert(0, 6 - digits.size(), '0');
    while (digits.back() == '0') digits.pop_back();
    s += "." + digits;
  }
  return s;
}

std::string Join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string out;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out += sep;
    out += parts[i];
  }
  return out;
}

// resources.limits for the request, as the extender reads them (objects.h).
core::Result<json> Limits(const core::Request& r, const ManifestOptions& o,
                          const std::string& who) {
  json limits = json::object();
  if (r.gpu_count < 0 || r.gpu_milli < 0 || r.gpu_mib < 0) {
    return MakeError(ErrorCode::kInvalidArgument, who + ": a negative GPU amount");
  }
  if (r.gpu_count == 0) {
    if (r.gpu_milli > 0 || r.gpu_mib > 0) {
      return MakeError(ErrorCode::kInvalidArgument, who + ": GPU compute or memory without a GPU");
    }
    return limits;
  }
  if (r.gpu_milli > core::kMilliPerGpu) {
    return MakeError(ErrorCode::kInvalidArgument,
                     who + ": " + std::to_string(r.gpu_milli) +
                         " milli-GPU per GPU, more than a whole GPU (1000)");
  }
  const bool whole = r.sharing == core::GpuSharing::kExclusive ||
                     (r.gpu_milli == core::kMilliPerGpu && r.gpu_mib == 0);
  if (whole) {
    limits[std::string(kube::kResourceGpu)] = std::to_string(r.gpu_count);
    return limits;
  }
  // A share: on one GPU, or the same share on each of N GPUs (gpu: N beside it).
  if (r.gpu_count > 1) limits[std::string(kube::kResourceGpu)] = std::to_string(r.gpu_count);
  if (r.gpu_milli > 0) limits[std::string(kube::kResourceGpuMilli)] = std::to_string(r.gpu_milli);
  if (r.gpu_mib > 0) {
    const std::int64_t units = (r.gpu_mib + o.gpu_mem_unit_mib - 1) / o.gpu_mem_unit_mib;
    limits[std::string(kube::kResourceGpuMem)] = std::to_string(units);
  }
  if (limits.empty()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     who + ": a shared GPU with neither compute nor memory asked");
  }
  return limits;
}

}  // namespace

bool IsLabelValue(std::string_view value) {
  if (value.empty() || value.size() > 63) return false;
  auto alnum = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; };
  if (!alnum(value.front()) || !alnum(value.back())) return false;
  return std::all_of(value.begin(), value.end(),
                     [&](char c) { return alnum(c) || c == '-' || c == '_' || c == '.'; });
}

core::Result<std::string> ObjectName(std::string_view prefix, std::string_view job) {
  std::string name;
  for (char c : std::string(prefix) + std::string(job)) {
    const char l = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    name += Alnum(l) || l == '-' || l == '.' ? l : '-';
  }
  const auto first = std::find_if(name.begin(), name.end(), Alnum);
  const auto last = std::find_if(name.rbegin(), name.rend(), Alnum).base();
  name = first < last ? std::string(first, last) : std::string();
  if (name.empty()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "job '" + std::string(job) + "': no letter or digit to name it by");
  }
  if (name.size() > 63) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "job '" + std::string(job) + "': the name '" + name +
                         "' is longer than 63 characters (a Job's limit)");
  }
  return name;
}

core::Result<json> MakeManifest(const WorkloadItem& item, const ManifestOptions& o) {
  const std::string who = "job '" + item.job + "'";
  if (o.gpu_mem_unit_mib < 1 || o.gpu_mem_unit_mib > kube::kMaxGpuMemUnitMib) {
    return MakeError(ErrorCode::kInvalidArgument, "the gpumux.io/gpu-mem unit must be 1.." +
                                                      std::to_string(kube::kMaxGpuMemUnitMib) +
                                                      " MiB, not " +
                                                      std::to_string(o.gpu_mem_unit_mib));
  }
  if (o.image.empty()) return MakeError(ErrorCode::kInvalidArgument, who + ": no image");
  if (!o.run.empty() && !IsLabelValue(o.run)) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "the run name '" + o.run +
                         "' is not a label value (1..63 letters, digits, '-', '_' or '.', "
                         "starting and ending with a letter or digit)");
  }
  if (item.submit_us < 0) return MakeError(ErrorCode::kInvalidArgument, who + ": negative arrival");
  const core::Request& r = item.request;
  if (r.cpu_milli < 0 || r.memory_mib < 0) {
    return MakeError(ErrorCode::kInvalidArgument, who + ": a negative CPU or memory request");
  }
  auto name = ObjectName(o.name_prefix, item.job);
  if (!name) return tl::unexpected(name.error());
  auto limits = Limits(r, o, who);
  if (!limits) return tl::unexpected(limits.error());

  json annotations = json::object();
  for (const auto& [key, value] : item.annotations) annotations[key] = value;
  annotations[std::string(kAnnotationJob)] = item.job;
  annotations[std::string(kAnnotationSubmitAt)] = Seconds(item.submit_us);
  if (!r.workload_class.empty()) {
    annotations[std::string(kube::kAnnotationWorkloadClass)] = r.workload_class;
  }
  if (!r.gpu_models.empty()) {
    annotations[std::string(kube::kAnnotationGpuModel)] = Join(r.gpu_models, ",");
  }
  json metadata = {{"name", *name}, {"annotations", annotations}};
  if (!o.run.empty()) metadata["labels"] = {{std::string(kLabelRun), o.run}};

  json container = {{"name", o.container_name}, {"image", o.image}};
  if (!item.command.empty()) container["command"] = item.command;
  json resources = json::object();
  if (!limits->empty()) resources["limits"] = *limits;
  json requests = json::object();
  if (r.cpu_milli > 0) requests["cpu"] = std::to_string(r.cpu_milli) + "m";
  if (r.memory_mib > 0) requests["memory"] = std::to_string(r.memory_mib) + "Mi";
  if (!requests.empty()) resources["requests"] = requests;
  if (!resources.empty()) container["resources"] = resources;
  if (!item.env_from_annotations.empty()) {
    json env = json::array();
    for (const auto& [var, key] : item.env_from_annotations) {
      env.push_back(
          {{"name", var},
           {"valueFrom", {{"fieldRef", {{"fieldPath", "metadata.annotations['" + key + "']"}}}}}});
    }
    container["env"] = env;
  }
  json pod_spec = {{"schedulerName", o.scheduler_name}, {"restartPolicy", "Never"}};
  if (!item.host_dir.empty()) {
    container["volumeMounts"] = json::array({{{"name", "host-dir"}, {"mountPath", item.host_dir}}});
    pod_spec["volumes"] =
        json::array({{{"name", "host-dir"},
                      {"hostPath", {{"path", item.host_dir}, {"type", "DirectoryOrCreate"}}}}});
  }
  pod_spec["containers"] = json::array({container});

  if (o.kind == ManifestKind::kPod) {
    return json{{"apiVersion", "v1"}, {"kind", "Pod"}, {"metadata", metadata}, {"spec", pod_spec}};
  }
  json template_metadata = {{"annotations", annotations}};
  if (!o.run.empty()) template_metadata["labels"] = metadata["labels"];
  return json{
      {"apiVersion", "batch/v1"},
      {"kind", "Job"},
      {"metadata", metadata},
      {"spec",
       {{"backoffLimit", 0}, {"template", {{"metadata", template_metadata}, {"spec", pod_spec}}}}}};
}

core::Result<std::vector<json>> MakeManifests(const std::vector<WorkloadItem>& items,
                                              const ManifestOptions& options) {
  std::vector<json> out;
  std::map<std::string, std::string> names;  // name -> job
  for (const WorkloadItem& item : items) {
    auto object = MakeManifest(item, options);
    if (!object) return tl::unexpected(object.error());
    const std::string name = (*object)["metadata"]["name"];
    if (auto [it, fresh] = names.emplace(name, item.job); !fresh) {
      return MakeError(ErrorCode::kInvalidArgument, "jobs '" + it->second + "' and '" + item.job +
                                                        "' both get the name '" + name + "'");
    }
    out.push_back(std::move(*object));
  }
  return out;
}

}  // namespace gpumux::runs
