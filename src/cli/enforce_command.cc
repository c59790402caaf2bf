// `gpumux enforce`: the CDI hook that holds a container to its grant on the GPU (isolation/cdi.h
// writes the hook into the runtime's CDI spec), and the commands that show and reconcile what it
// left on the node.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "gpumux/core/shown.h"
#include "gpumux/core/time.h"
#include "gpumux/gpu/memory_limits.h"
#include "gpumux/hook/oci.h"
#include "gpumux/isolation/cgroup.h"
#include "gpumux/isolation/limits.h"
#include "src/cli/commands.h"

namespace gpumux::cli {
namespace {

constexpr int kUsageError = 2;
constexpr int kFailed = 1;

// "GPU-..=8192:0" or "GPU-..=8192" -> a limit; error text otherwise.
core::Result<isolation::GpuLimit> ParseGpuLimit(const std::string& text) {
  const auto bad = [&] {
    return core::MakeError(core::ErrorCode::kInvalidArgument,
                           "--gpu '" + core::Shown(text, 80) +
                               "' is not UUID=HARD_MIB[:SOFT_MIB] (HARD_MIB >= 1, SOFT_MIB <= it)");
  };
  const auto eq = text.rfind('=');
  if (eq == std::string::npos || eq == 0) return bad();
  isolation::GpuLimit g;
  g.uuid = text.substr(0, eq);
  const std::string amounts = text.substr(eq + 1);
  const auto colon = amounts.find(':');
  const auto number = [](const std::string& s, std::int64_t& out) {
    if (s.empty() || s.size() > 10 || s.find_first_not_of("0123456789") != std::string::npos) {
      return false;
    }
    out = std::stoll(s);
    return true;
  };
  if (!number(amounts.substr(0, colon), g.hard_mib)) return bad();
  if (colon != std::string::npos && !number(amounts.substr(colon + 1), g.soft_mib)) return bad();
  if (g.hard_mib < 1 || g.hard_mib > (std::int64_t{1} << 32) || g.soft_mib > g.hard_mib) {
    return bad();
  }
  return g;
}

// One line to <state-dir>/enforce.log (best effort).
void Append(const EnforceCliOptions& o, const std::string& line) {
  std::ofstream(o.state_dir + "/enforce.log", std::ios::app)
      << core::FormatRfc3339(std::time(nullptr)) << " gpumux[" << ::getpid() << "]: " << line
      << "\n";
}

// Also to `err`, which the runtime shows when the hook fails.
void Note(const EnforceCliOptions& o, const std::string& line, std::ostream& err) {
  Append(o, line);
  err << "gpumux: " << line << "\n";
}

int CreateRuntime(const EnforceCliOptions& o, std::istream& in, std::ostream& err) {
  auto state = hook::ParseState(in);
  if (!state) {
    err << "gpumux enforce: " << state.error().message << "\n";
    return kFailed;
  }
  isolation::ApplyRequest request;
  request.container_id = state->id;
  request.pid = state->pid;
  request.pod = o.pod;
  request.pod_uid = o.pod_uid;
  request.container = o.container;
  request.proc_root = o.proc_root;
  request.cgroup_root = o.cgroup_root;
  request.now_unix_s = std::time(nullptr);
  for (const std::string& text : o.gpus) {
    auto limit = ParseGpuLimit(text);
    if (!limit) {
      err << "gpumux enforce: " << limit.error().message << "\n";
      return kUsageError;
    }
    request.gpus.push_back(*limit);
  }
  auto nvml = gpu::OpenMemoryLimits(o.nvml_library);
  if (!nvml) {
    Note(o,
         "refused to start container " + state->id.substr(0, 12) + " of pod " + o.pod +
             ": its GPU memory limit cannot be set: " + nvml.error().message,
         err);
    return kFailed;
  }
  isolation::LimitRecords records(o.state_dir);
  auto applied = isolation::ApplyLimits(request, **nvml, records);
  if (!applied) {
    Note(o, "refused to start: " + applied.error().message, err);
    return kFailed;
  }
  std::string limits;
  for (const isolation::GpuLimit& g : applied->gpus) {
    limits += (limits.empty() ? "" : ", ") + g.uuid + " hard " + std::to_string(g.hard_mib) +
              " MiB" + (g.soft_mib > 0 ? ", soft " + std::to_string(g.soft_mib) + " MiB" : "");
  }
  Append(o, "limited container " + state->id.substr(0, 12) + " of pod " + o.pod + "/" +
                o.container + " (cgroup " + applied->cgroup + "): " + limits);
  return 0;
}

int Poststop(const EnforceCliOptions& o, std::istream& in, std::ostream& err) {
  auto state = hook::ParseState(in);
  if (!state) {
    err << "gpumux enforce: " << state.error().message << "\n";
    return kFailed;
  }
  auto nvml = gpu::OpenMemoryLimits(o.nvml_library);
  isolation::LimitRecords records(o.state_dir);
  auto released = isolation::ReleaseLimits(state->id, nvml ? nvml->get() : nullptr, records);
  if (!released) {
    Note(o, "container " + state->id.substr(0, 12) + ": " + released.error().message, err);
    return kFailed;
  }
  return 0;
}

int List(const EnforceCliOptions& o, std::ostream& out, std::ostream& err) {
  isolation::LimitRecords records(o.state_dir);
  std::vector<std::string> unreadable;
  const std::vector<isolation::LimitRecord> all = records.List(&unreadable);
  for (const std::string& u : unreadable) err << "gpumux enforce: unreadable record: " << u << "\n";
  if (o.json) {
    nlohmann::json list = nlohmann::json::array();
    for (const isolation::LimitRecord& r : all) {
      nlohmann::json gpus = nlohmann::json::array();
      for (const isolation::GpuLimit& g : r.gpus) {
        gpus.push_back({{"uuid", g.uuid}, {"hard_mib", g.hard_mib}, {"soft_mib", g.soft_mib}});
      }
      list.push_back({{"container_id", r.container_id},
                      {"pod", r.pod},
                      {"container", r.container},
                      {"cgroup", r.cgroup},
                      {"state", r.state},
                      {"cgroup_exists", isolation::FolderExists(r.cgroup)},
                      {"gpus", std::move(gpus)}});
    }
    out << list.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return 0;
  }
  if (all.empty()) {
    out << "no GPU memory limits recorded in " << records.folder() << "\n";
    return 0;
  }
  for (const isolation::LimitRecord& r : all) {
    out << core::Shown(r.pod, 200) << "/" << core::Shown(r.container, 64) << " (container "
        << r.container_id.substr(0, 12) << ", " << r.state
        << (isolation::FolderExists(r.cgroup) ? "" : ", cgroup gone") << ")\n";
    for (const isolation::GpuLimit& g : r.gpus) {
      out << "  " << g.uuid << ": hard " << g.hard_mib << " MiB"
          << (g.soft_mib > 0 ? ", soft " + std::to_string(g.soft_mib) + " MiB" : "") << " on "
          << core::Shown(r.cgroup, 300) << "\n";
    }
  }
  return 0;
}

int Reconcile(const EnforceCliOptions& o, std::ostream& out) {
  auto nvml = gpu::OpenMemoryLimits(o.nvml_library);
  isolation::LimitRecords records(o.state_dir);
  const isolation::ReconcileResult r = isolation::ReconcileLimits(
      records, nvml ? nvml->get() : nullptr,
      [](const std::string& cgroup) { return isolation::FolderExists(cgroup); });
  for (const std::string& name : r.reclaimed_names) {
    out << "reclaimed the limits of " << name << ": its cgroup is gone\n";
  }
  for (const std::string& u : r.unreadable) out << "unreadable record: " << u << "\n";
  out << r.kept << " kept, " << r.reclaimed << " reclaimed\n";
  return 0;
}

}  // namespace

CLI::App* AddEnforceCommand(CLI::App& app, EnforceCliOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "enforce",
      "Hold a container to its GPU grant: the CDI hook the device plugin writes for shares "
      "on GPUs with memory partitioning (driver r615+, cgroup v2), and what it left on the "
      "node\n"
      "createRuntime (the container runtime runs it, the OCI state on stdin) finds the "
      "container's own cgroup from its first process and sets each --gpu's hard (and soft) "
      "memory limit there through NVML, reading it back; if any step fails the container does "
      "not start. poststop clears them. Each container's limits are recorded under "
      "<state-dir>/limits/ before they are set, so that 'reconcile' (which the device plugin "
      "runs at start and every minute) removes what a killed hook or a vanished container "
      "left. 'list' shows the records.");
  const char* env = std::getenv("GPUMUX_STATE_DIR");
  o.state_dir = env != nullptr && env[0] != '\0' ? env : "/var/lib/gpumux";
  cmd->add_option("stage", o.stage, "createRuntime, poststop, list or reconcile")
      ->required()
      ->check(CLI::IsMember({"createRuntime", "poststop", "list", "reconcile"}));
  cmd->add_option("--state-dir", o.state_dir,
                  "Where the limit records are kept [default: $GPUMUX_STATE_DIR, else "
                  "/var/lib/gpumux]");
  cmd->add_option("--nvml-library", o.nvml_library, "NVML library to dlopen")
      ->capture_default_str();
  cmd->add_option("--cgroup-root", o.cgroup_root,
                  "The cgroup v2 hierarchy the container's cgroup path is under")
      ->capture_default_str();
  cmd->add_option("--proc-root", o.proc_root, "Where processes' cgroup files are read")
      ->capture_default_str();
  cmd->add_option("--pod", o.pod, "The container's pod, namespace/name (createRuntime)");
  cmd->add_option("--pod-uid", o.pod_uid, "The pod's uid (createRuntime)");
  cmd->add_option("--container", o.container, "The container's name (createRuntime)");
  cmd->add_option("--gpu", o.gpus,
                  "UUID=HARD_MIB[:SOFT_MIB]: a GPU's limits, in MiB (createRuntime; repeatable)");
  cmd->add_flag("--json", o.json, "list: JSON");
  cmd->footer(
      "\nExit status: 0; 1 when the limits cannot be set (the runtime then does not start the "
      "container) or a record cannot be written; 2 for bad usage.\n"
      "\nExamples:\n"
      "  gpumux enforce list\n"
      "      the containers this node holds to a GPU memory limit, and their cgroups\n"
      "  gpumux enforce reconcile\n"
      "      remove the records (and limits) of containers that are gone\n"
      "\nThe container runtime runs createRuntime and poststop with the container's state on "
      "stdin, as the device plugin wrote them into the container's CDI spec (--cdi-spec-dir), "
      "e.g. 'gpumux enforce createRuntime --gpu GPU-<uuid>=8192 --pod ml/train --pod-uid <uid> "
      "--container main'.\n");
  return cmd;
}

int RunEnforce(const EnforceCliOptions& o, std::istream& in, std::ostream& out, std::ostream& err) {
  if (o.stage == "createRuntime") {
    if (o.gpus.empty()) {
      err << "gpumux enforce createRuntime: give at least one --gpu UUID=HARD_MIB\n";
      return kUsageError;
    }
    return CreateRuntime(o, in, err);
  }
  if (o.stage == "poststop") return Poststop(o, in, err);
  if (o.stage == "list") return List(o, out, err);
  return Reconcile(o, out);
}

}  // namespace gpumux::cli
