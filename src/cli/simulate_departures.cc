// gpumux simulate --departures: the study's pods with arrival times and departures
// (sim/departures.h), one table of allocation over time and waits per policy.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "gpumux/core/plural.h"
#include "gpumux/sim/departures.h"
#include "gpumux/sim/trace.h"
#include "src/cli/commands.h"

namespace gpumux::cli {

namespace {

nlohmann::json WaitsJson(const sim::KindWaits& k) {
  return {{"arrived", k.arrived},         {"placed", k.placed},
          {"waited", k.waited},           {"never_placed", k.never_placed},
          {"mean_wait_s", k.mean_wait_s}, {"p95_wait_s", k.p95_wait_s}};
}

// Means over the seeds of one policy.
struct PolicyMeans {
  double alloc = 0;
  std::array<sim::KindWaits, 3> waits{};
  int runs = 0;
  void Add(const sim::DepartureResult& r) {
    alloc += r.mean_alloc_pct;
    for (std::size_t k = 0; k < waits.size(); ++k) {
      sim::KindWaits& m = waits[k];
      const sim::KindWaits& w = r.waits[k];
      m.arrived += w.arrived;
      m.placed += w.placed;
      m.waited += w.waited;
      m.never_placed += w.never_placed;
      m.mean_wait_s += w.mean_wait_s;
      m.p95_wait_s += w.p95_wait_s;
    }
    ++runs;
  }
};

void WriteTable(std::ostream& out, const std::vector<sim::DepartureResult>& runs,
                const std::vector<std::string>& policies, const sim::DepartureOptions& d,
                std::size_t seeds) {
  std::map<std::string, PolicyMeans> means;
  for (const sim::DepartureResult& r : runs) means[r.policy].Add(r);
  const double span_h = runs.empty() ? 0 : runs.front().span_s / 3600;
  char head[512];
  std::snprintf(head, sizeof head,
                "Pods with departures: offered GPU load %g, %g cluster capacities of arrivals over "
                "about %.0f h, durations from the trace capped at %.0f s, %s\n"
                "  alloc: time-weighted GPU allocation after the warm-up (the first %.0f s); per "
                "kind of GPU pod, per run: placed at once / after waiting / never (still waiting "
                "at the last arrival), mean and p95 wait of the placed\n\n",
                d.load, d.rounds, span_h, d.max_duration_s,
                seeds > 1 ? ("mean over " + core::Plural(seeds, "seed")).c_str() : "one seed",
                d.max_duration_s);
  out << head;
  char line[256];
  std::snprintf(line, sizeof line, "  %-16s %7s  %-34s %-34s %-34s\n", "policy", "alloc",
                "shares: at once/waited/never wait", "whole GPUs", "several GPUs");
  out << line;
  for (const std::string& p : policies) {
    const PolicyMeans& m = means[p];
    if (m.runs == 0) continue;
    const double n = m.runs;
    std::string cells[3];
    for (std::size_t k = 0; k < 3; ++k) {
      const sim::KindWaits& w = m.waits[k];
      char cell[64];
      std::snprintf(cell, sizeof cell, "%.0f/%.0f/%.0f %.0fs p95 %.0fs",
                    static_cast<double>(w.placed - w.waited) / n, static_cast<double>(w.waited) / n,
                    static_cast<double>(w.never_placed) / n, w.mean_wait_s / n, w.p95_wait_s / n);
      cells[k] = cell;
    }
    std::snprintf(line, sizeof line, "  %-16s %6.2f%%  %-34s %-34s %-34s\n", p.c_str(), m.alloc / n,
                  cells[0].c_str(), cells[1].c_str(), cells[2].c_str());
    out << line;
  }
}

}  // namespace

int RunSimulateDepartures(const SimulateOptions& o, const std::vector<std::uint64_t>& seeds,
                          const std::vector<std::string>& policies, std::ostream& out,
                          std::ostream& err) {
  auto fail = [&](const std::string& message) {
    err << "gpumux simulate: " << message << "\n";
    return 2;
  };
  for (const char* study_only :
       {"replay", "expect", "placements", "out", "percentage-of-nodes-to-score"}) {
    if (o.given.count(study_only) != 0) {
      return fail("--" + std::string(study_only) +
                  " belongs to the study's protocol and does not apply with --departures");
    }
  }
  if (o.format == "csv") return fail("--format csv does not apply with --departures (table, json)");
  // Offered load: --load when given, else 1.0 (the study's default, 1.3, would grow the queue
  // without end).
  sim::DepartureOptions departure;
  departure.load = o.given.count("load") != 0 ? o.load : 1.0;
  departure.rounds = o.departure_rounds;
  departure.max_duration_s = o.max_duration_s;
  const double load = departure.load;
  auto nodes = sim::NodeListOrEmbedded(o.nodes);
  if (!nodes) return fail(nodes.error().message);
  auto timed = sim::TimedPodListOrEmbedded(o.pods);
  if (!timed) return fail(timed.error().message);
  std::vector<core::Request> pods;
  pods.reserve(timed->size());
  for (const sim::TracePod& p : *timed) pods.push_back(p.request);
  const std::string name = sim::PodListName(o.pods);
  auto workload = sim::MakeWorkload(name, std::move(*nodes), std::move(pods));
  if (!workload) return fail(workload.error().message);

  sim::ExperimentOptions options;
  options.knobs = o.knobs;
  std::vector<sim::DepartureResult> runs;
  for (std::uint64_t seed : seeds) {
    auto durations = sim::PodDurations(*timed, seed, departure.max_duration_s);
    if (!durations) return fail(durations.error().message);
    for (const std::string& p : policies) {
      auto r = sim::RunWithDepartures(*workload, *durations, p, seed, departure, options);
      if (!r) return fail(r.error().message);
      if (!o.quiet) {
        char ms[32];
        std::snprintf(ms, sizeof ms, "%.0f", r->wall_ms);
        err << "gpumux simulate: " << p << " seed " << seed << " with departures: " << ms << " ms\n"
            << std::flush;
      }
      runs.push_back(std::move(*r));
    }
  }
  if (o.format == "json") {
    nlohmann::json j;
    j["protocol"] = "departures";
    j["workload"] = name;
    j["load"] = load;
    j["rounds"] = departure.rounds;
    j["max_duration_s"] = departure.max_duration_s;
    j["runs"] = nlohmann::json::array();
    for (const sim::DepartureResult& r : runs) {
      nlohmann::json waits = nlohmann::json::object();
      for (sim::PodKind k : sim::kPodKinds) {
        waits[std::string(sim::PodKindName(k))] = WaitsJson(r.waits[static_cast<std::size_t>(k)]);
      }
      j["runs"].push_back({{"policy", r.policy},
                           {"seed", r.seed},
                           {"pods", r.pods},
                           {"span_s", r.span_s},
                           {"warmup_s", r.warmup_s},
                           {"mean_alloc_pct", r.mean_alloc_pct},
                           {"alloc_over_time", r.alloc_over_time},
                           {"waits", waits},
                           {"wall_ms", o.no_timing ? 0.0 : r.wall_ms}});
    }
    out << j.dump(2) << "\n";
    return 0;
  }
  WriteTable(out, runs, policies, departure, seeds.size());
  return 0;
}

}  // namespace gpumux::cli
