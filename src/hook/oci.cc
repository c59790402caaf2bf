#include "gpumux/hook/oci.h"

#include <cstring>

#include "gpumux/core/json.h"
#include "gpumux/core/json_text.h"
#include "gpumux/io/atomic_file.h"
#include "gpumux/io/read_file.h"

namespace gpumux::hook {
namespace {

using Json = nlohmann::json;

core::Error Invalid(std::string message) {
  return core::Error{core::ErrorCode::kInvalidArgument, std::move(message)};
}

// The member `key` of the object `parent`, or nullptr when it is absent or null (which the
// OCI spec treats alike). `parent` must be an object.
const Json* Member(const Json& parent, const char* key) {
  const auto it = parent.find(key);
  if (it == parent.end() || it->is_null()) return nullptr;
  return &*it;
}

const char* TypeWord(Json::value_t type) {
  return type == Json::value_t::object  ? "an object"
         : type == Json::value_t::array ? "a list"
                                        : "a string";
}

// nullptr-safe: absent is fine, else `value` must have `type`. Error "'field' is not a list".
core::Result<void> Expect(const Json* value, Json::value_t type, const std::string& field) {
  if (value == nullptr || value->type() == type) return {};
  return tl::unexpected(Invalid("'" + field + "' is not " + TypeWord(type)));
}

// The member `key` of `parent` (an object), created as `type` when absent or null; an error
// naming `field` when it has another type.
core::Result<Json*> Ensure(Json& parent, const char* key, Json::value_t type,
                           const std::string& field) {
  if (const Json* found = Member(parent, key); found != nullptr) {
    if (auto ok = Expect(found, type, field); !ok) return tl::unexpected(ok.error());
    return &parent[key];
  }
  Json& made = parent[key];
  made = Json(type);
  return &made;
}

// A string for a message: at most 64 bytes of `s`, control characters as '?'.
std::string Shown(const std::string& s) {
  std::string out = s.substr(0, 64);
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  return s.size() > 64 ? out + "..." : out;
}

// Every check of CheckConfig: all faults found, "; "-separated, for the caller to prefix with
// the file (so that one run names everything to fix).
core::Result<void> CheckFields(const Json& config) {
  if (!config.is_object()) return tl::unexpected(Invalid("not a JSON object"));
  std::string faults;
  auto expect = [&faults](const Json* value, Json::value_t type, const std::string& field) {
    auto ok = Expect(value, type, field);
    if (!ok) faults += (faults.empty() ? "" : "; ") + ok.error().message;
    return ok.has_value() && value != nullptr;  // present and of its type: look inside
  };
  if (const Json* process = Member(config, "process");
      expect(process, Json::value_t::object, "process")) {
    const Json* env = Member(*process, "env");
    if (expect(env, Json::value_t::array, "process.env")) {
      for (std::size_t i = 0; i < env->size(); ++i) {
        if ((*env)[i].is_string()) continue;
        expect(&(*env)[i], Json::value_t::string, "process.env[" + std::to_string(i) + "]");
        break;  // one is enough
      }
    }
  }
  if (const Json* root = Member(config, "root"); expect(root, Json::value_t::object, "root")) {
    expect(Member(*root, "path"), Json::value_t::string, "root.path");
  }
  if (const Json* linux_ = Member(config, "linux");
      expect(linux_, Json::value_t::object, "linux")) {
    const Json* devices = Member(*linux_, "devices");
    if (expect(devices, Json::value_t::array, "linux.devices")) {
      for (std::size_t i = 0; i < devices->size(); ++i) {
        const std::string field = "linux.devices[" + std::to_string(i) + "]";
        if (expect(&(*devices)[i], Json::value_t::object, field)) {
          expect(Member((*devices)[i], "path"), Json::value_t::string, field + ".path");
        }
      }
    }
    if (const Json* resources = Member(*linux_, "resources");
        expect(resources, Json::value_t::object, "linux.resources")) {
      expect(Member(*resources, "devices"), Json::value_t::array, "linux.resources.devices");
    }
  }
  if (const Json* hooks = Member(config, "hooks"); expect(hooks, Json::value_t::object, "hooks")) {
    // The spec's stages (runc ignores other keys, and so does gpumux).
    for (const char* stage : {"prestart", "createRuntime", "createContainer", "startContainer",
                              "poststart", "poststop"}) {
      expect(Member(*hooks, stage), Json::value_t::array, std::string("hooks.") + stage);
    }
  }
  expect(Member(config, "annotations"), Json::value_t::object, "annotations");
  if (!faults.empty()) return tl::unexpected(Invalid(std::move(faults)));
  return {};
}

}  // namespace

core::Result<ContainerState> ParseState(std::istream& in) {
  const std::string where = "container state on stdin";
  std::string text;
  char buffer[1 << 14];
  while (in.read(buffer, sizeof buffer) || in.gcount() > 0) {
    text.append(buffer, static_cast<std::size_t>(in.gcount()));
    if (text.size() > kMaxStateBytes) {
      return core::MakeError(core::ErrorCode::kInvalidArgument,
                             where + ": larger than " + std::to_string(kMaxStateBytes) +
                                 " bytes (hook::kMaxStateBytes)");
    }
  }
  auto parsed = core::ParseJson(text, where);
  if (!parsed) return tl::unexpected(parsed.error());
  const Json& j = *parsed;
  if (!j.is_object()) {
    return core::MakeError(core::ErrorCode::kInvalidArgument, where + ": not a JSON object");
  }
  ContainerState s;
  const Json* id = Member(j, "id");
  if (id == nullptr || !id->is_string() || id->get_ref<const std::string&>().empty()) {
    return core::MakeError(core::ErrorCode::kInvalidArgument,
                           where + ": field 'id' missing or not a non-empty string");
  }
  s.id = id->get_ref<const std::string&>();
  if (auto ok = CheckContainerId(s.id, where + ": field 'id'"); !ok)
    return tl::unexpected(ok.error());
  if (const Json* pid = Member(j, "pid"); pid != nullptr) {
    const auto value = core::JsonIntIn(*pid, 0, kMaxPid);
    if (!value) {
      return core::MakeError(core::ErrorCode::kInvalidArgument,
                             where + ": field 'pid' is not a non-negative integer up to " +
                                 std::to_string(kMaxPid) + " (hook::kMaxPid)");
    }
    s.pid = *value;
  }
  const Json* bundle = Member(j, "bundle");
  if (bundle == nullptr || !bundle->is_string() || bundle->get_ref<const std::string&>().empty()) {
    return core::MakeError(core::ErrorCode::kInvalidArgument,
                           where + ": field 'bundle' missing or not a non-empty string");
  }
  s.bundle = bundle->get_ref<const std::string&>();
  if (s.bundle.find('\0') != std::string::npos) {
    return core::MakeError(core::ErrorCode::kInvalidArgument,
                           where + ": field 'bundle' holds a NUL character");
  }
  return s;
}

core::Result<void> CheckContainerId(const std::string& id, const std::string& where) {
  if (id.empty()) return core::MakeError(core::ErrorCode::kInvalidArgument, where + " is empty");
  if (id.size() > kMaxContainerIdBytes) {
    return core::MakeError(core::ErrorCode::kInvalidArgument,
                           where + " is longer than " + std::to_string(kMaxContainerIdBytes) +
                               " bytes (hook::kMaxContainerIdBytes)");
  }
  for (const char c : id) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return core::MakeError(core::ErrorCode::kInvalidArgument,
                             where + " holds a control character ('" + Shown(id) + "')");
    }
  }
  return {};
}

core::Result<Json> LoadConfig(const std::string& bundle) {
  const std::string path = bundle + "/config.json";
  auto text = io::ReadInputFile(path, kMaxConfigJsonBytes);
  if (!text) return tl::unexpected(text.error());
  auto j = core::ParseJson(*text, path, {.max_depth = kMaxConfigJsonDepth});
  if (!j) return tl::unexpected(j.error());
  if (auto ok = CheckConfig(*j, path); !ok) return tl::unexpected(ok.error());
  return std::move(*j);
}

core::Result<void> SaveConfig(const std::string& bundle, const Json& config) {
  return io::WriteFileAtomically(bundle + "/config.json", config.dump(2) + "\n");
}

core::Result<void> CheckConfig(const Json& config, const std::string& source) {
  auto ok = CheckFields(config);
  if (!ok) return core::MakeError(ok.error().code, source + ": " + ok.error().message);
  return {};
}

core::Result<std::vector<std::string>> ConfigEnv(const Json& config, const std::string& source) {
  std::vector<std::string> env;
  if (!config.is_object()) {
    return core::MakeError(core::ErrorCode::kInvalidArgument, source + ": not a JSON object");
  }
  const Json* process = Member(config, "process");
  if (process == nullptr) return env;
  if (!process->is_object()) {
    return core::MakeError(core::ErrorCode::kInvalidArgument,
                           source + ": 'process' is not an object");
  }
  const Json* list = Member(*process, "env");
  if (list == nullptr) return env;
  if (!list->is_array()) {
    return core::MakeError(core::ErrorCode::kInvalidArgument,
                           source + ": 'process.env' is not a list");
  }
  for (const Json& e : *list) {
    if (!e.is_string()) {
      return core::MakeError(core::ErrorCode::kInvalidArgument,
                             source + ": 'process.env' holds a non-string entry");
    }
    env.push_back(e.get_ref<const std::string&>());
  }
  return env;
}

core::Result<std::string> ConfigRootPath(const Json& config, const std::string& source) {
  if (!config.is_object()) {
    return core::MakeError(core::ErrorCode::kInvalidArgument, source + ": not a JSON object");
  }
  const Json* root = Member(config, "root");
  const Json* path = nullptr;
  auto ok = Expect(root, Json::value_t::object, "root");
  if (ok && root != nullptr) {
    path = Member(*root, "path");
    ok = Expect(path, Json::value_t::string, "root.path");
  }
  if (!ok) return core::MakeError(ok.error().code, source + ": " + ok.error().message);
  return path != nullptr ? path->get_ref<const std::string&>() : std::string("rootfs");
}

PodContainer PodOf(const Json& config) {
  PodContainer p;
  if (!config.is_object()) return p;
  const Json* a = Member(config, "annotations");
  if (a == nullptr || !a->is_object()) return p;
  auto first = [&](std::initializer_list<const char*> keys) {
    for (const char* k : keys) {
      const Json* v = Member(*a, k);
      if (v != nullptr && v->is_string() && !v->get_ref<const std::string&>().empty()) {
        return v->get_ref<const std::string&>();
      }
    }
    return std::string();
  };
  p.ns = first({"io.kubernetes.cri.sandbox-namespace", "io.kubernetes.pod.namespace"});
  p.pod = first({"io.kubernetes.cri.sandbox-name", "io.kubernetes.pod.name"});
  p.container = first({"io.kubernetes.cri.container-name", "io.kubernetes.container.name"});
  return p;
}

core::Result<void> SetEnv(Json& config, const std::string& name, const std::string& value) {
  if (!config.is_object()) return tl::unexpected(Invalid("not a JSON object"));
  // Checked before anything is created, so that an error leaves `config` as it was.
  if (const Json* process = Member(config, "process"); process != nullptr) {
    if (auto ok = Expect(process, Json::value_t::object, "process"); !ok) return ok;
    if (auto ok = Expect(Member(*process, "env"), Json::value_t::array, "process.env"); !ok) {
      return ok;
    }
  }
  auto process = Ensure(config, "process", Json::value_t::object, "process");
  if (!process) return tl::unexpected(process.error());
  auto env = Ensure(**process, "env", Json::value_t::array, "process.env");
  if (!env) return tl::unexpected(env.error());
  Json kept = Json::array();
  const std::string prefix = name + "=";
  for (const Json& e : **env) {
    if (!(e.is_string() &&
          e.get_ref<const std::string&>().compare(0, prefix.size(), prefix) == 0)) {
      kept.push_back(e);
    }
  }
  kept.push_back(prefix + value);
  **env = std::move(kept);
  return {};
}

core::Result<void> AddDevices(Json& config, const std::vector<DeviceNode>& devices) {
  if (!config.is_object()) return tl::unexpected(Invalid("not a JSON object"));
  // Everything AddDevices reads is checked first: an error leaves `config` as it was.
  Json probe = Json::object();
  if (const Json* linux_ = Member(config, "linux"); linux_ != nullptr) probe["linux"] = *linux_;
  if (auto ok = CheckFields(probe); !ok) return ok;
  auto linux_ = Ensure(config, "linux", Json::value_t::object, "linux");
  if (!linux_) return tl::unexpected(linux_.error());
  auto list = Ensure(**linux_, "devices", Json::value_t::array, "linux.devices");
  if (!list) return tl::unexpected(list.error());
  auto resources = Ensure(**linux_, "resources", Json::value_t::object, "linux.resources");
  if (!resources) return tl::unexpected(resources.error());
  auto allow = Ensure(**resources, "devices", Json::value_t::array, "linux.resources.devices");
  if (!allow) return tl::unexpected(allow.error());
  for (const DeviceNode& d : devices) {
    bool present = false;
    for (const Json& e : **list) {
      const Json* path = Member(e, "path");  // CheckFields: an object; path a string if set
      present =
          present || (path != nullptr && path->get_ref<const std::string&>() == d.container_path);
    }
    if (!present) {
      (*list)->push_back({{"path", d.container_path},
                          {"type", "c"},
                          {"major", d.major},
                          {"minor", d.minor},
                          {"fileMode", 0666},
                          {"uid", 0},
                          {"gid", 0}});
    }
    (*allow)->push_back({{"allow", true},
                         {"type", "c"},
                         {"major", d.major},
                         {"minor", d.minor},
                         {"access", "rwm"}});
  }
  return {};
}

core::Result<void> AddHook(Json& config, const std::string& stage, const std::string& path,
                           const std::vector<std::string>& args,
                           const std::vector<std::string>& env) {
  if (!config.is_object()) return tl::unexpected(Invalid("not a JSON object"));
  const std::string field = "hooks." + stage;
  if (const Json* hooks = Member(config, "hooks"); hooks != nullptr) {
    if (auto ok = Expect(hooks, Json::value_t::object, "hooks"); !ok) return ok;
    if (auto ok = Expect(Member(*hooks, stage.c_str()), Json::value_t::array, field); !ok)
      return ok;
  }
  auto hooks = Ensure(config, "hooks", Json::value_t::object, "hooks");
  if (!hooks) return tl::unexpected(hooks.error());
  auto list = Ensure(**hooks, stage.c_str(), Json::value_t::array, field);
  if (!list) return tl::unexpected(list.error());
  Json hook = {{"path", path}, {"args", args}};
  if (!env.empty()) hook["env"] = env;
  for (const Json& h : **list) {
    if (h == hook) return {};
  }
  (*list)->push_back(std::move(hook));
  return {};
}

}  // namespace gpumux::hook
