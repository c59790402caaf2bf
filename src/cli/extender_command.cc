// `gpumux extender`: the kube-scheduler HTTP extender daemon. Settings come from flags and an
// optional YAML file (flags win); the cluster comes from the API server (list + watch of nodes
// and pods) or, with --offline-nodes, from a file. SIGINT/SIGTERM stop it cleanly.
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "gpumux/core/cluster.h"
#include "gpumux/core/json.h"
#include "gpumux/core/plural.h"
#include "gpumux/extender/cluster_sync.h"
#include "gpumux/extender/extender.h"
#include "gpumux/extender/extender_server.h"
#include "gpumux/extender/observation_feed.h"
#include "gpumux/io/read_file.h"
#include "gpumux/kube/api_client.h"
#include "gpumux/kube/objects.h"
#include "gpumux/kube/reflector.h"
#include "gpumux/policy/fragmentation.h"
#include "gpumux/policy/registry.h"
#include "gpumux/sched/cluster_state.h"
#include "gpumux/sim/dl_workload.h"
#include "gpumux/sim/trace.h"
#include "gpumux/store/store.h"
#include "src/cli/commands.h"
#include "src/cli/daemon_log.h"
#include "src/cli/daemon_support.h"
#include "src/cli/metrics_listener.h"
#include "src/cli/options.h"
#include "src/cli/policy_options.h"
#include "src/cli/settings.h"

namespace gpumux::cli {
namespace {

using nlohmann::json;

constexpr std::chrono::seconds kExpireInterval{5};
constexpr int kUsageError = 2;
constexpr int kRuntimeError = 1;
// --request-read-timeout-ms: kube-scheduler writes a request in well under a millisecond on
// the same host; a 5,000-node NodeList (tens of MB) takes a fraction of a second on a slow
// network. Beyond 10 minutes a slow client is not being limited at all.
constexpr std::int64_t kMinRequestReadTimeoutMs = 100;
constexpr std::int64_t kMaxRequestReadTimeoutMs = 600'000;
// glibc gives each thread that allocates an arena of its own (up to 8 per core) and keeps the
// free top of each arena's heap (up to 64 MiB); the server runs a thread per connection, and a
// large request body (up to 64 MiB) is read by whichever connection's thread:
// after a flood of them ~400 MiB stayed resident, spread over dozens of arenas
// (bench/extender_flood.cc), against a 512 MiB limit in deploy/. A few arenas bound that;
// kube-scheduler's verbs come mostly one at a time, so they are hardly contended.
constexpr int kMallocArenas = 4;
// --grant-ttl-seconds and --node-lock-ttl-seconds: a grant or a node lock that is still not
// settled after a day is not waiting for anything.
constexpr std::int64_t kMaxTtlSeconds = 86'400;
std::string KnownPolicies() { return policy::BuiltinPolicies().KnownNames(); }

// "fgd, fgd-sat, fgd-sat-reserve": the policies whose entry has `needs` set.
std::string PoliciesThat(bool policy::PolicyEntry::*needs) {
  std::string with;
  for (const auto& e : policy::BuiltinPolicies().entries()) {
    if (e.*needs) with += (with.empty() ? "" : ", ") + e.name;
  }
  return with;
}
std::string ColocationPolicies() { return PoliciesThat(&policy::PolicyEntry::needs_profile); }

std::string EmbeddedProfiles() {
  std::string names;
  for (const auto& n : sim::EmbeddedProfileNames()) names += (names.empty() ? "" : ", ") + n;
  return names;
}

// ---------------------------------------------------------------------------------------------
// Settings: the YAML file, then the flags given on the command line.

struct UsageError {
  std::string message;
};

// "127.0.0.1:12345", "[::1]:8080", ":12345" is refused (say 0.0.0.0 to mean every address).
std::optional<UsageError> ParseListen(const std::string& text, std::string& host, int& port) {
  if (text.rfind(':') == std::string::npos || text.rfind(':') == 0) {
    return UsageError{"--listen \"" + text + "\": expected HOST:PORT, e.g. 127.0.0.1:12345"};
  }
  if (!ParseHostPort(text, host, port)) {
    return UsageError{"--listen \"" + text + "\": expected HOST:PORT with a port in 0..65535"};
  }
  return std::nullopt;
}

// The policy and the cluster source (one of three).
std::optional<UsageError> ValidateSource(const ExtenderCliOptions& o) {
  if (policy::BuiltinPolicies().Find(o.policy) == nullptr) {
    return UsageError{"unknown policy '" + o.policy + "' (known: " + KnownPolicies() + ")"};
  }
  const int sources =
      (o.kubeconfig.empty() ? 0 : 1) + (o.in_cluster ? 1 : 0) + (o.offline_nodes.empty() ? 0 : 1);
  if (sources == 0) {
    return UsageError{
        "no cluster source: give --kubeconfig PATH (e.g. ~/.kube/config), --in-cluster (the "
        "pod's service account), or --offline-nodes FILE (no API server)"};
  }
  if (sources > 1) {
    return UsageError{"give only one of --kubeconfig, --in-cluster and --offline-nodes"};
  }
  if (!o.context.empty() && o.kubeconfig.empty()) {
    return UsageError{"--context needs --kubeconfig"};
  }
  return std::nullopt;
}

// Every number and the URL prefix within its range.
std::optional<UsageError> ValidateRanges(const ExtenderCliOptions& o) {
  if (o.default_gpu_memory_mib < 0) {
    return UsageError{"--default-gpu-memory-mib must not be negative"};
  }
  if (o.default_gpu_memory_mib > core::kMaxGpuMemoryMib) {
    return UsageError{"--default-gpu-memory-mib must be at most " +
                      std::to_string(core::kMaxGpuMemoryMib) + " (the most one GPU may have)"};
  }
  const std::string ttl_range = " and at most " + std::to_string(kMaxTtlSeconds) + " (a day)";
  if (o.grant_ttl_seconds < 1 || o.grant_ttl_seconds > kMaxTtlSeconds) {
    return UsageError{"--grant-ttl-seconds must be at least 1" + ttl_range};
  }
  if (o.node_lock_ttl_seconds < 1 || o.node_lock_ttl_seconds > kMaxTtlSeconds) {
    return UsageError{"--node-lock-ttl-seconds must be at least 1" + ttl_range};
  }
  if (o.bind_wait_ms < 0 || o.bind_wait_ms > 60000) {
    return UsageError{"--bind-wait-ms must be in 0..60000"};
  }
  if (o.gpu_mem_unit_mib < 1 || o.gpu_mem_unit_mib > kube::kMaxGpuMemUnitMib) {
    std::string message = "--gpu-mem-unit-mib must be in 1..";
    message += std::to_string(kube::kMaxGpuMemUnitMib);
    message += " (MiB per unit of gpumux.io/gpu-mem; the device plugin's --gpu-mem-unit-mib)";
    return UsageError{std::move(message)};
  }
  if (auto r = kube::ParseRequiredEnforcement(o.require_enforcement, "--require-enforcement"); !r) {
    return UsageError{r.error().message};
  }
  if (o.threads < 1 || o.threads > 1024) return UsageError{"--threads must be in 1..1024"};
  if (o.max_connections < 1 || o.max_connections > extender::kMaxConnectionsLimit) {
    return UsageError{"--max-connections must be in 1.." +
                      std::to_string(extender::kMaxConnectionsLimit)};
  }
  if (o.request_read_timeout_ms < kMinRequestReadTimeoutMs ||
      o.request_read_timeout_ms > kMaxRequestReadTimeoutMs) {
    return UsageError{"--request-read-timeout-ms must be in " +
                      std::to_string(kMinRequestReadTimeoutMs) + ".." +
                      std::to_string(kMaxRequestReadTimeoutMs)};
  }
  if (auto prefix = extender::NormalizeUrlPrefix(o.url_prefix); !prefix) {
    return UsageError{"--url-prefix: " + prefix.error().message};
  }
  return std::nullopt;
}

// Flags given together that cannot apply together (with the policy, or without the store).
std::optional<UsageError> ValidateCombinations(const ExtenderCliOptions& o) {
  // Flags that cannot apply with the others given (a settings file's keys are defaults for
  // every mode and are not checked here).
  if (!o.offline_nodes.empty()) {
    for (const char* flag : {"grant-ttl-seconds", "node-lock-ttl-seconds", "bind-wait-ms"}) {
      if (Given(o.given, flag)) {
        return UsageError{"--" + std::string(flag) +
                          " does not apply with --offline-nodes: "
                          "without an API server bind answers an error, so no GPUs are "
                          "granted or locked"};
      }
    }
  }
  const bool colocation = policy::BuiltinPolicies().Find(o.policy)->needs_profile;
  for (const char* flag : {"profile", "observations-from"}) {
    if (Given(o.given, flag) && !colocation) {
      return UsageError{"--" + std::string(flag) + " does not apply with --policy " + o.policy +
                        ": only the co-location policies (" + ColocationPolicies() +
                        ") use a workload profile"};
    }
  }
  if (o.observations_from.empty()) {
    for (const char* flag : {"observations-prefix", "observations-every", "observations-gpu-model",
                             "observations-measured-only", "etcd-ca", "etcd-cert", "etcd-key",
                             "etcd-user", "etcd-password-file"}) {
      if (Given(o.given, flag)) {
        return UsageError{"--" + std::string(flag) + " needs --observations-from"};
      }
    }
  } else if (!colocation) {
    return UsageError{"observationsFrom does not apply with --policy " + o.policy +
                      ": only the co-location policies (" + ColocationPolicies() +
                      ") use a workload profile"};
  }
  if (!(o.observations_every_s >= 1 && o.observations_every_s <= 86400)) {
    return UsageError{"--observations-every must be in 1..86400 seconds"};
  }
  if (o.observations_prefix.empty() || o.observations_prefix.back() != '/') {
    return UsageError{
        "--observations-prefix must end with '/' (the coordinators' --store-prefix, "
        "e.g. /gpumux/)"};
  }
  if (Given(o.given, "typical-pods") &&
      !policy::BuiltinPolicies().Find(o.policy)->needs_typical_pods) {
    return UsageError{"--typical-pods does not apply with --policy " + o.policy + ": only " +
                      PoliciesThat(&policy::PolicyEntry::needs_typical_pods) +
                      " score fragmentation against typical pods"};
  }
  if (auto bad = CheckPolicyKnobs(o.knobs, {o.policy})) return UsageError{*bad};
  return std::nullopt;
}

std::optional<UsageError> Validate(const ExtenderCliOptions& o) {
  if (auto bad = ValidateSource(o)) return bad;
  if (auto bad = ValidateRanges(o)) return bad;
  return ValidateCombinations(o);
}

// Typical pods for fragmentation-aware policies: the request shapes of a pod list (the
// embedded default trace unless --typical-pods). The trace's GPU model names (T4, V100M16, ...)
// are not this cluster's, so model constraints are dropped and every shape fits any model.
core::Result<std::vector<policy::TypicalPod>> TypicalPods(const std::string& pod_list) {
  core::Result<std::vector<core::Request>> pods = sim::PodListOrEmbedded(pod_list);
  if (!pods) return tl::unexpected(pods.error());
  for (core::Request& r : *pods) r.gpu_models.clear();
  auto cluster = core::Cluster::Build({});
  if (!cluster) return tl::unexpected(cluster.error());
  return policy::ComputeTypicalPods(*pods, *cluster);
}

// A v1.NodeList ({"items": [...]}) or a JSON array of nodes; every node must decode.
core::Result<std::vector<json>> LoadOfflineNodes(const std::string& path,
                                                 const kube::NodeDefaults& defaults,
                                                 const core::Logger& log) {
  auto text = io::ReadInputFile(path);
  if (!text) return tl::unexpected(text.error());
  auto parsed = core::ParseJson(*text, path);
  if (!parsed) return tl::unexpected(parsed.error());
  json& doc = *parsed;
  json items;
  if (doc.is_array()) {
    items = std::move(doc);
  } else if (doc.is_object() && doc.contains("items") && doc["items"].is_array()) {
    items = std::move(doc["items"]);
  } else {
    return core::MakeError(core::ErrorCode::kInvalidArgument,
                           path +
                               ": expected a v1.NodeList (an object with \"items\") or a JSON "
                               "array of nodes");
  }
  std::vector<json> nodes;
  nodes.reserve(items.size());
  for (std::size_t i = 0; i < items.size(); ++i) {
    auto node = kube::DecodeNode(items[i], defaults);
    if (!node) {
      return core::MakeError(core::ErrorCode::kInvalidArgument,
                             path + ": node " + std::to_string(i) + ": " + node.error().message);
    }
    if (!node->gpus_error.empty()) {
      log.Warn("node gets no GPUs",
               {{"node", node->spec.name}, {"file", path}, {"why", node->gpus_error}});
    }
    if (!node->gpu_mem_unit_error.empty()) {
      log.Warn("node's gpu-mem unit refused",
               {{"node", node->spec.name}, {"file", path}, {"why", node->gpu_mem_unit_error}});
    }
    nodes.push_back(std::move(items[i]));
  }
  return nodes;
}

}  // namespace

core::Result<std::vector<policy::TypicalPod>> TypicalPodsFor(const std::string& pod_list) {
  return TypicalPods(pod_list);
}

CLI::App* AddExtenderCommand(CLI::App& app, ExtenderCliOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "extender",
      "Run the kube-scheduler HTTP extender that places pods asking for gpumux.io resources\n"
      "Serves kube-scheduler's extender protocol: POST <prefix>/filter, /prioritize, /bind and "
      "/preempt decide which GPUs of which node each pod asking for gpumux.io/gpu, "
      "gpumux.io/gpu-mem or gpumux.io/gpu-milli gets, with the same placement engine as "
      "'gpumux simulate'. Also serves GET /healthz, /readyz (200 once nodes and pods are "
      "listed), /metrics (Prometheus) and /inspect (every node's GPUs and tenants, JSON). "
      "Needs one cluster source: --kubeconfig, --in-cluster or --offline-nodes.");
  auto settings = std::make_shared<SettingsTable<ExtenderCliOptions>>(*cmd, o);
  o.settings = settings;
  SettingsTable<ExtenderCliOptions>& s = *settings;
  using O = ExtenderCliOptions;
  s.Add("listen", &O::listen,
        "HOST:PORT to listen on (port 0: any free port, printed at start; "
        "0.0.0.0:PORT for every address)")
      ->capture_default_str();
  s.Add("metrics-address", &O::metrics_address,
        "Also serve GET /metrics (and /healthz) on this HOST:PORT, a listener of its "
        "own with nothing else on it: for Prometheus on the pod IP (e.g. 0.0.0.0:9401) "
        "while --listen, which also takes bind, stays on loopback [default: off]");
  s.Add("url-prefix", &O::url_prefix,
        "Path under which the verbs are served: the path of the scheduler "
        "configuration's urlPrefix")
      ->capture_default_str();
  s.Add("policy", &O::policy, "Placement policy: one of " + KnownPolicies())->capture_default_str();
  s.AddPath("kubeconfig", &O::kubeconfig,
            "Reach the API server with this kubeconfig (not read from $KUBECONFIG "
            "implicitly: a daemon should say which cluster it serves)");
  s.Add("in-cluster", &O::in_cluster,
        "Reach the API server with the pod's service account (in a cluster)");
  s.Add("context", &O::context, "kubeconfig context [default: current-context]");
  s.AddPath("offline-nodes", &O::offline_nodes,
            "No API server: the nodes come from this JSON file (a v1.NodeList or an "
            "array of nodes) and there are no pods; bind answers an error. For trying "
            "the protocol and for benchmarks (not with --grant-ttl-seconds, "
            "--node-lock-ttl-seconds, --bind-wait-ms)");
  s.Add("default-gpu-model", &O::default_gpu_model,
        "GPU model of nodes that publish no gpumux.io/gpus annotation (their GPU "
        "count is status.allocatable[gpumux.io/gpu])")
      ->capture_default_str();
  s.Add("default-gpu-memory-mib", &O::default_gpu_memory_mib,
        "GPU memory of such nodes; 0: they take whole-GPU requests only", "defaultGpuMemoryMiB")
      ->capture_default_str();
  s.Add("grant-ttl-seconds", &O::grant_ttl_seconds,
        "Release GPUs picked at bind whose pod is not seen bound within this time "
        "(1..86400)",
        "grantTTLSeconds")
      ->capture_default_str();
  s.Add("node-lock-ttl-seconds", &O::node_lock_ttl_seconds,
        "On nodes whose device plugin announces the node lock (annotation "
        "gpumux.io/handshake: node-lock/v1), bind waits while another pod's devices "
        "are being allocated; a lock older than this is taken over (1..86400)",
        "nodeLockTTLSeconds")
      ->capture_default_str();
  s.Add("bind-wait-ms", &O::bind_wait_ms,
        "How long a bind waits for another pod's node lock (its devices being "
        "allocated) before it is refused and kube-scheduler retries the pod later; "
        "keep it under the scheduler's extender httpTimeout minus a second (0..60000)")
      ->capture_default_str();
  s.Add("gpu-mem-unit-mib", &O::gpu_mem_unit_mib,
        "MiB per unit of gpumux.io/gpu-mem: a pod's 'gpumux.io/gpu-mem: 8' is 8 GiB "
        "with the default. Must match the device plugin's unit (it publishes it in "
        "the node annotation gpumux.io/gpu-mem-unit-mib; nodes that differ are "
        "refused for gpu-mem pods)",
        "gpuMemUnitMiB")
      ->capture_default_str();
  s.Add("require-enforcement", &O::require_enforcement,
        "Which limits a GPU's node must enforce before a share (gpumux.io/gpu-mem, "
        "gpu-milli) goes there: none, memory (a hard limit at the grant: MPS v3 memory "
        "partitioning), compute (the container's own compute share: an MPS namespace or "
        "HAMi-core) or memory,compute; a pod's gpumux.io/require-enforcement annotation can "
        "ask for more, never less. Whole-GPU pods are not affected. What each node "
        "enforces: kubectl gpumux nodes",
        "requireEnforcement")
      ->capture_default_str();
  s.AddPath("typical-pods", &O::typical_pods,
            "Pod list (the trace's CSV format) whose request shapes define fragmentation for " +
                PoliciesThat(&policy::PolicyEntry::needs_typical_pods) +
                " [default: the embedded Alibaba trace]; those policies only");
  AddPolicyKnobs(*cmd, o.knobs, "Options");
  for (const policy::Knob* k : policy::BuiltinPolicies().knobs()) {
    s.Key(k->name, k->config_key, SettingsTable<O>::Kind::kNumber,
          [name = k->name](const YAML::Node& value, const std::string&, O& options) {
            double v = 0;
            settings_detail::Read(value, &v);
            options.knobs[name] = v;
            return std::optional<std::string>();
          });
  }
  s.Add("threads", &O::threads,
        "Verbs computed at once (and request bodies over 128 KiB read at once); "
        "/healthz, /readyz and /metrics never wait for them (1..1024)")
      ->capture_default_str();
  s.Add("max-connections", &O::max_connections,
        "Open HTTP connections served at once (each costs a socket, not a thread); at the "
        "limit a new one evicts the connection that has waited longest without a "
        "request being answered (idle, or still sending its request), else gets 503")
      ->capture_default_str();
  s.Add("request-read-timeout-ms", &O::request_read_timeout_ms,
        "A request's head and body must arrive within this (from its first byte; "
        "from the connection for its first request), else 408 and the connection "
        "is closed: slow clients cannot hold connections")
      ->capture_default_str();
  cmd->add_option("--profile", o.profile,
                  "Workload profile of the co-location policies (" + ColocationPolicies() +
                      "): an embedded name (" + EmbeddedProfiles() +
                      ") or a JSON file; a pod's class is its gpumux.io/workload-class")
      ->capture_default_str();
  s.Key("profile", "profile", SettingsTable<O>::Kind::kString,
        [](const YAML::Node& value, const std::string& file, O& options) {
          std::string v;
          settings_detail::Read(value, &v);
          options.profile =
              sim::EmbeddedProfile(v) != nullptr ? v : settings_detail::ResolveAgainst(v, file);
          return std::optional<std::string>();
        });
  s.Add("observations-from", &O::observations_from,
        "Store of the node coordinators (etcd://HOST:PORT, etcds://..., file:///PATH): "
        "their learned interference observations are added to --profile, re-read every "
        "--observations-every seconds (co-location policies only)");
  s.Add("observations-prefix", &O::observations_prefix,
        "Key prefix of the coordinators' store (their --store-prefix)")
      ->capture_default_str();
  s.Add("observations-every", &O::observations_every_s,
        "Seconds between reads of the observations (1..86400)", "observationsEverySeconds")
      ->capture_default_str();
  s.Add("observations-gpu-model", &O::observations_gpu_model,
        "Learn only from windows measured on this GPU model (as NVML names it); those of "
        "unknown model are used too [default: every model]");
  s.Add("observations-measured-only", &O::observations_measured_only,
        "Learn only from windows whose solo step times were measured on their node; by default "
        "those relative to the profile's solo times count a quarter as much");
  s.Add("etcd-ca", &O::etcd_ca, "CA bundle (PEM) for an etcds:// --observations-from", "-");
  s.Add("etcd-cert", &O::etcd_cert, "Client certificate (PEM) for etcds://", "-");
  s.Add("etcd-key", &O::etcd_key, "Client key (PEM) for etcds://", "-");
  s.Add("etcd-user", &O::etcd_user, "etcd user (auth enabled)", "-");
  s.Add("etcd-password-file", &O::etcd_password_file, "File holding the etcd user's password", "-");
  AddLogSettings(*cmd, s, o, &O::log);
  s.AddConfigOption(&O::config);
  cmd->add_flag("--check", o.check,
                "Check the options, the settings file and the files they name (offline nodes, "
                "typical pods, kubeconfig), print what would be served and exit 0 (2 when "
                "something is wrong) without listening or reaching the API server; "
                "--in-cluster's service account is not read");
  cmd->footer(
      "\nExit status: 0 after SIGINT/SIGTERM (a second signal ends it at once), 2 for bad "
      "usage or input, 1 when it cannot run (e.g. the port is in use).\n"
      "\ngpumux.io/gpu-mem counts units of --gpu-mem-unit-mib MiB, as the device plugin advertises "
      "it to\nthe kubelet (default 1024: a pod's 'gpumux.io/gpu-mem: 8' asks for 8 GiB).\n"
      "\nExamples (add --check to try one without a cluster or a GPU):\n"
      "  gpumux extender --kubeconfig ~/.kube/config --policy fgd\n"
      "  gpumux extender --in-cluster --listen 0.0.0.0:12345 --default-gpu-model T4 \\\n"
      "      --default-gpu-memory-mib 15360\n"
      "  gpumux extender --in-cluster --metrics-address 0.0.0.0:9401 --log-format json\n"
      "      in a pod (deploy/overlays/monitoring): the verbs on loopback, /metrics also on the\n"
      "      pod IP for Prometheus, one JSON object per log line\n"
      "  gpumux extender --offline-nodes nodes.json --listen 127.0.0.1:0\n"
      "      no API server: the nodes of a v1.NodeList file; bind answers an error\n"
      "  gpumux extender --offline-nodes nodes.json --policy least-delay \\\n"
      "      --observations-from etcd://127.0.0.1:2379\n"
      "      the co-location policy learns from the node coordinators' measurements\n"
      "\nkube-scheduler configuration (KubeSchedulerConfiguration.extenders):\n"
      "  - urlPrefix: http://127.0.0.1:12345/gpumux\n"
      "    filterVerb: filter\n    prioritizeVerb: prioritize\n    bindVerb: bind\n"
      "    preemptVerb: preempt\n    weight: 1\n    nodeCacheCapable: true\n"
      "    ignorable: false\n    managedResources:\n"
      "    - {name: gpumux.io/gpu, ignoredByScheduler: false}\n"
      "    - {name: gpumux.io/gpu-mem, ignoredByScheduler: false}\n"
      "    - {name: gpumux.io/gpu-milli, ignoredByScheduler: false}\n");
  RecordGivenOptions(*cmd, o.given);
  return cmd;
}

int RunExtender(const ExtenderCliOptions& given, std::ostream& out, std::ostream& err) {
  const auto usage = [&err](const std::string& message) {
    err << "gpumux extender: " << message << "\nRun 'gpumux extender --help'.\n";
    return kUsageError;
  };
  ExtenderCliOptions o = given;
  if (!o.config.empty()) {
    if (auto e = o.settings->ApplyFile(o.config, o.given, o)) return usage(*e);
  }
  if (auto e = Validate(o)) return usage(e->message);
  extender::ExtenderServerOptions server_options;
  if (auto e = ParseListen(o.listen, server_options.host, server_options.port)) {
    return usage(e->message);
  }
  std::string metrics_host;
  int metrics_port = 0;
  if (!o.metrics_address.empty() && !ParseHostPort(o.metrics_address, metrics_host, metrics_port)) {
    return usage("--metrics-address must be HOST:PORT (e.g. 0.0.0.0:9401), not '" +
                 o.metrics_address + "'");
  }
  server_options.url_prefix = o.url_prefix;
  server_options.threads = o.threads;
  server_options.max_connections = o.max_connections;
  server_options.request_read_timeout = std::chrono::milliseconds(o.request_read_timeout_ms);

  // Before any thread starts (the API client's, the server's): they all inherit the mask, and
  // SIGINT/SIGTERM reach only the sigwait below.
  SignalBlock signals;
  signal(SIGPIPE, SIG_IGN);             // a peer that hangs up must not end the daemon
  mallopt(M_ARENA_MAX, kMallocArenas);  // before any thread allocates

  const core::Logger log = MakeDaemonLogger(err, "extender", o.log);
  const core::Logger& log_fn = log;
  sched::ClusterStateOptions state_options;
  state_options.policy = policy::Registry::Canonical(o.policy);
  state_options.defaults.gpu_model = o.default_gpu_model;
  state_options.defaults.gpu_memory_mib = o.default_gpu_memory_mib;
  state_options.grant_ttl_seconds = o.grant_ttl_seconds;
  state_options.gpu_mem_unit_mib = o.gpu_mem_unit_mib;
  state_options.required_enforcement =
      kube::ParseRequiredEnforcement(o.require_enforcement, "--require-enforcement")
          .value_or(core::kEnforcesNothing);
  state_options.log = log_fn;
  auto typical = TypicalPods(o.typical_pods);
  if (!typical) return usage(typical.error().message);
  state_options.context.typical_pods = std::move(*typical);
  state_options.context.knobs = o.knobs;
  // The co-location policies' profile; the observation feed replaces it while serving.
  std::shared_ptr<const policy::WorkloadProfile> profile;
  {
    if (policy::BuiltinPolicies().Find(o.policy)->needs_profile) {
      auto loaded = sim::ProfileByNameOrPath(o.profile);
      if (!loaded) return usage("--profile: " + loaded.error().message);
      profile = std::make_shared<const policy::WorkloadProfile>(std::move(*loaded));
      state_options.profile = profile;
    }
  }
  extender::ObservationFeedOptions feed_options;
  feed_options.url = o.observations_from;
  feed_options.store.ca_file = o.etcd_ca;
  feed_options.store.cert_file = o.etcd_cert;
  feed_options.store.key_file = o.etcd_key;
  feed_options.store.user = o.etcd_user;
  feed_options.store.password_file = o.etcd_password_file;
  feed_options.prefix = o.observations_prefix;
  feed_options.every = std::chrono::milliseconds(std::llround(o.observations_every_s * 1000));
  feed_options.observations.gpu_model = o.observations_gpu_model;
  feed_options.observations.measured_only = o.observations_measured_only;
  feed_options.log = log_fn;
  if (!o.observations_from.empty()) {
    // The URL and options are checked now (etcd connects lazily; a file store is opened and
    // closed again: it must be readable).
    auto opened = store::OpenStore(o.observations_from, feed_options.store);
    if (!opened) return usage("--observations-from: " + opened.error().message);
  }

  // The cluster source, before anything starts: its errors are the user's to fix.
  std::vector<json> offline_nodes;
  std::unique_ptr<kube::KubeApi> api;
  std::string source;
  if (!o.offline_nodes.empty()) {
    auto nodes = LoadOfflineNodes(o.offline_nodes, state_options.defaults, log);
    if (!nodes) return usage("--offline-nodes " + nodes.error().message);
    offline_nodes = std::move(*nodes);
    source = core::Plural(offline_nodes.size(), "offline node") + " from " + o.offline_nodes;
  } else {
    auto connected = ConnectDaemonApi(o.kubeconfig, o.context, o.in_cluster, o.check);
    if (!connected) return usage(connected.error().message);
    source = connected->Describe();
    api = std::move(connected->api);
  }
  if (o.check) {
    out << "gpumux extender: --check: the options are valid; it would serve policy " << o.policy
        << " for " << source << " on " << o.listen << ", verbs under " << o.url_prefix;
    if (profile != nullptr) out << ", profile " << profile->name;
    if (!o.observations_from.empty()) {
      out << " with the observations of " << o.observations_from << " every "
          << o.observations_every_s << " s";
    }
    out << "\n";
    return 0;
  }

  const sched::Clock clock = [] {
    return static_cast<std::int64_t>(std::chrono::duration_cast<std::chrono::seconds>(
                                         std::chrono::system_clock::now().time_since_epoch())
                                         .count());
  };
  auto created = sched::ClusterState::Create(std::move(state_options), clock);
  if (!created) return usage(created.error().message);
  sched::ClusterState& state = **created;
  extender::ExtenderOptions extender_options;
  extender_options.node_lock_ttl_seconds = o.node_lock_ttl_seconds;
  extender_options.log = log_fn;
  extender_options.bind_wait = std::chrono::milliseconds(o.bind_wait_ms);
  // Waiting binds each hold a work slot: leave at least half for the other verbs.
  extender_options.max_waiting_binds = std::max(1, o.threads / 2);
  kube::NodeLockBoard lock_board;
  extender_options.lock_board = &lock_board;
  std::unique_ptr<extender::Requeuer> requeuer;
  if (api != nullptr) {
    extender::RequeuerOptions requeue_options;
    requeue_options.log = log_fn;
    requeuer = std::make_unique<extender::Requeuer>(*api, std::move(requeue_options));
    extender_options.requeuer = requeuer.get();
  }
  extender::Extender extender(state, api.get(), extender_options);
  server_options.log = log_fn;

  if (api == nullptr) {
    // Offline nodes are the whole state: ready before the first request can arrive.
    state.SetNodes(offline_nodes);
    state.SetPods({});
    state.MarkSynced();
    const sched::StateCounters c = state.counters();
    log.Info("synced", {{"nodes", std::to_string(c.nodes)}, {"gpus", std::to_string(c.gpus)}});
  }

  extender::ExtenderServer server(extender, state, server_options);
  if (auto started = server.Start(); !started) {
    log.Error("cannot start", {{"error", started.error().message}});
    return kRuntimeError;
  }
  std::unique_ptr<MetricsListener> metrics;
  if (!o.metrics_address.empty()) {
    auto listening = MetricsListener::Start(metrics_host, metrics_port,
                                            [&server] { return server.RenderMetrics(); });
    if (!listening) {
      log.Error("cannot start", {{"error", listening.error().message}});
      server.Stop();
      return kRuntimeError;
    }
    metrics = std::move(*listening);
    log.Info("metrics listening (GET /metrics and /healthz only)",
             {{"address", metrics_host + ":" + std::to_string(metrics->port())}});
  }

  log.Info("serving",
           {{"policy", state.policy_name()},
            {"source", source},
            {"address", server_options.host + ":" + std::to_string(server.port())},
            {"url_prefix", server.url_prefix().empty() ? std::string("/") : server.url_prefix()},
            {"gpu_mem_unit_mib", std::to_string(state.gpu_mem_unit_mib())},
            {"profile", profile != nullptr ? profile->name : std::string()}});
  // Learned observations: read now and every --observations-every seconds on a thread.
  std::unique_ptr<extender::ObservationFeed> feed;
  if (!o.observations_from.empty()) {
    feed = std::make_unique<extender::ObservationFeed>(std::move(feed_options), profile, state);
    feed->Start();
  }

  // With an API server: reflectors for nodes and pods, synced once both listed, and a ticker
  // that gives back the GPUs of assumed grants whose pod never got bound.
  std::unique_ptr<extender::ClusterSync> sync;
  if (api != nullptr) {
    extender::ClusterSyncOptions sync_options;
    sync_options.expire_interval = kExpireInterval;
    sync_options.jitter_seed =
        (static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
         static_cast<std::uint64_t>(getpid())) |
        1U;  // never 0 (no jitter)
    sync_options.log = log_fn;
    extender::Requeuer* rq = requeuer.get();
    sync_options.on_node_event = [rq, &lock_board](const kube::WatchEvent& e) {
      lock_board.Observe(e);
      rq->ObserveNode(e);
    };
    sync_options.on_pod_event = [rq](const kube::WatchEvent& e) { rq->ObservePod(e); };
    sync_options.on_synced = [rq] { rq->RoomMayHaveBeenMade("synced with the API server"); };
    requeuer->Start();
    sync = std::make_unique<extender::ClusterSync>(*api, state, std::move(sync_options));
    sync->Start();
  }

  const int sig = signals.Wait();
  signals.Restore();
  log.Info("stopping (a second signal ends the process at once)",
           {{"signal", sig == SIGINT ? "SIGINT" : "SIGTERM"}});
  if (metrics) metrics->Stop();
  server.Stop();
  if (feed) feed->Stop();
  if (sync) sync->Stop();
  if (requeuer) requeuer->Stop();
  log("stopped");
  return 0;
}

}  // namespace gpumux::cli
