#include "gpumux/sim/dl_report.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>

#include "gpumux/core/plural.h"
#include "gpumux/policy/registry.h"
#include "gpumux/policy/tuner.h"
#include "src/sim/parallel.h"
#include "src/sim/report_format.h"

namespace gpumux::sim {

using report_format::Fixed;
using report_format::LoadString;
using Json = nlohmann::ordered_json;

core::Result<std::vector<DlResult>> RunDlSweep(
    const policy::WorkloadProfile& profile, const DlSweepConfig& config,
    const std::function<void(const DlResult&, std::size_t, std::size_t)>& progress) {
  if (config.policies.empty() || config.inputs.empty()) {
    return core::MakeError(core::ErrorCode::kInvalidArgument, "no policy or no load given");
  }
  for (const auto& p : config.policies) {
    if (policy::BuiltinPolicies().Find(p) == nullptr) {
      return tl::unexpected(policy::BuiltinPolicies().Make(p, {}).error());
    }
  }
  const std::size_t n = config.inputs.size() * config.policies.size();
  std::vector<std::optional<core::Result<DlResult>>> results(n);
  // Runs are started from the last (the highest load, the co-location policies, which cost the
  // most) so that a long run does not start last and leave the other cores idle; each result
  // still goes to its own slot.
  RunParallel(
      n, config.threads,
      [&](std::size_t k) {
        const std::size_t i = n - 1 - k;
        const DlWorkloadInput& input = config.inputs[i / config.policies.size()];
        DlSimOptions options = config.options;
        options.policy = config.policies[i % config.policies.size()];
        options.seed = input.seed;
        auto r = RunDl(profile, input.jobs, options, config.truth);
        if (r) r->load = input.load;
        results[i] = std::move(r);
      },
      [&](std::size_t k, std::size_t done) {
        const std::size_t i = n - 1 - k;
        if (progress && *results[i]) progress(**results[i], done, n);
      });
  std::vector<DlResult> out;
  for (auto& r : results) {
    if (!*r) return tl::unexpected(r->error());
    out.push_back(std::move(**r));
  }
  return out;
}

std::optional<double> DlMargin(const std::vector<DlResult>& results, double load,
                               const std::string& baseline, double DlMetrics::*metric) {
  double ours = 0, base = 0;
  bool have_ours = false, have_base = false;
  for (const auto& r : results) {
    if (r.load != load) continue;
    if (r.policy == kOwnDlPolicy) {
      ours += r.metrics.*metric;
      have_ours = true;
    }
    if (r.policy == baseline) {
      base += r.metrics.*metric;
      have_base = true;
    }
  }
  if (!have_ours || !have_base || base <= 0) return std::nullopt;
  return (base - ours) / base * 100.0;
}

namespace {

// The mean metrics of `policy` at `load` over its seeds, the tuner that ran, and how many runs.
struct MeanRow {
  DlMetrics metrics;
  std::string tuner;
  int runs = 0;
};

MeanRow MeanMetrics(const std::vector<DlResult>& results, double load, const std::string& policy) {
  MeanRow row;
  DlMetrics& sum = row.metrics;
  for (const auto& r : results) {
    if (r.load != load || r.policy != policy) continue;
    const DlMetrics& m = r.metrics;
    sum.avg_jct_s += m.avg_jct_s;
    sum.median_jct_s += m.median_jct_s;
    sum.p95_jct_s += m.p95_jct_s;
    sum.makespan_s += m.makespan_s;
    sum.avg_queue_s += m.avg_queue_s;
    sum.gpu_busy += m.gpu_busy;
    sum.gpu_util += m.gpu_util;
    row.tuner = r.tuner;
    ++row.runs;
  }
  if (row.runs > 0) {
    const double k = row.runs;
    for (double* v : {&sum.avg_jct_s, &sum.median_jct_s, &sum.p95_jct_s, &sum.makespan_s,
                      &sum.avg_queue_s, &sum.gpu_busy, &sum.gpu_util}) {
      *v /= k;
    }
  }
  return row;
}

// Seeds at `load` on which least-delay's average JCT is lower than `other`'s, and seeds compared.
std::pair<int, int> SeedWins(const std::vector<DlResult>& results, double load,
                             const std::string& other) {
  int wins = 0, seeds = 0;
  for (const auto& ours : results) {
    if (ours.load != load || ours.policy != kOwnDlPolicy) continue;
    for (const auto& r : results) {
      if (r.load != load || r.policy != other || r.seed != ours.seed) continue;
      ++seeds;
      if (ours.metrics.avg_jct_s < r.metrics.avg_jct_s) ++wins;
    }
  }
  return {wins, seeds};
}

std::string MarginWords(double margin) {
  return Fixed(std::fabs(margin), 1) + "% " + (margin >= 0 ? "lower" : "higher");
}

}  // namespace

void WriteDlTable(std::ostream& out, const std::vector<DlResult>& results,
                  const DlReportContext& ctx) {
  const std::size_t seeds = std::max<std::size_t>(ctx.seeds.size(), 1);
  if (ctx.measured) {
    out << "JCT measured on a cluster: " << ctx.workload << "\n";
    for (const auto& note : ctx.notes) out << note << "\n";
  } else {
    out << "JCT simulation: " << ctx.workload << ", mix " << ctx.mix << ", "
        << core::Plural(ctx.gpus, "GPU") << ", at most "
        << core::Plural(ctx.options.max_jobs_per_gpu, "job") << " per GPU, ";
    if (seeds > 1) {
      out << core::Plural(seeds, "seed") << " (" << ctx.seeds.front() << ".." << ctx.seeds.back()
          << "; every figure is the mean over the seeds)";
    } else {
      out << "seed " << ctx.seed;
    }
    out << "\nprofile: " << ctx.profile << "; truth: " << ctx.truth << "\n";
  }
  char line[256];
  // The policy column fits the longest name (a cluster run's label may be long), at least 10.
  std::size_t width = 10;
  for (const auto& policy : ctx.policies) width = std::max(width, policy.size());
  auto column = [width](const std::string& name) {
    std::string padded = name;
    padded.resize(std::max(width, name.size()), ' ');
    return padded;
  };
  for (double load : ctx.loads) {
    out << "\nload " << LoadString(load) << "x\n";
    std::snprintf(line, sizeof line, " %-7s %9s %9s %9s %10s %9s %6s %6s\n", "tuner", "avg JCT",
                  "median", "p95", "makespan", "queue", "busy", "util");
    out << "  " << column("policy") << line;
    for (const auto& policy : ctx.policies) {
      const MeanRow row = MeanMetrics(results, load, policy);
      if (row.runs == 0) continue;
      const DlMetrics& m = row.metrics;
      char util[16] = "     -";  // not measured on a cluster
      if (!std::isnan(m.gpu_util)) std::snprintf(util, sizeof util, "%5.1f%%", m.gpu_util * 100);
      std::snprintf(line, sizeof line, " %-7s %8.0fs %8.0fs %8.0fs %9.0fs %8.0fs %5.1f%% %s\n",
                    row.tuner.c_str(), m.avg_jct_s, m.median_jct_s, m.p95_jct_s, m.makespan_s,
                    m.avg_queue_s, m.gpu_busy * 100, util);
      out << "  " << column(policy) << line;
    }
    for (const auto& other : ctx.policies) {
      if (other == kOwnDlPolicy) continue;
      const auto avg = DlMargin(results, load, other);
      if (!avg) continue;
      const auto p95 = DlMargin(results, load, other, &DlMetrics::p95_jct_s);
      const auto makespan = DlMargin(results, load, other, &DlMetrics::makespan_s);
      out << "  " << kOwnDlPolicy << " vs " << other << ": average JCT " << MarginWords(*avg)
          << ", p95 " << MarginWords(p95.value_or(0)) << ", makespan "
          << MarginWords(makespan.value_or(0));
      if (seeds > 1) {
        const auto [wins, compared] = SeedWins(results, load, other);
        out << " (average lower on " << wins << " of " << compared << " seeds)";
      }
      out << "\n";
    }
  }
}

namespace {

Json OptionsJson(const DlSimOptions& o) {
  Json j;
  j["tuner"] = o.tuner;
  j["queue"] = o.queue;
  j["nodes"] = o.nodes;
  j["gpus_per_node"] = o.gpus_per_node;
  j["max_jobs_per_gpu"] = o.max_jobs_per_gpu;
  j["reconfigure_s"] = o.reconfigure_s;
  j["measure_noise"] = o.measure_noise;
  j["model_error"] = o.model_error;
  if (o.truth_model != "predictor") j["truth_model"] = o.truth_model;
  j["work_spread"] = o.work_spread;
  j["noise_scale_spread"] = o.noise_scale_spread;
  j["seed"] = o.seed;
  if (o.truth_seed != 0) j["truth_seed"] = o.truth_seed;
  if (o.learn) j["learn"] = true;
  if (!o.knobs.empty()) {
    Json knobs = Json::object();
    for (const auto& [name, value] : o.knobs) knobs[name] = value;
    j["policy_settings"] = std::move(knobs);
  }
  return j;
}

Json MetricsJson(const DlMetrics& m) {
  Json j;
  j["avg_jct_s"] = m.avg_jct_s;
  j["median_jct_s"] = m.median_jct_s;
  j["p95_jct_s"] = m.p95_jct_s;
  j["makespan_s"] = m.makespan_s;
  j["avg_queue_s"] = m.avg_queue_s;
  j["gpu_busy"] = m.gpu_busy;
  j["gpu_util"] = m.gpu_util;
  j["tuning_sessions"] = m.tuning_sessions;
  j["measurement_windows"] = m.measurement_windows;
  j["locked_gpu_s"] = m.locked_gpu_s;
  j["paused_job_s"] = m.paused_job_s;
  j["declined"] = m.declined;
  return j;
}

}  // namespace

void WriteDlJson(std::ostream& out, const std::vector<DlResult>& results,
                 const DlReportContext& ctx) {
  Json j;
  j["workload"] = ctx.workload;
  if (ctx.measured) {
    j["measured"] = true;
    j["notes"] = ctx.notes;
  }
  j["mix"] = ctx.mix;
  j["profile"] = ctx.profile;
  j["truth"] = ctx.truth;
  j["gpus"] = ctx.gpus;
  j["seed"] = ctx.seed;
  j["seeds"] = ctx.seeds.empty() ? std::vector<std::uint64_t>{ctx.seed} : ctx.seeds;
  j["options"] = OptionsJson(ctx.options);
  j["policies"] = ctx.policies;
  j["loads"] = ctx.loads;
  Json runs = Json::array();
  for (const auto& r : results) {
    Json run;
    run["policy"] = r.policy;
    run["tuner"] = r.tuner;
    run["queue"] = r.queue;
    run["load"] = r.load;
    run["seed"] = r.seed;
    run["jobs"] = r.jobs.size();
    run["events"] = r.events;
    run["metrics"] = MetricsJson(r.metrics);
    if (!r.belief_error_by_size.empty()) {
      // What the belief predicted of each measured window, by jobs in it (record_observations
      // or learn): members, mean |predicted - measured|, mean (predicted - measured).
      Json by_size = Json::object();
      for (std::size_t n = 2; n < r.belief_error_by_size.size(); ++n) {
        const DlResult::BeliefError& e = r.belief_error_by_size[n];
        if (e.members == 0) continue;
        const double members = static_cast<double>(e.members);
        by_size[std::to_string(n)] = {{"members", e.members},
                                      {"mean_abs_error", e.abs / members},
                                      {"mean_signed_error", e.signed_sum / members}};
      }
      run["belief_error_by_size"] = std::move(by_size);
    }
    if (r.learned_sets > 0) run["learned_sets"] = r.learned_sets;
    runs.push_back(std::move(run));
  }
  j["runs"] = std::move(runs);
  Json margins = Json::array();
  for (double load : ctx.loads) {
    for (const auto& other : ctx.policies) {
      if (other == kOwnDlPolicy) continue;
      const auto m = DlMargin(results, load, other);
      if (!m) continue;
      margins.push_back(
          {{"load", load},
           {"baseline", other},
           {"avg_jct_lower_pct", *m},
           {"p95_jct_lower_pct", DlMargin(results, load, other, &DlMetrics::p95_jct_s).value_or(0)},
           {"makespan_lower_pct",
            DlMargin(results, load, other, &DlMetrics::makespan_s).value_or(0)}});
    }
  }
  j["least_delay_margin"] = std::move(margins);
  out << j.dump(2) << "\n";
}

void WriteDlJobsCsv(std::ostream& out, const std::vector<DlResult>& results) {
  out << "load,policy,job,class,submit_s,start_s,finish_s,jct_s,queue_s,gpu,final_batch,"
         "batch_changes,seed\n";
  for (const auto& r : results) {
    for (const auto& j : r.jobs) {
      out << LoadString(r.load) << ',' << r.policy << ',' << j.id << ',' << j.cls << ','
          << FormatSeconds(j.submit_us) << ',' << FormatSeconds(j.start_us) << ','
          << FormatSeconds(j.finish_us) << ',' << FormatSeconds(j.jct_us()) << ','
          << FormatSeconds(j.queue_us()) << ',' << j.gpu << ',' << j.final_batch << ','
          << j.batch_changes << ',' << r.seed << '\n';
    }
  }
}

core::Result<void> WriteDlReportDir(const std::string& dir, const std::vector<DlResult>& results,
                                    const DlReportContext& ctx) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return core::MakeError(core::ErrorCode::kIo, dir + ": " + ec.message());
  const std::filesystem::path base(dir);
  if (auto w = report_format::WriteAtomically(
          base / "results.json", [&](std::ostream& o) { WriteDlJson(o, results, ctx); });
      !w) {
    return w;
  }
  if (auto w = report_format::WriteAtomically(base / "jobs.csv",
                                              [&](std::ostream& o) { WriteDlJobsCsv(o, results); });
      !w) {
    return w;
  }
  // The page shows the first seed's runs (its timelines are per run).
  std::vector<DlResult> first;
  for (const auto& r : results) {
    if (r.seed == results.front().seed) first.push_back(r);
  }
  return report_format::WriteAtomically(base / "index.html",
                                        [&](std::ostream& o) { WriteDlHtml(o, first, ctx); });
}

}  // namespace gpumux::sim
