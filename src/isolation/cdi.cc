#include "gpumux/isolation/cdi.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <nlohmann/json.hpp>

#include "gpumux/io/atomic_file.h"
#include "gpumux/io/read_file.h"

namespace gpumux::isolation {
namespace {

using json = nlohmann::json;
constexpr const char* kFilePrefix = "gpumux.io-enforce_";
constexpr const char* kCdiVersion = "0.5.0";  // hooks have been in CDI since 0.3.0

bool CdiNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.';
}

// The device's name: "<pod uid>_<container>" (neither may hold '_': a UUID and a DNS label).
core::Result<std::string> DeviceOf(const std::string& pod_uid, const std::string& container) {
  const auto usable = [](const std::string& s) {
    return !s.empty() && s.size() <= 128 && std::all_of(s.begin(), s.end(), CdiNameChar) &&
           CdiNameChar(s.front()) && s.front() != '-' && s.front() != '.' && s.back() != '-' &&
           s.back() != '.';
  };
  if (!usable(pod_uid) || !usable(container)) {
    return core::MakeError(core::ErrorCode::kInvalidArgument,
                           "pod uid and container name must be letters, digits, '-' and '.' to "
                           "name a CDI device");
  }
  return pod_uid + "_" + container;
}

json HookJson(const HookSettings& s, const std::string& stage, std::vector<std::string> extra) {
  std::vector<std::string> args = s.command;
  args.insert(args.end(), {"enforce", stage, "--state-dir", s.state_dir});
  args.insert(args.end(), extra.begin(), extra.end());
  return {{"hookName", stage},
          {"path", s.command.front()},
          {"args", std::move(args)},
          {"timeout", s.hook_timeout_s}};
}

}  // namespace

std::string CdiDeviceName(const std::string& pod_uid, const std::string& container) {
  return std::string(kCdiKind) + "=" + pod_uid + "_" + container;
}

core::Result<std::string> EnforcementSpec(const HookSettings& settings,
                                          const ContainerHookRequest& request) {
  if (settings.command.empty() || settings.command.front().empty() ||
      settings.command.front().front() != '/') {
    return core::MakeError(core::ErrorCode::kInvalidArgument,
                           "the CDI hook's program must be an absolute host path");
  }
  if (request.gpus.empty() || request.gpus.size() > kMaxLimitGpus) {
    return core::MakeError(
        core::ErrorCode::kInvalidArgument,
        "a CDI enforcement spec limits 1.." + std::to_string(kMaxLimitGpus) + " GPUs");
  }
  auto device = DeviceOf(request.pod_uid, request.container);
  if (!device) return tl::unexpected(device.error());
  std::vector<std::string> create = {"--nvml-library", settings.nvml_library,
                                     "--cgroup-root",  settings.cgroup_root,
                                     "--pod",          request.pod_ns + "/" + request.pod_name,
                                     "--pod-uid",      request.pod_uid,
                                     "--container",    request.container};
  for (const GpuLimit& g : request.gpus) {
    create.push_back("--gpu");
    create.push_back(g.uuid + "=" + std::to_string(g.hard_mib) + ":" + std::to_string(g.soft_mib));
  }
  json hooks =
      json::array({HookJson(settings, "createRuntime", std::move(create)),
                   HookJson(settings, "poststop", {"--nvml-library", settings.nvml_library})});
  const json spec = {
      {"cdiVersion", kCdiVersion},
      {"kind", kCdiKind},
      {"devices", json::array({{{"name", *device},
                                {"containerEdits",
                                 {{"env", json::array({"GPUMUX_ENFORCED=memory-partitioning"})},
                                  {"hooks", std::move(hooks)}}}}})}};
  return spec.dump(2) + "\n";
}

namespace {
std::string SpecFile(const std::string& spec_dir, const std::string& pod_uid,
                     const std::string& container) {
  return spec_dir + "/" + kFilePrefix + pod_uid + "_" + container + ".json";
}
}  // namespace

bool SpecExists(const std::string& spec_dir, const std::string& pod_uid,
                const std::string& container) {
  struct stat st {};
  return ::stat(SpecFile(spec_dir, pod_uid, container).c_str(), &st) == 0;
}

core::Result<std::string> WriteEnforcementSpec(const HookSettings& settings,
                                               const ContainerHookRequest& request) {
  auto text = EnforcementSpec(settings, request);
  if (!text) return tl::unexpected(text.error());
  if (::mkdir(settings.spec_dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return core::MakeError(
        core::ErrorCode::kIo,
        settings.spec_dir + ": cannot create the CDI spec folder: " + std::strerror(errno));
  }
  const std::string file = SpecFile(settings.spec_dir, request.pod_uid, request.container);
  if (auto written = io::WriteFileAtomically(file, *text); !written) {
    return tl::unexpected(written.error());
  }
  return CdiDeviceName(request.pod_uid, request.container);
}

std::vector<std::string> RemoveStaleSpecs(const std::string& spec_dir,
                                          const std::function<bool(const std::string&)>& live,
                                          std::int64_t min_age_s) {
  std::vector<std::string> removed;
  DIR* dir = ::opendir(spec_dir.c_str());
  if (dir == nullptr) return removed;
  const std::string prefix = kFilePrefix;
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(dir)) {
    const std::string name = e->d_name;
    if (name.size() > prefix.size() + 5 && name.compare(0, prefix.size(), prefix) == 0 &&
        name.compare(name.size() - 5, 5, ".json") == 0) {
      names.push_back(name);
    }
  }
  ::closedir(dir);
  std::sort(names.begin(), names.end());
  const std::time_t now = std::time(nullptr);
  for (const std::string& name : names) {
    const std::string rest = name.substr(prefix.size(), name.size() - prefix.size() - 5);
    const std::string uid = rest.substr(0, rest.find('_'));
    if (live(uid)) continue;
    const std::string path = spec_dir + "/" + name;
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0 || now - st.st_mtime < min_age_s) continue;
    if (::unlink(path.c_str()) == 0) removed.push_back(name);
  }
  return removed;
}

}  // namespace gpumux::isolation

namespace gpumux::isolation {
namespace {

// Copies `from` to `to` through "<to>.tmp" and a rename, with `mode`.
core::Result<void> CopyFile(const std::string& from, const std::string& to, mode_t mode) {
  auto bytes = io::ReadInputFile(from);
  if (!bytes) return tl::unexpected(bytes.error());
  if (auto written = io::WriteFileAtomically(to, *bytes); !written) return written;
  if (::chmod(to.c_str(), mode) != 0) {
    return core::MakeError(core::ErrorCode::kIo, to + ": chmod: " + std::strerror(errno));
  }
  return {};
}

}  // namespace

core::Result<std::vector<std::string>> InstallSelf(const std::string& dir) {
  if (dir.empty() || dir.front() != '/') {
    return core::MakeError(core::ErrorCode::kInvalidArgument,
                           "the hook's folder must be an absolute path, not '" + dir + "'");
  }
  auto maps = io::ReadInputFile("/proc/self/maps", std::size_t{64} << 20);
  if (!maps) return tl::unexpected(maps.error());
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) {
    return core::MakeError(core::ErrorCode::kIo,
                           std::string("/proc/self/exe: ") + std::strerror(errno));
  }
  self[n] = '\0';
  std::vector<std::string> libs;
  std::string loader;
  std::size_t at = 0;
  while (at < maps->size()) {
    const auto end = std::min(maps->find('\n', at), maps->size());
    const std::string line = maps->substr(at, end - at);
    at = end + 1;
    const auto slash = line.find('/');
    if (slash == std::string::npos) continue;
    const std::string path = line.substr(slash);
    if (path.find(" (deleted)") != std::string::npos) continue;
    const std::string base = path.substr(path.rfind('/') + 1);
    if (path == self || base.find(".so") == std::string::npos) continue;
    if (std::find(libs.begin(), libs.end(), path) != libs.end()) continue;
    libs.push_back(path);
    if (base.rfind("ld-linux", 0) == 0 || base.rfind("ld64.so", 0) == 0) loader = base;
  }
  for (const std::string& d : {dir, dir + "/lib"}) {
    if (::mkdir(d.c_str(), 0755) != 0 && errno != EEXIST) {
      return core::MakeError(core::ErrorCode::kIo, d + ": cannot create: " + std::strerror(errno));
    }
  }
  for (const std::string& lib : libs) {
    if (auto copied = CopyFile(lib, dir + "/lib/" + lib.substr(lib.rfind('/') + 1), 0755);
        !copied) {
      return tl::unexpected(copied.error());
    }
  }
  if (auto copied = CopyFile(self, dir + "/gpumux", 0755); !copied) {
    return tl::unexpected(copied.error());
  }
  if (loader.empty()) return std::vector<std::string>{dir + "/gpumux"};
  return std::vector<std::string>{dir + "/lib/" + loader, "--library-path", dir + "/lib",
                                  dir + "/gpumux"};
}

}  // namespace gpumux::isolation
