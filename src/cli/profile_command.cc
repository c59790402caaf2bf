// `gpumux profile`: measures the shipped PyTorch training examples (python/examples) solo and
// in co-located sets on one device and writes a workload profile in the simulator's format,
// with provenance (profile_builder.h has the arithmetic).
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "gpumux/core/time.h"
#include "gpumux/io/atomic_file.h"
#include "gpumux/kube/grant.h"
#include "gpumux/sim/dl_workload.h"
#include "src/cli/commands.h"
#include "src/cli/options.h"
#include "src/cli/profile_builder.h"

extern char** environ;

namespace gpumux::cli {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr int kUsageError = 2;
constexpr int kRuntimeError = 1;

std::vector<std::string> Split(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream s(text);
  std::string item;
  while (std::getline(s, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

std::string ReadText(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string LastLine(const std::string& text) {
  std::string t = text;
  while (!t.empty() && t.back() == '\n') t.pop_back();
  const auto nl = t.rfind('\n');
  return nl == std::string::npos ? t : t.substr(nl + 1);
}

// One example process: stdout and stderr to files in `dir`.
struct Child {
  pid_t pid = -1;
  fs::path out, err;
};

Child Spawn(const ProfileCliOptions& o, const std::string& cls, int batch, int steps, int warmup,
            const fs::path& dir, const std::string& tag) {
  Child c;
  c.out = dir / (tag + ".out");
  c.err = dir / (tag + ".err");
  std::vector<std::string> args{o.python,    (fs::path(o.examples) / (cls + ".py")).string(),
                                "--device",  o.device,
                                "--threads", std::to_string(o.threads),
                                "--steps",   std::to_string(steps),
                                "--warmup",  std::to_string(warmup),
                                "--json",    "--no-sdk"};
  if (batch > 0) {
    args.push_back("--batch-size");
    args.push_back(std::to_string(batch));
  }
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, c.out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, c.err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  if (posix_spawnp(&c.pid, argv[0], &fa, nullptr, argv.data(), environ) != 0) c.pid = -1;
  posix_spawn_file_actions_destroy(&fa);
  return c;
}

core::Result<ExampleRun> Finish(const Child& c, const std::string& what) {
  if (c.pid < 0) return core::MakeError(core::ErrorCode::kIo, what + ": cannot start the example");
  int status = 0;
  while (waitpid(c.pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::string tail = ReadText(c.err);
    if (tail.size() > 1500) tail = "..." + tail.substr(tail.size() - 1500);
    return core::MakeError(core::ErrorCode::kIo, what + ": the example failed:\n" + tail);
  }
  return ParseExampleRun(LastLine(ReadText(c.out)), what);
}

std::string UtcNow() { return core::FormatRfc3339(std::time(nullptr)); }

std::string DriverVersion() {
  std::ifstream in("/proc/driver/nvidia/version");
  std::string line;
  std::getline(in, line);
  return line;
}

Json ProfileJson(const policy::WorkloadProfile& p, const std::vector<ClassDefaults>& defaults,
                 Json provenance) {
  Json classes = Json::array();
  for (std::size_t c = 0; c < p.classes.size(); ++c) {
    const auto& cp = p.classes[c];
    Json solo = Json::array();
    for (const auto& s : cp.solo) {
      solo.push_back({{"batch", s.batch},
                      {"step_s", s.step_s},
                      {"memory_mib", s.memory_mib},
                      {"gpu_busy", s.gpu_busy}});
    }
    classes.push_back(
        {{"name", cp.name},
         {"default_batch", cp.default_batch},
         {"noise_scale", cp.noise_scale},
         {"dataset_samples", cp.dataset_samples},
         {"target_epochs", cp.target_epochs},
         {"solo", solo},
         {"source", "solo points measured by gpumux profile; " + defaults[c].source}});
  }
  Json measured = Json::array();
  for (const auto& m : p.measured) {
    measured.push_back({{"classes", m.classes},
                        {"batches", m.batches},
                        {"slowdown", m.slowdown},
                        {"source", m.source}});
  }
  return Json{{"name", p.name},
              {"gpu", {{"model", p.gpu_model}, {"memory_mib", p.gpu_memory_mib}}},
              {"companion_overhead", p.companion_overhead},
              {"provenance", std::move(provenance)},
              {"classes", classes},
              {"measured", measured}};
}

}  // namespace

CLI::App* AddProfileCommand(CLI::App& app, ProfileCliOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "profile",
      "Measure the training examples solo and co-located; write a workload profile\n"
      "Runs python/examples (real PyTorch training loops on synthetic data) alone at several "
      "batch sizes and in co-located sets on one device (CPU or an NVIDIA GPU), and writes a "
      "workload profile in the simulator's format (gpumux simulate --workload dl --profile, "
      "gpumux coordinator --profile) with where every number came from.");
  cmd->add_option("--examples", o.examples,
                  "Folder of the training examples (default: $GPUMUX_EXAMPLES, else "
                  "python/examples here, else python/examples beside the binary's build folder)");
  cmd->add_option("--classes", o.classes, "Examples to measure (file names without .py)")
      ->capture_default_str();
  cmd->add_option("--batches", o.batches,
                  "Batch sizes as multiples of each example's default batch")
      ->capture_default_str();
  cmd->add_option("--sets", o.sets,
                  "Co-located sets at the default batches: pairs (every pair, a class with "
                  "itself too), none, or a list such as resnet+lstm,lstm+neumf")
      ->capture_default_str();
  cmd->add_option("--steps", o.steps, "Measured steps per run")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  cmd->add_option("--warmup", o.warmup, "Steps before measuring")
      ->check(CLI::Range(0, 100000))
      ->capture_default_str();
  cmd->add_option("--repeats", o.repeats, "Runs per measurement (the median is kept)")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  cmd->add_option("--device", o.device, "cpu, cuda or auto")
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}))
      ->capture_default_str();
  cmd->add_option("--python", o.python, "Python with PyTorch (Debian: python3-torch)")
      ->capture_default_str();
  cmd->add_option("--threads", o.threads, "CPU threads per example")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  cmd->add_option("--name", o.name, "The profile's name (default: from the device)");
  cmd->add_option("--out", o.out, "Where to write the profile")->capture_default_str();
  cmd->footer(
      "\nExamples:\n"
      "  gpumux profile --device cpu --classes neumf --batches 1 --sets none --steps 3 --repeats 1 "
      "\\\n"
      "      --out neumf.json\n"
      "      a few seconds: one example, one batch size, no co-located set\n"
      "  gpumux profile --device cpu --classes neumf,lstm --batches 1 --sets neumf+lstm \\\n"
      "      --steps 5 --repeats 1 --out pair.json\n"
      "      one pair run together\n"
      "The full profile of the three examples (data/dl_profile_cpu_example.json) took 76 s on a\n"
      "2-core CPU: --device cpu --steps 30 --warmup 5 --repeats 3. On a GPU: --device cuda.\n");
  return cmd;
}

// The examples folder when --examples is not given.
std::string DefaultExamples() {
  if (const char* env = std::getenv("GPUMUX_EXAMPLES"); env != nullptr && env[0] != '\0')
    return env;
  if (fs::exists("python/examples/common.py")) return "python/examples";
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (const fs::path& up :
         {exe.parent_path().parent_path(), exe.parent_path().parent_path().parent_path()}) {
      if (fs::exists(up / "python" / "examples" / "common.py"))
        return (up / "python" / "examples").string();
    }
  }
  return "python/examples";
}

int RunProfile(const ProfileCliOptions& given, std::ostream& out, std::ostream& err) {
  const auto usage = [&err](const std::string& m) {
    err << "gpumux profile: " << m << "\nRun 'gpumux profile --help'.\n";
    return kUsageError;
  };
  ProfileCliOptions o = given;
  if (o.examples.empty()) o.examples = DefaultExamples();
  const std::vector<std::string> classes = Split(o.classes);
  if (classes.empty()) return usage("--classes names no example");
  for (const auto& c : classes) {
    if (!fs::exists(fs::path(o.examples) / (c + ".py"))) {
      return usage("--classes: no example " + (fs::path(o.examples) / (c + ".py")).string() +
                   " (see --examples)");
    }
  }
  std::vector<double> multiples;
  for (const auto& m : Split(o.batches)) {
    char* end = nullptr;
    const double v = std::strtod(m.c_str(), &end);
    if (end == m.c_str() || *end != '\0' || !(v > 0) || v > 64) {
      return usage("--batches: '" + m + "' is not a multiple in (0, 64]");
    }
    multiples.push_back(v);
  }
  if (multiples.empty()) return usage("--batches names no multiple");
  std::vector<std::vector<std::string>> sets;
  if (o.sets == "pairs") {
    for (std::size_t a = 0; a < classes.size(); ++a) {
      for (std::size_t b = a; b < classes.size(); ++b) sets.push_back({classes[a], classes[b]});
    }
  } else if (o.sets != "none") {
    for (const auto& s : Split(o.sets)) {
      std::vector<std::string> members;
      std::stringstream ss(s);
      std::string m;
      while (std::getline(ss, m, '+')) members.push_back(m);
      if (members.size() < 2)
        return usage("--sets: '" + s + "' needs at least two classes joined by +");
      for (const auto& name : members) {
        if (std::find(classes.begin(), classes.end(), name) == classes.end()) {
          return usage("--sets: " + name + " is not in --classes");
        }
      }
      sets.push_back(members);
    }
  }
  std::error_code ec;
  const fs::path scratch =
      fs::temp_directory_path() / ("gpumux-profile-" + std::to_string(::getpid()));
  fs::create_directories(scratch, ec);
  if (ec) return usage("cannot create " + scratch.string() + ": " + ec.message());
  const auto started = std::chrono::steady_clock::now();
  int run_no = 0;
  const auto progress = [&](const std::string& what) {
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    char buf[32];
    std::snprintf(buf, sizeof buf, "[%6.1f s] ", s);
    err << "gpumux profile: " << buf << what << "\n" << std::flush;
  };
  const auto fail = [&](const core::Error& e) {
    err << "gpumux profile: " << e.message << "\n";
    fs::remove_all(scratch, ec);
    return kRuntimeError;
  };

  ProfileInputs in;
  in.classes = classes;
  // Each example's default batch: one short run (it also warms the caches).
  std::string device_name, torch_version, python_version, device_kind;
  double device_memory = 0;
  for (const auto& c : classes) {
    progress("probing " + c);
    auto r = Finish(Spawn(o, c, 0, 1, 0, scratch, "probe-" + c), "probing " + c);
    if (!r) return fail(r.error());
    device_name = r->device_name;
    device_kind = r->device;
    device_memory = r->device_memory_mib;
    torch_version = r->torch;
    python_version = r->python;
    ClassDefaults d;
    d.default_batch = r->batch;
    const policy::ClassProfile* known = sim::DefaultProfile().Find(c);
    if (known != nullptr) {
      d.noise_scale = known->noise_scale * r->batch / known->default_batch;
      d.dataset_samples = known->dataset_samples;
      d.target_epochs = known->target_epochs;
      d.source =
          "noise_scale (scaled to this example's default batch), dataset_samples and "
          "target_epochs from the embedded profile's class of the same name (not measured)";
    } else {
      d.noise_scale = 2.0 * r->batch;
      d.dataset_samples = 50000;
      d.target_epochs = 10;
      d.source =
          "noise_scale = 2 x default batch, dataset_samples 50000, target_epochs 10: "
          "ASSUMED (not measured; no class of that name in the embedded profile)";
    }
    in.defaults.push_back(d);
  }
  const int total_runs =
      static_cast<int>(classes.size() * multiples.size() + sets.size()) * o.repeats;
  for (std::size_t c = 0; c < classes.size(); ++c) {
    std::vector<int> batches;
    for (double m : multiples)
      batches.push_back(
          std::max(1, static_cast<int>(std::lround(m * in.defaults[c].default_batch))));
    if (std::find(batches.begin(), batches.end(), in.defaults[c].default_batch) == batches.end()) {
      batches.push_back(in.defaults[c].default_batch);
    }
    std::sort(batches.begin(), batches.end());
    batches.erase(std::unique(batches.begin(), batches.end()), batches.end());
    for (int b : batches) {
      SoloMeasurement s{classes[c], b, {}};
      for (int r = 0; r < o.repeats; ++r) {
        ++run_no;
        progress("run " + std::to_string(run_no) + "/" + std::to_string(total_runs) + ": " +
                 classes[c] + " alone at batch " + std::to_string(b));
        auto run = Finish(Spawn(o, classes[c], b, o.steps, o.warmup, scratch, "solo"),
                          classes[c] + " alone at batch " + std::to_string(b));
        if (!run) return fail(run.error());
        s.repeats.push_back(std::move(*run));
      }
      in.solo.push_back(std::move(s));
    }
  }
  for (const auto& set : sets) {
    SetMeasurement m;
    std::string name;
    for (const auto& c : set) name += (name.empty() ? "" : "+") + c;
    for (int r = 0; r < o.repeats; ++r) {
      ++run_no;
      progress("run " + std::to_string(run_no) + "/" + std::to_string(total_runs) + ": " + name +
               " together");
      std::vector<Child> children;
      for (std::size_t k = 0; k < set.size(); ++k) {
        const std::size_t c = static_cast<std::size_t>(
            std::find(classes.begin(), classes.end(), set[k]) - classes.begin());
        children.push_back(Spawn(o, set[k], in.defaults[c].default_batch, o.steps, o.warmup,
                                 scratch, "set-" + std::to_string(k)));
      }
      std::vector<ExampleRun> runs;
      for (std::size_t k = 0; k < children.size(); ++k) {
        auto run = Finish(children[k], set[k] + " in " + name);
        if (!run) {
          for (std::size_t j = k + 1; j < children.size(); ++j) (void)Finish(children[j], "");
          return fail(run.error());
        }
        runs.push_back(std::move(*run));
      }
      m.repeats.push_back(std::move(runs));
    }
    in.sets.push_back(std::move(m));
  }
  fs::remove_all(scratch, ec);
  in.device_name = device_name;
  in.device_memory_mib = std::max<core::MiB>(1, static_cast<core::MiB>(device_memory));
  in.name = o.name.empty() ? "measured-" + device_kind : o.name;
  auto built = BuildProfile(in);
  if (!built) return fail(built.error());
  Json provenance{
      {"tool", std::string("gpumux profile ") + GPUMUX_VERSION},
      {"date", UtcNow()},
      {"command", o.command_line},
      {"device", device_kind},
      {"device_name", device_name},
      {"driver", device_kind == "cuda" ? DriverVersion() : std::string("none (CPU)")},
      {"torch", torch_version},
      {"python", python_version},
      {"threads_per_example", o.threads},
      {"steps", o.steps},
      {"warmup", o.warmup},
      {"repeats", o.repeats},
      {"measured", "solo step time, memory and busy fraction per batch; co-located slowdowns"},
      {"not_measured",
       "noise_scale, dataset_samples, target_epochs (see each class's source); "
       "companion_overhead 0.05 (the predictor's default, for unmeasured sets)"},
      {"gpu_memory_mib", device_kind == "cuda"
                             ? "the GPU's total memory (torch)"
                             : "the host's memory: on a CPU, memory is host memory"},
      {"clamped_slowdowns", built->clamped_slowdowns},
      {"discarded_steps_outside_overlap", built->discarded_steps}};
  const std::string text =
      ProfileJson(built->profile, in.defaults, std::move(provenance)).dump(1) + "\n";
  if (auto written = io::WriteFileAtomically(o.out, text); !written) return fail(written.error());
  progress("wrote " + o.out + ": " + std::to_string(built->profile.classes.size()) + " classes, " +
           std::to_string(built->profile.measured.size()) + " measured sets");
  out << o.out << "\n";
  return 0;
}

}  // namespace gpumux::cli
