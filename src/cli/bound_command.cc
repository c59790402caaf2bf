// gpumux bound: how much GPU any policy could allocate on the FGD study's protocol (an LP upper
// bound) and a packing that knows every arrival in advance (sim/packing_bound.h).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "gpumux/core/plural.h"
#include "gpumux/policy/registry.h"
#include "gpumux/sim/packing_bound.h"
#include "gpumux/sim/trace.h"
#include "src/cli/commands.h"
#include "src/cli/options.h"

namespace gpumux::cli {

namespace {

std::optional<std::vector<double>> ParseDemands(const std::string& text, std::string& error) {
  std::vector<double> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    if (item.empty() || end == nullptr || *end != '\0' || !std::isfinite(v) || v <= 0 ||
        v > sim::kMaxLoad * 100 || v != std::floor(v)) {
      error = "--demand \"" + text + "\": expected whole percents of the cluster's GPU " +
              "capacity, comma-separated, each in 1.." +
              std::to_string(static_cast<int>(sim::kMaxLoad * 100)) + " (e.g. 100,130)";
      return std::nullopt;
    }
    out.push_back(v);
  }
  if (out.empty()) {
    error = "--demand: no demand point given (e.g. 100,130)";
    return std::nullopt;
  }
  return out;
}

std::string Pct(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f%%", v);
  return buf;
}

}  // namespace

CLI::App* AddBoundCommand(CLI::App& app, BoundCliOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "bound",
      "How much GPU any policy could allocate on the FGD study's protocol: for each seed and "
      "demand point, an upper bound (a linear program over the pods that arrived, solved by "
      "GLPK; no policy, online or offline, allocates more) and a packing of the same pods made "
      "with hindsight (the best real packing found: policies in arrival order or largest first, "
      "or where the LP's solution puts each pod), so the best possible lies between the two. "
      "Compare with 'gpumux simulate --seeds ...' at the same "
      "demand (the curve's column).");
  cmd->add_option("--seeds", o.seeds, "Seeds: 42, 42-51 or 42,45,47")->capture_default_str();
  cmd->add_option("--demand", o.demand,
                  "Arrived GPU demand, whole % of the cluster's GPU capacity, comma-separated")
      ->capture_default_str();
  cmd->add_option("--hindsight-policy", o.hindsight_policies,
                  "Policies that place the pods for the best packing, in arrival order and largest "
                  "first (comma-separated; the best counts)")
      ->capture_default_str();
  cmd->add_option("--at-least", o.at_least,
                  "Also bound a policy held at or above this policy's allocation curve at every "
                  "5 % of demand from 50 % (issue 32's 'at least FGD at every step'): a second LP "
                  "with a floor per curve column, the policy run on the same arrivals");
  cmd->add_option("--nodes", o.nodes,
                  "Node list CSV [default: embedded openb_node_list_gpu_node, 1213 nodes]");
  cmd->add_option("--pods", o.pods,
                  "Pod list CSV [default: embedded openb_pod_list_default, 8152 pods]");
  cmd->add_option("--format", o.format, "Output on stdout")
      ->capture_default_str()
      ->check(CLI::IsMember({"table", "json"}));
  cmd->add_option("--threads", o.threads, "Seeds run in parallel [default: all cores]")
      ->check(IntegerIn(0, 1024));
  cmd->add_flag("-q,--quiet", o.quiet, "No progress on stderr");
  cmd->footer(
      "\nExamples:\n"
      "  gpumux bound                                   # seed 42, 100% and 130% demand\n"
      "  gpumux bound --seeds 42-51 --demand 90,95,100,130\n"
      "  gpumux bound --seeds 42-51 --demand 130 --at-least fgd\n"
      "  gpumux bound --pods openb_pod_list_gpushare40.csv --format json\n");
  return cmd;
}

int RunBound(const BoundCliOptions& o, std::ostream& out, std::ostream& err) {
  const auto fail = [&err](const std::string& message) {
    err << "gpumux bound: " << message << "\n";
    return 2;
  };
  std::string error;
  const auto seeds = ParseSeeds(o.seeds, error);
  if (!seeds) return fail(error);
  const auto demands = ParseDemands(o.demand, error);
  if (!demands) return fail(error);
  const policy::Registry& registry = policy::BuiltinPolicies();
  const std::vector<std::string> policies =
      ExpandPolicies({o.hindsight_policies}, registry.compared(policy::Workload::kPods),
                     registry.names(policy::Workload::kPods));
  for (const std::string& name : policies) {
    const policy::PolicyEntry* e = registry.Find(name);
    if (e == nullptr || !e->For(policy::Workload::kPods)) {
      return fail("--hindsight-policy: '" + name + "' is not a policy for pods (" +
                  "see 'gpumux policies')");
    }
  }
  if (policies.empty()) return fail("--hindsight-policy: no policy given");
  if (!o.at_least.empty()) {
    const policy::PolicyEntry* e = registry.Find(o.at_least);
    if (e == nullptr || !e->For(policy::Workload::kPods)) {
      return fail("--at-least: '" + o.at_least + "' is not a policy for pods (see 'gpumux " +
                  "policies')");
    }
  }

  auto nodes = sim::NodeListOrEmbedded(o.nodes);
  if (!nodes) return fail(nodes.error().message);
  auto pods = sim::PodListOrEmbedded(o.pods);
  if (!pods) return fail(pods.error().message);
  const std::string name = sim::PodListName(o.pods);
  auto workload = sim::MakeWorkload(name, std::move(*nodes), std::move(*pods));
  if (!workload) return fail(workload.error().message);
  // The plans must fit the arrival limit of `gpumux simulate` (the same protocol).
  const double load = *std::max_element(demands->begin(), demands->end()) / 100.0;
  for (std::uint64_t seed : *seeds) {
    auto count =
        sim::CountStudyArrivals(workload->pods, workload->cluster, seed, load, sim::ArrivalLimit{});
    if (!count) return fail(count.error().message);
  }

  const auto start = std::chrono::steady_clock::now();
  if (!o.quiet) {
    err << "gpumux bound: " << core::Plural(seeds->size(), "seed") << " x "
        << core::Plural(demands->size(), "demand point") << " on " << name << "\n"
        << std::flush;
  }
  sim::BoundOptions options;
  options.hindsight_policies = policies;
  options.threads = o.threads;
  options.at_least = o.at_least;
  auto rows = sim::ComputeBounds(*workload, *seeds, *demands, options, [&](std::size_t done) {
    if (o.quiet) return;
    err << "gpumux bound: " << done << "/" << seeds->size() << " seeds\n" << std::flush;
  });
  if (!rows) {
    err << "gpumux bound: " << rows.error().message << "\n";
    return 1;
  }
  const double wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  // Means over seeds, per demand point.
  struct Mean {
    double lp = 0, hindsight = 0, at_least = 0, lp_above = 0;
    std::size_t n = 0;
  };
  const bool above = !o.at_least.empty();
  std::map<double, Mean> means;
  for (const sim::BoundRow& r : *rows) {
    Mean& m = means[r.demand_pct];
    m.lp += r.lp.alloc_pct;
    m.hindsight += r.hindsight.alloc_pct;
    m.at_least += r.at_least_pct.value_or(0);
    if (r.lp_above) m.lp_above += r.lp_above->alloc_pct;
    ++m.n;
  }
  const auto mean = [](double sum, const Mean& m) { return sum / static_cast<double>(m.n); };

  if (o.format == "json") {
    nlohmann::json j;
    j["workload"] = name;
    j["hindsight_policies"] = policies;
    if (above) j["at_least"] = o.at_least;
    j["rows"] = nlohmann::json::array();
    for (const sim::BoundRow& r : *rows) {
      nlohmann::json row = {{"seed", r.seed},
                            {"demand_pct", r.demand_pct},
                            {"arrivals", r.arrivals},
                            {"lp_bound_pct", r.lp.alloc_pct},
                            {"hindsight_pct", r.hindsight.alloc_pct},
                            {"hindsight_policy", r.hindsight.policy},
                            {"pod_shapes", r.lp.pod_shapes},
                            {"node_shapes", r.lp.node_shapes},
                            {"lp_variables", r.lp.variables},
                            {"lp_gpu_configurations", r.lp.configurations}};
      if (above) {
        row["at_least_pct"] = r.at_least_pct ? nlohmann::json(*r.at_least_pct) : nlohmann::json();
        row["lp_bound_at_least_pct"] = r.lp_above->alloc_pct;
        row["lp_at_least_pod_classes"] = r.lp_above->pod_shapes;
      }
      j["rows"].push_back(std::move(row));
    }
    j["mean"] = nlohmann::json::array();
    for (const auto& [demand, m] : means) {
      nlohmann::json row = {{"demand_pct", demand},
                            {"seeds", m.n},
                            {"lp_bound_pct", mean(m.lp, m)},
                            {"hindsight_pct", mean(m.hindsight, m)}};
      if (above) {
        row["at_least_pct"] = mean(m.at_least, m);
        row["lp_bound_at_least_pct"] = mean(m.lp_above, m);
      }
      j["mean"].push_back(std::move(row));
    }
    out << j.dump(2) << "\n";
    return 0;
  }
  out << "GPU allocation any policy could reach on " << name << " (" << workload->cluster.size()
      << " nodes, " << workload->cluster.total_gpus() << " GPUs), % of GPU capacity\n"
      << "  best packing: the most any real packing found placed: " << o.hindsight_policies
      << " in arrival order or largest first, or fgd where the LP puts each pod (hindsight)\n"
      << "  LP bound:  no policy allocates more (pooled nodes of one shape; GLPK)\n";
  if (above) {
    out << "  " << o.at_least << ": what " << o.at_least << " allocates on the same arrivals\n"
        << "  LP, >= " << o.at_least << ": no policy allocates more while its curve is at least "
        << o.at_least << "'s at 50, 55, ... % demand\n";
  }
  out << "\n";
  const std::string floor_head = "LP, >= " + o.at_least;
  char line[200];
  const auto print = [&](const std::string& seed, double demand, const std::string& arrivals,
                         double best, double lp, const sim::BoundRow* r, const Mean* m,
                         const std::string& how) {
    std::snprintf(line, sizeof line, "  %-6s %6.0f%% %9s %13s %10s", seed.c_str(), demand,
                  arrivals.c_str(), Pct(best).c_str(), Pct(lp).c_str());
    out << line;
    if (above) {
      const double at_least = r != nullptr ? r->at_least_pct.value_or(0) : mean(m->at_least, *m);
      const double lp_above = r != nullptr ? r->lp_above->alloc_pct : mean(m->lp_above, *m);
      std::snprintf(line, sizeof line, " %12s %16s", Pct(at_least).c_str(), Pct(lp_above).c_str());
      out << line;
    }
    out << (how.empty() ? "" : "  ") << how << "\n";
  };
  std::snprintf(line, sizeof line, "  %-6s %7s %9s %13s %10s", "seed", "demand", "arrivals",
                "best packing", "LP bound");
  out << line;
  if (above) {
    std::snprintf(line, sizeof line, " %12s %16s", o.at_least.c_str(), floor_head.c_str());
    out << line;
  }
  out << "  found by\n";
  for (const sim::BoundRow& r : *rows) {
    print(std::to_string(r.seed), r.demand_pct, std::to_string(r.arrivals), r.hindsight.alloc_pct,
          r.lp.alloc_pct, &r, nullptr, r.hindsight.policy);
  }
  if (seeds->size() > 1) {
    for (const auto& [demand, m] : means) {
      print("mean", demand, "", mean(m.hindsight, m), mean(m.lp, m), nullptr, &m, "");
    }
  }
  if (!o.quiet) {
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%.1f", wall_s);
    err << "gpumux bound: done in " << seconds << " s\n";
  }
  return 0;
}

}  // namespace gpumux::cli
