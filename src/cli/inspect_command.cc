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

// An argument of the extender installed as deploy/ installs it (`flag`, e.g. --policy, in the
// Deployment gpumux-system/gpumux-scheduler), with $(VAR) expanded from the container's env (a
// value, or a ConfigMap key); `fallback` (the extender's default) when it is not given. The
// reason when it cannot be read.
tl::expected<std::string, std::string> InstalledExtenderArg(kube::KubeApi& api,
                                                            const std::string& flag,
                                                            const std::string& fallback) {
  constexpr const char* kNs = "gpumux-system";
  auto dep =
      api.Get(std::string("/apis/apps/v1/namespaces/") + kNs + "/deployments/gpumux-scheduler");
  if (!dep)
    return tl::unexpected("reading deployment " + std::string(kNs) +
                          "/gpumux-scheduler: " + dep.error().ToString());
  const nlohmann::json* spec = &*dep;
  for (const char* k : {"spec", "template", "spec", "containers"}) {
    spec = spec != nullptr ? kube::JsonChild(*spec, k) : nullptr;
  }
  if (spec == nullptr || !spec->is_array())
    return tl::unexpected(std::string("its pod template has no containers"));
  for (const nlohmann::json& c : *spec) {
    if (kube::JsonString(c, "name") != "gpumux-extender") continue;
    const nlohmann::json* args = kube::JsonChild(c, "args");
    std::string value;
    for (std::size_t i = 0; args != nullptr && args->is_array() && i < args->size(); ++i) {
      const std::string a = (*args)[i].is_string() ? (*args)[i].get<std::string>() : "";
      if (a == flag && i + 1 < args->size() && (*args)[i + 1].is_string()) {
        value = (*args)[i + 1].get<std::string>();
      } else if (a.rfind(flag + "=", 0) == 0) {
        value = a.substr(flag.size() + 1);
      }
    }
    if (value.empty()) return fallback;
    if (value.size() < 4 || value.rfind("$(", 0) != 0 || value.back() != ')') return value;
    const std::string var = value.substr(2, value.size() - 3);
    const nlohmann::json* env = kube::JsonChild(c, "env");
    for (std::size_t i = 0; env != nullptr && env->is_array() && i < env->size(); ++i) {
      const nlohmann::json& e = (*env)[i];
      if (kube::JsonString(e, "name") != var) continue;
      if (const std::string v = kube::JsonString(e, "value"); !v.empty()) return v;
      const nlohmann::json* from = kube::JsonChild(e, "valueFrom");
      const nlohmann::json* ref =
          from != nullptr ? kube::JsonChild(*from, "configMapKeyRef") : nullptr;
      if (ref == nullptr) break;
      const std::string name = kube::JsonString(*ref, "name"), key = kube::JsonString(*ref, "key");
      auto cm = api.Get(std::string("/api/v1/namespaces/") + kNs + "/configmaps/" +
                        kube::QueryEscape(name));
      if (!cm) return tl::unexpected("reading configmap " + name + ": " + cm.error().ToString());
      const nlohmann::json* data = kube::JsonChild(*cm, "data");
      const std::string v = data != nullptr ? kube::JsonString(*data, key.c_str()) : "";
      if (v.empty()) return tl::unexpected("configmap " + name + " has no key " + key);
      return v;
    }
    return tl::unexpected(flag + " is " + value +
                          " and its variable is not set from a value "
                          "or a ConfigMap");
  }
  return tl::unexpected(std::string("it has no container gpumux-extender"));
}

// The policy, typical pods and profile `nodes` and `why` judge with: --policy, else the
// installed extender's (a note on `err` when it cannot be read: fgd then).
core::Result<void> JudgeWith(kube::KubeApi& api, const InspectCliOptions& o,
                             sched::ClusterStateOptions& state, std::ostream& err) {
  std::string name = o.policy;
  if (name.empty()) {
    // The cluster's own policy, so that `why` gives the extender's reasons, not another's.
    auto installed = InstalledExtenderArg(api, "--policy", "fgd");
    name = installed ? *installed : "fgd";
    if (!installed) {
      err << "gpumux inspect: the extender's policy is unknown (" << installed.error()
          << "); judging with fgd: give --policy\n";
    }
  }
  const policy::PolicyEntry* entry = policy::BuiltinPolicies().Find(name);
  if (entry == nullptr) {
    return core::MakeError(core::ErrorCode::kInvalidArgument,
                           "the installed extender's policy '" + name +
                               "' is not one this gpumux knows (" +
                               policy::BuiltinPolicies().KnownNames() + "): give --policy");
  }
  state.policy = policy::Registry::Canonical(name);
  // And what it requires of a share's GPU, so that `why` refuses what the extender refuses.
  if (auto required = InstalledExtenderArg(api, "--require-enforcement", "none"); required) {
    state.required_enforcement =
        kube::ParseRequiredEnforcement(*required, "the extender's --require-enforcement")
            .value_or(core::kEnforcesNothing);
  }
  auto typical = TypicalPodsFor("");
  if (!typical) return tl::unexpected(typical.error());
  state.context.typical_pods = std::move(*typical);
  if (entry->needs_profile) {
    auto loaded = sim::ProfileByNameOrPath(o.profile);
    if (!loaded) {
      return core::MakeError(core::ErrorCode::kInvalidArgument,
                             "--profile: " + loaded.error().message);
    }
    state.profile = std::make_shared<const policy::WorkloadProfile>(std::move(*loaded));
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
                  "The placement policy `nodes` and `why` judge with (default: the installed "
                  "extender's --policy, read from the gpumux-scheduler Deployment)");
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
      "\nAlso a kubectl plugin: with the kubectl-gpumux symlink beside gpumux on PATH, "
      "`kubectl gpumux VIEW`\nruns the same views. `nodes` and `why` judge with the installed "
      "extender's policy (its --policy\nin the gpumux-scheduler Deployment) unless --policy "
      "says otherwise. Exit status: 0; 1 when the\nAPI server cannot be read or the pod is not "
      "found; 2 for bad usage.\n");
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
  const auto env = [](const char* name) {
    const char* v = std::getenv(name);
    return std::string(v != nullptr ? v : "");
  };
  // Where kubectl looks, in kubectl's order (and, in a pod, its service account).
  auto where = kube::FindKubeconfig(o.kubeconfig, env("KUBECONFIG"), env("HOME"),
                                    env("KUBERNETES_SERVICE_HOST"));
  if (!where) return fail(kUsageError, where.error().message);
  core::Result<kube::ClientConfig> config = where->in_cluster
                                                ? kube::LoadInClusterConfig()
                                                : kube::LoadKubeconfig(where->path, o.context);
  if (!config) return fail(kUsageError, config.error().message);
  config->request_timeout =
      std::chrono::milliseconds(static_cast<std::int64_t>(o.request_timeout_s * 1000));
  config->user_agent = "kubectl-gpumux";
  const std::string default_ns = config->default_namespace;

  const std::string server = config->server;
  auto api = kube::MakeCurlClient(std::move(*config));
  inspect::ViewOptions view;
  view.ns = o.all_namespaces ? "" : (o.ns.empty() ? default_ns : o.ns);
  if (!o.policy.empty() && policy::BuiltinPolicies().Find(o.policy) == nullptr) {
    return fail(kUsageError, "--policy: unknown policy '" + o.policy +
                                 "' (known: " + policy::BuiltinPolicies().KnownNames() + ")");
  }
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

  view.state.defaults.gpu_model = o.default_gpu_model;
  view.state.defaults.gpu_memory_mib = o.default_gpu_memory_mib;
  view.state.gpu_mem_unit_mib = o.gpu_mem_unit_mib;
  if (o.view == "nodes" || o.view == "why") {
    if (auto judged = JudgeWith(*api, o, view.state, err); !judged) {
      return fail(
          judged.error().code == core::ErrorCode::kInvalidArgument ? kUsageError : kRuntimeError,
          judged.error().message);
    }
  }

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
    // Cells hold what the cluster's objects say: invalid UTF-8 is written as U+FFFD.
    out << inspect::RenderJson(*table).dump(2, ' ', false, nlohmann::json::error_handler_t::replace)
        << "\n";
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
