// `gpumux device-plugin`: the kubelet device plugin daemon of one GPU node (NodeAgent: GPU
// backend, health, the three resources' gRPC servers, the node's inventory annotation, the
// node-lock handshake in Allocate). SIGINT/SIGTERM stop it cleanly.
#include <signal.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "gpumux/core/plural.h"
#include "gpumux/deviceplugin/node_agent.h"
#include "gpumux/gpu/backend.h"
#include "gpumux/hook/coexistence.h"
#include "gpumux/isolation/cdi.h"
#include "gpumux/isolation/discovery.h"
#include "gpumux/kube/api_client.h"
#include "gpumux/kube/objects.h"
#include "src/cli/commands.h"
#include "src/cli/daemon_log.h"
#include "src/cli/daemon_support.h"
#include "src/cli/options.h"
#include "src/cli/settings.h"

namespace gpumux::cli {
namespace {

constexpr int kUsageError = 2;
constexpr int kRuntimeError = 1;
// --health-interval-ms: below 10 ms the backend is polled for nothing; above an hour a failed
// GPU keeps taking pods for too long.
constexpr std::int64_t kMinHealthIntervalMs = 10;
constexpr std::int64_t kMaxHealthIntervalMs = 3'600'000;
// --xid-recovery-seconds: a GPU that has had no XID for a week is not recovering from that one.
constexpr std::int64_t kMaxXidRecoverySeconds = 7 * 86'400;

// "HOST[:CONTAINER]" -> a read-only mount.
deviceplugin::MountSpec ParseMount(const std::string& text) {
  const auto colon = text.find(':');
  if (colon == std::string::npos) return {text, text, true};
  return {text.substr(0, colon), text.substr(colon + 1), true};
}

// The enforcement settings, or what is wrong with them (for the usage error).
core::Result<deviceplugin::EnforcementOptions> EnforcementFrom(const DevicePluginCliOptions& o,
                                                               const std::string& state_dir) {
  const auto Bad = [](const std::string& why) {
    return core::MakeError(core::ErrorCode::kInvalidArgument, why);
  };
  deviceplugin::EnforcementOptions e;
  e.allowed.clear();
  const std::set<std::string> known = {isolation::kMemoryPartitioning, isolation::kMps,
                                       isolation::kHamiCore};
  if (o.enforcement == "auto") {
    e.allowed = known;
  } else if (o.enforcement != "none") {
    for (const std::string& item : SplitCommas(o.enforcement)) {
      if (!known.contains(item)) {
        return Bad("--enforcement: '" + item +
                   "' is not auto, none, memory-partitioning, mps or hami-core");
      }
      e.allowed.insert(item);
    }
  }
  if (e.allowed.contains(isolation::kMps) && o.enforcement != "auto" && !o.mps) {
    return Bad("--enforcement mps needs --mps (the plugin's MPS daemons)");
  }
  if (e.allowed.contains(isolation::kHamiCore) && o.enforcement != "auto" &&
      o.hami_core_library.empty()) {
    return Bad("--enforcement hami-core needs --hami-core-library");
  }
  if (o.memory_soft_limit_percent < 0 || o.memory_soft_limit_percent > 100) {
    return Bad("--memory-soft-limit-percent must be in 0..100");
  }
  for (const auto& [flag, path] :
       {std::pair<const char*, const std::string*>{"--cgroup-root", &o.cgroup_root},
        {"--cdi-spec-dir", &o.cdi_spec_dir},
        {"--hami-core-library", &o.hami_core_library}}) {
    if (!path->empty() && path->front() != '/') {
      return Bad(std::string(flag) + " must be an absolute host path, not '" + *path + "'");
    }
  }
  e.nvml_library = o.limits_nvml_library;
  e.cgroup_root = o.cgroup_root;
  e.state_dir = state_dir;
  e.soft_limit_percent = static_cast<int>(o.memory_soft_limit_percent);
  e.hami_core_library = o.hami_core_library;
  if (!o.cdi_hook.empty() && !o.install_cdi_hook.empty()) {
    return Bad("give --cdi-hook or --install-cdi-hook, not both");
  }
  if (!o.install_cdi_hook.empty() && o.install_cdi_hook.front() != '/') {
    return Bad("--install-cdi-hook must be an absolute host path, not '" + o.install_cdi_hook +
               "'");
  }
  if (!o.cdi_hook.empty() || !o.install_cdi_hook.empty()) {
    isolation::HookSettings hook;
    hook.spec_dir = o.cdi_spec_dir;
    std::istringstream words(o.cdi_hook.empty() ? o.install_cdi_hook + "/gpumux" : o.cdi_hook);
    for (std::string w; words >> w;) hook.command.push_back(w);
    if (hook.command.empty() || hook.command.front().front() != '/') {
      return Bad("--cdi-hook must start with the absolute host path of a program, not '" +
                 o.cdi_hook + "'");
    }
    hook.nvml_library = o.limits_nvml_library;
    hook.cgroup_root = o.cgroup_root;
    hook.state_dir = state_dir;
    e.hook = std::move(hook);
  }
  return e;
}

}  // namespace

CLI::App* AddDevicePluginCommand(CLI::App& app, DevicePluginCliOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "device-plugin",
      "Run the kubelet device plugin of this node: gpumux.io/gpu, gpu-mem and gpu-milli\n"
      "Registers gpumux.io/gpu (one device per "
      "GPU), gpumux.io/gpu-mem (GPU memory in units of --gpu-mem-unit-mib) and "
      "gpumux.io/gpu-milli (1000 per GPU), reports GPU health (backend state and XID events) "
      "to the kubelet, publishes the node's GPUs in its gpumux.io/gpus annotation for the "
      "extender, and in Allocate gives each container exactly the GPUs the extender granted it "
      "(found through the node lock, never guessed). Serves /healthz, /readyz and /metrics on "
      "--metrics-address.");
  auto settings = std::make_shared<SettingsTable<DevicePluginCliOptions>>(*cmd, o);
  o.settings = settings;
  SettingsTable<DevicePluginCliOptions>& s = *settings;
  using O = DevicePluginCliOptions;
  s.Add("node-name", &O::node_name, "This node's name [default: $NODE_NAME]");
  s.Add("backend", &O::backend, "Where GPUs come from: nvml or fake (a --gpus-file)")
      ->check(CLI::IsMember({"nvml", "fake"}))
      ->capture_default_str();
  s.AddPath("gpus-file", &O::gpus_file,
            "Fake backend: CSV with index,uuid,model,memory_mib and optional minor, "
            "health, memory_used_mib, xids columns (re-read when it changes)");
  s.Add("nvml-library", &O::nvml_library, "NVML library to dlopen (--backend nvml)")
      ->capture_default_str();
  s.Add("kubelet-dir", &O::kubelet_dir,
        "The kubelet's device-plugin folder (kubelet.sock and the plugins' sockets)")
      ->capture_default_str();
  s.Add("hook-state-dir", &O::hook_state_dir,
        "State folder of the OCI runtime path (gpumux oci-runtime / gpumux hook): the "
        "plugin refuses to start while its GPU reservation ledger holds live "
        "reservations, since the two would grant GPUs twice [default: "
        "$GPUMUX_STATE_DIR, else /var/lib/gpumux]");
  s.Add("resources", &O::resources, "Resources to serve, comma-separated: gpu, gpu-mem, gpu-milli")
      ->capture_default_str();
  s.Add("gpu-mem-unit-mib", &O::gpu_mem_unit_mib,
        "MiB per gpumux.io/gpu-mem device; must equal the extender's "
        "--gpu-mem-unit-mib (published in the node annotation gpumux.io/gpu-mem-unit-mib)")
      ->capture_default_str()
      ->check(AnyInteger<std::int64_t>());
  s.AddPath("kubeconfig", &O::kubeconfig, "Reach the API server with this kubeconfig");
  s.Add("in-cluster", &O::in_cluster,
        "Reach the API server with the pod's service account (in a DaemonSet)");
  s.Add("context", &O::context, "kubeconfig context [default: current-context]; with --kubeconfig");
  s.Add("offline", &O::offline,
        "No API server: register and report health only; every Allocate is refused "
        "(the pod cannot be identified). For trying the kubelet side");
  s.Add("inject-devices", &O::inject_devices,
        "Add /dev/nvidiactl, /dev/nvidia-uvm, /dev/nvidia-uvm-tools and the granted "
        "/dev/nvidia<minor> to containers (for runtimes without the NVIDIA hook)");
  s.Add("dev-dir", &O::dev_dir, "Where the NVIDIA device nodes are (with --inject-devices)")
      ->capture_default_str();
  s.Add("mount", &O::mounts,
        "HOST[:CONTAINER] to bind read-only into containers (driver libraries, "
        "nvidia-smi); with --inject-devices; repeatable");
  s.Add("cdi-kind", &O::cdi_kind,
        "Also name the granted GPUs as CDI devices of this kind (e.g. nvidia.com/gpu)");
  s.Add("coordinator-dir", &O::coordinator_dir,
        "Host folder of the node coordinator's socket (its --socket's folder, e.g. /run/gpumux), "
        "mounted read-only at /run/gpumux into every granted container with "
        "GPUMUX_COORDINATOR set: training jobs reach the coordinator without a hostPath");
  s.Add("mps", &O::mps,
        "Run one MPS control daemon per GPU (--mps-control -f, supervised) and give shared "
        "single-GPU containers its pipe folder and /dev/shm through Allocate's mounts, with "
        "the daemon's limits raised to the largest share granted on the GPU (deploy/README.md, "
        "\"MPS\")");
  s.Add("mps-control", &O::mps_control, "The MPS control program (with --mps)")
      ->capture_default_str();
  s.Add("mps-dir", &O::mps_dir,
        "Host folder of the MPS daemons' pipe, log and shm folders (with --mps; the DaemonSet "
        "mounts it at the same path)")
      ->capture_default_str();
  s.Add("enforcement", &O::enforcement,
        "What may hold a share's container to its grant on the GPU: 'auto' (every backend "
        "the node has, strongest first), 'none', or a comma list of memory-partitioning "
        "(a hard memory limit on the container's cgroup: driver r615+, cgroup v2, non-MIG, "
        "and --cdi-hook), mps (with --mps) and hami-core (with --hami-core-library). What "
        "each GPU gets is published in gpumux.io/gpus and shown by kubectl gpumux nodes")
      ->capture_default_str();
  s.Add("cgroup-root", &O::cgroup_root,
        "The host's cgroup v2 hierarchy, as this process sees it (memory partitioning needs "
        "cgroup v2 at /sys/fs/cgroup; the DaemonSet mounts the host's there)")
      ->capture_default_str();
  s.Add("cdi-spec-dir", &O::cdi_spec_dir,
        "Host folder where the container runtime reads CDI specs (containerd's cdi_spec_dirs, "
        "CRI-O's cdi_spec_dirs); a share gets its enforcement hook as a CDI device there")
      ->capture_default_str();
  s.Add("cdi-hook", &O::cdi_hook,
        "How the container runtime runs gpumux on the host as the CDI hook that sets a "
        "container's GPU memory limit: the host path of a gpumux binary, or a command "
        "(words separated by spaces) that runs one; without it memory partitioning is not "
        "used");
  s.Add("install-cdi-hook", &O::install_cdi_hook,
        "Host folder (mounted at the same path) to copy this gpumux and the libraries it "
        "runs with into at start, and to use as the CDI hook (instead of --cdi-hook): the "
        "hook then runs whatever the host has installed");
  s.Add("limits-nvml-library", &O::limits_nvml_library,
        "NVML library for the GPU memory limits (dlopen'ed by the plugin to discover "
        "them, and by the CDI hook on the host to set them)")
      ->capture_default_str();
  s.Add("memory-soft-limit-percent", &O::memory_soft_limit_percent,
        "Soft GPU memory limit as a percentage of the hard one (the grant) with memory "
        "partitioning; 0 = none. NVIDIA's driver adds a soft limit to every parent cgroup's "
        "reservation, which stays when the runtime removes the container's cgroup (0..100)")
      ->capture_default_str()
      ->check(AnyInteger<std::int64_t>());
  s.Add("hami-core-library", &O::hami_core_library,
        "Host path of HAMi-core's libvgpu.so, installed by the operator (gpumux does not ship "
        "it): shares get it preloaded with their grant as its memory and SM limits");
  s.Add("device-list-strategy", &O::device_list_strategy,
        "How the NVIDIA container toolkit learns a container's GPUs: 'envvar' "
        "(NVIDIA_VISIBLE_DEVICES=<UUIDs>; a pod's own NVIDIA_VISIBLE_DEVICES wins) or "
        "'volume-mounts' (one mount per granted GPU under /var/run/nvidia-container-devices; "
        "set the toolkit's accept-nvidia-visible-devices-as-volume-mounts = true and "
        "accept-nvidia-visible-devices-envvar-when-unprivileged = false, and a pod's own "
        "environment cannot widen its grant)")
      ->check(CLI::IsMember({"envvar", "volume-mounts"}))
      ->capture_default_str();
  s.Add("health-interval-ms", &O::health_interval_ms,
        "How often GPU health is read from the backend (10..3600000)")
      ->capture_default_str()
      ->check(AnyInteger<std::int64_t>());
  s.Add("xid-recovery-seconds", &O::xid_recovery_seconds,
        "A GPU marked unhealthy by a transient XID is healthy again after this long "
        "without another one (fatal XIDs keep it unhealthy until restart; 0..604800)")
      ->capture_default_str()
      ->check(AnyInteger<std::int64_t>());
  s.Add("ignore-xids", &O::ignore_xids,
        "Comma-separated XIDs to treat as application errors (no health change)");
  s.Add("metrics-address", &O::metrics_address,
        "HOST:PORT for /healthz, /readyz and /metrics (port 0: any free port; 'off')")
      ->capture_default_str();
  AddLogSettings(*cmd, s, o, &O::log);
  s.AddConfigOption(&O::config);
  s.Add("check", &O::check,
        "Check the options and the files they name (the GPU file of --backend fake, "
        "the kubeconfig), print what would be served and exit 0 (2 when something is "
        "wrong) without opening NVML, serving sockets or reaching the API server; "
        "--in-cluster's service account is not read",
        "-");
  RecordGivenOptions(*cmd, o.given);
  cmd->footer(
      "\nExit status: 0 after SIGINT/SIGTERM, 2 for bad usage or input (a malformed GPU file, "
      "more devices than the kubelet can take: raise --gpu-mem-unit-mib), 1 when it cannot run "
      "(no GPUs can be listed, a socket or port cannot be served, the OCI runtime path holds "
      "GPUs on this node).\n"
      "\nWithout a kubelet (--offline and a --kubelet-dir of your own) it says that it waits "
      "for <kubelet-dir>/kubelet.sock, and registers when that socket appears.\n"
      "\nExamples (add --check to try one without a cluster or a GPU):\n"
      "  gpumux device-plugin --in-cluster\n"
      "      in the DaemonSet (deploy/base/device-plugin/), which sets NODE_NAME\n"
      "  gpumux device-plugin --in-cluster --metrics-address 0.0.0.0:9402 --log-format json \\\n"
      "      --log-level warn\n"
      "      /healthz /readyz /metrics on the pod IP for Prometheus; JSON logs, problems only\n"
      "  gpumux device-plugin --node-name gpu-1 --kubeconfig ~/.kube/config\n"
      "  gpumux device-plugin --node-name dev --backend fake --gpus-file gpus.csv \\\n"
      "      --kubelet-dir /tmp/kubelet --offline\n"
      "      no GPU, no cluster: a fake GPU file; waits for /tmp/kubelet/kubelet.sock\n");
  return cmd;
}

int RunDevicePlugin(const DevicePluginCliOptions& given, std::ostream& out, std::ostream& err) {
  const auto usage = [&err](const std::string& message) {
    err << "gpumux device-plugin: " << message << "\nRun 'gpumux device-plugin --help'.\n";
    return kUsageError;
  };
  DevicePluginCliOptions o = given;
  if (!o.config.empty()) {
    if (auto bad = o.settings->ApplyFile(o.config, o.given, o)) return usage(*bad);
  }
  deviceplugin::NodeAgentOptions options;
  deviceplugin::PluginOptions& p = options.plugin;
  p.node_name = o.node_name;
  if (p.node_name.empty()) {
    const char* env = std::getenv("NODE_NAME");
    if (env != nullptr) p.node_name = env;
  }
  if (p.node_name.empty())
    return usage("the node name is unknown: give --node-name or set NODE_NAME");
  if (o.backend == "fake" && o.gpus_file.empty()) return usage("--backend fake needs --gpus-file");
  if (o.backend == "nvml" && !o.gpus_file.empty()) {
    return usage("--gpus-file is for --backend fake, not --backend nvml");
  }
  if (o.backend == "fake" && Given(o.given, "nvml-library")) {
    return usage(
        "--nvml-library does not apply with --backend fake (the GPUs come from "
        "--gpus-file)");
  }
  if (o.gpu_mem_unit_mib < 1 || o.gpu_mem_unit_mib > kube::kMaxGpuMemUnitMib) {
    return usage("--gpu-mem-unit-mib must be 1.." + std::to_string(kube::kMaxGpuMemUnitMib));
  }
  if (o.health_interval_ms < kMinHealthIntervalMs || o.health_interval_ms > kMaxHealthIntervalMs) {
    return usage("--health-interval-ms must be at least " + std::to_string(kMinHealthIntervalMs) +
                 " and at most " + std::to_string(kMaxHealthIntervalMs) + " (an hour)");
  }
  if (o.xid_recovery_seconds < 0 || o.xid_recovery_seconds > kMaxXidRecoverySeconds) {
    return usage("--xid-recovery-seconds must be in 0.." + std::to_string(kMaxXidRecoverySeconds) +
                 " (a week)");
  }
  const int sources = (o.kubeconfig.empty() ? 0 : 1) + (o.in_cluster ? 1 : 0) + (o.offline ? 1 : 0);
  if (sources != 1) {
    return usage("give exactly one of --kubeconfig, --in-cluster and --offline");
  }
  if (!o.context.empty() && o.kubeconfig.empty()) return usage("--context needs --kubeconfig");
  if (Given(o.given, "dev-dir") && !o.inject_devices) {
    return usage(
        "--dev-dir needs --inject-devices (the device nodes are only read to inject "
        "them)");
  }
  p.resources.clear();
  for (const std::string& item : SplitCommas(o.resources)) {
    auto r = deviceplugin::ParseResource(item);
    if (!r) return usage("--resources: " + r.error().message);
    p.resources.push_back(*r);
  }
  if (p.resources.empty()) return usage("--resources names no resource");
  p.kubelet_dir = o.kubelet_dir;
  std::string hook_state_dir = o.hook_state_dir;
  if (hook_state_dir.empty()) {
    const char* env = std::getenv(std::string(hook::kStateDirEnv).c_str());
    hook_state_dir = env != nullptr && env[0] != '\0' ? env : std::string(hook::kDefaultStateDir);
  }
  // Checked once the sockets are served, before registering (hook/coexistence.h).
  p.before_register = [hook_state_dir] { return hook::CheckNoActiveReservations(hook_state_dir); };
  p.gpu_mem_unit_mib = o.gpu_mem_unit_mib;
  p.inject.inject_devices = o.inject_devices;
  p.inject.dev_dir = o.dev_dir;
  for (const std::string& m : o.mounts) p.inject.mounts.push_back(ParseMount(m));
  if (!p.inject.mounts.empty() && !o.inject_devices) return usage("--mount needs --inject-devices");
  p.inject.cdi_kind = o.cdi_kind;
  if (!o.coordinator_dir.empty() && o.coordinator_dir.front() != '/') {
    return usage("--coordinator-dir must be an absolute host path, not '" + o.coordinator_dir +
                 "'");
  }
  p.inject.coordinator_dir = o.coordinator_dir;
  if ((Given(o.given, "mps-control") || Given(o.given, "mps-dir")) && !o.mps) {
    return usage("--mps-control and --mps-dir need --mps");
  }
  if (o.mps) {
    if (o.mps_dir.empty() || o.mps_dir.front() != '/') {
      return usage("--mps-dir must be an absolute host path, not '" + o.mps_dir + "'");
    }
    options.mps = deviceplugin::MpsOptions{o.mps_control, o.mps_dir, nullptr};
  }
  auto enforcement = EnforcementFrom(o, hook_state_dir);
  if (!enforcement) return usage(enforcement.error().message);
  options.enforcement = std::move(*enforcement);
  p.inject.device_list = o.device_list_strategy == "volume-mounts"
                             ? deviceplugin::DeviceListStrategy::kVolumeMounts
                             : deviceplugin::DeviceListStrategy::kEnvvar;
  options.health_interval = std::chrono::milliseconds(o.health_interval_ms);
  options.health.transient_recovery_ms = o.xid_recovery_seconds * 1000;
  for (const std::string& item : SplitCommas(o.ignore_xids)) {
    if (item.empty() || item.size() > 9 ||
        item.find_first_not_of("0123456789") != std::string::npos) {
      return usage("--ignore-xids: '" + item + "' is not an XID number");
    }
    options.health.ignored_xids.push_back(std::stoull(item));
  }
  if (!ParseHostPortOrOff(o.metrics_address, options.metrics_host, options.metrics_port)) {
    return usage("--metrics-address must be HOST:PORT or 'off', not '" + o.metrics_address + "'");
  }

  SignalBlock signals;
  signal(SIGPIPE, SIG_IGN);
  const core::Logger log = MakeDaemonLogger(err, "device-plugin", o.log);
  p.log = log;

  std::unique_ptr<kube::KubeApi> api;
  std::string source = "no API server (--offline)";
  if (!o.offline) {
    auto connected = ConnectDaemonApi(o.kubeconfig, o.context, o.in_cluster, o.check);
    if (!connected) return usage(connected.error().message);
    source = connected->Describe();
    api = std::move(connected->api);
  }
  std::string resources;
  for (deviceplugin::Resource r : p.resources) {
    resources += (resources.empty() ? "" : ", ") + std::string(deviceplugin::ResourceName(r));
  }
  const std::string node_name = p.node_name, kubelet_dir = p.kubelet_dir;
  const std::int64_t unit = p.gpu_mem_unit_mib;
  const auto check_passed = [&](const std::string& gpus) {
    out << "gpumux device-plugin: --check: the options are valid; it would serve " << gpus
        << " of node " << node_name << " as " << resources << " in " << kubelet_dir << " with "
        << source << "\n";
    return 0;
  };
  if (o.check && o.backend == "nvml")
    return check_passed("the GPUs NVML lists (not opened by --check)");
  if (!o.install_cdi_hook.empty() && !o.check && options.enforcement->hook) {
    // Before NVML is opened: only the libraries gpumux starts with are copied.
    auto installed = isolation::InstallSelf(o.install_cdi_hook);
    if (!installed) {
      log.Error("cannot install the CDI hook",
                {{"folder", o.install_cdi_hook}, {"error", installed.error().message}});
      return kRuntimeError;
    }
    options.enforcement->hook->command = std::move(*installed);
    log.Info("installed the CDI hook", {{"folder", o.install_cdi_hook}});
  }
  auto backend = o.backend == "fake" ? gpu::OpenFake(o.gpus_file) : gpu::OpenNvml(o.nvml_library);
  // A GPU file or an inventory gpumux refuses (kInvalidArgument) is bad input: exit 2.
  const auto failure = [](const core::Error& e) {
    return e.code == core::ErrorCode::kInvalidArgument ? kUsageError : kRuntimeError;
  };
  if (!backend) {
    log.Error("cannot open the GPU backend",
              {{"backend", o.backend}, {"error", backend.error().message}});
    return failure(backend.error());
  }
  auto agent = deviceplugin::NodeAgent::Create(std::move(options), std::move(*backend), api.get());
  if (!agent) {
    log.Error("cannot start", {{"error", agent.error().message}});
    return failure(agent.error());
  }
  const std::string gpus = core::Plural((*agent)->gpus().size(), "GPU");
  if (o.check) return check_passed(gpus + " from " + o.gpus_file);
  if (auto started = (*agent)->Start(); !started) {
    log.Error("cannot start", {{"error", started.error().message}});
    return kRuntimeError;
  }
  log.Info("serving",
           {{"node", node_name},
            {"gpus", std::to_string((*agent)->gpus().size())},
            {"resources", resources},
            {"gpu_mem_unit_mib", std::to_string(unit)},
            {"kubelet_dir", kubelet_dir},
            {"metrics_address", (*agent)->metrics_port() > 0
                                    ? o.metrics_address.substr(0, o.metrics_address.rfind(':')) +
                                          ":" + std::to_string((*agent)->metrics_port())
                                    : std::string()}});
  const int sig = signals.Wait();
  signals.Restore();
  log.Info("stopping (a second signal ends the process at once)",
           {{"signal", sig == SIGINT ? "SIGINT" : "SIGTERM"}});
  (*agent)->Stop();
  log("stopped");
  return 0;
}

}  // namespace gpumux::cli
