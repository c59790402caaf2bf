// `gpumux simulate --workload dl` and `gpumux jobgen`.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <sstream>

#include "gpumux/core/plural.h"
#include "gpumux/io/atomic_file.h"
#include "gpumux/io/read_file.h"
#include "gpumux/policy/observations.h"
#include "gpumux/policy/registry.h"
#include "gpumux/policy/tuner.h"
#include "gpumux/sim/dl_report.h"
#include "gpumux/sim/dl_truth.h"
#include "gpumux/sim/dl_workload.h"
#include "src/cli/commands.h"
#include "src/cli/options.h"
#include "src/cli/policy_options.h"

namespace gpumux::cli {
namespace {

// The policies for training jobs, and those `--workload dl` compares by default.
const std::vector<std::string>& DlPolicies() {
  static const std::vector<std::string> names =
      policy::BuiltinPolicies().names(policy::Workload::kTrainingJobs);
  return names;
}
const std::vector<std::string>& ComparedDlPolicies() {
  static const std::vector<std::string> names =
      policy::BuiltinPolicies().compared(policy::Workload::kTrainingJobs);
  return names;
}

// The most load factors one DL run may sweep (each is a run per policy over the whole job list).
constexpr std::size_t kMaxLoads = 64;

// The most jobs one run simulates over all its loads (each load is the whole job list again, and
// every job of every run is kept for the report).
constexpr std::size_t kMaxJobsOverLoads = 2'000'000;

// "--count 1000000 x 3 load factors (--loads): 3000000 jobs, ..." (x N seeds when more than
// one) or nothing within the bound.
std::optional<std::string> TooManyJobsOverLoads(const std::string& what, std::size_t jobs,
                                                std::size_t loads, std::size_t seeds) {
  if (jobs * loads * seeds <= kMaxJobsOverLoads) return std::nullopt;
  return what + " x " + core::Plural(loads, "load factor") + " (--loads)" +
         (seeds > 1 ? " x " + core::Plural(seeds, "seed") + " (--seeds)" : std::string()) + ": " +
         core::Plural(jobs * loads * seeds, "job") + " to simulate, more than " +
         std::to_string(kMaxJobsOverLoads);
}

core::Result<std::vector<double>> ParseLoads(const std::string& text) {
  std::vector<double> loads;
  std::stringstream ss(text);
  std::string part;
  while (std::getline(ss, part, ',')) {
    if (loads.size() == kMaxLoads) {
      return core::MakeError(core::ErrorCode::kInvalidArgument,
                             "--loads: more than " + std::to_string(kMaxLoads) + " load factors");
    }
    char* end = nullptr;
    const double v = std::strtod(part.c_str(), &end);
    if (part.empty() || end != part.c_str() + part.size() || !(v > 0) || v > 1000) {
      return core::MakeError(core::ErrorCode::kInvalidArgument,
                             "--loads: '" + part + "' is not a load factor in (0, 1000]");
    }
    loads.push_back(v);
  }
  if (loads.empty()) return core::MakeError(core::ErrorCode::kInvalidArgument, "--loads: empty");
  return loads;
}

core::Result<policy::WorkloadProfile> ProfileFrom(const std::string& name_or_path) {
  if (name_or_path.empty()) return sim::DefaultProfile();
  return sim::ProfileByNameOrPath(name_or_path);
}

// "iadeep-fitted, iadeep-measured or iadeep5-assumed"
std::string EmbeddedNames() {
  const auto names = sim::EmbeddedProfileNames();
  std::string s;
  for (std::size_t i = 0; i < names.size(); ++i) {
    s += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  }
  return s;
}

}  // namespace

// long function: the flags of --workload dl, one statement per flag
void AddDlOptions(CLI::App& cmd, DlOptions& o) {
  const std::string group(kDlOptionsGroup);
  cmd.add_option("--jobs", o.jobs,
                 "Job list CSV (job,class,submit_s,gpu_mib), e.g. from 'gpumux jobgen'; each "
                 "load divides its submit times [default: --count jobs generated with --mix]")
      ->group(group);
  cmd.add_option("--profile", o.profile,
                 "Workload profile: what the policies believe; a JSON file or an embedded "
                 "profile, " +
                     EmbeddedNames() + " [default: " + std::string(sim::kDefaultProfileName) + "]")
      ->group(group);
  cmd.add_option("--truth-profile", o.truth_profile,
                 "Workload profile of what the simulated GPUs really do (its measured sets, else "
                 "its predictor), a file or an embedded name [default: " +
                     std::string(sim::kDefaultTruthProfileName) +
                     " without --profile, else the --profile]")
      ->group(group);
  cmd.add_option(
         "--mix", o.mix,
         "Class mix of generated jobs: uniform, iadeep, conv-heavy, light, or class=weight,... "
         "(not with --jobs)")
      ->capture_default_str()
      ->group(group);
  cmd.add_option("--count", o.count, "Number of generated jobs (not with --jobs)")
      ->capture_default_str()
      ->check(IntegerIn(1, static_cast<int>(sim::kMaxDlJobs)))
      ->group(group);
  cmd.add_option("--loads", o.loads, "Load factors (arrival-rate multipliers), comma-separated")
      ->capture_default_str()
      ->group(group);
  std::vector<std::string> tuners = policy::TunerNames();
  tuners.insert(tuners.begin(), "auto");
  cmd.add_option("--tuner", o.tuner,
                 "The tuner of every policy (equal levers), or auto (each policy's own: "
                 "least-delay's joint, iadeep's iadeep, none for the others): " +
                     policy::TunersHelp())
      ->capture_default_str()
      ->check(CLI::IsMember(tuners))
      ->group(group);
  cmd.add_option("--queue", o.queue,
                 "Queue discipline of every policy: fifo, shortest (least predicted solo time of "
                 "the job's class first), or auto (each policy's own: least-delay's shortest, "
                 "fifo for the others)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "fifo", "shortest"}))
      ->group(group);
  cmd.add_option("--max-jobs-per-gpu", o.max_jobs_per_gpu, "Co-location limit of every policy")
      ->capture_default_str()
      ->check(IntegerIn(1, sim::kMaxDlJobsPerGpu))
      ->group(group);
  cmd.add_option("--gpus", o.gpus, "GPUs in the cluster (4 per node: a multiple of 4, or 1..3)")
      ->capture_default_str()
      ->check(IntegerIn(1, sim::kMaxDlGpus))
      ->group(group);
  cmd.add_option("--truth-model", o.truth_model,
                 "How the simulated GPUs answer sets the truth profile has not measured: "
                 "predictor (its busy-time predictor, the policies' own model family), pair-max "
                 "(each job suffers its worst companion's measured pair slowdown, +5 % per further "
                 "companion) or pair-sum (the extra slowdowns of its measured pairs add up); the "
                 "pair rules use the truth's measured pairs alone")
      ->capture_default_str()
      ->check(CLI::IsMember(sim::TruthRuleNames()))
      ->group(group);
  cmd.add_option(
         "--model-error", o.model_error,
         "Hidden deviation of the simulated GPUs from the truth model, on sets the truth profile "
         "has not measured")
      ->capture_default_str()
      ->check(NumberIn(0.0, 0.9))
      ->group(group);
  cmd.add_option("--reconfigure-s", o.reconfigure_s, "Pause of a job whose batch size changes")
      ->capture_default_str()
      ->check(NumberIn(0.0, 3600.0))
      ->group(group);
  cmd.add_option("--measure-noise", o.measure_noise,
                 "Relative noise of one measured step time (tuner measurements)")
      ->capture_default_str()
      ->check(NumberIn(0.0, 1.0))
      ->group(group);
  cmd.add_option("--work-spread", o.work_spread,
                 "Hidden spread of each job's work around its class's (sd of the log; policies "
                 "know the spread, not the job's length)")
      ->capture_default_str()
      ->check(NumberIn(0.0, 2.0))
      ->group(group);
  cmd.add_option("--noise-scale-spread", o.noise_scale_spread,
                 "Hidden spread of each job's gradient noise scale around its class's (sd of the "
                 "log); tuners estimate it from their measurements")
      ->capture_default_str()
      ->check(NumberIn(0.0, 2.0))
      ->group(group);
  cmd.add_option("--truth-seed", o.truth_seed,
                 "Seed of the simulated GPUs' hidden deviations (--model-error); 0 = each run's "
                 "seed. Fix it to keep one cluster across --seeds (e.g. to learn observations on "
                 "some seeds and test them on others)")
      ->capture_default_str()
      ->check(IntegerIn(std::uint64_t{0}, std::numeric_limits<std::uint64_t>::max()))
      ->group(group);
  cmd.add_option("--observations", o.observations,
                 "JSON array of learned interference observations (docs/COORDINATOR.md), added "
                 "to the measured sets of the policies' profile (never to the truth)")
      ->group(group);
  cmd.add_option("--observations-out", o.observations_out,
                 "Write what node coordinators would have measured in every run (one "
                 "observation per set of classes and batch sizes, all runs combined) as a JSON "
                 "array that --observations reads")
      ->group(group);
  cmd.add_flag("--learn", o.learn,
               "The policies and tuners learn within each run: every co-location a tuner measures "
               "(a node coordinator's window) joins their belief at once, as the extender joins "
               "the coordinators' observations; needs a tuner (--tuner joint or iadeep)")
      ->group(group);
}

namespace {

// "2 jobs: 0.101 (predicted - measured -0.023, 138); 3 jobs: ..." over all runs.
std::string BeliefErrorBySize(const std::vector<sim::DlResult>& results) {
  std::vector<sim::DlResult::BeliefError> total;
  for (const sim::DlResult& r : results) {
    if (total.size() < r.belief_error_by_size.size()) total.resize(r.belief_error_by_size.size());
    for (std::size_t n = 0; n < r.belief_error_by_size.size(); ++n) {
      total[n].abs += r.belief_error_by_size[n].abs;
      total[n].signed_sum += r.belief_error_by_size[n].signed_sum;
      total[n].members += r.belief_error_by_size[n].members;
    }
  }
  std::string out;
  for (std::size_t n = 2; n < total.size(); ++n) {
    if (total[n].members == 0) continue;
    const double m = static_cast<double>(total[n].members);
    char part[128];
    std::snprintf(part, sizeof part, "%s%zu jobs: %.3f (predicted - measured %+.3f, %lld)",
                  out.empty() ? "" : "; ", n, total[n].abs / m, total[n].signed_sum / m,
                  static_cast<long long>(total[n].members));
    out += part;
  }
  return out.empty() ? out
                     : "gpumux simulate: mean absolute error by jobs sharing the GPU (mean signed "
                       "error, member windows): " +
                           out + "\n";
}

}  // namespace

int RunSimulateDl(const SimulateOptions& o, std::ostream& out, std::ostream& err) {
  const auto start = std::chrono::steady_clock::now();
  auto fail = [&](const std::string& message) {
    err << "gpumux simulate: " << message << "\n";
    return 2;
  };
  if (o.format == "csv") {
    return fail(
        "--format csv belongs to --workload fgd: --workload dl writes its CSV (jobs.csv) "
        "into the report folder");
  }
  std::string seed_error;
  auto seeds = ParseSeeds(o.seeds, seed_error);
  if (!seeds) return fail(seed_error);
  const std::uint64_t seed = seeds->front();
  const std::vector<std::string> policies =
      ExpandPolicies(o.policies, ComparedDlPolicies(), DlPolicies());
  if (policies.empty()) return fail("--policy: no policy given");
  for (const auto& p : policies) {
    if (policy::BuiltinPolicies().Find(p) == nullptr) {
      return fail(policy::BuiltinPolicies().Make(p, {}).error().message);
    }
  }
  if (auto bad = CheckPolicyKnobs(o.knobs, policies)) return fail(*bad);
  if (o.dl.learn && o.dl.tuner == "none") {
    return fail(
        "--learn needs a tuner: co-locations are measured only while one tunes (--tuner "
        "joint or iadeep)");
  }
  auto loads = ParseLoads(o.dl.loads);
  if (!loads) return fail(loads.error().message);
  auto profile = ProfileFrom(o.dl.profile);
  if (!profile) return fail(profile.error().message);
  // The truth: as given; without --profile the measured one; with only --profile that profile
  // (a profile of one's own classes has no measured truth here).
  std::string truth_name = o.dl.truth_profile;
  if (truth_name.empty() && o.dl.profile.empty()) truth_name = sim::kDefaultTruthProfileName;
  std::optional<policy::WorkloadProfile> truth;
  if (!truth_name.empty()) {
    auto t = ProfileFrom(truth_name);
    if (!t) return fail("--truth-profile: " + t.error().message);
    truth = std::move(*t);
  }
  // Observations change what the policies believe, never what the GPUs do: a truth that was
  // the profile itself stays the profile as it was read.
  std::string observed_note;
  if (!o.dl.observations.empty()) {
    auto text = io::ReadInputFile(o.dl.observations);
    if (!text) return fail("--observations: " + text.error().message);
    auto observations = policy::ParseObservations(*text, o.dl.observations);
    if (!observations) return fail("--observations: " + observations.error().message);
    if (!truth) truth = *profile;
    policy::ObservationSummary summary;
    profile = policy::WithObservations(*profile, *observations, &summary);
    if (auto ok = profile->Validate(); !ok) return fail("--observations: " + ok.error().message);
    observed_note = " + " + core::Plural(summary.observed_sets(), "observed set") + " from " +
                    o.dl.observations;
    if (!o.quiet) {
      err << "gpumux simulate: --observations " << o.dl.observations << ": " << summary.Describe()
          << "\n";
      for (const std::string& why : summary.skipped) err << "  skipped " << why << "\n";
    }
  }

  sim::DlSweepConfig config;
  config.policies = policies;
  config.threads = o.threads;
  config.options.tuner = o.dl.tuner;
  config.options.queue = o.dl.queue;
  config.options.gpus_per_node = std::min(4, o.dl.gpus);
  config.options.nodes =
      (o.dl.gpus + config.options.gpus_per_node - 1) / config.options.gpus_per_node;
  if (config.options.nodes * config.options.gpus_per_node != o.dl.gpus) {
    return fail("--gpus must be a multiple of 4 (4 GPUs per node), or less than 4");
  }
  config.options.max_jobs_per_gpu = o.dl.max_jobs_per_gpu;
  config.options.model_error = o.dl.model_error;
  config.options.truth_model = o.dl.truth_model;
  config.options.knobs = o.knobs;
  config.options.reconfigure_s = o.dl.reconfigure_s;
  config.options.measure_noise = o.dl.measure_noise;
  config.options.work_spread = o.dl.work_spread;
  config.options.noise_scale_spread = o.dl.noise_scale_spread;
  config.options.seed = seed;
  config.options.truth_seed = o.dl.truth_seed;
  config.options.record_observations = !o.dl.observations_out.empty();
  config.options.learn = o.dl.learn;
  config.truth = truth ? &*truth : nullptr;
  config.options.check_invariants = o.check_invariants;

  sim::DlReportContext ctx;
  const std::size_t runs_per_policy = loads->size() * seeds->size();
  if (!o.dl.jobs.empty()) {
    auto jobs = sim::LoadJobs(o.dl.jobs, *profile);
    if (!jobs) return fail(jobs.error().message);
    if (auto m = TooManyJobsOverLoads(o.dl.jobs + " (" + core::Plural(jobs->size(), "job") + ")",
                                      jobs->size(), loads->size(), seeds->size())) {
      return fail(*m);
    }
    for (std::uint64_t s : *seeds) {
      for (double load : *loads) {
        auto scaled = sim::ScaleSubmitTimes(*jobs, load);
        if (!scaled) return fail(o.dl.jobs + ": " + scaled.error().message + " (--loads)");
        config.inputs.push_back({load, s, std::move(*scaled)});
      }
    }
    ctx.workload = o.dl.jobs + " (" + core::Plural(jobs->size(), "job") + ")";
    ctx.mix = "from the job list";
  } else {
    if (auto m = TooManyJobsOverLoads("--count " + std::to_string(o.dl.count),
                                      static_cast<std::size_t>(o.dl.count), loads->size(),
                                      seeds->size())) {
      return fail(*m);
    }
    auto mix = sim::ParseMix(o.dl.mix, *profile);
    if (!mix) return fail(mix.error().message);
    for (std::uint64_t s : *seeds) {
      for (double load : *loads) {
        sim::JobGenOptions g;
        g.mix = *mix;
        g.count = o.dl.count;
        g.load = load;
        g.load_name = "--loads";
        g.seed = s;
        auto jobs = sim::GenerateJobs(g, *profile);
        if (!jobs) return fail(jobs.error().message);
        config.inputs.push_back({load, s, std::move(*jobs)});
      }
    }
    ctx.workload =
        core::Plural(o.dl.count, "generated job") + " (bursty arrivals, 300 per ~4000 s at load 1)";
    ctx.mix = o.dl.mix;
  }
  auto described = [](const policy::WorkloadProfile& p, const std::string& given) {
    return p.name + (given.empty() || sim::EmbeddedProfile(given) != nullptr ? " (embedded)"
                                                                             : " (" + given + ")");
  };
  ctx.profile = described(*profile, o.dl.profile) + observed_note;
  ctx.truth = truth_name.empty() ? std::string("the same profile") : described(*truth, truth_name);
  if (truth_name.empty() && !observed_note.empty()) ctx.truth += " (without the observations)";
  if (o.dl.truth_model != "predictor") {
    ctx.truth += "; sets it has not measured: " + o.dl.truth_model + " of its measured pairs";
  }
  ctx.seeds = *seeds;
  ctx.gpus = o.dl.gpus;
  ctx.seed = seed;
  ctx.options = config.options;
  ctx.policies = policies;
  ctx.loads = *loads;

  const std::size_t runs = policies.size() * runs_per_policy;
  auto progress = [&](const sim::DlResult& r, std::size_t done, std::size_t total) {
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (o.quiet || elapsed < 1.0) return;
    char line[256];
    std::snprintf(line, sizeof line, "[%zu/%zu] %s at load %g, seed %llu: average JCT %.0f s\n",
                  done, total, r.policy.c_str(), r.load, static_cast<unsigned long long>(r.seed),
                  r.metrics.avg_jct_s);
    err << line << std::flush;
  };
  auto results = sim::RunDlSweep(*profile, config, progress);
  if (!results) return fail(results.error().message);
  if (o.format == "json") {
    sim::WriteDlJson(out, *results, ctx);
  } else {
    sim::WriteDlTable(out, *results, ctx);
  }
  if (!o.dl.observations_out.empty()) {
    // Every run's observations, combined per set (the map keeps the key order).
    std::map<std::pair<std::vector<std::string>, std::vector<int>>, policy::Observation> all;
    for (const sim::DlResult& r : *results) {
      for (const policy::Observation& ob : r.observations) {
        auto [it, inserted] = all.try_emplace({ob.classes, ob.batches}, ob);
        if (inserted) continue;
        auto merged = policy::MergeObservations(it->second, ob);
        if (!merged) return fail("--observations-out: " + merged.error().message);
        it->second = std::move(*merged);
      }
    }
    std::vector<policy::Observation> list;
    std::int64_t windows = 0;
    double abs_error = 0;
    std::int64_t members = 0;
    for (const sim::DlResult& r : *results) {
      abs_error += r.belief_abs_error;
      members += r.belief_error_members;
    }
    for (auto& [key, ob] : all) {
      windows += ob.count;
      list.push_back(std::move(ob));
    }
    if (auto w =
            io::WriteFileAtomically(o.dl.observations_out, policy::SerializeObservations(list));
        !w) {
      return fail("--observations-out: " + w.error().message);
    }
    if (!o.quiet) {
      err << "gpumux simulate: " << core::Plural(list.size(), "observed set") << " ("
          << core::Plural(windows, "measurement window") << ") written to " << o.dl.observations_out
          << "\n";
      if (members > 0) {
        char line[160];
        std::snprintf(line, sizeof line,
                      "gpumux simulate: the policies' profile predicted those slowdowns with a "
                      "mean absolute error of %.3f\n",
                      abs_error / static_cast<double>(members));
        err << line;
        err << BeliefErrorBySize(*results);
      }
    }
  }
  if (!o.no_report) {
    const std::string dir = o.out_dir.empty() ? std::string(kDlReportDir) : o.out_dir;
    if (auto w = sim::WriteDlReportDir(dir, *results, ctx); !w) return fail(w.error().message);
    if (!o.quiet) err << "gpumux simulate: report written to " << dir << "/index.html\n";
  }
  if (!o.quiet) {
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%.2f", s);
    err << "gpumux simulate: " << core::Plural(runs, "simulation") << " in " << seconds << " s\n";
  }
  return 0;
}

CLI::App* AddJobGenCommand(CLI::App& app, JobGenCliOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "jobgen",
      "Write a job list of deep-learning training jobs, or their Kubernetes manifests\n"
      "Writes a CSV (job,class,submit_s,gpu_mib) for 'gpumux simulate --workload dl --jobs "
      "FILE': classes drawn from --mix, submit times from --arrival, a GPU memory request "
      "between --min-gib and --max-gib. With --format k8s, the same jobs (or a list given by "
      "--jobs, or the Alibaba trace pods of --pods) as Pods or batch/v1 Jobs for 'gpumux "
      "submit': each with its arrival (annotation gpumux.io/submit-at-s), workload class "
      "(gpumux.io/workload-class), schedulerName gpumux-scheduler, its GPU request as "
      "gpumux.io/gpu-mem, gpu-milli or gpu, and for training jobs the command of a shipped "
      "PyTorch example (python/examples) with --steps from the class's work.");
  cmd->add_option("--profile", o.profile,
                  "Workload profile: a JSON file or an embedded profile, " + EmbeddedNames() +
                      " [default: " + std::string(sim::kDefaultProfileName) + "]");
  cmd->add_option("--mix", o.mix, "uniform, iadeep, conv-heavy, light, or class=weight,...")
      ->capture_default_str();
  cmd->add_option("--count", o.count, "Number of jobs")
      ->capture_default_str()
      ->check(IntegerIn(1, static_cast<int>(sim::kMaxDlJobs)));
  cmd->add_option("--arrival", o.arrival,
                  "bursty (hyperexponential gaps), poisson, or a file of submit times in "
                  "seconds (one per line; --load divides them)")
      ->capture_default_str();
  cmd->add_option("--rate", o.rate,
                  "Mean arrivals per second at load 1, for bursty and poisson arrivals (jobs "
                  "later than 999999999999.999999 s are refused)")
      ->capture_default_str()
      ->check(NumberIn(0, 1e9, LowerBound::kOpen));
  cmd->add_option("--load", o.load, "Divides every gap (2 = twice the rate)")
      ->capture_default_str()
      ->check(NumberIn(0, 1000, LowerBound::kOpen));
  cmd->add_option("--min-gib", o.min_gib, "Smallest GPU memory request")
      ->capture_default_str()
      ->check(IntegerIn(1, 1024));
  cmd->add_option("--max-gib", o.max_gib, "Largest GPU memory request")
      ->capture_default_str()
      ->check(IntegerIn(1, 1024));
  cmd->add_option("--seed", o.seed, "Random seed")
      ->capture_default_str()
      ->check(IntegerIn(std::uint64_t{0}, std::numeric_limits<std::uint64_t>::max()));
  cmd->add_option("-o,--out", o.out, "Output file [default: stdout]");
  AddJobGenK8sOptions(*cmd, o);
  RecordGivenOptions(*cmd, o.given);
  // Every command line below is run by tests/cli/help_examples.py (keep them under 100 columns).
  cmd->footer(
      "\nExamples:\n"
      "  gpumux jobgen > jobs.csv\n"
      "      300 jobs of IADeep's 8 measured models, bursty arrivals\n"
      "  gpumux jobgen --mix vgg16=1,alexnet=1 --arrival poisson --rate 0.1 --count 500 -o "
      "jobs.csv\n"
      "  gpumux jobgen --profile iadeep5-assumed --mix iadeep -o jobs-iadeep5.csv\n"
      "  gpumux jobgen --arrival submit_times.txt --count 1000 -o jobs.csv\n"
      "      submit times from a file, one per line\n"
      "  gpumux jobgen --format k8s --count 20 --work-scale 0.01 -o jobs.yaml\n"
      "      the same kind of jobs as Pods running the PyTorch examples, for 'gpumux submit'\n"
      "  gpumux jobgen --format k8s --jobs jobs.csv --kind job --image registry.example/train:1 "
      "\\\n"
      "      -o jobs.yaml\n"
      "      a job list a simulation ran, as batch/v1 Jobs\n"
      "  gpumux jobgen --format k8s --pods default --start-s 11500000 --count 100 -o pods.yaml\n"
      "      100 pods of the FGD study's trace (openb_pod_list_default) from day 133 on\n"
      "  gpumux jobgen --format k8s-json --profile cpu-example --count 5 -o jobs.json\n"
      "      classes with a shipped example of their own (resnet, lstm, neumf), as a JSON List\n");
  return cmd;
}

int RunJobGen(const JobGenCliOptions& o, std::ostream& out, std::ostream& err) {
  auto fail = [&](const std::string& message) {
    err << "gpumux jobgen: " << message << "\n";
    return 2;
  };
  if (auto m = CheckJobGenCombination(o)) return fail(*m);
  if (!o.pods.empty()) return RunJobGenPods(o, out, err);
  const bool from_file = o.arrival != "bursty" && o.arrival != "poisson";
  if (from_file && Given(o.given, "rate")) {
    return fail("--rate does not apply with --arrival " + o.arrival +
                ": the file gives the submit times (--load still divides them)");
  }
  auto profile = ProfileFrom(o.profile);
  if (!profile) return fail(profile.error().message);
  if (!o.jobs.empty()) {
    auto listed = sim::LoadJobs(o.jobs, *profile);
    if (!listed) return fail("--jobs: " + listed.error().message);
    return WriteJobManifests(o, *listed, *profile, out, err);
  }
  auto mix = sim::ParseMix(o.mix, *profile);
  if (!mix) return fail(mix.error().message);
  if (o.max_gib < o.min_gib) return fail("--max-gib is below --min-gib");
  sim::JobGenOptions g;
  g.mix = *mix;
  g.count = o.count;
  g.rate_per_s = o.rate;
  g.load = o.load;
  g.seed = o.seed;
  g.min_gpu_mib = o.min_gib * core::MiB{1024};
  g.max_gpu_mib = o.max_gib * core::MiB{1024};
  g.rate_name = "--rate";
  g.load_name = "--load";
  if (o.arrival == "bursty") {
    g.arrival = sim::ArrivalKind::kBursty;
  } else if (o.arrival == "poisson") {
    g.arrival = sim::ArrivalKind::kPoisson;
  } else {
    auto times = sim::LoadSubmitTimes(o.arrival);
    if (!times) return fail("--arrival: " + times.error().message);
    g.arrival = sim::ArrivalKind::kFile;
    g.submit_times = std::move(*times);
  }
  auto jobs = sim::GenerateJobs(g, *profile);
  if (!jobs) return fail(jobs.error().message);
  if (o.format != "csv") return WriteJobManifests(o, *jobs, *profile, out, err);
  if (o.out.empty()) {
    sim::WriteJobs(out, *jobs);
    return 0;
  }
  std::ostringstream text;
  sim::WriteJobs(text, *jobs);
  if (auto w = io::WriteFileAtomically(o.out, text.str()); !w) return fail(w.error().message);
  return 0;
}

}  // namespace gpumux::cli
