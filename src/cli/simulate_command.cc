#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <sstream>

#include <CLI/CLI.hpp>

#include "gpumux/policy/registry.h"
#include "gpumux/sim/experiment.h"
#include "gpumux/sim/report.h"
#include "gpumux/sim/sweep.h"
#include "gpumux/sim/trace.h"
#include "src/cli/commands.h"

namespace gpumux::cli {
namespace {

// The policies that place pods without job state: every policy but the co-location ones.
std::vector<std::string> PackingPolicies() {
  std::vector<std::string> out;
  for (const auto& e : policy::BuiltinPolicies().entries()) {
    auto p = e.make({});
    if (p->colocation() == nullptr) out.push_back(e.name);
  }
  return out;
}

}  // namespace

std::vector<std::string> ExpandPolicies(const std::vector<std::string>& given,
                                        const std::vector<std::string>& all) {
  std::vector<std::string> out;
  for (const std::string& item : given) {
    std::stringstream ss(item);
    std::string name;
    while (std::getline(ss, name, ',')) {
      if (name == "all") {
        for (const auto& n : all) out.push_back(n);
      } else if (name == "study") {
        for (const auto& n : policy::FgdStudyPolicies()) out.push_back(n);
      } else if (!name.empty()) {
        out.push_back(name);
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
    if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos || s.size() > 18) {
      error = "--seeds: '" + s + "' is not a non-negative integer";
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
  CLI::App* cmd = app.add_subcommand(
      "simulate",
      "Replay a GPU-sharing trace through placement policies (the FGD study's protocol).\n"
      "With no options: the embedded Alibaba default trace, every policy, seed 42, load 1.3;\n"
      "prints a table and writes an HTML report to ./gpumux-report/.");
  cmd->add_option("--workload", o.workload,
                  "fgd: the FGD study's GPU-sharing trace (allocation rate); dl: deep-learning "
                  "training jobs sharing GPUs (job completion times; see the DL options)")
      ->capture_default_str()
      ->check(CLI::IsMember({"fgd", "dl"}));
  cmd->add_option("--nodes", o.nodes,
                  "Node list CSV (sn,cpu_milli,memory_mib,gpu,model) [default: embedded "
                  "openb_node_list_gpu_node, 1213 nodes]");
  cmd->add_option("--pods", o.pods,
                  "Pod list CSV (name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec) "
                  "[default: embedded openb_pod_list_default, 8152 pods]");
  cmd->add_option("--policy", o.policies,
                  "Policy name(s), comma-separated or repeated; 'all' = every policy, 'study' = "
                  "the six of the FGD study (see 'gpumux policies')")
      ->capture_default_str();
  cmd->add_option("--seeds", o.seeds, "Seeds: 42, 42-51 or 42,45,47")->capture_default_str();
  cmd->add_option("--load", o.load, "Arrived GPU demand as a multiple of cluster GPU capacity")
      ->capture_default_str()
      ->check(CLI::Range(0.01, 100.0));
  cmd->add_option("--format", o.format, "Output on stdout")
      ->capture_default_str()
      ->check(CLI::IsMember({"table", "json", "csv"}));
  cmd->add_option("--out", o.out_dir, "Report folder (index.html, results.json, curves.csv)")
      ->capture_default_str();
  cmd->add_flag("--no-report", o.no_report, "Write no report folder");
  cmd->add_option("--expect", o.expect,
                  "The study's analysis_allo_discrete.csv, to print its numbers beside ours "
                  "[default: embedded copy when the embedded pod list is used; 'none' = off]");
  cmd->add_option("--replay", o.replay,
                  "Replay folder (arrival.csv, nodes.csv): the study's arrival order and "
                  "tie-break ranks; placements are compared pod by pod");
  cmd->add_option("--placements", o.placements,
                  "Write every placement (arrival.csv format) to this file; one policy and one "
                  "seed (or --replay) only");
  cmd->add_option("--threads", o.threads, "Experiments run in parallel [default: all cores]")
      ->check(CLI::Range(0, 1024));
  cmd->add_option("--max-arrivals", o.max_arrivals,
                  "The most arrivals one experiment may have (a resampled or replayed plan "
                  "beyond it is refused before anything runs)")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{1}, std::size_t{1'000'000'000}));
  cmd->add_flag("--no-timing", o.no_timing, "Write wall times as 0 (byte-identical output)");
  cmd->add_flag("--check-invariants", o.check_invariants,
                "Check every ledger invariant after every arrival (slow)");
  cmd->add_flag("-q,--quiet", o.quiet, "No progress on stderr");
  AddDlOptions(*cmd, o.dl);
  cmd->footer(
      "\nExamples:\n"
      "  gpumux simulate --workload dl                     JCT of 300 training jobs on 20 GPUs, loads 1,2,4\n"
      "  gpumux simulate --workload dl --mix light --jobs jobs.csv --policy gpumux,iadeep\n"
      "  gpumux simulate                                   every policy, seed 42, report in ./gpumux-report\n"
      "  gpumux simulate --policy study --seeds 42-51      the FGD study's grid (6 policies x 10 seeds)\n"
      "  gpumux simulate --policy fgd --replay DIR         the study's own arrival order, compared pod by pod\n"
      "  gpumux simulate --pods openb_pod_list_gpushare40.csv --expect analysis_allo_discrete.csv\n"
      "  gpumux simulate --policy fgd --format json --no-report\n");
  return cmd;
}

int RunSimulate(const SimulateOptions& o, std::ostream& out, std::ostream& err) {
  if (o.workload == "dl") return RunSimulateDl(o, out, err);
  const auto start = std::chrono::steady_clock::now();
  auto fail = [&](const std::string& message) {
    err << "gpumux simulate: " << message << "\n";
    return 2;
  };
  if (!std::isfinite(o.load)) return fail("--load: " + std::to_string(o.load) + " is not a number");
  std::string seed_error;
  auto seeds = ParseSeeds(o.seeds, seed_error);
  if (!seeds) return fail(seed_error);
  const std::vector<std::string> policies = ExpandPolicies(o.policies, PackingPolicies());
  if (policies.empty()) return fail("--policy: no policy given");
  for (const auto& p : policies) {
    if (policy::BuiltinPolicies().Find(p) == nullptr) {
      return fail(policy::BuiltinPolicies().Make(p, {}).error().message);
    }
  }
  if (!o.placements.empty() && (policies.size() != 1 || (seeds->size() != 1 && o.replay.empty()))) {
    return fail("--placements needs exactly one policy and one seed (or --replay)");
  }

  // Inputs.
  core::Result<std::vector<core::NodeSpec>> nodes = [&] {
    if (!o.nodes.empty()) return sim::LoadNodeList(o.nodes);
    std::istringstream in{std::string(sim::EmbeddedNodeList())};
    return sim::ParseNodeList(in, "<embedded " + std::string(sim::kEmbeddedNodeListName) + ">");
  }();
  if (!nodes) return fail(nodes.error().message);
  core::Result<std::vector<core::Request>> pods = [&] {
    if (!o.pods.empty()) return sim::LoadPodList(o.pods);
    std::istringstream in{std::string(sim::EmbeddedPodList())};
    return sim::ParsePodList(in, "<embedded " + std::string(sim::kEmbeddedPodListName) + ">");
  }();
  if (!pods) return fail(pods.error().message);
  if (!o.quiet && std::chrono::steady_clock::now() - start > std::chrono::seconds(1)) {
    char line[160];
    std::snprintf(line, sizeof line, "gpumux simulate: read %zu nodes and %zu pods in %.1f s\n",
                  nodes->size(), pods->size(),
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    err << line << std::flush;
  }
  const std::string workload_name =
      o.pods.empty() ? std::string(sim::kEmbeddedPodListName) : sim::TraceStem(o.pods);
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
        return fail("--replay: " + *config.replay_dir + f + ": cannot open (a replay folder holds "
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
    std::snprintf(line, sizeof line, "[%zu/%zu] %s seed %llu: %.2f%% allocated at 130%% (%.0f ms)\n",
                  done, total, r.policy.c_str(), static_cast<unsigned long long>(r.seed),
                  r.alloc_pct_at_130.value_or(0), r.wall_ms);
    err << line << std::flush;
  };
  if (!o.quiet && runs > 4) {
    err << "gpumux simulate: " << runs << " experiments (" << policies.size() << " policies x "
        << config.seeds.size() << " seeds) on " << workload->cluster.size() << " nodes, "
        << workload->pods.size() << " pods\n";
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

  if (o.format == "json") {
    sim::WriteJson(out, *results, ctx);
  } else if (o.format == "csv") {
    sim::WriteCsv(out, *results, ctx);
  } else {
    sim::WriteTable(out, *results, ctx);
  }
  if (!o.placements.empty()) {
    // The node ranks of the run's plan (the placement file names nodes with them).
    auto plan = config.replay_dir
                    ? sim::LoadReplay(*config.replay_dir, workload->pods, workload->cluster,
                                      config.limit)
                    : sim::MakeStudyArrivals(workload->pods, workload->cluster, config.seeds[0],
                                             o.load, config.limit);
    if (!plan) return fail(plan.error().message);
    if (auto w = sim::WritePlacements(o.placements, results->front(), *workload, *plan); !w) {
      return fail(w.error().message);
    }
  }
  if (!o.no_report && !o.out_dir.empty()) {
    if (auto w = sim::WriteReportDir(o.out_dir, *results, ctx); !w) return fail(w.error().message);
    if (!o.quiet) err << "gpumux simulate: report written to " << o.out_dir << "/index.html\n";
  }
  if (!o.quiet && std::chrono::steady_clock::now() - start > std::chrono::seconds(1)) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    char line[128];
    std::snprintf(line, sizeof line, "gpumux simulate: %zu experiments in %.1f s\n", runs, s);
    err << line;
  }
  return 0;
}

int RunPolicies(std::ostream& out) {
  for (const auto& e : policy::BuiltinPolicies().entries()) {
    char line[256];
    std::snprintf(line, sizeof line, "%-16s %s\n", e.name.c_str(), e.summary.c_str());
    out << line;
  }
  return 0;
}

}  // namespace gpumux::cli
