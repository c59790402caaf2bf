// Subcommands of the gpumux CLI (internal to the cli module).
#pragma once

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

// "42-51" -> 42..51; "42,45" -> {42,45}; error text on bad input.
std::optional<std::vector<std::uint64_t>> ParseSeeds(const std::string& text, std::string& error);

}  // namespace gpumux::cli
