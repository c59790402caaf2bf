// Subcommands of the gpumux CLI (internal to the cli module).
#pragma once

#include <cstdint>
#include <istream>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace gpumux::cli {

struct SimulateOptions {
  std::string nodes;   // "" = embedded
  std::string pods;    // "" = embedded
  std::vector<std::string> policies{"all"};
  std::string seeds = "42";
  double load = 1.3;
  std::string format = "table";
  std::string out_dir = "gpumux-report";
  bool no_report = false;
  std::string expect;  // "" = embedded when the embedded pod list is used; "none" = off
  std::string replay;
  std::string placements;
  int threads = 0;
  bool no_timing = false;
  bool check_invariants = false;
  bool quiet = false;
};

CLI::App* AddSimulateCommand(CLI::App& app, SimulateOptions& options);
int RunSimulate(const SimulateOptions& options, std::ostream& out, std::ostream& err);
int RunPolicies(std::ostream& out);

// Where the reservation adapters find the host's GPUs and keep their ledger. Defaults come from
// GPUMUX_STATE_DIR (/var/lib/gpumux), GPUMUX_DEV_DIR (/dev) and GPUMUX_GPUS_FILE.
struct HostOptions {
  std::string state_dir;
  std::string dev_dir;
  std::string gpus_file;
};
void AddHostOptions(CLI::App& cmd, HostOptions& options);
// `gpumux hook <stage>`: the OCI state on `in`. Exit 0, or 1 with the reason on `err` (which
// makes the runtime abort the container start).
int RunHook(const HostOptions& options, const std::string& stage, std::istream& in,
            std::ostream& out, std::ostream& err);
// `gpumux oci-runtime <runtime args>`: grants, edits config.json, then execs the runtime.
int RunOciRuntime(const HostOptions& options, const std::vector<std::string>& args,
                  std::ostream& err);
int RunGpus(const HostOptions& options, bool reservations, bool json, std::ostream& out,
            std::ostream& err);

// "42-51" -> 42..51; "42,45" -> {42,45}; error text on bad input.
std::optional<std::vector<std::uint64_t>> ParseSeeds(const std::string& text, std::string& error);

}  // namespace gpumux::cli
