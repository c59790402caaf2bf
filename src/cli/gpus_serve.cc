// `gpumux gpus --serve ADDR`: Houdini's /gpus view. Every service of a deep-learning stack runs
// it (or its own equivalent) so that an operator can ask each one which GPUs it was given and
// which it can see: GET /gpus answers with the service's GPU environment and the
// `nvidia-smi -L` lines of the GPUs visible to it.
//
// What "visible" means per backend:
//   dev (default)  the device nodes /dev/nvidia<N> present in the service's device folder (a
//                  container sees only those the device plugin or the runtime hook gave it);
//                  UUIDs from the grant's variables (GPUMUX_GPU_INDICES or GPUMUX_GPUS, with
//                  GPUMUX_GPU_UUIDS); with a GPU file, the file's GPUs that
//                  NVIDIA_VISIBLE_DEVICES names
//   fake           the GPU file's GPUs that NVIDIA_VISIBLE_DEVICES names (all when unset or
//                  "all"; none for "none", "void" or empty), as the NVIDIA runtime would filter
//   nvml           what NVML lists (in a container the NVIDIA runtime already limits it)
// The GPUs are read again for every request.

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <ostream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gpumux/gpu/backend.h"
#include "gpumux/hook/inventory.h"
#include "gpumux/net/http_server.h"
#include "src/cli/commands.h"
#include "src/cli/daemon_log.h"
#include "src/cli/daemon_support.h"

extern char** environ;  // NOLINT: POSIX

namespace gpumux::cli {

namespace {

using Json = nlohmann::ordered_json;

struct SeenGpu {
  int index = 0;
  std::string name, uuid;
};

// The variables a GPU service's placement is described by.
std::map<std::string, std::string> GpuEnvironment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry = *e;
    const std::size_t eq = entry.find('=');
    if (eq == std::string::npos) continue;
    const std::string name = entry.substr(0, eq);
    for (const char* prefix : {"NVIDIA_", "HOUDINI_", "GPUMUX_", "CUDA_"}) {
      if (name.rfind(prefix, 0) == 0) env[name] = entry.substr(eq + 1);
    }
  }
  return env;
}

std::vector<std::string> SplitList(const std::string& text) {
  std::vector<std::string> items;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    item.erase(0, item.find_first_not_of(' '));
    item.erase(item.find_last_not_of(' ') + 1);
    if (!item.empty()) items.push_back(item);
  }
  return items;
}

std::string Lookup(const std::map<std::string, std::string>& env, const std::string& name) {
  auto it = env.find(name);
  return it == env.end() ? std::string() : it->second;
}

// index -> UUID from the grant's variables (the device plugin's GPUMUX_GPU_INDICES, the runtime
// hook's GPUMUX_GPUS, each with GPUMUX_GPU_UUIDS in the same order).
std::map<int, std::string> GrantedUuids(const std::map<std::string, std::string>& env) {
  std::string indices = Lookup(env, "GPUMUX_GPU_INDICES");
  if (indices.empty()) indices = Lookup(env, "GPUMUX_GPUS");
  const std::vector<std::string> index_list = SplitList(indices);
  const std::vector<std::string> uuids = SplitList(Lookup(env, "GPUMUX_GPU_UUIDS"));
  std::map<int, std::string> out;
  for (std::size_t k = 0; k < index_list.size() && k < uuids.size(); ++k) {
    if (index_list[k].find_first_not_of("0123456789") != std::string::npos) continue;
    if (index_list[k].size() > 3) continue;
    out[std::stoi(index_list[k])] = uuids[k];
  }
  return out;
}

// Whether NVIDIA_VISIBLE_DEVICES lets the service see `gpu`.
bool Visible(const std::map<std::string, std::string>& env, const SeenGpu& gpu) {
  auto it = env.find("NVIDIA_VISIBLE_DEVICES");
  if (it == env.end() || it->second == "all") return true;
  for (const std::string& item : SplitList(it->second)) {
    if (item == std::to_string(gpu.index) || (!gpu.uuid.empty() && item == gpu.uuid)) return true;
  }
  return false;
}

// The device nodes nvidia<N> of `dev_dir` (no other check: a container's folder has gaps).
std::vector<SeenGpu> DeviceNodes(const std::string& dev_dir) {
  std::vector<SeenGpu> gpus;
  DIR* dir = opendir(dev_dir.c_str());
  if (dir == nullptr) return gpus;
  static const std::regex kName("^nvidia([0-9]{1,3})$");
  while (dirent* e = readdir(dir)) {
    std::cmatch m;
    if (!std::regex_match(e->d_name, m, kName)) continue;
    struct stat st {};
    if (stat((dev_dir + "/" + e->d_name).c_str(), &st) != 0 || !S_ISCHR(st.st_mode)) continue;
    gpus.push_back({std::stoi(m[1].str()), "", ""});
  }
  closedir(dir);
  std::sort(gpus.begin(), gpus.end(),
            [](const SeenGpu& a, const SeenGpu& b) { return a.index < b.index; });
  return gpus;
}

core::Result<std::vector<SeenGpu>> SeenGpus(const HostOptions& host, const GpusOptions& options,
                                            const std::map<std::string, std::string>& env,
                                            std::string* source) {
  std::vector<SeenGpu> gpus;
  bool filter = true;
  if (options.backend == "nvml" || options.backend == "fake") {
    auto backend = options.backend == "nvml" ? gpu::OpenNvml(options.nvml_library)
                                             : gpu::OpenFake(host.gpus_file);
    if (!backend) return tl::unexpected(backend.error());
    auto list = (*backend)->List();
    if (!list) return tl::unexpected(list.error());
    for (const gpu::Gpu& g : *list) gpus.push_back({g.index, g.name, g.uuid});
    filter = options.backend == "fake";
    *source = options.backend == "nvml" ? "nvml: " + options.nvml_library : host.gpus_file;
  } else if (!host.gpus_file.empty()) {
    auto inventory = hook::LoadInventory({host.dev_dir, host.gpus_file});
    if (!inventory) return tl::unexpected(inventory.error());
    for (const auto& g : inventory->gpus) gpus.push_back({g.index, g.model, g.uuid});
    *source = inventory->source;
  } else {
    gpus = DeviceNodes(host.dev_dir);
    const std::map<int, std::string> granted = GrantedUuids(env);
    for (SeenGpu& g : gpus) {
      if (auto it = granted.find(g.index); it != granted.end()) g.uuid = it->second;
    }
    filter = false;  // the device folder is what the service can open
    *source = "device nodes in " + host.dev_dir;
  }
  if (filter) {
    std::erase_if(gpus, [&](const SeenGpu& g) { return !Visible(env, g); });
  }
  return gpus;
}

std::string Hostname() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "unknown";
  return name;
}

}  // namespace

int ServeGpus(const HostOptions& host, const GpusOptions& options, std::ostream& out,
              std::ostream& err) {
  (void)out;
  std::string bind_host;
  int port = 0;
  if (!ParseHostPort(options.serve, bind_host, port)) {
    err << "gpumux gpus: --serve must be HOST:PORT, not '" << options.serve << "'\n";
    return 2;
  }
  if (options.reservations || options.json) {
    err << "gpumux gpus: --reservations and --json do not apply with --serve (GET /gpus is "
           "JSON; ?format=text for text)\n";
    return 2;
  }
  const std::map<std::string, std::string> env = GpuEnvironment();
  const std::string service = Hostname();
  // Check the backend once before serving, so that a bad file is a usage error at start.
  std::string source;
  if (auto first = SeenGpus(host, options, env, &source); !first) {
    err << "gpumux gpus: " << first.error().message << "\n";
    return options.backend == "nvml" ? 1 : 2;
  }
  const core::Logger log = MakeDaemonLogger(err, "gpus", options.log);
  net::ServerOptions server_options;
  server_options.name = "gpus";
  server_options.listen = {net::Endpoint::Tcp(bind_host, port)};
  server_options.workers = 1;
  server_options.max_connections = 64;
  server_options.max_body_bytes = 4096;  // GETs only
  server_options.log = log;
  net::HttpServer http(std::move(server_options));
  http.Route("/gpus", {"GET"}, net::Lane::kSide, [&](const net::Request& req) {
    std::string from;
    auto gpus = SeenGpus(host, options, env, &from);
    if (!gpus) return net::Response::Json(500, Json{{"error", gpus.error().message}}.dump() + "\n");
    std::vector<std::string> lines;
    Json list = Json::array();
    for (const SeenGpu& g : *gpus) {
      lines.push_back("GPU " + std::to_string(g.index) + ": " +
                      (g.name.empty() ? "NVIDIA GPU" : g.name) +
                      " (UUID: " + (g.uuid.empty() ? "unknown" : g.uuid) + ")");
      list.push_back({{"index", g.index}, {"name", g.name}, {"uuid", g.uuid}});
    }
    if (req.QueryValue("format") == "text") {
      std::string text = "service: " + service + "\n";
      for (const auto& [name, value] : env) text += name + "=" + value + "\n";
      for (const std::string& l : lines) text += l + "\n";
      if (lines.empty()) text += "No devices found (" + from + ").\n";
      return net::Response::Text(200, std::move(text));
    }
    // The environment and the GPU names are the container's: bytes that are not UTF-8 are
    // written as U+FFFD.
    Json environment = Json::object();
    for (const auto& [name, value] : env) environment[name] = value;
    return net::Response::Json(200, Json{{"service", service},
                                         {"environment", environment},
                                         {"nvidia_smi_L", lines},
                                         {"gpus", list},
                                         {"source", from}}
                                            .dump(2, ' ', false, Json::error_handler_t::replace) +
                                        "\n");
  });
  http.Route("/healthz", {"GET"}, net::Lane::kInline,
             [](const net::Request&) { return net::Response::Text(200, "ok\n"); });
  SignalBlock signals;  // before the server's threads start: they inherit the mask
  if (auto started = http.Start(); !started) {
    log.Error("cannot start", {{"error", started.error().message}});
    return 1;
  }
  log.Info("serving GET /gpus", {{"address", options.serve},
                                 {"source", source},
                                 {"gpu_variables", std::to_string(env.size())}});
  const int sig = signals.Wait();
  log.Info("stopping", {{"signal", sig == SIGINT ? "SIGINT" : "SIGTERM"}});
  http.Stop();
  return 0;
}

}  // namespace gpumux::cli
