#include "gpumux/sim/dl_report.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>

#include <nlohmann/json.hpp>

#include "gpumux/policy/registry.h"
#include "gpumux/policy/tuner.h"
#include "gpumux/core/plural.h"
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
        auto r = RunDl(profile, input.jobs, options);
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
                               const std::string& baseline) {
  const DlResult* ours = nullptr;
  const DlResult* base = nullptr;
  for (const auto& r : results) {
    if (r.load != load) continue;
    if (r.policy == "gpumux") ours = &r;
    if (r.policy == baseline) base = &r;
  }
  if (ours == nullptr || base == nullptr || base->metrics.avg_jct_s <= 0) return std::nullopt;
  return (base->metrics.avg_jct_s - ours->metrics.avg_jct_s) / base->metrics.avg_jct_s * 100.0;
}

void WriteDlTable(std::ostream& out, const std::vector<DlResult>& results,
                  const DlReportContext& ctx) {
  out << "JCT simulation: " << ctx.workload << ", mix " << ctx.mix << ", " << core::Plural(ctx.gpus, "GPU")
      << ", at most " << core::Plural(ctx.options.max_jobs_per_gpu, "job") << " per GPU, seed " << ctx.seed
      << "\nprofile: " << ctx.profile << "\n";
  char line[256];
  for (double load : ctx.loads) {
    out << "\nload " << LoadString(load) << "x\n";
    std::snprintf(line, sizeof line, "  %-10s %-7s %9s %9s %9s %10s %9s %6s %6s\n", "policy",
                  "tuner", "avg JCT", "median", "p95", "makespan", "queue", "busy", "util");
    out << line;
    for (const auto& r : results) {
      if (r.load != load) continue;
      const DlMetrics& m = r.metrics;
      std::snprintf(line, sizeof line,
                    "  %-10s %-7s %8.0fs %8.0fs %8.0fs %9.0fs %8.0fs %5.1f%% %5.1f%%\n",
                    r.policy.c_str(), r.tuner.c_str(), m.avg_jct_s, m.median_jct_s, m.p95_jct_s,
                    m.makespan_s, m.avg_queue_s, m.gpu_busy * 100, m.gpu_util * 100);
      out << line;
    }
    if (auto margin = DlMargin(results, load, ctx.baseline)) {
      out << "  gpumux vs " << ctx.baseline << ": average JCT " << Fixed(*margin, 1) << "% "
          << (*margin >= 0 ? "lower" : "higher") << "\n";
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
  j["seed"] = o.seed;
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
  j["mix"] = ctx.mix;
  j["profile"] = ctx.profile;
  j["gpus"] = ctx.gpus;
  j["seed"] = ctx.seed;
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
    run["jobs"] = r.jobs.size();
    run["events"] = r.events;
    run["metrics"] = MetricsJson(r.metrics);
    runs.push_back(std::move(run));
  }
  j["runs"] = std::move(runs);
  Json margins = Json::array();
  for (double load : ctx.loads) {
    if (auto m = DlMargin(results, load, ctx.baseline)) {
      margins.push_back({{"load", load}, {"baseline", ctx.baseline}, {"avg_jct_lower_pct", *m}});
    }
  }
  j["gpumux_margin"] = std::move(margins);
  out << j.dump(2) << "\n";
}

void WriteDlJobsCsv(std::ostream& out, const std::vector<DlResult>& results) {
  out << "load,policy,job,class,submit_s,start_s,finish_s,jct_s,queue_s,gpu,final_batch,"
         "batch_changes\n";
  for (const auto& r : results) {
    for (const auto& j : r.jobs) {
      out << LoadString(r.load) << ',' << r.policy << ',' << j.id << ',' << j.cls << ','
          << FormatSeconds(j.submit_us) << ',' << FormatSeconds(j.start_us) << ','
          << FormatSeconds(j.finish_us) << ',' << FormatSeconds(j.jct_us()) << ','
          << FormatSeconds(j.queue_us()) << ',' << j.gpu << ',' << j.final_batch << ','
          << j.batch_changes << '\n';
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
  if (auto w = report_format::WriteAtomically(
          base / "jobs.csv", [&](std::ostream& o) { WriteDlJobsCsv(o, results); });
      !w) {
    return w;
  }
  return report_format::WriteAtomically(base / "index.html",
                                        [&](std::ostream& o) { WriteDlHtml(o, results, ctx); });
}

}  // namespace gpumux::sim
