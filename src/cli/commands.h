// Subcommands of the gpumux CLI (internal to the cli module).
#pragma once

#include <cstddef>
#include <cstdint>
#include <istream>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "gpumux/core/result.h"
#include "gpumux/policy/fragmentation.h"
#include "gpumux/sim/dl_workload.h"
#include "src/cli/daemon_log.h"

namespace CLI {
class App;
}

namespace gpumux::cli {

template <typename Options>
class SettingsTable;

// `gpumux simulate --workload dl`: the JCT simulation of deep-learning training jobs.
struct DlOptions {
  std::string jobs;             // job list CSV; "" = generated (embedded IADeep-like default)
  std::string profile;          // workload profile JSON; "" = embedded default
  std::string truth_profile;    // what the simulated GPUs do; "" = the default truth
  std::string mix = "uniform";  // class mix for generated jobs
  int count = 300;
  std::string loads = "1,2,4";
  // Equal levers by default: every policy with the same queue and tuner, so that the comparison
  // is of placement (issue 31); "auto" gives each policy its own (an explicit choice).
  std::string tuner = "joint";
  std::string queue = "fifo";
  int max_jobs_per_gpu = 3;
  int gpus = 20;
  std::string truth_model = "predictor";  // sim::TruthRule's name
  double model_error = 0.1;
  double reconfigure_s = 3.0;
  double measure_noise = 0.1;
  double work_spread = 0.5;
  double noise_scale_spread = 0.3;
  std::uint64_t truth_seed = 0;  // the truth's hidden factors; 0 = each run's seed
  std::string observations;      // JSON array of observations added to the belief
  std::string observations_out;  // where to write what coordinators would have measured
  bool learn = false;            // the policies learn within each run
};

// The default report folders: each workload its own, so that one run never overwrites the
// other's index.html and results.json.
inline constexpr std::string_view kFgdReportDir = "gpumux-report";
inline constexpr std::string_view kDlReportDir = "gpumux-report-dl";
// The --help group of simulate's --workload dl options (and of the training-job policies' knobs).
inline constexpr std::string_view kDlOptionsGroup = "DL workload (--workload dl)";

struct SimulateOptions {
  std::string workload = "fgd";  // fgd (the FGD study's trace) or dl (JCT of training jobs)
  DlOptions dl;
  std::string nodes;  // "" = embedded
  std::string pods;   // "" = embedded
  std::vector<std::string> policies{"default"};
  std::string seeds = "42";
  double load = 1.3;
  std::string format = "table";
  std::string out_dir;  // "" = the workload's default (kFgdReportDir, kDlReportDir)
  bool no_report = false;
  std::string expect;  // "" = embedded when the embedded pod list is used; "none" = off
  std::string replay;
  std::string placements;
  int threads = 0;
  bool no_timing = false;
  bool check_invariants = false;
  bool quiet = false;
  bool departures = false;             // pods leave after their trace durations (sim/departures.h)
  double departure_rounds = 30;        // = sim::DepartureOptions
  double max_duration_s = 6 * 3600.0;  // = sim::DepartureOptions
  std::size_t max_arrivals = 1'000'000;    // = sim::kDefaultMaxArrivals (a CLI test checks)
  int percentage_of_nodes_to_score = 100;  // = sim::ExperimentOptions
  std::map<std::string, double, std::less<>> knobs;  // the policies' knobs given (--<knob>)
  std::set<std::string> given;  // long names of the options given on the command line
};

CLI::App* AddSimulateCommand(CLI::App& app, SimulateOptions& options);
int RunSimulate(const SimulateOptions& options, std::ostream& out, std::ostream& err);
// The message for options given together that cannot apply together (an option of the other
// workload, --out with --no-report, --mix or --count with --jobs); nothing when they can.
std::optional<std::string> CheckSimulateCombination(const SimulateOptions& options);
int RunPolicies(std::ostream& out);
int RunSimulateDl(const SimulateOptions& options, std::ostream& out, std::ostream& err);
int RunSimulateDepartures(const SimulateOptions& options, const std::vector<std::uint64_t>& seeds,
                          const std::vector<std::string>& policies, std::ostream& out,
                          std::ostream& err);

struct BoundCliOptions {
  std::string seeds = "42";
  std::string demand = "100,130";
  std::string hindsight_policies = "fgd,fgd-sat-reserve,best-fit";
  std::string at_least;  // "" = no curve floor
  std::string nodes;     // "" = embedded
  std::string pods;      // "" = embedded
  std::string format = "table";
  int threads = 0;
  bool quiet = false;
};

CLI::App* AddBoundCommand(CLI::App& app, BoundCliOptions& options);
int RunBound(const BoundCliOptions& options, std::ostream& out, std::ostream& err);

struct JobGenCliOptions {
  std::string profile;
  std::string mix = "uniform";
  int count = 300;
  std::string arrival = "bursty";  // bursty, poisson, or a file of submit times
  double rate = 300.0 / 4000.0;
  double load = 1.0;
  int min_gib = 3;
  int max_gib = 7;
  std::uint64_t seed = 42;
  std::string out;  // "" = stdout
  // Kubernetes manifests (workload_commands.cc): --format k8s (YAML) or k8s-json (a List).
  std::string format = "csv";
  std::string kind = "pod";  // pod or job
  std::string jobs;          // an existing job list to write as manifests
  std::string pods;          // an openb pod list (a file, or "default": the embedded one)
  double start_s = 0;        // --pods: the first pod created at or after this time
  std::string image;         // "" = the workload's default image
  std::string scheduler_name = "gpumux-scheduler";
  std::string name_prefix;
  std::string run;                       // the gpumux.io/run label; "" = none (submit adds its own)
  std::int64_t gpu_mem_unit_mib = 1024;  // = kube::kDefaultGpuMemUnitMib
  double work_scale = 1;  // training steps = work_scale x the class's samples / batch
  std::string examples_dir = "/opt/gpumux/python/examples";
  std::vector<std::string> examples;     // CLASS=SCRIPT: the example a class runs
  std::string coordinator_dir = "none";  // a hostPath into training pods; "none" = not (the
                                         // device plugin's --coordinator-dir mounts it)
  std::int64_t job_cpu_milli = 2000;     // each training pod's CPU request
  std::int64_t job_memory_mib = 8192;    // and memory request (0: none)
  std::string host_resources = "trace";  // --pods: trace (CPU, memory requests) or none
  std::set<std::string> given;           // long names of the options given on the command line
};
CLI::App* AddJobGenCommand(CLI::App& app, JobGenCliOptions& options);
int RunJobGen(const JobGenCliOptions& options, std::ostream& out, std::ostream& err);

// `gpumux jobgen --format k8s|k8s-json` (workload_commands.cc): the jobs (generated, or read
// with --jobs) or the pods of --pods as Kubernetes objects. Exit 0, or 2 naming the bad input.
void AddJobGenK8sOptions(CLI::App& cmd, JobGenCliOptions& options);
// The message for an option that does not apply with the others given; nothing when all do.
std::optional<std::string> CheckJobGenCombination(const JobGenCliOptions& options);
int RunJobGenPods(const JobGenCliOptions& options, std::ostream& out, std::ostream& err);
int WriteJobManifests(const JobGenCliOptions& options, const std::vector<sim::JobSpec>& jobs,
                      const policy::WorkloadProfile& profile, std::ostream& out, std::ostream& err);

// `gpumux submit`: creates a workload's objects on a cluster at their arrival times and
// records what happens to every job (workload_commands.cc).
struct SubmitCliOptions {
  std::string file = "-";  // manifests; "-" = stdin
  std::string kubeconfig, context, ns;
  double time_scale = 1;
  std::string record;  // "" = gpumux-run-<run>.jsonl
  std::string run;     // "" = the manifests' gpumux.io/run label, else run-<UTC time>
  std::string label;   // "" = the run
  bool wait = false;
  double wait_timeout_s = 0;
  bool fail_fast = false;
  bool dry_run = false;
  std::string progress = "auto";  // auto, bar, lines, none
  double progress_every_s = 10;
  std::set<std::string> given;
};
CLI::App* AddSubmitCommand(CLI::App& app, SubmitCliOptions& options);
// 0: every object created (and with --wait every job finished, succeeded or not); 1: a create
// failed, --fail-fast stopped, the wait timed out or the record could not be written; 130:
// interrupted (Ctrl-C); 2: bad usage or input.
int RunSubmit(const SubmitCliOptions& options, std::istream& in, std::ostream& out,
              std::ostream& err);

// `gpumux report --from-cluster RECORD...`: the JCT tables and HTML report of `simulate
// --workload dl` for runs recorded by `gpumux submit`.
struct ReportCliOptions {
  std::vector<std::string> records;
  std::string out_dir;  // "" = gpumux-report-cluster
  bool no_report = false;
  std::string format = "table";
  std::string baseline = "iadeep";
  bool quiet = false;
  std::set<std::string> given;
};
inline constexpr std::string_view kClusterReportDir = "gpumux-report-cluster";
CLI::App* AddReportCommand(CLI::App& app, ReportCliOptions& options);
int RunReport(const ReportCliOptions& options, std::ostream& out, std::ostream& err);

// Where the reservation adapters find the host's GPUs and keep their ledger. Defaults come from
// GPUMUX_STATE_DIR (/var/lib/gpumux), GPUMUX_DEV_DIR (/dev) and GPUMUX_GPUS_FILE.
struct HostOptions {
  std::string state_dir;
  std::string dev_dir;
  std::string gpus_file;
};
void AddHostOptions(CLI::App& cmd, HostOptions& options);
// The subcommands of hook_commands.cc.
CLI::App* AddHookCommand(CLI::App& app, HostOptions& host, std::string& stage);
CLI::App* AddOciRuntimeCommand(CLI::App& app);
// `gpumux hook <stage>`: the OCI state on `in`. Exit 0, or 1 with the reason on `err` (which
// makes the runtime abort the container start).
int RunHook(const HostOptions& options, const std::string& stage, std::istream& in,
            std::ostream& out, std::ostream& err);
// `gpumux oci-runtime <runtime args>`: grants, edits config.json, then execs the runtime.
int RunOciRuntime(const HostOptions& options, const std::vector<std::string>& args,
                  std::ostream& err);
// `gpumux enforce <stage>` (enforce_command.cc): the CDI hook of isolation/cdi.h, and `list`,
// `reconcile` of its records.
struct EnforceCliOptions {
  std::string stage;
  std::string state_dir;  // $GPUMUX_STATE_DIR, else /var/lib/gpumux
  std::string nvml_library = "libnvidia-ml.so.1";
  std::string cgroup_root = "/sys/fs/cgroup";
  std::string proc_root = "/proc";
  std::string pod, pod_uid, container;
  std::vector<std::string> gpus;  // UUID=HARD_MIB[:SOFT_MIB]
  bool json = false;
};
CLI::App* AddEnforceCommand(CLI::App& app, EnforceCliOptions& options);
int RunEnforce(const EnforceCliOptions& options, std::istream& in, std::ostream& out,
               std::ostream& err);

// `gpumux gpus`: the host's GPUs from one backend. dev: the hook's view (the device folder, or
// the GPU file when one is given); fake: the GPU file through gpu::OpenFake; nvml: NVML.
// Exit 0; 1 when NVML cannot be used; 2 for bad usage or a bad file.
struct GpusOptions {
  std::string backend = "dev";
  std::string nvml_library = "libnvidia-ml.so.1";
  bool reservations = false;
  bool enforcement = false;  // what memory partitioning, MPS or HAMi-core could enforce per GPU
  std::string cgroup_root = "/sys/fs/cgroup";
  std::string limits_nvml_library = "libnvidia-ml.so.1";
  std::string hami_core_library;
  bool json = false;
  std::string serve;            // HOST:PORT: serve GET /gpus (gpus_serve.cc) until SIGINT/SIGTERM
  LogOptions log;               // --serve's log
  std::set<std::string> given;  // long names of the options given on the command line
};
CLI::App* AddGpusCommand(CLI::App& app, HostOptions& host, GpusOptions& options);
int RunGpus(const HostOptions& host, const GpusOptions& options, std::ostream& out,
            std::ostream& err);
// `gpumux gpus --serve`: Houdini's /gpus view of one service (gpus_serve.cc).
int ServeGpus(const HostOptions& host, const GpusOptions& options, std::ostream& out,
              std::ostream& err);

// `gpumux inspect` / `kubectl gpumux` (inspect_command.cc): nodes, pods, why POD, top.
struct InspectCliOptions {
  std::string view;  // nodes, pods, why, top
  std::string pod;   // why
  std::string kubeconfig, context, ns;
  bool all_namespaces = false;
  std::string output;           // "", wide, json
  std::string colour = "auto";  // auto, always, never
  std::string policy;           // "" = the installed extender's (gpumux-system/gpumux-scheduler)
  std::string profile = "iadeep-fitted";
  std::string default_gpu_model = "unknown";
  std::int64_t default_gpu_memory_mib = 0;
  std::int64_t gpu_mem_unit_mib = 0;  // 0 = what the nodes publish, else 1024
  double request_timeout_s = 10;
};
CLI::App* AddInspectCommand(CLI::App& app, InspectCliOptions& options);
int RunInspect(const InspectCliOptions& options, std::ostream& out, std::ostream& err);

// The typical pods fgd scores fragmentation against (the extender's --typical-pods): the request
// shapes of a pod list, the embedded default trace when `pod_list` is "" (extender_command.cc).
core::Result<std::vector<policy::TypicalPod>> TypicalPodsFor(const std::string& pod_list);

// `gpumux extender`: the kube-scheduler extender daemon (extender_command.cc).
// `gpumux profile`: measures the training examples (profile_command.cc).
struct ProfileCliOptions {
  std::string examples;  // "" = $GPUMUX_EXAMPLES, ./python/examples, <binary>/../python/examples
  std::string classes = "resnet,lstm,neumf";
  std::string batches = "0.5,1,2";
  std::string sets = "pairs";
  int steps = 30;
  int warmup = 5;
  int repeats = 3;
  std::string device = "auto";
  std::string python = "/usr/bin/python3";
  int threads = 1;
  std::string name;
  std::string out = "gpumux-profile.json";
  std::string command_line;  // recorded in the profile's provenance
};
CLI::App* AddProfileCommand(CLI::App& app, ProfileCliOptions& options);
int RunProfile(const ProfileCliOptions& options, std::ostream& out, std::ostream& err);

// `gpumux coordinator`: the node coordinator daemon (coordinator_command.cc).
struct CoordinatorCliOptions {
  std::string node;  // "" = $NODE_NAME, else the hostname
  std::string profile = "iadeep-fitted";
  std::string tuner = "joint";
  std::string listen = "127.0.0.1:9403";
  std::string socket = "/run/gpumux/coordinator.sock";
  std::string socket_mode = "0666";     // octal; callers are identified by the kernel either way
  bool listen_beyond_loopback = false;  // --listen on a non-loopback address is refused without it
  int max_jobs_per_gpu = 16;
  int max_jobs_per_caller = 64;
  int max_jobs = 512;
  std::string proc_root = "/proc";  // where callers' cgroups are read
  std::string store = "file:///var/lib/gpumux/coordinator.json";
  std::string store_prefix = "/gpumux/";
  std::string etcd_ca, etcd_cert, etcd_key, etcd_user, etcd_password_file;
  std::string backend = "auto";
  std::string gpus_file;
  std::string members = "auto";  // auto, kubernetes, ledger, jobs
  std::string hook_state_dir;    // --members ledger: "" = $GPUMUX_STATE_DIR, else /var/lib/gpumux
  std::string kubeconfig, context;
  bool in_cluster = false;
  int window_steps = 10;
  double window_timeout_s = 30;
  double job_timeout_s = 30;
  double report_every_s = 1;
  double publish_every_s = 10;  // node annotation gpumux.io/coordinator; 0 = off
  std::string metrics_address;  // "" = /metrics only on --listen
  std::string config;           // YAML settings (--config); flags given on the command line win
  LogOptions log;
  bool check = false;
  std::set<std::string> given;
  // The flags and settings-file keys, described once (settings.h); made by Add...Command.
  std::shared_ptr<const SettingsTable<CoordinatorCliOptions>> settings;
};
CLI::App* AddCoordinatorCommand(CLI::App& app, CoordinatorCliOptions& options);
int RunCoordinator(const CoordinatorCliOptions& options, std::ostream& out, std::ostream& err);

// gpumux call: one request to a gpumux listener (call_command.cc).
struct CallCliOptions {
  std::string socket;   // a unix socket path
  std::string address;  // HOST:PORT (default 127.0.0.1:9403 without --socket)
  std::string data;     // the request body; "@FILE" reads it from FILE
  double timeout_s = 10;
  std::string method, path;
};
CLI::App* AddCallCommand(CLI::App& app, CallCliOptions& options);
int RunCall(const CallCliOptions& options, std::ostream& out, std::ostream& err);

struct ExtenderCliOptions {
  std::string listen = "127.0.0.1:12345";
  std::string metrics_address;  // "" = /metrics only on --listen
  std::string url_prefix = "/gpumux";
  std::string policy = "fgd";
  std::string config;  // YAML settings; flags given on the command line win
  std::string kubeconfig;
  bool in_cluster = false;
  std::string context;
  std::string offline_nodes;
  std::string default_gpu_model = "unknown";
  std::int64_t default_gpu_memory_mib = 0;
  std::int64_t grant_ttl_seconds = 60;
  std::int64_t node_lock_ttl_seconds = 120;
  std::int64_t bind_wait_ms = 3000;
  std::int64_t gpu_mem_unit_mib = 1024;  // = kube::kDefaultGpuMemUnitMib (a CLI test checks)
  std::string require_enforcement = "none";
  std::string typical_pods;                          // "" = the embedded trace
  std::map<std::string, double, std::less<>> knobs;  // the policy's knobs given (--<knob>)
  int threads = 16;
  int max_connections = 256;
  std::int64_t request_read_timeout_ms = 10000;
  // The co-location policies' workload profile, and learned observations from a store.
  std::string profile = "iadeep-fitted";
  std::string observations_from;  // store URL; "" = none
  std::string observations_prefix = "/gpumux/";
  double observations_every_s = 30;
  std::string observations_gpu_model;       // "" = every model
  bool observations_measured_only = false;  // leave out profile-relative windows
  std::string etcd_ca, etcd_cert, etcd_key, etcd_user, etcd_password_file;
  LogOptions log;
  bool check = false;           // check the options and files, then exit
  std::set<std::string> given;  // long names of the flags given on the command line
  // The flags and settings-file keys, described once (settings.h); made by AddExtenderCommand.
  std::shared_ptr<const SettingsTable<ExtenderCliOptions>> settings;
};
CLI::App* AddExtenderCommand(CLI::App& app, ExtenderCliOptions& options);
// Runs until SIGINT/SIGTERM (exit 0); 2 for bad usage or input, 1 when it cannot serve.
int RunExtender(const ExtenderCliOptions& options, std::ostream& out, std::ostream& err);

// `gpumux device-plugin`: the kubelet device plugin daemon (device_plugin_command.cc).
struct DevicePluginCliOptions {
  std::string node_name;  // "" = $NODE_NAME
  std::string backend = "nvml";
  std::string gpus_file;
  std::string nvml_library = "libnvidia-ml.so.1";
  std::string kubelet_dir = "/var/lib/kubelet/device-plugins";
  std::string hook_state_dir;  // "" = $GPUMUX_STATE_DIR, else the hook's /var/lib/gpumux
  std::string resources = "gpu,gpu-mem,gpu-milli";
  std::int64_t gpu_mem_unit_mib = 1024;
  std::string kubeconfig;
  bool in_cluster = false;
  std::string context;
  bool offline = false;
  bool inject_devices = false;
  std::string dev_dir = "/dev";
  std::vector<std::string> mounts;
  std::string cdi_kind;
  std::string coordinator_dir;  // host folder mounted into granted containers; "" = none
  bool mps = false;
  std::string mps_control = "nvidia-cuda-mps-control";
  std::string mps_dir = "/run/gpumux/mps";
  // Enforcement (deviceplugin/enforcement.h).
  std::string enforcement = "auto";
  std::string cgroup_root = "/sys/fs/cgroup";
  std::string cdi_spec_dir = "/var/run/cdi";
  std::string cdi_hook;          // "" = no CDI hook (no memory partitioning)
  std::string install_cdi_hook;  // host folder to install this gpumux into as the CDI hook
  std::string limits_nvml_library = "libnvidia-ml.so.1";
  std::int64_t memory_soft_limit_percent = 0;
  std::string hami_core_library;
  std::string device_list_strategy = "envvar";
  std::int64_t health_interval_ms = 5000;
  std::int64_t xid_recovery_seconds = 300;
  std::string ignore_xids;
  std::string metrics_address = "127.0.0.1:9402";
  std::string config;  // YAML settings (--config); flags given on the command line win
  LogOptions log;
  bool check = false;           // check the options and files, then exit
  std::set<std::string> given;  // long names of the options given on the command line
  // The flags and settings-file keys, described once (settings.h); made by Add...Command.
  std::shared_ptr<const SettingsTable<DevicePluginCliOptions>> settings;
};
CLI::App* AddDevicePluginCommand(CLI::App& app, DevicePluginCliOptions& options);
// Runs until SIGINT/SIGTERM (exit 0); 2 for bad usage or input, 1 when it cannot serve.
int RunDevicePlugin(const DevicePluginCliOptions& options, std::ostream& out, std::ostream& err);

// `gpumux webhook`: the mutating admission webhook (webhook_command.cc).
struct WebhookCliOptions {
  std::string listen = "127.0.0.1:9443";
  std::string tls_names = "gpumux-webhook.gpumux-system.svc";
  std::string tls_secret = "gpumux-system/gpumux-webhook-tls";  // "" = made, kept in memory
  std::string tls_cert_file, tls_key_file, tls_ca_file;
  int tls_valid_days = 3650;
  std::string configuration = "gpumux";  // MutatingWebhookConfiguration; "" = none
  std::int64_t ca_bundle_every_s = 60;
  std::int64_t shutdown_delay_s = 5;  // after SIGTERM: /readyz 503, still serving
  bool reuse_port = false;
  std::int64_t gpu_mem_unit_mib = 1024;
  std::int64_t gpushare_mem_unit_mib = 1024;
  std::int64_t fraction_gpu_memory_mib = 0;
  std::string scheduler_name = "gpumux-scheduler";
  std::string kubeconfig;
  bool in_cluster = false;
  std::string context;
  bool offline = false;
  int max_connections = 256;
  std::string metrics_address = "127.0.0.1:9405";  // "off" = none
  std::string config;
  LogOptions log;
  bool check = false;
  std::set<std::string> given;
  std::shared_ptr<const SettingsTable<WebhookCliOptions>> settings;
};
CLI::App* AddWebhookCommand(CLI::App& app, WebhookCliOptions& options);
// Runs until SIGINT/SIGTERM (exit 0); 2 for bad usage or input, 1 when it cannot serve.
int RunWebhook(const WebhookCliOptions& options, std::ostream& out, std::ostream& err);

void AddDlOptions(CLI::App& cmd, DlOptions& options);
// Splits comma-separated or repeated names; 'all' = `all`, 'study' = the FGD study's six.
std::vector<std::string> ExpandPolicies(const std::vector<std::string>& given,
                                        const std::vector<std::string>& compared,
                                        const std::vector<std::string>& all);

// "42-51" -> 42..51; "42,45" -> {42,45}; error text on bad input (also for more than
// sim::kMaxSweepSeeds seeds in all).
std::optional<std::vector<std::uint64_t>> ParseSeeds(const std::string& text, std::string& error);

}  // namespace gpumux::cli
