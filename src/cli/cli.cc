#include "gpumux/cli/cli.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstring>
#include <iostream>
#include <memory>
#include <sstream>
#include <vector>

#include "src/cli/commands.h"
#include "src/cli/options.h"
#include "src/cli/parse_errors.h"

namespace gpumux::cli {

namespace {

// `gpumux inspect` as `kubectl gpumux` (help, examples, errors of the plugin).
std::string AsKubectlPlugin(std::string text) {
  const std::string from = "gpumux inspect", to = "kubectl gpumux";
  for (std::size_t at = text.find(from); at != std::string::npos;
       at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
  return text;
}

}  // namespace

int Main(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  CLI::App app{
      "gpumux: share the GPUs of a Kubernetes cluster between deep-learning jobs.\n"
      "One placement engine, proven in a trace-driven simulator, run by every component.",
      "gpumux"};
  // Before the subcommands are added: they take the parent's formatter.
  app.formatter(std::make_shared<WrappingFormatter>());
  app.set_version_flag("--version", std::string("gpumux ") + GPUMUX_VERSION);
  app.require_subcommand(1);
  app.fallthrough(false);
  app.footer("\nRun 'gpumux <command> --help' for a command's options and examples.");

  SimulateOptions sim;
  CLI::App* simulate = AddSimulateCommand(app, sim);
  BoundCliOptions bound_options;
  CLI::App* bound = AddBoundCommand(app, bound_options);
  CLI::App* policies = app.add_subcommand("policies", "List the placement policies");
  JobGenCliOptions jobgen_options;
  CLI::App* jobgen = AddJobGenCommand(app, jobgen_options);
  ExtenderCliOptions extender_options;
  CLI::App* extender = AddExtenderCommand(app, extender_options);
  DevicePluginCliOptions device_plugin_options;
  CLI::App* device_plugin = AddDevicePluginCommand(app, device_plugin_options);
  WebhookCliOptions webhook_options;
  CLI::App* webhook = AddWebhookCommand(app, webhook_options);
  HostOptions host;
  std::string stage;
  CLI::App* hook = AddHookCommand(app, host, stage);
  CLI::App* oci_runtime = AddOciRuntimeCommand(app);
  EnforceCliOptions enforce_options;
  CLI::App* enforce = AddEnforceCommand(app, enforce_options);
  GpusOptions gpus_options;
  CLI::App* gpus = AddGpusCommand(app, host, gpus_options);
  CoordinatorCliOptions coordinator_options;
  CLI::App* coordinator = AddCoordinatorCommand(app, coordinator_options);
  ProfileCliOptions profile_options;
  CLI::App* profile = AddProfileCommand(app, profile_options);
  InspectCliOptions inspect_options;
  CLI::App* inspect = AddInspectCommand(app, inspect_options);
  SubmitCliOptions submit_options;
  CLI::App* submit = AddSubmitCommand(app, submit_options);
  ReportCliOptions report_options;
  CLI::App* report = AddReportCommand(app, report_options);
  CallCliOptions call_options;
  CLI::App* call = AddCallCommand(app, call_options);
  for (int k = 0; k < argc; ++k) {
    profile_options.command_line += (k == 0 ? "" : " ") + std::string(argv[k]);
  }

  // The runtime wrapper takes the runtime's own arguments verbatim: no option parsing here.
  const char* base = std::strrchr(argv[0], '/');
  base = base == nullptr ? argv[0] : base + 1;
  if (std::strcmp(base, "gpumux-oci-runtime") == 0 ||
      (argc > 1 && std::strcmp(argv[1], "oci-runtime") == 0)) {
    const int first = std::strcmp(base, "gpumux-oci-runtime") == 0 ? 1 : 2;
    std::vector<std::string> args(argv + first, argv + argc);
    // gpumux's own help (also for no arguments at all, where runc would print its usage); the
    // runtime's help with --runtime-help (and '<command> --help').
    if (args.empty() || args[0] == "--help" || args[0] == "-h") {
      out << oci_runtime->help("gpumux");
      return 0;
    }
    if (!args.empty() && args[0] == "--runtime-help") args[0] = "--help";
    HostOptions o;
    CLI::App scratch;
    AddHostOptions(scratch, o);  // defaults from the environment
    return RunOciRuntime(o, args, err);
  }
  // kubectl runs a plugin as kubectl-<name> with the arguments after `kubectl gpumux`.
  if (std::strcmp(base, "kubectl-gpumux") == 0) {
    std::vector<const char*> args{"gpumux", "inspect"};
    for (int k = 1; k < argc; ++k) args.push_back(argv[k]);
    if (argc <= 1) args.push_back("--help");
    // Help and errors name the command as the user typed it; a view's output (data) is left
    // as it is.
    const bool help = std::any_of(args.begin() + 2, args.end(), [](const char* a) {
      return std::strcmp(a, "--help") == 0 || std::strcmp(a, "-h") == 0;
    });
    std::ostringstream o, e;
    const int code = Main(static_cast<int>(args.size()), args.data(), o, e);
    out << (help ? AsKubectlPlugin(o.str()) : o.str());
    err << AsKubectlPlugin(e.str());
    return code;
  }
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
    err << ExplainParseError(app, e, argc, argv) << "\n";
    return 2;
  }
  if (simulate->parsed()) return RunSimulate(sim, out, err);
  if (bound->parsed()) return RunBound(bound_options, out, err);
  if (policies->parsed()) return RunPolicies(out);
  if (jobgen->parsed()) return RunJobGen(jobgen_options, out, err);
  if (extender->parsed()) return RunExtender(extender_options, out, err);
  if (device_plugin->parsed()) return RunDevicePlugin(device_plugin_options, out, err);
  if (webhook->parsed()) return RunWebhook(webhook_options, out, err);
  if (hook->parsed()) return RunHook(host, stage, std::cin, out, err);
  if (enforce->parsed()) return RunEnforce(enforce_options, std::cin, out, err);
  if (gpus->parsed()) return RunGpus(host, gpus_options, out, err);
  if (coordinator->parsed()) return RunCoordinator(coordinator_options, out, err);
  if (profile->parsed()) return RunProfile(profile_options, out, err);
  if (inspect->parsed()) return RunInspect(inspect_options, out, err);
  if (submit->parsed()) return RunSubmit(submit_options, std::cin, out, err);
  if (report->parsed()) return RunReport(report_options, out, err);
  if (call->parsed()) return RunCall(call_options, out, err);
  return 2;
}

}  // namespace gpumux::cli
