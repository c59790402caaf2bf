#include "gpumux/hook/oci.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "gpumux/io/atomic_file.h"

namespace gpumux::hook {
namespace {

using Json = nlohmann::json;

Json& Ensure(Json& parent, const char* key, Json default_value) {
  if (!parent.contains(key) || parent[key].is_null()) parent[key] = std::move(default_value);
  return parent[key];
}

}  // namespace

core::Result<ContainerState> ParseState(std::istream& in) {
  std::ostringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  const std::string where = "container state on stdin";
  Json j;
  try {
    j = Json::parse(text);
  } catch (const Json::exception& e) {
    return core::MakeError(core::ErrorCode::kInvalidArgument,
                           where + ": not JSON (" + std::string(e.what()) + ")");
  }
  if (!j.is_object()) {
    return core::MakeError(core::ErrorCode::kInvalidArgument, where + ": not a JSON object");
  }
  ContainerState s;
  if (!j.contains("id") || !j["id"].is_string() || j["id"].get<std::string>().empty()) {
    return core::MakeError(core::ErrorCode::kInvalidArgument,
                           where + ": field 'id' missing or not a non-empty string");
  }
  s.id = j["id"].get<std::string>();
  if (j.contains("pid")) {
    if (!j["pid"].is_number_integer() || j["pid"].get<std::int64_t>() < 0) {
      return core::MakeError(core::ErrorCode::kInvalidArgument,
                             where + ": field 'pid' is not a non-negative integer");
    }
    s.pid = j["pid"].get<std::int64_t>();
  }
  if (!j.contains("bundle") || !j["bundle"].is_string()) {
    return core::MakeError(core::ErrorCode::kInvalidArgument,
                           where + ": field 'bundle' missing or not a string");
  }
  s.bundle = j["bundle"].get<std::string>();
  return s;
}

core::Result<Json> LoadConfig(const std::string& bundle) {
  const std::string path = bundle + "/config.json";
  std::ifstream in(path);
  if (!in) return core::MakeError(core::ErrorCode::kIo, path + ": cannot open");
  try {
    Json j = Json::parse(in);
    if (!j.is_object()) {
      return core::MakeError(core::ErrorCode::kInvalidArgument, path + ": not a JSON object");
    }
    return j;
  } catch (const Json::exception& e) {
    return core::MakeError(core::ErrorCode::kInvalidArgument,
                           path + ": malformed JSON (" + std::string(e.what()) + ")");
  }
}

core::Result<void> SaveConfig(const std::string& bundle, const Json& config) {
  return io::WriteFileAtomically(bundle + "/config.json", config.dump(2) + "\n");
}

core::Result<std::vector<std::string>> ConfigEnv(const Json& config, const std::string& source) {
  std::vector<std::string> env;
  if (!config.contains("process") || config["process"].is_null()) return env;
  const Json& process = config["process"];
  if (!process.is_object()) {
    return core::MakeError(core::ErrorCode::kInvalidArgument, source + ": 'process' is not an object");
  }
  if (!process.contains("env") || process["env"].is_null()) return env;
  if (!process["env"].is_array()) {
    return core::MakeError(core::ErrorCode::kInvalidArgument,
                           source + ": 'process.env' is not a list");
  }
  for (const Json& e : process["env"]) {
    if (!e.is_string()) {
      return core::MakeError(core::ErrorCode::kInvalidArgument,
                             source + ": 'process.env' holds a non-string entry");
    }
    env.push_back(e.get<std::string>());
  }
  return env;
}

PodContainer PodOf(const Json& config) {
  PodContainer p;
  if (!config.contains("annotations") || !config["annotations"].is_object()) return p;
  const Json& a = config["annotations"];
  auto first = [&](std::initializer_list<const char*> keys) {
    for (const char* k : keys) {
      if (a.contains(k) && a[k].is_string() && !a[k].get<std::string>().empty()) {
        return a[k].get<std::string>();
      }
    }
    return std::string();
  };
  p.ns = first({"io.kubernetes.cri.sandbox-namespace", "io.kubernetes.pod.namespace"});
  p.pod = first({"io.kubernetes.cri.sandbox-name", "io.kubernetes.pod.name"});
  p.container = first({"io.kubernetes.cri.container-name", "io.kubernetes.container.name"});
  return p;
}

void SetEnv(Json& config, const std::string& name, const std::string& value) {
  Json& process = Ensure(config, "process", Json::object());
  Json& env = Ensure(process, "env", Json::array());
  Json kept = Json::array();
  const std::string prefix = name + "=";
  for (const Json& e : env) {
    if (!(e.is_string() && e.get<std::string>().compare(0, prefix.size(), prefix) == 0)) {
      kept.push_back(e);
    }
  }
  kept.push_back(prefix + value);
  env = std::move(kept);
}

void AddDevices(Json& config, const std::vector<DeviceNode>& devices) {
  Json& linux_ = Ensure(config, "linux", Json::object());
  Json& list = Ensure(linux_, "devices", Json::array());
  Json& resources = Ensure(linux_, "resources", Json::object());
  Json& allow = Ensure(resources, "devices", Json::array());
  for (const DeviceNode& d : devices) {
    bool present = false;
    for (const Json& e : list) present = present || (e.value("path", "") == d.container_path);
    if (!present) {
      list.push_back({{"path", d.container_path},
                      {"type", "c"},
                      {"major", d.major},
                      {"minor", d.minor},
                      {"fileMode", 0666},
                      {"uid", 0},
                      {"gid", 0}});
    }
    allow.push_back({{"allow", true},
                     {"type", "c"},
                     {"major", d.major},
                     {"minor", d.minor},
                     {"access", "rwm"}});
  }
}

void AddHook(Json& config, const std::string& stage, const std::string& path,
             const std::vector<std::string>& args, const std::vector<std::string>& env) {
  Json& hooks = Ensure(config, "hooks", Json::object());
  Json& list = Ensure(hooks, stage.c_str(), Json::array());
  Json hook = {{"path", path}, {"args", args}};
  if (!env.empty()) hook["env"] = env;
  for (const Json& h : list) {
    if (h == hook) return;
  }
  list.push_back(hook);
}

}  // namespace gpumux::hook
