// gpumux hook, gpumux oci-runtime, gpumux gpus: the Houdini-compatible GPU reservation adapters.
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "gpumux/core/check.h"
#include "gpumux/core/time.h"
#include "gpumux/gpu/backend.h"
#include "gpumux/hook/coexistence.h"
#include "gpumux/hook/grant.h"
#include "gpumux/hook/oci.h"
#include "gpumux/io/read_file.h"
#include "gpumux/isolation/discovery.h"
#include "src/cli/commands.h"
#include "src/cli/options.h"

namespace gpumux::cli {
namespace {

std::string EnvOr(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && v[0] != '\0' ? v : fallback;
}

std::string SelfExe() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "gpumux";
  buf[n] = '\0';
  return buf;
}

// UTC now as RFC 3339, e.g. "2024-05-01T10:00:00Z".
std::string UtcStamp() { return core::FormatRfc3339(std::time(nullptr)); }

// Appends one line to <state-dir>/hook.log (best effort) and echoes it on stderr.
void Log(const HostOptions& o, const std::string& line, std::ostream& err) {
  const std::string text = UtcStamp() + " gpumux[" + std::to_string(::getpid()) + "]: " + line;
  ::mkdir(o.state_dir.c_str(), 0755);
  std::ofstream(o.state_dir + "/hook.log", std::ios::app) << text << "\n";
  err << "gpumux: " << line << "\n";
}

// The runtime's own log (runc --log FILE --log-format json|text). containerd's shim passes
// --log <bundle>/log.json --log-format json and, when the runtime fails, shows the "msg" of
// the file's last "level":"error" line; without one it says only "unable to retrieve OCI
// runtime error". So the wrapper writes its refusals there as runc would (logrus formats).
struct RuntimeLog {
  std::string path;             // "" = none given
  std::string format = "text";  // runc's default

  // Appends one error line (best effort: the refusal stands whether or not it is written).
  void Error(const std::string& message) const {
    if (path.empty()) return;
    const std::string msg = "gpumux: " + message;
    std::string line;
    if (format == "json") {
      // Invalid UTF-8 (from a variable's value) is replaced rather than thrown on.
      line = nlohmann::ordered_json{{"level", "error"}, {"msg", msg}, {"time", UtcStamp()}}.dump(
          -1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    } else {
      line = "time=\"" + UtcStamp() + "\" level=error msg=" + Quoted(msg);
    }
    std::ofstream(path, std::ios::app) << line << "\n";
  }

  // A logrus text value: in double quotes, with \\ \" and control characters escaped.
  static std::string Quoted(const std::string& s) {
    std::string out = "\"";
    for (const char c : s) {
      if (c == '"' || c == '\\') {
        out += '\\';
        out += c;
      } else if (c == '\n') {
        out += "\\n";
      } else if (c == '\t') {
        out += "\\t";
      } else if (static_cast<unsigned char>(c) < 0x20) {
        char hex[8];
        std::snprintf(hex, sizeof hex, "\\x%02x", static_cast<unsigned>(c));
        out += hex;
      } else {
        out += c;
      }
    }
    return out + "\"";
  }
};

// The kubelet's device-plugin folder, where a gpumux device plugin would serve its sockets.
std::string DevicePluginDir() {
  return EnvOr(std::string(hook::kDevicePluginDirEnv).c_str(),
               std::string(hook::kDefaultDevicePluginDir).c_str());
}

hook::InventoryOptions InventoryOf(const HostOptions& o) {
  return hook::InventoryOptions{o.dev_dir, o.gpus_file};
}

// The device nodes of granted GPUs (indexes into `inv`, as GrantGpus returns them) and the
// control devices.
std::vector<hook::DeviceNode> DevicesFor(const hook::Inventory& inv, const std::vector<int>& gpus) {
  std::vector<hook::DeviceNode> out;
  for (int g : gpus) {
    GPUMUX_CHECK(g >= 0 && static_cast<std::size_t>(g) < inv.gpus.size(),
                 "GrantGpus grants only GPUs of the inventory");
    out.push_back(inv.gpus[static_cast<std::size_t>(g)].device);
  }
  for (const auto& c : inv.control) out.push_back(c);
  return out;
}

// Hook-only mode (no wrapper): create the device nodes inside the container's /dev, which runc
// has mounted but not yet pivoted into when createRuntime/prestart hooks run, and allow them in
// a cgroup v1 devices controller. `rootfs` is config.json's root.path. Best effort: failures
// are logged, the grant stands.
void InjectDevices(const HostOptions& o, const hook::ContainerState& state, std::string rootfs,
                   const std::vector<hook::DeviceNode>& devices, std::ostream& err) {
  if (rootfs.empty() || rootfs[0] != '/') rootfs = state.bundle + "/" + rootfs;
  const std::string dev = "/proc/" + std::to_string(state.pid) + "/root" + rootfs + "/dev";
  std::string cgroup_dir;
  auto cgroups =
      io::ReadInputFile("/proc/" + std::to_string(state.pid) + "/cgroup", std::size_t{1} << 20);
  std::istringstream cg(cgroups ? *cgroups : std::string());
  for (std::string line; std::getline(cg, line);) {
    const auto first = line.find(':');
    if (first == std::string::npos) continue;
    const auto second = line.find(':', first + 1);
    if (second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    if (controllers == "devices") cgroup_dir = "/sys/fs/cgroup/devices" + line.substr(second + 1);
  }
  for (const auto& d : devices) {
    const std::string path = dev + d.container_path.substr(4);  // strip "/dev"
    if (::mknod(path.c_str(), S_IFCHR | 0666, makedev(d.major, d.minor)) != 0 && errno != EEXIST) {
      Log(o,
          "warning: cannot create " + d.container_path + " in container '" + state.id +
              "': " + std::strerror(errno),
          err);
    } else {
      ::chmod(path.c_str(), 0666);  // mknod's mode is masked by the umask
    }
    if (!cgroup_dir.empty()) {
      std::ofstream allow(cgroup_dir + "/devices.allow");
      allow << "c " << d.major << ":" << d.minor << " rwm\n";
    }
  }
}

// The wrapper's edits of config.json for a grant: the variables, the device nodes and, for a
// reservation, the hooks that find and release it. An error names config.json and the field
// (LoadConfig's checks make one unlikely) and leaves the file unwritten.
core::Result<void> ApplyGrant(const HostOptions& o, const hook::Inventory& inventory,
                              const hook::Grant& grant, const std::string& plugin_dir,
                              nlohmann::json& config, const std::string& source) {
  const std::string visible =
      grant.gpus.empty() ? "void" : hook::VisibleDevicesValue(inventory, grant.gpus);
  std::vector<core::Result<void>> edits;
  edits.push_back(hook::SetEnv(config, "NVIDIA_VISIBLE_DEVICES", visible));
  edits.push_back(hook::SetEnv(config, "GPUMUX_GPUS", hook::JoinIndices(grant.gpus)));
  // The node coordinator's SDK names the job's GPUs from this (docs/COORDINATOR.md), as it
  // does from the device plugin's variable of the same name.
  if (visible.rfind("GPU-", 0) == 0) {
    edits.push_back(hook::SetEnv(config, "GPUMUX_GPU_UUIDS", visible));
  }
  edits.push_back(hook::SetEnv(config, "GPUMUX_GPU_RESERVED", grant.reserved ? "true" : "false"));
  edits.push_back(hook::AddDevices(config, DevicesFor(inventory, grant.gpus)));
  if (grant.reserved) {
    const std::vector<std::string> hook_env{
        "GPUMUX_STATE_DIR=" + o.state_dir, "GPUMUX_DEV_DIR=" + o.dev_dir,
        "GPUMUX_GPUS_FILE=" + o.gpus_file,
        std::string(hook::kDevicePluginDirEnv) + "=" + plugin_dir};
    const std::string self = SelfExe();
    edits.push_back(hook::AddHook(config, "createRuntime", self,
                                  {"gpumux", "hook", "createRuntime"}, hook_env));
    edits.push_back(
        hook::AddHook(config, "poststop", self, {"gpumux", "hook", "poststop"}, hook_env));
  }
  for (const auto& e : edits) {
    if (!e) return core::MakeError(e.error().code, source + ": " + e.error().message);
  }
  return {};
}

}  // namespace

void AddHostOptions(CLI::App& cmd, HostOptions& o) {
  o.state_dir =
      EnvOr(std::string(hook::kStateDirEnv).c_str(), std::string(hook::kDefaultStateDir).c_str());
  o.dev_dir = EnvOr("GPUMUX_DEV_DIR", "/dev");
  o.gpus_file = EnvOr("GPUMUX_GPUS_FILE", "");
  cmd.add_option("--state-dir", o.state_dir,
                 "Folder of the reservation ledger and hook.log [env GPUMUX_STATE_DIR]")
      ->capture_default_str();
  cmd.add_option("--dev-dir", o.dev_dir,
                 "Folder holding the nvidia<N> device nodes [env GPUMUX_DEV_DIR]")
      ->capture_default_str();
  cmd.add_option("--gpus", o.gpus_file,
                 "GPU file (CSV index,uuid,model,memory_mib[,device]) instead of listing "
                 "--dev-dir [env GPUMUX_GPUS_FILE]");
}

CLI::App* AddHookCommand(CLI::App& app, HostOptions& host, std::string& stage) {
  CLI::App* cmd = app.add_subcommand(
      "hook",
      "OCI runtime hook: Houdini-compatible GPU reservations, for runtimes run without the "
      "wrapper\n"
      "Reads the container state (JSON) on stdin, as an OCI runtime gives it to a hook.\n"
      "  createRuntime (or prestart, createContainer): grant the GPUs the container's "
      "environment asks for (HOUDINI_GPU_REQUESTED=N reserves N GPUs exclusively; "
      "HOUDINI_GPU_ENABLED=true or NVIDIA_VISIBLE_DEVICES=all|0,2|UUIDs shares them); exit 1 "
      "(the container does not start) when they are not free.\n"
      "  poststop: release the container's reservation.\n"
      "Declare 'gpumux hook createRuntime' and 'gpumux hook poststop' in the runtime's hooks "
      "(config.json, or an OCI hooks.d file). The options below are the same for every stage; "
      "each also comes from its environment variable.");
  AddHostOptions(*cmd, host);
  cmd->add_option("stage", stage, "createRuntime, prestart, createContainer or poststop")
      ->required()
      ->check(CLI::IsMember({"createRuntime", "prestart", "createContainer", "poststop"}));
  cmd->footer(
      "\nExit status: 0, or 1 with the reason on stderr and in <state-dir>/hook.log (the runtime "
      "then stops the container's start).");
  return cmd;
}

CLI::App* AddOciRuntimeCommand(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "oci-runtime",
      "OCI runtime wrapper: grants GPUs, then runs the real runtime (runc) with the same "
      "arguments\n"
      "Use it where a container runtime is configured (containerd's runtime BinaryName, "
      "Docker's \"runtimes\", a Kubernetes RuntimeClass), in place of runc: "
      "'gpumux oci-runtime <runc arguments>', or the symlink 'gpumux-oci-runtime' to the "
      "gpumux binary.\n"
      "For 'create' and 'run' it reads the bundle's config.json; when the container's "
      "environment asks for GPUs (HOUDINI_GPU_REQUESTED=N reserves N GPUs exclusively; "
      "HOUDINI_GPU_ENABLED=true or NVIDIA_VISIBLE_DEVICES=all|0,2|UUIDs shares them) it grants "
      "them, writes them into config.json (NVIDIA_VISIBLE_DEVICES, GPUMUX_GPUS, the device "
      "nodes, and for a reservation the createRuntime and poststop hooks that keep and release "
      "it), and refuses the container (exit 1, the reason in the runtime's --log file and in "
      "<state-dir>/hook.log) when they are not free. Every other command ('start', 'kill', "
      "'delete', 'state', '--version', ...) goes to the real runtime unchanged.\n"
      "Every argument belongs to the real runtime, so the wrapper takes no options of its own: "
      "it is configured by the environment:\n"
      "  GPUMUX_RUNTIME: the real runtime [default: runc, found on PATH]\n"
      "  GPUMUX_STATE_DIR: the reservation ledger and hook.log [default: /var/lib/gpumux]\n"
      "  GPUMUX_DEV_DIR: the nvidia<N> device nodes [default: /dev]\n"
      "  GPUMUX_GPUS_FILE: a GPU file (CSV index,uuid,model,memory_mib) instead of the device "
      "folder\n"
      "  GPUMUX_DEVICE_PLUGIN_DIR: where a gpumux device plugin would serve (reservations are "
      "refused while one does) [default: /var/lib/kubelet/device-plugins]");
  // Shown in the help only: Main hands every argument to the runtime unparsed.
  static const std::string kArguments =
      "The real runtime's global options, command and arguments, e.g. 'create --bundle DIR ID'";
  cmd->add_option("RUNTIME-ARGUMENTS", kArguments)->expected(0, -1);
  static const std::string kRuntimeHelp =
      "The real runtime's own help (runs '$GPUMUX_RUNTIME --help'); 'gpumux oci-runtime "
      "<command> --help' shows the help of one of its commands";
  cmd->add_flag("--runtime-help", kRuntimeHelp);
  cmd->footer(
      "\nExamples:\n"
      "  gpumux oci-runtime --runtime-help\n"
      "  gpumux oci-runtime --version\n"
      "      the real runtime's version (runc --version)\n"
      "\nIn Docker's daemon.json: {\"runtimes\": {\"gpumux\": {\"path\": "
      "\"/usr/local/bin/gpumux-oci-runtime\"}}}, then 'docker run --runtime=gpumux -e "
      "HOUDINI_GPU_REQUESTED=1 ...'.");
  return cmd;
}

CLI::App* AddGpusCommand(CLI::App& app, HostOptions& host, GpusOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "gpus",
      "List the host's GPUs as 'nvidia-smi -L' does (or JSON), and who holds them\n"
      "  --backend dev (default): the device folder's nvidia<N> nodes, or the GPU file when one "
      "is given (what the runtime hook sees).\n"
      "  --backend fake: the GPU file as the device plugin's fake backend reads it (optional "
      "columns minor, health, memory_used_mib, xids).\n"
      "  --backend nvml: NVIDIA's management library (libnvidia-ml.so.1): name, memory, "
      "minor, utilisation, processes, health.");
  AddHostOptions(*cmd, host);
  cmd->add_option("--gpus-file", host.gpus_file, "Same as --gpus");
  cmd->add_option("--backend", o.backend, "Where the GPUs come from: dev, fake, nvml")
      ->check(CLI::IsMember({"dev", "fake", "nvml"}))
      ->capture_default_str();
  cmd->add_option("--nvml-library", o.nvml_library,
                  "NVML library to load with --backend nvml (a soname or a path)")
      ->capture_default_str();
  cmd->add_flag("--reservations", o.reservations,
                "Show which container holds each GPU, and since when (dev and fake backends)");
  cmd->add_flag("--enforcement", o.enforcement,
                "Also say, per GPU, what a device plugin with a CDI hook could hold a share to "
                "here: memory partitioning (driver r615+, cgroup v2 at --cgroup-root, not MIG), "
                "HAMi-core (--hami-core-library), and why not");
  cmd->add_option("--cgroup-root", o.cgroup_root, "With --enforcement: the cgroup v2 hierarchy")
      ->capture_default_str();
  cmd->add_option("--limits-nvml-library", o.limits_nvml_library,
                  "With --enforcement: the NVML whose memory-limit calls are used")
      ->capture_default_str();
  cmd->add_option("--hami-core-library", o.hami_core_library,
                  "With --enforcement: where HAMi-core's libvgpu.so is installed");
  cmd->add_flag("--json", o.json,
                "JSON instead of text (with fake and nvml: every field the backend reports)");
  cmd->add_option("--serve", o.serve,
                  "Serve GET /gpus on HOST:PORT until SIGTERM: this service's GPU variables "
                  "(NVIDIA_*, HOUDINI_*, GPUMUX_*, CUDA_*) and the 'nvidia-smi -L' lines of the "
                  "GPUs it can see (JSON; ?format=text for text). Give 0.0.0.0:PORT only to "
                  "reach it from outside the pod or host");
  AddLogOptions(*cmd, o.log);
  RecordGivenOptions(*cmd, o.given);
  cmd->footer(
      "\nExamples:\n"
      "  gpumux gpus --reservations\n"
      "      the GPUs of /dev and who holds them\n"
      "  gpumux gpus --backend fake --gpus-file gpus.csv --json\n"
      "\nIn a container of a deep-learning stack (deploy/examples/houdini-stack-*.yaml):\n"
      "  gpumux gpus --serve 0.0.0.0:8080     then: wget -qO- http://POD_IP:8080/gpus\n");
  return cmd;
}

int RunHook(const HostOptions& o, const std::string& stage, std::istream& in, std::ostream& out,
            std::ostream& err) {
  (void)out;
  auto fail = [&](const std::string& message) {
    Log(o, "hook " + stage + ": " + message, err);
    return 1;
  };
  auto state = hook::ParseState(in);
  if (!state) return fail(state.error().message);
  hook::ReservationStore store(o.state_dir);
  if (stage == "poststop") {
    auto released = hook::ReleaseGpus(state->id, store);
    if (!released) return fail(released.error().message);
    if (*released) Log(o, "Released reservation of '" + state->id + "'", err);
    return 0;
  }
  // Everything read from config.json is checked here, before any GPU is granted.
  auto config = hook::LoadConfig(state->bundle);
  if (!config) return fail(config.error().message);
  auto env = hook::ConfigEnv(*config, state->bundle + "/config.json");
  if (!env) return fail(env.error().message);
  auto rootfs = hook::ConfigRootPath(*config, state->bundle + "/config.json");
  if (!rootfs) return fail(rootfs.error().message);
  auto ask = hook::ParseGpuAsk(*env);
  if (!ask) return fail("container '" + state->id + "': " + ask.error().message);
  if (ask->kind == hook::AskKind::kNone) return 0;
  auto inventory = hook::LoadInventory(InventoryOf(o));
  if (!inventory) return fail(inventory.error().message);
  auto grant = hook::GrantGpus(state->id, *ask, *inventory, store, hook::CurrentProcess(state->pid),
                               "running", {hook::PodOf(*config), DevicePluginDir()});
  if (!grant) return fail(grant.error().message);
  Log(o, grant->message, err);
  // The wrapper already put the devices into config.json; without it, add them now.
  std::string wrapped;
  if (state->pid > 0 && hook::FindEnv(*env, "GPUMUX_GPUS", &wrapped) == nullptr) {
    InjectDevices(o, *state, *rootfs, DevicesFor(*inventory, grant->gpus), err);
  }
  return 0;
}

int RunOciRuntime(const HostOptions& o, const std::vector<std::string>& args, std::ostream& err) {
  const std::string runtime = EnvOr("GPUMUX_RUNTIME", "runc");
  // Find the runtime command and, for create/run, the bundle and the container id. Global
  // options come before the command, as --name value, --name=value or -name value (runc's
  // flag parser accepts all three); every argument goes to the runtime unchanged.
  static const std::vector<std::string> kGlobalWithValue{"root", "log", "log-format", "criu",
                                                         "rootless"};
  RuntimeLog log;
  std::size_t i = 0;
  while (i < args.size() && args[i].size() > 1 && args[i][0] == '-') {
    std::string name = args[i].substr(args[i][1] == '-' ? 2 : 1);
    std::string value;
    bool inline_value = false;
    if (const auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name.resize(eq);
      inline_value = true;
    }
    const bool takes_value =
        std::find(kGlobalWithValue.begin(), kGlobalWithValue.end(), name) != kGlobalWithValue.end();
    if (takes_value && !inline_value && i + 1 < args.size()) value = args[i + 1];
    if (name == "log") log.path = value;
    if (name == "log-format") log.format = value;
    i += takes_value && !inline_value ? 2 : 1;
  }
  std::string command = i < args.size() ? args[i] : "";
  // Every refusal goes to hook.log and stderr (Log) and to the runtime's --log file, where
  // containerd's shim looks for the reason to show in the pod's events.
  auto refuse = [&](const std::string& message) {
    Log(o, message, err);
    log.Error(message);
    return 1;
  };
  auto fail = [&](const std::string& message) {
    err << "gpumux oci-runtime: " << message << "\n";
    log.Error(message);
    return 1;
  };
  std::string bundle = ".";
  std::string id;
  if (command == "create" || command == "run") {
    bool help = false;  // `create --help`: the runtime's help of the command, nothing to grant
    for (std::size_t k = i + 1; k < args.size(); ++k) {
      const std::string& a = args[k];
      if ((a == "--bundle" || a == "-b") && k + 1 < args.size()) {
        bundle = args[++k];
      } else if (a.rfind("--bundle=", 0) == 0) {
        bundle = a.substr(9);
      } else if (a == "--console-socket" || a == "--pid-file" || a == "--preserve-fds") {
        ++k;
      } else if (a == "--help" || a == "-h") {
        help = true;
      } else if (!a.empty() && a[0] != '-') {
        id = a;
      }
    }
    if (help) command.clear();
  }
  if (command == "create" || command == "run") {
    auto config = hook::LoadConfig(bundle);
    if (!config) return fail(config.error().message);
    auto env = hook::ConfigEnv(*config, bundle + "/config.json");
    if (!env) return fail(env.error().message);
    auto ask = hook::ParseGpuAsk(*env);
    if (!ask) return refuse("container '" + id + "': " + ask.error().message);
    if (ask->kind == hook::AskKind::kNone && ask->explicit_none) {
      if (auto set = hook::SetEnv(*config, "NVIDIA_VISIBLE_DEVICES", "void"); !set) {
        return fail(bundle + "/config.json: " + set.error().message);
      }
      if (auto saved = hook::SaveConfig(bundle, *config); !saved) {
        return fail(saved.error().message);
      }
    }
    if (ask->kind != hook::AskKind::kNone) {
      if (id.empty()) return fail(command + " without a container id");
      if (auto ok = hook::CheckContainerId(id, "the container id"); !ok) {
        return fail(ok.error().message);
      }
      auto inventory = hook::LoadInventory(InventoryOf(o));
      if (!inventory) return refuse(inventory.error().message);
      hook::ReservationStore store(o.state_dir);
      const std::string plugin_dir = DevicePluginDir();
      auto grant = hook::GrantGpus(id, *ask, *inventory, store, hook::CurrentProcess(::getpid()),
                                   "pending", {hook::PodOf(*config), plugin_dir});
      if (!grant) return refuse(grant.error().message);
      Log(o, grant->message, err);
      if (auto edited =
              ApplyGrant(o, *inventory, *grant, plugin_dir, *config, bundle + "/config.json");
          !edited) {
        if (grant->reserved && !grant->existing) (void)hook::ReleaseGpus(id, store);
        return fail(edited.error().message);
      }
      if (auto saved = hook::SaveConfig(bundle, *config); !saved) {
        if (grant->reserved && !grant->existing) (void)hook::ReleaseGpus(id, store);
        return fail(saved.error().message);
      }
    }
  }
  std::vector<std::string> argv_store{runtime};
  argv_store.insert(argv_store.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_store) argv.push_back(a.data());
  argv.push_back(nullptr);
  err.flush();
  std::cout.flush();
  ::execvp(runtime.c_str(), argv.data());
  const std::string reason = "cannot run '" + runtime + "': " + std::strerror(errno) +
                             " (set GPUMUX_RUNTIME to the runtime's path)";
  fail(reason);
  return 127;
}

namespace {

// One GPU as `gpumux gpus` prints it: the nvidia-smi -L line's parts and the JSON object.
struct GpuRow {
  int index = 0;
  std::string name;
  std::string uuid;
  nlohmann::ordered_json json;
};

struct GpuRows {
  std::vector<GpuRow> rows;
  std::string source;  // for "No devices found (...)"
};

// The hook's view: the device folder, or the GPU file.
int DevRows(const HostOptions& o, GpuRows& rows, std::ostream& err) {
  auto inventory = hook::LoadInventory(InventoryOf(o));
  if (!inventory) {
    err << "gpumux gpus: " << inventory.error().message << "\n";
    return 2;
  }
  rows.source = inventory->source;
  for (const auto& g : inventory->gpus) {
    rows.rows.push_back(GpuRow{g.index, g.model, g.uuid,
                               nlohmann::ordered_json{{"index", g.index},
                                                      {"uuid", g.uuid},
                                                      {"name", g.model},
                                                      {"memory_mib", g.memory_mib},
                                                      {"device", g.device.host_path}}});
  }
  return 0;
}

nlohmann::ordered_json GpuJson(const gpu::Gpu& g) {
  nlohmann::ordered_json processes = nlohmann::ordered_json::array();
  for (const gpu::GpuProcess& p : g.processes) {
    processes.push_back({{"pid", p.pid}, {"used_mib", p.used_mib}});
  }
  return {{"index", g.index},
          {"uuid", g.uuid},
          {"name", g.name},
          {"memory_total_mib", g.memory_total_mib},
          {"memory_used_mib", g.memory_used_mib},
          {"minor", g.minor},
          {"utilization_gpu", g.utilization_gpu},
          {"utilization_memory", g.utilization_memory},
          {"processes", std::move(processes)},
          {"health", gpu::HealthName(g.health)},
          {"health_reason", g.health_reason}};
}

// gpu::OpenFake or gpu::OpenNvml. Exit codes: 2 for usage and a bad GPU file, 1 when NVML
// cannot be used.
int BackendRows(const HostOptions& o, const GpusOptions& options, GpuRows& rows,
                std::ostream& err) {
  const bool nvml = options.backend == "nvml";
  if (nvml && options.reservations) {
    err << "gpumux gpus: --reservations is not supported with --backend nvml (the hook's "
           "ledger numbers GPUs as the device folder or GPU file does, not as NVML does); use "
           "--backend dev\n";
    return 2;
  }
  if (!nvml && o.gpus_file.empty()) {
    err << "gpumux gpus: --backend fake needs a GPU file (--gpus-file FILE or "
           "GPUMUX_GPUS_FILE)\n";
    return 2;
  }
  const int failure = nvml ? 1 : 2;
  auto backend = nvml ? gpu::OpenNvml(options.nvml_library) : gpu::OpenFake(o.gpus_file);
  if (!backend) {
    err << "gpumux gpus: " << backend.error().message << "\n";
    return failure;
  }
  auto gpus = (*backend)->List();
  if (!gpus) {
    err << "gpumux gpus: " << gpus.error().message << "\n";
    return failure;
  }
  rows.source = nvml ? "nvml: " + options.nvml_library : o.gpus_file;
  for (const gpu::Gpu& g : *gpus) rows.rows.push_back(GpuRow{g.index, g.name, g.uuid, GpuJson(g)});
  return 0;
}

}  // namespace

namespace {

// What this node could enforce on each listed GPU with a CDI hook (isolation/discovery.h).
std::vector<kube::GpuEnforcement> Enforceable(const GpusOptions& options, const GpuRows& rows) {
  isolation::DiscoveryInput in;
  for (const GpuRow& row : rows.rows) in.uuids.push_back(row.uuid);
  in.cgroup = isolation::DetectCgroupHierarchy(options.cgroup_root);
  auto nvml = gpu::OpenMemoryLimits(options.limits_nvml_library);
  if (nvml) {
    in.nvml = nvml->get();
  } else {
    in.nvml_error = nvml.error().message;
  }
  in.cdi_hook = true;  // the device plugin's to give (--install-cdi-hook)
  in.hami_core_library = options.hami_core_library;
  struct stat st {};
  in.hami_core_present = !options.hami_core_library.empty() &&
                         ::stat(options.hami_core_library.c_str(), &st) == 0 && S_ISREG(st.st_mode);
  return isolation::Discover(in);
}

}  // namespace

int RunGpus(const HostOptions& o, const GpusOptions& options, std::ostream& out,
            std::ostream& err) {
  const auto usage = [&err](const std::string& message) {
    err << "gpumux gpus: " << message << "\n";
    return 2;
  };
  if (Given(options.given, "gpus") && Given(options.given, "gpus-file")) {
    return usage("--gpus and --gpus-file name the same file: give one");
  }
  if (options.serve.empty()) {
    for (const char* flag : {"log-format", "log-level"}) {
      if (Given(options.given, flag)) {
        return usage(std::string("--") + flag +
                     " applies with --serve only (the log of the server)");
      }
    }
  }
  if (options.backend != "nvml" && Given(options.given, "nvml-library")) {
    return usage("--nvml-library does not apply with --backend " + options.backend +
                 " (only --backend nvml loads NVML)");
  }
  if (options.backend == "nvml") {
    for (const char* flag : {"gpus", "gpus-file", "dev-dir"}) {
      if (Given(options.given, flag)) {
        return usage("--" + std::string(flag) +
                     " does not apply with --backend nvml (NVML "
                     "lists the GPUs itself)");
      }
    }
  }
  if (options.backend == "fake" && Given(options.given, "dev-dir")) {
    return usage(
        "--dev-dir does not apply with --backend fake (the GPUs come from the GPU "
        "file)");
  }
  if (!options.serve.empty()) return ServeGpus(o, options, out, err);
  GpuRows rows;
  const int loaded =
      options.backend == "dev" ? DevRows(o, rows, err) : BackendRows(o, options, rows, err);
  if (loaded != 0) return loaded;
  if (rows.rows.empty() && !options.json) {
    err << "No devices found (" << rows.source << ").\n";
    return 0;
  }
  hook::ReservationFile file;
  if (options.reservations) {
    auto read = hook::ReservationStore(o.state_dir).Read();
    if (!read) {
      err << "gpumux gpus: " << read.error().message << "\n";
      return 2;
    }
    file = std::move(*read);
  }
  auto holder_of = [&](int gpu) -> const hook::Reservation* {
    for (const auto& r : file.reservations) {
      if (std::find(r.gpus.begin(), r.gpus.end(), gpu) != r.gpus.end()) return &r;
    }
    return nullptr;
  };
  std::vector<kube::GpuEnforcement> enforced;
  if (options.enforcement) enforced = Enforceable(options, rows);
  const auto enforcement_of = [&](std::size_t i) {
    return i < enforced.size() ? enforced[i] : kube::GpuEnforcement{};
  };
  if (options.json) {
    nlohmann::ordered_json j = nlohmann::ordered_json::array();
    for (std::size_t i = 0; i < rows.rows.size(); ++i) {
      GpuRow& row = rows.rows[i];
      if (options.enforcement) {
        row.json["enforcement"] =
            nlohmann::ordered_json::parse(kube::EnforcementToJson(enforcement_of(i)).dump());
      }
      if (options.reservations) {
        const hook::Reservation* r = holder_of(row.index);
        row.json["reserved_by"] = r != nullptr ? nlohmann::ordered_json(r->container) : nullptr;
        if (r != nullptr) {
          // "namespace/pod/container" when the runtime said (CRI annotations), else null.
          row.json["reserved_by_pod"] = r->pod.empty()
                                            ? nlohmann::ordered_json(nullptr)
                                            : nlohmann::ordered_json(hook::HolderName(*r));
          row.json["since"] = r->since;
          row.json["state"] = r->state;
          const hook::Liveness alive = hook::HolderLiveness(*r);
          row.json["holder_alive"] = alive == hook::Liveness::kUnknown
                                         ? nlohmann::ordered_json(nullptr)
                                         : nlohmann::ordered_json(alive == hook::Liveness::kAlive);
        }
      }
      j.push_back(std::move(row.json));
    }
    out << j.dump(2) << "\n";
    return 0;
  }
  for (std::size_t i = 0; i < rows.rows.size(); ++i) {
    const GpuRow& row = rows.rows[i];
    out << "GPU " << row.index << ": " << (row.name.empty() ? "NVIDIA GPU" : row.name)
        << " (UUID: " << (row.uuid.empty() ? "unknown" : row.uuid) << ")";
    if (options.enforcement) {
      const kube::GpuEnforcement e = enforcement_of(i);
      out << "  enforces " << e.Summary();
      if (!e.note.empty()) out << " (" << e.note << ")";
    }
    if (options.reservations) {
      const hook::Reservation* r = holder_of(row.index);
      if (r == nullptr) {
        out << "  free";
      } else {
        out << "  reserved by '" << hook::HolderName(*r) << "'";
        if (!r->pod.empty()) out << " (container " << r->container.substr(0, 12) << ")";
        out << " since " << r->since << " (" << r->state;
        switch (hook::HolderLiveness(*r)) {
          case hook::Liveness::kAlive:
            break;
          case hook::Liveness::kGone:
            out << ", holder gone: reclaimed at the next grant";
            break;
          case hook::Liveness::kUnknown:
            out << ", holder in another pid namespace: cannot tell whether it runs";
            break;
        }
        out << ")";
      }
    }
    out << "\n";
  }
  return 0;
}

}  // namespace gpumux::cli
