#include "gpumux/cli/cli.h"

#include <CLI/CLI.hpp>

#include <cstring>
#include <iostream>

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
  JobGenCliOptions jobgen_options;
  CLI::App* jobgen = AddJobGenCommand(app, jobgen_options);
  ExtenderCliOptions extender_options;
  CLI::App* extender = AddExtenderCommand(app, extender_options);
  DevicePluginCliOptions device_plugin_options;
  CLI::App* device_plugin = AddDevicePluginCommand(app, device_plugin_options);

  HostOptions host;
  std::string stage;
  CLI::App* hook = app.add_subcommand(
      "hook",
      "OCI runtime hook (Houdini-compatible GPU reservations). Reads the container state on "
      "stdin.\n  createRuntime|prestart: grant the GPUs the container's environment asks for "
      "(HOUDINI_GPU_REQUESTED=N reserves N GPUs exclusively; HOUDINI_GPU_ENABLED=true or "
      "NVIDIA_VISIBLE_DEVICES=all|0,2|UUIDs shares them); exits 1 (the container does not start) "
      "when they are not free.\n  poststop: release the container's reservation.");
  AddHostOptions(*hook, host);
  hook->add_option("stage", stage, "createRuntime, prestart, createContainer or poststop")
      ->required()
      ->check(CLI::IsMember({"createRuntime", "prestart", "createContainer", "poststop"}));
  app.add_subcommand("oci-runtime",
                     "Runtime wrapper: `gpumux oci-runtime <runc arguments>` grants GPUs, writes "
                     "them into config.json (NVIDIA_VISIBLE_DEVICES, devices, hooks) and runs the "
                     "real runtime ($GPUMUX_RUNTIME, default runc). Also runs as "
                     "'gpumux-oci-runtime' through a symlink. Configured by GPUMUX_STATE_DIR, "
                     "GPUMUX_DEV_DIR, GPUMUX_GPUS_FILE.");
  GpusOptions gpus_options;
  CLI::App* gpus = app.add_subcommand(
      "gpus",
      "List the host's GPUs in the format of `nvidia-smi -L` (or JSON), and who holds them.\n"
      "  --backend dev (default): the device folder's nvidia<N> nodes, or the GPU file when one "
      "is given (what the runtime hook sees).\n"
      "  --backend fake: the GPU file as the device plugin's fake backend reads it (optional "
      "columns minor, health, memory_used_mib, xids).\n"
      "  --backend nvml: NVIDIA's management library (libnvidia-ml.so.1): name, memory, "
      "minor, utilisation, processes, health.");
  AddHostOptions(*gpus, host);
  gpus->add_option("--gpus-file", host.gpus_file, "Same as --gpus");
  gpus->add_option("--backend", gpus_options.backend, "Where the GPUs come from: dev, fake, nvml")
      ->check(CLI::IsMember({"dev", "fake", "nvml"}))
      ->capture_default_str();
  gpus->add_option("--nvml-library", gpus_options.nvml_library,
                   "NVML library to load with --backend nvml (a soname or a path)")
      ->capture_default_str();
  gpus->add_flag("--reservations", gpus_options.reservations,
                 "Show which container holds each GPU, and since when (dev and fake backends)");
  gpus->add_flag("--json", gpus_options.json,
                 "JSON instead of text (with fake and nvml: every field the backend reports)");

  // The runtime wrapper takes the runtime's own arguments verbatim: no option parsing here.
  const char* base = std::strrchr(argv[0], '/');
  base = base == nullptr ? argv[0] : base + 1;
  if (std::strcmp(base, "gpumux-oci-runtime") == 0 ||
      (argc > 1 && std::strcmp(argv[1], "oci-runtime") == 0)) {
    const int first = std::strcmp(base, "gpumux-oci-runtime") == 0 ? 1 : 2;
    HostOptions o;
    CLI::App scratch;
    AddHostOptions(scratch, o);  // defaults from the environment
    return RunOciRuntime(o, std::vector<std::string>(argv + first, argv + argc), err);
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
    err << "gpumux: " << e.what() << "\nRun 'gpumux --help' or 'gpumux <command> --help'.\n";
    return 2;
  }
  if (simulate->parsed()) return RunSimulate(sim, out, err);
  if (policies->parsed()) return RunPolicies(out);
  if (jobgen->parsed()) return RunJobGen(jobgen_options, out, err);
  if (extender->parsed()) return RunExtender(extender_options, out, err);
  if (device_plugin->parsed()) return RunDevicePlugin(device_plugin_options, out, err);
  if (hook->parsed()) return RunHook(host, stage, std::cin, out, err);
  if (gpus->parsed()) return RunGpus(host, gpus_options, out, err);
  return 2;
}

}  // namespace gpumux::cli
