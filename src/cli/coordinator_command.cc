// `gpumux coordinator`: the node coordinator daemon (docs/COORDINATOR.md). Jobs on the node
// register through the Python task SDK; the coordinator tunes the batch sizes of the jobs
// sharing each GPU with the simulator's tuner and keeps its state in a store (etcd or a file).
// SIGINT/SIGTERM stop it; the jobs keep training.
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "gpumux/coordinator/coordinator.h"
#include "gpumux/coordinator/node_status.h"
#include "gpumux/coordinator/pod_grants.h"
#include "gpumux/coordinator/server.h"
#include "gpumux/core/plural.h"
#include "gpumux/gpu/backend.h"
#include "gpumux/hook/coexistence.h"
#include "gpumux/hook/reservations.h"
#include "gpumux/kube/api_client.h"
#include "gpumux/policy/tuner.h"
#include "gpumux/sim/dl_workload.h"
#include "gpumux/store/store.h"
#include "src/cli/commands.h"
#include "src/cli/daemon_log.h"
#include "src/cli/daemon_support.h"
#include "src/cli/metrics_listener.h"
#include "src/cli/options.h"
#include "src/cli/settings.h"

namespace gpumux::cli {
namespace {

constexpr int kUsageError = 2;
constexpr int kRuntimeError = 1;

std::string DefaultNode() {
  const char* env = std::getenv("NODE_NAME");
  if (env != nullptr && env[0] != '\0') return env;
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) == 0 && host[0] != '\0') return host;
  return "localhost";
}

// mkdir -p for the folder of `path` (the socket's, the file store's).
bool MakeParent(const std::string& path, std::string& error) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos || slash == 0) return true;
  const std::string dir = path.substr(0, slash);
  std::string partial;
  for (std::size_t k = 1; k <= dir.size(); ++k) {
    if (k == dir.size() || dir[k] == '/') {
      partial = dir.substr(0, k);
      if (::mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) {
        error = "cannot create " + partial + ": " + std::strerror(errno);
        return false;
      }
    }
  }
  return true;
}

// Octal permissions "0666", "660": at most 0777.
std::optional<mode_t> ParseMode(const std::string& text) {
  if (text.empty() || text.size() > 4) return std::nullopt;
  mode_t mode = 0;
  for (char ch : text) {
    if (ch < '0' || ch > '7') return std::nullopt;
    mode = static_cast<mode_t>(mode * 8 + static_cast<mode_t>(ch - '0'));
  }
  if (mode > 0777) return std::nullopt;
  return mode;
}

// Whether a cgroup path segment is the container `id`'s: "<id>", "<id>.scope" or
// "<runtime>-<id>.scope" (runc, systemd's docker-, cri-containerd-, crio-).
bool NamesContainer(const std::string& segment, const std::string& id) {
  if (id.empty()) return false;
  if (segment == id || segment == id + ".scope") return true;
  const std::string tail = "-" + id + ".scope";
  return segment.size() > tail.size() &&
         segment.compare(segment.size() - tail.size(), tail.size(), tail) == 0;
}

// Whether every address `host` stands for is a loopback one: an IPv4 literal in 127.0.0.0/8,
// ::1, or "localhost" when every address it resolves to is one of those. Any other name is not
// (it could resolve anywhere, now or later: give the address).
bool IsLoopbackHost(const std::string& given) {
  std::string host = given;
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  in_addr v4{};
  in6_addr v6{};
  if (::inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  if (::inet_pton(AF_INET6, host.c_str(), &v6) == 1) return IN6_IS_ADDR_LOOPBACK(&v6) != 0;
  if (host != "localhost") return false;
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0) return false;
  bool all = found != nullptr;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    if (a->ai_family == AF_INET) {
      const auto* in = reinterpret_cast<const sockaddr_in*>(a->ai_addr);
      all = all && (ntohl(in->sin_addr.s_addr) >> 24) == 127;
    } else if (a->ai_family == AF_INET6) {
      const auto* in = reinterpret_cast<const sockaddr_in6*>(a->ai_addr);
      all = all && IN6_IS_ADDR_LOOPBACK(&in->sin6_addr) != 0;
    } else {
      all = false;
    }
  }
  ::freeaddrinfo(found);
  return all;
}

// --members ledger: which of the node's GPUs live containers reserve (the runtime hook's ledger,
// hook/reservations.h), read at most once a second.
class LedgerMembership {
 public:
  LedgerMembership(const std::string& dir, std::vector<std::string> uuids)
      : store_(dir), uuids_(std::move(uuids)) {}
  const std::string& path() const { return store_.path(); }
  bool Due() const {
    return std::chrono::steady_clock::now() - read_at_ >= std::chrono::seconds(1);
  }
  core::Result<void> Refresh() {
    read_at_ = std::chrono::steady_clock::now();
    auto file = store_.Read();
    if (!file) return tl::unexpected(file.error());
    std::set<std::string> live;
    std::map<std::string, std::set<std::string>> by_container;
    for (const auto& r : file->reservations) {
      if (hook::HolderLiveness(r) == hook::Liveness::kGone) continue;
      for (int g : r.gpus) {
        if (g >= 0 && static_cast<std::size_t>(g) < uuids_.size()) {
          live.insert(uuids_[static_cast<std::size_t>(g)]);
          by_container[r.container].insert(uuids_[static_cast<std::size_t>(g)]);
        }
      }
    }
    by_container_ = std::move(by_container);
    for (const auto& g : live_) {
      if (live.count(g) == 0) vacated_.push_back(g);
    }
    live_ = std::move(live);
    return {};
  }
  // The node's administrator may name any GPU a live container reserves; any other caller
  // only the GPUs its own container reserves (its id is a segment of the caller's cgroup).
  std::optional<std::string> Admit(const std::vector<std::string>& gpus,
                                   const coordinator::Caller& caller) const {
    const std::set<std::string>* own = &live_;
    static const std::set<std::string> kNone;
    if (!caller.trusted()) {
      own = &kNone;
      for (const auto& segment : caller.cgroup.segments) {
        for (const auto& [container, reserved] : by_container_) {
          if (NamesContainer(segment, container)) own = &reserved;
        }
      }
    }
    for (const auto& g : gpus) {
      if (own->count(g) == 0) {
        return "gpus: " + g + " is not reserved by " +
               (caller.trusted() ? std::string("a live container") : caller.Describe()) + " in " +
               store_.path() + " (--members ledger: start the job through gpumux oci-runtime)";
      }
    }
    return std::nullopt;
  }
  std::vector<std::string> Vacated() { return std::exchange(vacated_, {}); }

 private:
  hook::ReservationStore store_;
  std::vector<std::string> uuids_;
  std::set<std::string> live_;
  std::map<std::string, std::set<std::string>> by_container_;  // container id -> its GPUs
  std::vector<std::string> vacated_;
  std::chrono::steady_clock::time_point read_at_{};
};

}  // namespace

CLI::App* AddCoordinatorCommand(CLI::App& app, CoordinatorCliOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "coordinator",
      "Run the node coordinator: tune the batch sizes of the jobs sharing each GPU\n"
      "Training jobs on this node register through the Python task SDK (python/gpumux) and "
      "report their step times. When the set of jobs on a GPU changes, the coordinator runs "
      "the tuner of the simulator (policy/tuner.h) over short measurement windows and tells "
      "every job the batch size to use; it records each measured co-location (classes and "
      "batch sizes -> slowdowns) in the store, where the extender reads them. A job that does "
      "not answer keeps training with what it has. Protocol and store keys: "
      "docs/COORDINATOR.md.");
  auto settings = std::make_shared<SettingsTable<CoordinatorCliOptions>>(*cmd, o);
  o.settings = settings;
  SettingsTable<CoordinatorCliOptions>& s = *settings;
  using O = CoordinatorCliOptions;
  s.Add("node", &O::node, "This node's name (default: $NODE_NAME, else the hostname)");
  s.Add(
       "profile", &O::profile,
       "Workload profile: an embedded name (" +
           [] {
             std::string names;
             for (const auto& n : sim::EmbeddedProfileNames()) {
               names += (names.empty() ? "" : ", ") + n;
             }
             return names;
           }() +
           ") or a JSON file (e.g. one written by 'gpumux profile')")
      ->capture_default_str();
  s.Add("tuner", &O::tuner, "The tuner: " + policy::TunersHelp())
      ->check(CLI::IsMember(policy::TunerNames()))
      ->capture_default_str();
  s.Add("listen", &O::listen, "Loopback HTTP address of the job protocol and /metrics")
      ->capture_default_str();
  s.Add("socket", &O::socket, "Unix socket for jobs in pods (mount its folder); 'off' for none")
      ->capture_default_str();
  s.Add("socket-mode", &O::socket_mode,
        "Permissions of --socket (octal). Whoever connects is identified by the kernel (its "
        "pod or container, else its uid) and acts only for its own jobs, so the default lets "
        "pods of any user connect")
      ->capture_default_str();
  s.Add("listen-beyond-loopback", &O::listen_beyond_loopback,
        "Allow --listen on an address other than loopback (TCP callers cannot be identified: "
        "with --members kubernetes or ledger they may only read the state)");
  s.Add("max-jobs-per-gpu", &O::max_jobs_per_gpu,
        "Registrations beyond this many jobs on one GPU are refused (503)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  s.Add("proc-root", &O::proc_root,
        "Where the callers' processes are read (/proc/<pid>/cgroup names a caller's pod or "
        "container); a folder of that shape for tests")
      ->capture_default_str();
  s.Add("max-jobs", &O::max_jobs, "Registrations beyond this many jobs on the node are refused")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  s.Add("max-jobs-per-caller", &O::max_jobs_per_caller,
        "Registrations beyond this many jobs of one pod, container or uid (all TCP peers count "
        "as one) are refused; the node's administrator (root outside containers) is not limited")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  s.Add("store", &O::store,
        "Where state is kept: etcd://HOST:PORT[,HOST:PORT], etcds://... (TLS), or "
        "file:///PATH (one fsync'd file; default)")
      ->capture_default_str();
  s.Add("store-prefix", &O::store_prefix, "Key prefix in the store")->capture_default_str();
  s.AddPath("etcd-ca", &O::etcd_ca, "CA bundle (PEM) for etcds://");
  s.AddPath("etcd-cert", &O::etcd_cert, "Client certificate (PEM) for etcds://");
  s.AddPath("etcd-key", &O::etcd_key, "Client key (PEM) for etcds://");
  s.Add("etcd-user", &O::etcd_user, "etcd user (auth enabled)");
  s.AddPath("etcd-password-file", &O::etcd_password_file, "File holding the etcd user's password");
  s.Add("backend", &O::backend,
        "Where this node's GPUs come from (to refuse jobs naming other GPUs): auto "
        "(NVML when it loads, else none), nvml, fake (--gpus-file) or none")
      ->check(CLI::IsMember({"auto", "nvml", "fake", "none"}))
      ->capture_default_str();
  s.AddPath("gpus-file", &O::gpus_file, "Fake backend: CSV with index,uuid,model,memory_mib");
  s.Add("members", &O::members,
        "Who decides which GPUs a job shares: kubernetes (the grants of the pods bound "
        "to this node, watched; a deleted pod's jobs leave at once), ledger (a host "
        "without Kubernetes: the runtime hook's reservation ledger; a job must name "
        "GPUs that a live container reserved, and leaves once no live reservation "
        "holds its GPU), jobs (the GPUs a job names, from GPUMUX_GPU_UUIDS, which the "
        "device plugin and the runtime hook set from their grant), or auto (kubernetes "
        "with --kubeconfig or --in-cluster, else jobs)")
      ->check(CLI::IsMember({"auto", "kubernetes", "ledger", "jobs"}))
      ->capture_default_str();
  s.Add("hook-state-dir", &O::hook_state_dir,
        "--members ledger: the runtime hook's state folder (default: $GPUMUX_STATE_DIR, "
        "else /var/lib/gpumux)");
  s.AddPath("kubeconfig", &O::kubeconfig, "Kubeconfig for --members kubernetes");
  s.Add("context", &O::context, "Context of --kubeconfig (default: its current one)");
  s.Add("in-cluster", &O::in_cluster, "Use the pod's service account for --members kubernetes");
  s.Add("window-steps", &O::window_steps,
        "At least this many steps per job in a measurement window")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  s.Add("window-timeout", &O::window_timeout_s,
        "Seconds a measurement window waits for a silent job")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  s.Add("job-timeout", &O::job_timeout_s, "Seconds without a report after which a job has left")
      ->check(CLI::Range(0.1, 86400.0))
      ->capture_default_str();
  s.Add("report-every", &O::report_every_s, "Seconds between a job's reports (told to jobs)")
      ->check(CLI::Range(0.05, 600.0))
      ->capture_default_str();
  s.Add("publish-every", &O::publish_every_s,
        "With --members kubernetes: seconds between updates of the node annotation "
        "gpumux.io/coordinator (what `kubectl gpumux top` shows; written when the state "
        "changed, and every 60 s regardless); 0 = never")
      ->check(CLI::Range(0.0, 3600.0))
      ->capture_default_str();
  s.Add("metrics-address", &O::metrics_address,
        "Also serve GET /metrics (and /healthz) on this HOST:PORT, a listener of its "
        "own with nothing else on it: for Prometheus on the pod IP (e.g. 0.0.0.0:9404) "
        "while --listen, which also takes the job protocol, stays on loopback "
        "[default: off]");
  AddLogSettings(*cmd, s, o, &O::log);
  s.AddConfigOption(&O::config);
  s.Add("check", &O::check,
        "Check the options, the profile and the GPU file, print what would be served, and "
        "exit (connects to nothing)",
        "-");
  RecordGivenOptions(*cmd, o.given);
  cmd->footer(
      "\nExamples:\n"
      "  gpumux coordinator --profile cpu-example --socket off \\\n"
      "      --store file:///tmp/gpumux-coordinator.json\n"
      "      one host, no etcd, the shipped examples on a CPU: jobs reach it on 127.0.0.1:9403\n"
      "  gpumux coordinator --store etcd://127.0.0.1:2379 --backend nvml\n"
      "      state in etcd; jobs naming GPUs this node lacks are refused\n"
      "  gpumux coordinator --in-cluster --members kubernetes --metrics-address 0.0.0.0:9404 \\\n"
      "      --log-format json\n"
      "      in the DaemonSet: /metrics also on the pod IP, the job protocol stays on loopback\n"
      "Then run a training example beside it, e.g.\n"
      "  GPUMUX_GPU_UUIDS=GPU-0 /usr/bin/python3 python/examples/resnet.py --device cpu\n");
  return cmd;
}

int RunCoordinator(const CoordinatorCliOptions& given, std::ostream& out, std::ostream& err) {
  const auto usage = [&err](const std::string& message) {
    err << "gpumux coordinator: " << message << "\nRun 'gpumux coordinator --help'.\n";
    return kUsageError;
  };
  CoordinatorCliOptions o = given;
  if (!o.config.empty()) {
    if (auto bad = o.settings->ApplyFile(o.config, o.given, o)) return usage(*bad);
  }
  coordinator::CoordinatorOptions c;
  c.node = o.node.empty() ? DefaultNode() : o.node;
  c.tuner = o.tuner;
  c.prefix = o.store_prefix;
  if (c.prefix.empty() || c.prefix.back() != '/') c.prefix += '/';
  c.window_steps = o.window_steps;
  c.window_timeout =
      std::chrono::milliseconds(static_cast<std::int64_t>(o.window_timeout_s * 1000));
  c.job_timeout = std::chrono::milliseconds(static_cast<std::int64_t>(o.job_timeout_s * 1000));
  c.report_every_s = o.report_every_s;
  coordinator::ServerOptions s;
  if (!ParseHostPort(o.listen, s.host, s.port)) {
    return usage("--listen must be HOST:PORT, not '" + o.listen + "'");
  }
  std::string metrics_host;
  int metrics_port = 0;
  if (!o.metrics_address.empty() && !ParseHostPort(o.metrics_address, metrics_host, metrics_port)) {
    return usage("--metrics-address must be HOST:PORT (e.g. 0.0.0.0:9404), not '" +
                 o.metrics_address + "'");
  }
  s.socket_path = o.socket == "off" ? "" : o.socket;
  if (auto mode = ParseMode(o.socket_mode)) {
    s.socket_mode = *mode;
  } else {
    return usage("--socket-mode must be octal permissions such as 0666 or 0660, not '" +
                 o.socket_mode + "'");
  }
  if (!IsLoopbackHost(s.host) && !o.listen_beyond_loopback) {
    return usage("--listen " + o.listen +
                 " is not a loopback address: the job protocol "
                 "would be reachable from the network, where callers cannot be identified; "
                 "give --listen-beyond-loopback to mean it");
  }
  s.proc = o.proc_root;
  c.max_jobs_per_gpu = o.max_jobs_per_gpu;
  c.max_jobs = o.max_jobs;
  c.max_jobs_per_caller = o.max_jobs_per_caller;
  if (o.backend == "fake" && o.gpus_file.empty()) return usage("--backend fake needs --gpus-file");
  if (o.backend != "fake" && !o.gpus_file.empty()) return usage("--gpus-file needs --backend fake");

  if (!o.kubeconfig.empty() && o.in_cluster)
    return usage("give --kubeconfig or --in-cluster, not both");
  if (!o.context.empty() && o.kubeconfig.empty()) return usage("--context needs --kubeconfig");
  const bool kube =
      o.members == "kubernetes" || (o.members == "auto" && (!o.kubeconfig.empty() || o.in_cluster));
  if (o.members == "kubernetes" && o.kubeconfig.empty() && !o.in_cluster) {
    return usage("--members kubernetes needs --kubeconfig or --in-cluster");
  }
  if ((o.members == "jobs" || o.members == "ledger") && (!o.kubeconfig.empty() || o.in_cluster)) {
    return usage("--kubeconfig and --in-cluster are for --members kubernetes");
  }
  if (!o.hook_state_dir.empty() && o.members != "ledger") {
    return usage("--hook-state-dir is for --members ledger");
  }
  std::unique_ptr<kube::KubeApi> api;
  std::string members_note = "jobs name their GPUs";
  if (kube && o.check && o.in_cluster) {
    members_note =
        "GPUs from the grants of pods on this node (the pod's service account; not read by "
        "--check)";
  } else if (kube) {
    auto connected = ConnectDaemonApi(o.kubeconfig, o.context, o.in_cluster, o.check);
    if (!connected) return usage(connected.error().message);
    members_note = "GPUs from the grants of pods on this node (" + connected->Describe() + ")";
    api = std::move(connected->api);
  }

  auto profile = sim::ProfileByNameOrPath(o.profile);
  if (!profile) return usage("--profile: " + profile.error().message);

  if (o.check) {
    std::string gpus = "any GPU a job names (no GPU backend)";
    if (o.backend == "fake") {
      auto backend = gpu::OpenFake(o.gpus_file);
      if (!backend) return usage("--gpus-file: " + backend.error().message);
      auto listed = (*backend)->List();
      if (!listed) return usage("--gpus-file: " + listed.error().message);
      gpus = core::Plural(listed->size(), "GPU") + " from " + o.gpus_file;
    } else if (o.backend != "none") {
      gpus = "the GPUs NVML lists (not opened by --check)";
    }
    out << "gpumux coordinator: --check: the options are valid; it would serve node " << c.node
        << " on " << o.listen << (s.socket_path.empty() ? "" : " and " + s.socket_path)
        << " with the " << c.tuner << " tuner and profile " << profile->name << " ("
        << core::Plural(profile->classes.size(), "class", "classes") << "), keep its state in "
        << o.store << ", and accept " << gpus << "; " << members_note << "\n";
    return 0;
  }

  SignalBlock signals;
  signal(SIGPIPE, SIG_IGN);
  const core::Logger log = MakeDaemonLogger(err, "coordinator", o.log);
  const core::Logger& log_line = log;
  if (!IsLoopbackHost(s.host)) {
    log.Warn("--listen " + o.listen +
             " is reachable beyond this host (--listen-beyond-loopback)"
             "; TCP callers are not identified");
  }

  std::string backend_note = "any GPU a job names is accepted (no GPU backend)";
  if (o.backend != "none") {
    auto backend = o.backend == "fake" ? gpu::OpenFake(o.gpus_file) : gpu::OpenNvml();
    if (backend) {
      auto gpus = (*backend)->List();
      if (gpus && !gpus->empty()) {
        for (const auto& g : *gpus) c.node_gpus.push_back(g.uuid);
        c.gpu_model = gpus->front().name;
        backend_note = core::Plural(gpus->size(), "GPU") + " from " +
                       std::string((*backend)->Name()) + " (" + c.gpu_model + ")";
      } else if (o.backend != "auto") {
        log.Error("cannot list GPUs",
                  {{"backend", o.backend},
                   {"error", gpus ? std::string("it has none") : gpus.error().message}});
        return kRuntimeError;
      }
    } else if (o.backend != "auto") {
      log.Error("cannot open the GPU backend",
                {{"backend", o.backend}, {"error", backend.error().message}});
      return backend.error().code == core::ErrorCode::kInvalidArgument ? kUsageError
                                                                       : kRuntimeError;
    }
  }

  store::StoreOptions so;
  so.ca_file = o.etcd_ca;
  so.cert_file = o.etcd_cert;
  so.key_file = o.etcd_key;
  so.user = o.etcd_user;
  so.password_file = o.etcd_password_file;
  std::string store_url = o.store;
  if (store_url.rfind("file://", 0) == 0 || store_url.find("://") == std::string::npos) {
    const std::string path = store_url.rfind("file://", 0) == 0 ? store_url.substr(7) : store_url;
    std::string error;
    if (!MakeParent(path, error)) return usage("--store: " + error);
  }
  auto opened = store::OpenStore(store_url, so);
  if (!opened) return usage("--store: " + opened.error().message);
  std::unique_ptr<store::Store> store = std::move(*opened);
  if (!s.socket_path.empty()) {
    std::string error;
    if (!MakeParent(s.socket_path, error)) return usage("--socket: " + error);
  }

  std::unique_ptr<LedgerMembership> ledger;
  if (o.members == "ledger") {
    std::string dir = o.hook_state_dir;
    if (dir.empty()) {
      const char* env = std::getenv(std::string(hook::kStateDirEnv).c_str());
      dir = env != nullptr && env[0] != '\0' ? env : std::string(hook::kDefaultStateDir);
    }
    if (c.node_gpus.empty()) {
      log.Error(
          "--members ledger needs the node's GPUs (--backend nvml or fake): the ledger names "
          "GPUs by index");
      return kUsageError;
    }
    ledger = std::make_unique<LedgerMembership>(dir, c.node_gpus);
    if (auto first = ledger->Refresh(); !first) {
      log.Error("cannot read the runtime hook's ledger (--members ledger)",
                {{"error", first.error().message}});
      return kRuntimeError;
    }
    members_note = "GPUs reserved in the runtime hook's ledger " + ledger->path();
    c.identity = coordinator::CoordinatorOptions::Identity::kContainers;
    c.admit = [l = ledger.get()](const coordinator::Registration& r,
                                 const coordinator::Caller& caller) {
      return l->Admit(r.gpus, caller);
    };
    s.on_tick = [l = ledger.get(), log_line = log](coordinator::Coordinator& co) {
      if (!l->Due()) return;
      if (auto ok = l->Refresh(); !ok) {
        log_line.Warn("cannot read the runtime hook's ledger (keeping the last reading)",
                      {{"error", ok.error().message}});
        return;
      }
      for (const auto& gpu : l->Vacated()) {
        co.GpuVacated(gpu, "left: no live container reserves its GPU any more");
      }
    };
  }
  std::unique_ptr<coordinator::PodGrants> grants;
  std::unique_ptr<coordinator::NodeStatusPublisher> publisher;
  if (api) {
    grants = std::make_unique<coordinator::PodGrants>(*api, c.node, c.node_gpus, log_line);
    grants->Start();
    c.resolve_gpus = [g = grants.get()](std::string_view job) { return g->GpusOf(job); };
    c.identity = coordinator::CoordinatorOptions::Identity::kPods;
    c.pod_of_uid = [g = grants.get()](std::string_view uid) { return g->PodOfUid(uid); };
    if (o.publish_every_s > 0) {
      coordinator::NodeStatusPublisher::Options po;
      po.every = std::chrono::milliseconds(static_cast<std::int64_t>(o.publish_every_s * 1000));
      po.heartbeat = std::max(po.heartbeat, po.every);
      publisher = std::make_unique<coordinator::NodeStatusPublisher>(*api, c.node, po, log_line);
    }
    s.on_tick = [g = grants.get(), p = publisher.get()](coordinator::Coordinator& co) {
      for (const auto& pod : g->TakeGone()) co.PodGone(pod);
      if (p != nullptr && p->Due()) {
        p->Offer(kube::StateJson(co.options().node, co.options().tuner, co.State()));
      }
    };
  }
  auto coordinator =
      std::make_unique<coordinator::Coordinator>(c, *profile, nullptr, nullptr, log_line);
  auto server = coordinator::Server::Start(s, std::move(coordinator), store.get(), log_line);
  if (!server) {
    log.Error("cannot start", {{"error", server.error().message}});
    return kRuntimeError;
  }
  std::unique_ptr<MetricsListener> metrics;
  if (!o.metrics_address.empty()) {
    coordinator::Server* served = server->get();
    auto listening = MetricsListener::Start(metrics_host, metrics_port,
                                            [served] { return served->RenderMetrics(); });
    if (!listening) {
      log.Error("cannot start", {{"error", listening.error().message}});
      (*server)->Stop();
      return kRuntimeError;
    }
    metrics = std::move(*listening);
    log.Info("metrics listening (GET /metrics and /healthz only)",
             {{"address", metrics_host + ":" + std::to_string(metrics->port())}});
  }
  log.Info("serving (callers on the socket identified by their pod, container or uid)",
           {{"node", c.node},
            {"address", s.host + ":" + std::to_string((*server)->port())},
            {"socket", s.socket_path},
            {"socket_mode", s.socket_path.empty() ? std::string() : o.socket_mode},
            {"tuner", c.tuner},
            {"profile", profile->name},
            {"classes", std::to_string(profile->classes.size())},
            {"store", store->Describe()},
            {"gpus", backend_note},
            {"members", members_note}});
  const int sig = signals.Wait();
  signals.Restore();
  log.Info("stopping (jobs keep training with their batch sizes)",
           {{"signal", sig == SIGINT ? "SIGINT" : "SIGTERM"}});
  if (metrics) metrics->Stop();
  (*server)->Stop();
  log("stopped");
  return 0;
}

}  // namespace gpumux::cli
