// `gpumux inspect` (also `kubectl gpumux`, through the kubectl-gpumux symlink): what gpumux did
// on a cluster, from the API server alone (inspect/views.h).

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "gpumux/inspect/views.h"
#include "gpumux/kube/api_client.h"
#include "gpumux/sim/dl_workload.h"
#include "src/cli/commands.h"
#include "src/cli/options.h"

namespace gpumux::cli {

namespace {

constexpr int kUsageError = 2;
constexpr int kRuntimeError = 1;

// Where kubectl would read its kubeconfig: --kubeconfig, else the first file of $KUBECONFIG
// that exists, else ~/.kube/config; "" when there is none (then in-cluster, if in a pod).
std::string FindKubeconfig(const std::string& given, std::string* note) {
  if (!given.empty()) return given;
  if (const char* env = std::getenv("KUBECONFIG"); env != nullptr && env[0] != '\0') {
    std::string list = env;
    std::vector<std::string> existing;
    for (std::size_t start = 0; start <= list.size();) {
      std::size_t end = list.find(':', start);
      if (end == std::string::npos) end = list.size();
      const std::string path = list.substr(start, end - start);
      if (!path.empty() && std::filesystem::exists(path)) existing.push_back(path);
      start = end + 1;
    }
    if (existing.size() > 1) {
      *note = "KUBECONFIG lists " + std::to_string(existing.size()) +
              " files; gpumux reads the first, " + existing[0] + " (it does not merge them)";
    }
    if (!existing.empty()) return existing[0];
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && home[0] != '\0') {
    const std::string path = std::string(home) + "/.kube/config";
    if (std::filesystem::exists(path)) return path;
  }
  return {};
}

bool ColourWanted(const std::string& mode, std::ostream& out) {
  if (mode == "always") return true;
  if (mode == "never") return false;
  if (&out != &std::cout || isatty(STDOUT_FILENO) == 0) return false;
  const char* no_colour = std::getenv("NO_COLOR");
  const char* term = std::getenv("TERM");
  return (no_colour == nullptr || no_colour[0] == '\0') &&
         (term == nullptr || std::string(term) != "dumb");
}

}  // namespace

CLI::App* AddInspectCommand(CLI::App& app, InspectCliOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "inspect",
      "What gpumux did on a cluster: GPUs, grants, why a pod waits, what the node coordinators "
      "measure (also `kubectl gpumux`)");
  cmd->fallthrough();  // `inspect nodes -o wide`: the options below also after the view
  cmd->require_subcommand(1);
  for (const auto& [name, help] : std::vector<std::pair<std::string, std::string>>{
           {"nodes",
            "Per node and GPU: model, memory and compute granted of total, health, "
            "tenants"},
           {"pods", "Which container holds which GPUs (index, UUID, compute, memory), since when"},
           {"why", "Why a pending pod does not fit, node by node, in the extender's words"},
           {"top",
            "Per GPU and job: step time, samples/s, batch size and slowdown versus solo, "
            "as the node coordinators report them; the grants where none reports"}}) {
    CLI::App* view = cmd->add_subcommand(name, help);
    view->callback([&o, view_name = name] { o.view = view_name; });
    if (name == "why") {
      view->add_option("pod", o.pod, "The pending pod: NAME (in -n) or NAMESPACE/NAME")->required();
    }
  }
  cmd->add_option("--kubeconfig", o.kubeconfig,
                  "Kubeconfig file (default: the first file of $KUBECONFIG that exists, else "
                  "~/.kube/config, else the pod's service account)");
  cmd->add_option("--context", o.context, "The kubeconfig context (default: current-context)");
  cmd->add_option("-n,--namespace", o.ns,
                  "Namespace of pods, top and why (default: the context's namespace)");
  cmd->add_flag("-A,--all-namespaces", o.all_namespaces, "Pods and jobs of every namespace");
  cmd->add_option("-o,--output", o.output, "wide (more columns) or json (every column, typed)")
      ->check(CLI::IsMember({"", "wide", "json"}));
  cmd->add_option("--colour,--color", o.colour,
                  "auto (on a terminal, unless NO_COLOR is set), always or never")
      ->check(CLI::IsMember({"auto", "always", "never"}))
      ->capture_default_str();
  cmd->add_option("--policy", o.policy,
                  "The extender's --policy (why: a co-location policy may decline a node)")
      ->capture_default_str();
  cmd->add_option("--profile", o.profile, "The extender's --profile, for the co-location policies")
      ->capture_default_str();
  cmd->add_option("--default-gpu-model", o.default_gpu_model,
                  "The extender's --default-gpu-model, for nodes without gpumux.io/gpus")
      ->capture_default_str();
  cmd->add_option("--default-gpu-memory-mib", o.default_gpu_memory_mib,
                  "The extender's --default-gpu-memory-mib")
      ->check(IntegerIn<std::int64_t>(0, std::int64_t{1} << 40));
  cmd->add_option("--gpu-mem-unit-mib", o.gpu_mem_unit_mib,
                  "MiB per gpumux.io/gpu-mem unit in pods (default: what the nodes publish, "
                  "else 1024)")
      ->check(IntegerIn<std::int64_t>(1, std::int64_t{1} << 20));
  cmd->add_option("--request-timeout", o.request_timeout_s,
                  "Seconds to wait for the API server per request")
      ->check(NumberIn(0.1, 600.0))
      ->capture_default_str();
  cmd->footer(
      "\nExamples:\n"
      "  gpumux inspect nodes\n"
      "      every GPU: model, memory and compute granted of total, health, tenants\n"
      "  gpumux inspect pods -A -o wide\n"
      "      every container's GPUs, with their UUIDs, in every namespace\n"
      "  gpumux inspect why train-7 -n team-a\n"
      "      why the pending pod waits, node by node, in the extender's words\n"
      "  gpumux inspect top\n"
      "      step times, batch sizes and slowdowns the node coordinators measure\n"
      "  gpumux inspect nodes -o json\n"
      "      the same, typed, for scripts\n"
      "\nAs a kubectl plugin (the kubectl-gpumux symlink beside gpumux on PATH), `kubectl gpumux "
      "why train-7`\nis `gpumux inspect why train-7`. Exit status: 0; 1 when the API server "
      "cannot be read or the\npod is not found; 2 for bad usage.\n");
  return cmd;
}

int RunInspect(const InspectCliOptions& o, std::ostream& out, std::ostream& err) {
  const auto fail = [&err](int code, const std::string& message) {
    err << "gpumux inspect: " << message << "\n";
    return code;
  };
  if (o.all_namespaces && !o.ns.empty()) {
    return fail(kUsageError, "give -n NAMESPACE or -A, not both");
  }
  if (o.view == "why" && o.all_namespaces) {
    return fail(kUsageError, "why takes one pod: NAME with -n, or NAMESPACE/NAME, not -A");
  }
  std::string note;
  const std::string path = FindKubeconfig(o.kubeconfig, &note);
  if (!note.empty()) err << "gpumux inspect: " << note << "\n";
  core::Result<kube::ClientConfig> config = [&]() -> core::Result<kube::ClientConfig> {
    if (!path.empty()) return kube::LoadKubeconfig(path, o.context);
    if (std::getenv("KUBERNETES_SERVICE_HOST") != nullptr) return kube::LoadInClusterConfig();
    return core::MakeError(core::ErrorCode::kNotFound,
                           "no kubeconfig: give --kubeconfig, set KUBECONFIG, or create "
                           "~/.kube/config");
  }();
  if (!config) return fail(kUsageError, config.error().message);
  config->request_timeout =
      std::chrono::milliseconds(static_cast<std::int64_t>(o.request_timeout_s * 1000));
  config->user_agent = "kubectl-gpumux";

  inspect::ViewOptions view;
  view.ns = o.all_namespaces ? "" : (o.ns.empty() ? config->default_namespace : o.ns);
  view.state.policy = o.policy;
  view.state.defaults.gpu_model = o.default_gpu_model;
  view.state.defaults.gpu_memory_mib = o.default_gpu_memory_mib;
  view.state.gpu_mem_unit_mib = o.gpu_mem_unit_mib;
  if (o.view == "nodes" || o.view == "why") {
    auto typical = TypicalPodsFor("");
    if (!typical) return fail(kRuntimeError, typical.error().message);
    view.state.context.typical_pods = std::move(*typical);
    const policy::PolicyEntry* entry = policy::BuiltinPolicies().Find(o.policy);
    if (entry == nullptr) {
      return fail(kUsageError, "--policy: unknown policy '" + o.policy +
                                   "' (known: " + policy::BuiltinPolicies().KnownNames() + ")");
    }
    if (entry->needs_profile) {
      auto loaded = sim::ProfileByNameOrPath(o.profile);
      if (!loaded) return fail(kUsageError, "--profile: " + loaded.error().message);
      view.state.profile = std::make_shared<const policy::WorkloadProfile>(std::move(*loaded));
    }
  }

  const std::string server = config->server;
  auto api = kube::MakeCurlClient(std::move(*config));
  inspect::Snapshot snapshot;
  auto nodes = api->List("/api/v1/nodes");
  if (!nodes)
    return fail(kRuntimeError, "listing nodes at " + server + ": " + nodes.error().ToString());
  // pods and top need the shown namespace only; nodes and why replay every grant.
  const bool all_pods = o.view == "nodes" || o.view == "why" || view.ns.empty();
  const std::string pods_path =
      all_pods ? "/api/v1/pods" : "/api/v1/namespaces/" + kube::QueryEscape(view.ns) + "/pods";
  auto pods = api->List(pods_path);
  if (!pods)
    return fail(kRuntimeError, "listing pods at " + server + ": " + pods.error().ToString());
  for (auto& n : (*nodes)["items"]) snapshot.nodes.push_back(std::move(n));
  for (auto& p : (*pods)["items"]) snapshot.pods.push_back(std::move(p));
  snapshot.now = static_cast<std::int64_t>(std::time(nullptr));

  core::Result<inspect::Table> table = [&]() -> core::Result<inspect::Table> {
    if (o.view == "nodes") return inspect::NodesView(snapshot, view);
    if (o.view == "pods") return inspect::PodsView(snapshot, view);
    if (o.view == "why") return inspect::WhyView(snapshot, view, o.pod);
    return inspect::TopView(snapshot, view);
  }();
  if (!table) {
    return fail(
        table.error().code == core::ErrorCode::kInvalidArgument ? kUsageError : kRuntimeError,
        table.error().message);
  }
  if (o.output == "json") {
    out << inspect::RenderJson(*table).dump(2) << "\n";
  } else {
    if (table->rows.empty() && o.view != "why") {
      out << "No "
          << (o.view == "nodes"  ? "GPUs"
              : o.view == "pods" ? "pods with gpumux resources"
                                 : "jobs")
          << (o.view == "nodes" || view.ns.empty() ? std::string(" found")
                                                   : " found in namespace " + view.ns)
          << ".\n";
    }
    out << inspect::RenderText(
        *table, o.output == "wide" ? inspect::Layout::kWide : inspect::Layout::kNormal,
        ColourWanted(o.colour, out) ? inspect::Colour::kOn : inspect::Colour::kOff);
  }
  return 0;
}

}  // namespace gpumux::cli
