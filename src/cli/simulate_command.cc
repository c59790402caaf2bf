#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <span>
#include <sstream>

#include "gpumux/core/plural.h"
#include "gpumux/policy/registry.h"
#include "gpumux/sim/experiment.h"
#include "gpumux/sim/report.h"
#include "gpumux/sim/sweep.h"
#include "gpumux/sim/trace.h"
#include "src/cli/commands.h"
#include "src/cli/options.h"
#include "src/cli/policy_options.h"

namespace gpumux::cli {
namespace {

// The policies that place pods (every policy but the co-location ones), and those of them in
// the default comparison.
std::vector<std::string> PackingPolicies() {
  return policy::BuiltinPolicies().names(policy::Workload::kPods);
}
std::vector<std::string> ComparedPackingPolicies() {
  return policy::BuiltinPolicies().compared(policy::Workload::kPods);
}

}  // namespace

std::vector<std::string> ExpandPolicies(const std::vector<std::string>& given,
                                        const std::vector<std::string>& compared,
                                        const std::vector<std::string>& all) {
  std::vector<std::string> out;
  for (const std::string& item : given) {
    std::stringstream ss(item);
    std::string name;
    while (std::getline(ss, name, ',')) {
      if (name == "all") {
        for (const auto& n : all) out.push_back(n);
      } else if (name == "default") {
        for (const auto& n : compared) out.push_back(n);
      } else if (name == "study") {
        for (const auto& n : policy::FgdStudyPolicies()) out.push_back(n);
      } else if (!name.empty()) {
        out.emplace_back(policy::Registry::Canonical(name));
      }
    }
  }
  std::vector<std::string> unique;
  for (const auto& n : out) {
    if (std::find(unique.begin(), unique.end(), n) == unique.end()) unique.push_back(n);
  }
  return unique;
}

std::optional<std::vector<std::uint64_t>> ParseSeeds(const std::string& text, std::string& error) {
  std::vector<std::uint64_t> seeds;
  std::stringstream ss(text);
  std::string part;
  auto number = [&](const std::string& s, std::uint64_t& v) {
    if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos) {
      error = "--seeds: '" + s + "' is not a non-negative integer";
      return false;
    }
    if (s.size() > 18) {
      error = "--seeds: " + s + " is outside 0..999999999999999999";
      return false;
    }
    v = std::stoull(s);
    return true;
  };
  while (std::getline(ss, part, ',')) {
    const std::size_t dash = part.find('-');
    std::uint64_t lo = 0, hi = 0;
    if (dash == std::string::npos) {
      if (!number(part, lo)) return std::nullopt;
      hi = lo;
    } else if (!number(part.substr(0, dash), lo) || !number(part.substr(dash + 1), hi)) {
      return std::nullopt;
    }
    if (hi < lo) {
      error = "--seeds: bad range '" + part + "'";
      return std::nullopt;
    }
    if (hi - lo >= sim::kMaxSweepSeeds - std::min(seeds.size(), sim::kMaxSweepSeeds)) {
      error = "--seeds: '" + text + "' gives more than " + std::to_string(sim::kMaxSweepSeeds) +
              " seeds, the most one run may have";
      return std::nullopt;
    }
    for (std::uint64_t s = lo; s <= hi; ++s) seeds.push_back(s);
  }
  if (seeds.empty()) {
    error = "--seeds: no seed given";
    return std::nullopt;
  }
  return seeds;
}

CLI::App* AddSimulateCommand(CLI::App& app, SimulateOptions& o) {
  const std::string fgd_dir = "./" + std::string(kFgdReportDir);
  const std::string dl_dir = "./" + std::string(kDlReportDir);
  std::string description =
      "Simulate placement policies: the FGD study's GPU-sharing trace, or training jobs "
      "(--workload dl)\n"
      "--workload fgd (the default) replays a GPU-sharing trace through placement policies with "
      "the FGD study's protocol and reports the allocation rate. With no options: the embedded "
      "Alibaba default trace, every policy, seed 42, load 1.3; prints a table and writes an HTML "
      "report to ";
  description += fgd_dir + "/.\n";
  description +=
      "--workload dl simulates deep-learning training jobs sharing GPUs and reports their "
      "completion times (JCT); its report goes to ";
  description += dl_dir + "/.\nAn option of the other workload is an error, not ignored.";
  CLI::App* cmd = app.add_subcommand("simulate", description);
  cmd->add_option("--workload", o.workload,
                  "fgd: the FGD study's GPU-sharing trace (allocation rate); dl: deep-learning "
                  "training jobs sharing GPUs (job completion times; see the DL options)")
      ->capture_default_str()
      ->check(CLI::IsMember({"fgd", "dl"}));
  cmd->add_option("--policy", o.policies,
                  "Policy name(s), comma-separated or repeated; 'default' = the policies of the "
                  "workload compared by default, 'all' = every policy of the workload (examples "
                  "too), 'study' = the six of the FGD study (see 'gpumux policies')")
      ->capture_default_str();
  cmd->add_option("--seeds", o.seeds,
                  "Seeds: 42, 42-51 or 42,45,47 (one seed with --replay; with --workload dl each "
                  "seed is a run of its own and the table shows the mean)")
      ->capture_default_str();
  cmd->add_option("--format", o.format, "Output on stdout (csv: --workload fgd only)")
      ->capture_default_str()
      ->check(CLI::IsMember({"table", "json", "csv"}));
  cmd->add_option("--out", o.out_dir,
                  "Report folder: index.html, results.json and curves.csv (fgd) or jobs.csv (dl) "
                  "[default: " +
                      fgd_dir + ", with --workload dl " + dl_dir + "]");
  cmd->add_flag("--no-report", o.no_report, "Write no report folder (not with --out)");
  cmd->add_option("--threads", o.threads, "Experiments run in parallel [default: all cores]")
      ->check(IntegerIn(0, 1024));
  cmd->add_flag("--check-invariants", o.check_invariants,
                "Check every ledger invariant after every arrival (slow)");
  cmd->add_flag("-q,--quiet", o.quiet, "No progress on stderr");

  const std::string fgd = "FGD study's trace (--workload fgd, the default)";
  cmd->add_option("--nodes", o.nodes,
                  "Node list CSV (sn,cpu_milli,memory_mib,gpu,model) [default: embedded "
                  "openb_node_list_gpu_node, 1213 nodes]")
      ->group(fgd);
  cmd->add_option("--pods", o.pods,
                  "Pod list CSV (name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec) "
                  "[default: embedded openb_pod_list_default, 8152 pods]")
      ->group(fgd);
  cmd->add_option("--load", o.load,
                  "Arrived GPU demand as a multiple of cluster GPU capacity (--workload dl: "
                  "--loads)")
      ->capture_default_str()
      ->check(NumberIn(0.01, sim::kMaxLoad))
      ->group(fgd);
  cmd->add_option("--expect", o.expect,
                  "The study's analysis_allo_discrete.csv, to print its numbers beside ours "
                  "[default: embedded copy when the embedded pod list is used; 'none' = off]")
      ->group(fgd);
  cmd->add_option("--replay", o.replay,
                  "Replay folder (arrival.csv, nodes.csv): the study's arrival order and "
                  "tie-break ranks; placements are compared pod by pod; one seed")
      ->group(fgd);
  cmd->add_option("--placements", o.placements,
                  "Write every placement (arrival.csv format) to this file; one policy and one "
                  "seed (or --replay) only")
      ->group(fgd);
  cmd->add_option("--max-arrivals", o.max_arrivals,
                  "The most arrivals one experiment may have (a resampled or replayed plan "
                  "beyond it is refused before anything runs)")
      ->capture_default_str()
      ->check(IntegerIn(std::size_t{1}, std::size_t{1'000'000'000}))
      ->group(fgd);
  cmd->add_option("--percentage-of-nodes-to-score", o.percentage_of_nodes_to_score,
                  "Decide among only the feasible nodes kube-scheduler would sample with this "
                  "percentageOfNodesToScore (its window moves on each pod; 0 = its adaptive "
                  "default, 50 - nodes/125 %, at least 100 nodes); 100 = every node, the "
                  "study's protocol")
      ->capture_default_str()
      ->check(IntegerIn(0, 100))
      ->group(fgd);
  cmd->add_flag("--no-timing", o.no_timing, "Write wall times as 0 (byte-identical output)")
      ->group(fgd);
  cmd->add_flag("--departures", o.departures,
                "Pods leave after their durations in the trace, arrive as a Poisson process at "
                "the offered GPU load --load (default 1.0 here) and wait, retried, when they do "
                "not fit: allocation over time and waits by kind (no report folder)")
      ->group(fgd);
  cmd->add_option("--departure-rounds", o.departure_rounds,
                  "--departures: arrivals resampled to this many times the cluster's GPU "
                  "capacity")
      ->capture_default_str()
      ->check(NumberIn(0.01, sim::kMaxLoad))
      ->group(fgd);
  cmd->add_option("--max-duration", o.max_duration_s,
                  "--departures: durations capped at this many seconds (also the warm-up left "
                  "out of the mean allocation)")
      ->capture_default_str()
      ->check(NumberIn(1, 1e9))
      ->group(fgd);
  AddPolicyKnobs(*cmd, o.knobs, fgd, std::string(kDlOptionsGroup));
  AddDlOptions(*cmd, o.dl);
  RecordGivenOptions(*cmd, o.given);
  // Every command line below is run by tests/cli/help_examples.py (keep them under 100 columns).
  cmd->footer(
      "\nExamples:\n"
      "  gpumux simulate\n"
      "      every policy on the embedded trace, seed 42; report in ./gpumux-report/\n"
      "  gpumux simulate --policy study --seeds 42-51 --no-report\n"
      "      the FGD study's grid: 6 policies x 10 seeds\n"
      "  gpumux simulate --policy fgd --replay replay-fgd-default-seed42\n"
      "      the study's own arrival order (a folder of ../shared/traces/alibaba-gpu-v2023/),\n"
      "      compared pod by pod\n"
      "  gpumux simulate --pods openb_pod_list_gpushare40.csv --expect analysis_allo_discrete.csv\n"
      "      another trace of the study, beside the study's own numbers\n"
      "  gpumux simulate --policy fgd --format json --no-report\n"
      "  gpumux simulate --policy fgd,fgd-sat-reserve --departures --load 0.9\n"
      "      pods leave after their trace durations; allocation over time and waits\n"
      "  gpumux simulate --workload dl\n"
      "      JCT of 300 training jobs on 20 GPUs at loads 1, 2 and 4 (the GPUs behave as\n"
      "      IADeep measured them); report in ./gpumux-report-dl/\n"
      "  gpumux simulate --workload dl --seeds 100-109 --queue fifo --tuner none --no-report\n"
      "      placement alone: every policy FIFO without tuning, mean of 10 seeds\n"
      "  gpumux simulate --workload dl --mix light --loads 2 --no-report\n"
      "  gpumux simulate --workload dl --policy least-delay --seeds 100-101 --loads 1 --no-report "
      "\\\n"
      "      --observations-out learned.json\n"
      "      also writes what node coordinators would have measured (docs/COORDINATOR.md)\n"
      "  gpumux simulate --workload dl --policy least-delay --seeds 102 --loads 1 --no-report \\\n"
      "      --observations learned.json\n"
      "      the policies believe the profile plus those observations; the GPUs do not change\n"
      "  gpumux jobgen --count 100 -o jobs.csv\n"
      "  gpumux simulate --workload dl --jobs jobs.csv --policy least-delay,iadeep --loads 1\n");
  return cmd;
}

namespace {

// The options that only one workload reads, and what to say when the other is given them.
struct WorkloadOption {
  const char* name;  // long name without dashes
  const char* hint;  // "" or what to use instead
};
constexpr WorkloadOption kFgdOnly[] = {{"nodes", ""},
                                       {"pods", ""},
                                       {"load", "; the DL load factors are --loads"},
                                       {"expect", ""},
                                       {"replay", ""},
                                       {"placements", ""},
                                       {"max-arrivals", ""},
                                       {"percentage-of-nodes-to-score", ""},
                                       {"no-timing", "; the DL output has no wall times"},
                                       {"departures", ""},
                                       {"departure-rounds", ""},
                                       {"max-duration", ""},
                                       {"reserve-idle-fraction", ""}};
constexpr WorkloadOption kDlOnly[] = {{"jobs", ""},
                                      {"profile", ""},
                                      {"mix", ""},
                                      {"count", ""},
                                      {"loads", "; the FGD load is --load"},
                                      {"tuner", ""},
                                      {"queue", ""},
                                      {"max-jobs-per-gpu", ""},
                                      {"gpus", ""},
                                      {"truth-model", ""},
                                      {"model-error", ""},
                                      {"reconfigure-s", ""},
                                      {"measure-noise", ""},
                                      {"truth-seed", ""},
                                      {"observations", ""},
                                      {"observations-out", ""},
                                      {"learn", ""}};

}  // namespace

std::optional<std::string> CheckSimulateCombination(const SimulateOptions& o) {
  const bool dl = o.workload == "dl";
  const std::string other = dl ? "--workload fgd" : "--workload dl";
  const std::string mode = dl ? "--workload dl" : "--workload fgd (the default)";
  for (const WorkloadOption& w :
       dl ? std::span<const WorkloadOption>(kFgdOnly) : std::span<const WorkloadOption>(kDlOnly)) {
    if (Given(o.given, w.name)) {
      return "--" + std::string(w.name) + " belongs to " + other + " and does not apply to " +
             mode + w.hint;
    }
  }
  if (o.no_report && Given(o.given, "out")) {
    return "--out and --no-report contradict each other: --no-report writes no report folder";
  }
  if (Given(o.given, "out") && o.out_dir.empty()) {
    return "--out: an empty folder name (--no-report writes no report)";
  }
  if (dl && Given(o.given, "jobs")) {
    if (Given(o.given, "mix")) {
      return "--mix does not apply with --jobs: the job list gives every job's class";
    }
    if (Given(o.given, "count")) {
      return "--count does not apply with --jobs: the job list gives the jobs";
    }
  }
  return std::nullopt;
}

int RunSimulate(const SimulateOptions& o, std::ostream& out, std::ostream& err) {
  auto fail = [&](const std::string& message) {
    err << "gpumux simulate: " << message << "\n";
    return 2;
  };
  if (auto conflict = CheckSimulateCombination(o)) return fail(*conflict);
  if (o.workload == "dl") return RunSimulateDl(o, out, err);
  const auto start = std::chrono::steady_clock::now();
  if (!std::isfinite(o.load)) return fail("--load: " + std::to_string(o.load) + " is not a number");
  std::string seed_error;
  auto seeds = ParseSeeds(o.seeds, seed_error);
  if (!seeds) return fail(seed_error);
  const std::vector<std::string> policies =
      ExpandPolicies(o.policies, ComparedPackingPolicies(), PackingPolicies());
  if (policies.empty()) return fail("--policy: no policy given");
  for (const auto& p : policies) {
    if (policy::BuiltinPolicies().Find(p) == nullptr) {
      return fail(policy::BuiltinPolicies().Make(p, {}).error().message);
    }
  }
  if (!o.replay.empty() && seeds->size() != 1) {
    return fail(
        "--replay takes one seed (the replay fixes the arrival order; the seed breaks "
        "the policies' random ties), --seeds " +
        o.seeds + " gives " + core::Plural(seeds->size(), "seed"));
  }
  if (!o.placements.empty() && (policies.size() != 1 || seeds->size() != 1)) {
    return fail("--placements needs exactly one policy and one seed (or --replay)");
  }
  if (auto bad = CheckPolicyKnobs(o.knobs, policies)) return fail(*bad);
  if (o.departures) return RunSimulateDepartures(o, *seeds, policies, out, err);
  for (const char* departures_only : {"departure-rounds", "max-duration"}) {
    if (Given(o.given, departures_only)) {
      return fail("--" + std::string(departures_only) + " applies only with --departures");
    }
  }

  // Inputs.
  core::Result<std::vector<core::NodeSpec>> nodes = sim::NodeListOrEmbedded(o.nodes);
  if (!nodes) return fail(nodes.error().message);
  core::Result<std::vector<core::Request>> pods = sim::PodListOrEmbedded(o.pods);
  if (!pods) return fail(pods.error().message);
  if (!o.quiet && std::chrono::steady_clock::now() - start > std::chrono::seconds(1)) {
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%.1f",
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    err << "gpumux simulate: read " << core::Plural(nodes->size(), "node") << " and "
        << core::Plural(pods->size(), "pod") << " in " << seconds << " s\n"
        << std::flush;
  }
  const std::string nodes_name = o.nodes.empty() ? "the embedded node list" : o.nodes;
  const std::string pods_name = o.pods.empty() ? "the embedded pod list" : o.pods;
  // Said once, at load time: such pods fail at every arrival without another word.
  if (const sim::AbsentModels absent = sim::PodsAskingForAbsentModels(*pods, *nodes);
      absent.pods > 0) {
    std::string models;
    for (const std::string& m : absent.models) models += (models.empty() ? "" : ", ") + m;
    const bool one = absent.pods == 1;
    err << "gpumux simulate: warning: " << core::Plural(absent.pods, "pod") << " of " << pods_name
        << (one ? " asks" : " ask") << " only for GPU models that no node of " << nodes_name
        << " has (gpu_spec " << models << "); " << (one ? "it is" : "they are")
        << " never placed\n";
  }
  const std::string workload_name = sim::PodListName(o.pods);
  auto workload = sim::MakeWorkload(workload_name, std::move(*nodes), std::move(*pods));
  if (!workload) return fail(workload.error().message);

  std::optional<sim::ExpectedTable> expected;
  if (o.expect == "none") {
  } else if (!o.expect.empty()) {
    auto t = sim::LoadExpected(o.expect);
    if (!t) return fail(t.error().message);
    expected = std::move(*t);
  } else if (o.pods.empty()) {
    std::istringstream in{std::string(sim::EmbeddedExpectedAlloc())};
    auto t = sim::ParseExpected(in, "<embedded fgd_expected_alloc_default>");
    if (!t) return fail(t.error().message);
    expected = std::move(*t);
  }

  sim::SweepConfig config;
  config.policies = policies;
  config.seeds = *seeds;
  config.load = o.load;
  config.threads = o.threads;
  if (!o.replay.empty()) {
    config.replay_dir = o.replay;
    config.seeds = {seeds->front()};
  }
  config.experiment.record_placements = !o.placements.empty();
  config.experiment.check_invariants = o.check_invariants;
  config.experiment.knobs = o.knobs;
  config.experiment.percentage_of_nodes_to_score = o.percentage_of_nodes_to_score;
  config.limit = sim::ArrivalLimit{o.max_arrivals, "--max-arrivals"};
  std::mutex progress_mu;  // experiments report from their own threads
  if (!o.quiet) {
    config.experiment.progress = [&](const sim::ExperimentProgress& p) {
      char line[256];
      std::snprintf(line, sizeof line,
                    "gpumux simulate: %s seed %llu: %zu of %zu arrivals (%.0f%%) after %.0f s\n",
                    p.policy.c_str(), static_cast<unsigned long long>(p.seed), p.done, p.total,
                    100.0 * static_cast<double>(p.done) / static_cast<double>(p.total),
                    p.elapsed_s);
      std::lock_guard<std::mutex> lock(progress_mu);
      err << line << std::flush;
    };
  }

  if (config.replay_dir) {
    // A missing file gets the folder's layout as a hint; anything else wrong with one (a
    // folder, a FIFO, its content) comes from reading it.
    for (const char* f : {"/arrival.csv", "/nodes.csv"}) {
      std::error_code ec;
      if (!std::filesystem::exists(*config.replay_dir + f, ec)) {
        return fail("--replay: " + *config.replay_dir + f +
                    ": cannot open (a replay folder holds "
                    "arrival.csv and nodes.csv)");
      }
    }
  }
  const std::size_t runs = policies.size() * config.seeds.size();
  auto progress = [&](const sim::ExperimentResult& r, std::size_t done, std::size_t total) {
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (o.quiet || elapsed < 1.0) return;
    char line[256];
    std::snprintf(line, sizeof line,
                  "[%zu/%zu] %s seed %llu: %.2f%% allocated at 130%% (%.0f ms)\n", done, total,
                  r.policy.c_str(), static_cast<unsigned long long>(r.seed),
                  r.alloc_pct_at_130.value_or(0), r.wall_ms);
    err << line << std::flush;
  };
  if (!o.quiet && runs > 4) {
    err << "gpumux simulate: " << core::Plural(runs, "experiment") << " ("
        << core::Plural(policies.size(), "policy", "policies") << " x "
        << core::Plural(config.seeds.size(), "seed") << ") on "
        << core::Plural(workload->cluster.size(), "node") << ", "
        << core::Plural(workload->pods.size(), "pod") << "\n";
  }
  auto results = sim::RunSweep(*workload, config, progress);
  if (!results) {
    return fail((config.replay_dir ? "--replay: " : "") + results.error().message);
  }

  sim::ReportContext ctx;
  ctx.nodes_source = o.nodes.empty() ? "<embedded>" : o.nodes;
  ctx.pods_source = o.pods.empty() ? "<embedded>" : o.pods;
  ctx.workload = workload->name;
  ctx.nodes = workload->cluster.size();
  ctx.gpus = workload->cluster.total_gpus();
  ctx.load = o.load;
  ctx.policies = policies;
  ctx.seeds = config.seeds;
  if (config.replay_dir) ctx.replay_dir = config.replay_dir;
  ctx.expected = expected ? &*expected : nullptr;
  ctx.timing = !o.no_timing;
  ctx.percentage_of_nodes_to_score = o.percentage_of_nodes_to_score;

  if (o.format == "json") {
    sim::WriteJson(out, *results, ctx);
  } else if (o.format == "csv") {
    sim::WriteCsv(out, *results, ctx);
  } else {
    sim::WriteTable(out, *results, ctx);
  }
  if (!o.placements.empty()) {
    // The node ranks of the run's plan (the placement file names nodes with them).
    auto plan = config.replay_dir ? sim::LoadReplay(*config.replay_dir, workload->pods,
                                                    workload->cluster, config.limit)
                                  : sim::MakeStudyArrivals(workload->pods, workload->cluster,
                                                           config.seeds[0], o.load, config.limit);
    if (!plan) return fail(plan.error().message);
    if (auto w = sim::WritePlacements(o.placements, results->front(), *workload, *plan); !w) {
      return fail(w.error().message);
    }
  }
  if (!o.no_report) {
    const std::string dir = o.out_dir.empty() ? std::string(kFgdReportDir) : o.out_dir;
    if (auto w = sim::WriteReportDir(dir, *results, ctx); !w) return fail(w.error().message);
    if (!o.quiet) err << "gpumux simulate: report written to " << dir << "/index.html\n";
  }
  if (!o.quiet && std::chrono::steady_clock::now() - start > std::chrono::seconds(1)) {
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%.1f", s);
    err << "gpumux simulate: " << core::Plural(runs, "experiment") << " in " << seconds << " s\n";
  }
  return 0;
}

int RunPolicies(std::ostream& out) {
  // Grouped by what they place: a policy of one workload is refused for the other.
  const std::pair<policy::Workload, const char*> groups[] = {
      {policy::Workload::kPods,
       "Pods of GPU-sharing traces (gpumux simulate, the extender's --policy, kubectl gpumux):"},
      {policy::Workload::kTrainingJobs,
       "Training jobs sharing GPUs (gpumux simulate --workload dl):"}};
  bool first = true;
  for (const auto& [workload, title] : groups) {
    out << (first ? "" : "\n") << title << "\n";
    first = false;
    for (const auto& e : policy::BuiltinPolicies().entries()) {
      if (!e.For(workload)) continue;
      char line[256];
      std::snprintf(line, sizeof line, "  %-16s %s\n", e.name.c_str(), e.summary.c_str());
      out << line;
    }
  }
  return 0;
}

}  // namespace gpumux::cli
