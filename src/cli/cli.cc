#include "gpumux/cli/cli.h"

#include <CLI/CLI.hpp>

#include "src/cli/commands.h"

namespace gpumux::cli {

int Main(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  CLI::App app{
      "gpumux: share the GPUs of a Kubernetes cluster between deep-learning jobs.\n"
      "One placement engine, proven in a trace-driven simulator, run by every component.",
      "gpumux"};
  app.set_version_flag("--version", std::string("gpumux ") + GPUMUX_VERSION);
  app.require_subcommand(1);
  app.fallthrough(false);

  SimulateOptions sim;
  CLI::App* simulate = AddSimulateCommand(app, sim);
  CLI::App* policies = app.add_subcommand("policies", "List the placement policies");

  if (argc <= 1) {
    out << app.help();
    return 0;
  }
  if (argv[1][0] != '-') {
    std::string known;
    bool found = false;
    for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
      found = found || sub->get_name() == argv[1];
      known += (known.empty() ? "" : ", ") + sub->get_name();
    }
    if (!found) {
      err << "gpumux: unknown command '" << argv[1] << "' (commands: " << known << ")\n"
          << "Run 'gpumux --help'.\n";
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    out << app.help();
    return 0;
  } catch (const CLI::CallForAllHelp& e) {
    out << app.help("", CLI::AppFormatMode::All);
    return 0;
  } catch (const CLI::CallForVersion& e) {
    out << e.what() << "\n";
    return 0;
  } catch (const CLI::ParseError& e) {
    // Help for a subcommand arrives as CallForHelp from that subcommand.
    if (e.get_name() == "CallForHelp") {
      for (CLI::App* sub : app.get_subcommands()) out << sub->help();
      return 0;
    }
    err << "gpumux: " << e.what() << "\nRun 'gpumux --help' or 'gpumux <command> --help'.\n";
    return 2;
  }
  if (simulate->parsed()) return RunSimulate(sim, out, err);
  if (policies->parsed()) return RunPolicies(out);
  return 2;
}

}  // namespace gpumux::cli
