#include "gpumux/sim/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "gpumux/core/plural.h"
#include "gpumux/io/csv.h"
#include "src/sim/input_file.h"
#include "src/sim/report_format.h"

namespace gpumux::sim {

using io::CsvReader;
namespace {

using Json = nlohmann::ordered_json;
using report_format::Fixed;
using report_format::JoinSeeds;
using report_format::LoadString;

double MeanOf(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

// Sample standard deviation (ddof = 1, as pandas reports it); 0 for fewer than 2 values.
double StdOf(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  const double m = MeanOf(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / static_cast<double>(v.size() - 1));
}

Curve MeanCurve(const std::vector<const Curve*>& curves) {
  std::size_t len = 0;
  for (const Curve* c : curves) len = std::max(len, c->size());
  Curve out(len);
  for (std::size_t x = 0; x < len; ++x) {
    std::vector<double> v;
    for (const Curve* c : curves) {
      if (x < c->size() && (*c)[x]) v.push_back(*(*c)[x]);
    }
    if (v.size() == curves.size() && !v.empty()) out[x] = MeanOf(v);
  }
  return out;
}

Json OptNumber(const std::optional<double>& v) { return v ? Json(*v) : Json(nullptr); }

}  // namespace

// ---------------------------------------------------------------- formatting

std::string report_format::HtmlEscape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

double report_format::TickStep(double range, int max_ticks) {
  if (!(range > 0) || !std::isfinite(range)) return 1;
  double mag = std::pow(10.0, std::floor(std::log10(range / max_ticks)));
  for (;; mag *= 10) {
    for (double m : {1.0, 2.0, 5.0}) {
      if (range / (m * mag) <= max_ticks) return m * mag;
    }
  }
}

std::string report_format::Fixed(double v, int decimals) {
  if (!std::isfinite(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  std::string s = buf;
  if (s[0] == '-' && s.find_first_not_of("-0.") == std::string::npos) s.erase(0, 1);
  return s;
}

std::string report_format::LoadString(double load) {
  // The shortest that reads back, without an exponent where a plain number reads back too
  // (%.1g writes 20 as "2e+01").
  char buf[32];
  std::string shortest;
  for (int p = 1; p < 18; ++p) {
    std::snprintf(buf, sizeof buf, "%.*g", p, load);
    if (std::strtod(buf, nullptr) != load) continue;
    if (shortest.empty()) shortest = buf;
    if (std::strchr(buf, 'e') == nullptr) return buf;
  }
  return shortest.empty() ? std::string(buf) : shortest;
}

std::string report_format::JoinSeeds(const std::vector<std::uint64_t>& seeds) {
  if (seeds.empty()) return "";
  bool contiguous = true;
  for (std::size_t i = 1; i < seeds.size(); ++i) contiguous &= seeds[i] == seeds[i - 1] + 1;
  if (contiguous && seeds.size() > 2) {
    return std::to_string(seeds.front()) + "-" + std::to_string(seeds.back());
  }
  std::string s;
  for (auto x : seeds) {
    if (!s.empty()) s += ',';
    s += std::to_string(x);
  }
  return s;
}

// ---------------------------------------------------------------- expected results

const ExpectedRow* ExpectedTable::Find(const std::string& workload, const std::string& policy,
                                       double load, std::uint64_t seed) const {
  const std::string study = StudyPolicyName(policy);
  for (const auto& r : rows) {
    if (r.workload == workload && r.policy == study && r.seed == seed &&
        std::fabs(std::strtod(r.tune.c_str(), nullptr) - load) < 1e-9) {
      return &r;
    }
  }
  return nullptr;
}

core::Result<ExpectedTable> ParseExpected(std::istream& in, const std::string& source) {
  CsvReader csv(in, source);
  std::vector<std::string> required{"workload", "sc_policy", "tune", "seed"};
  for (int x = 0; x <= 130; ++x) required.push_back(std::to_string(x));
  if (auto h = csv.ReadHeader(required); !h) return tl::unexpected(h.error());
  ExpectedTable t;
  t.source = source;
  while (true) {
    auto more = csv.Next();
    if (!more) return tl::unexpected(more.error());
    if (!*more) break;
    ExpectedRow row;
    row.workload = std::string(csv.Field("workload"));
    row.policy = std::string(csv.Field("sc_policy"));
    row.tune = std::string(csv.Field("tune"));
    auto seed = csv.Int("seed");
    if (!seed) return tl::unexpected(seed.error());
    if (*seed < 0) return tl::unexpected(csv.ErrorHere("negative seed"));
    row.seed = static_cast<std::uint64_t>(*seed);
    row.curve.resize(131);
    for (int x = 0; x <= 130; ++x) {
      const std::string col = std::to_string(x);
      if (csv.Field(col).empty()) continue;
      auto v = csv.Double(col);
      if (!v) return tl::unexpected(v.error());
      if (!std::isfinite(*v)) {
        return tl::unexpected(csv.ErrorHere("column '" + col + "': " + std::string(csv.Field(col)) +
                                            " is not a finite number"));
      }
      row.curve[static_cast<std::size_t>(x)] = *v;
    }
    t.rows.push_back(std::move(row));
  }
  return t;
}

core::Result<ExpectedTable> LoadExpected(const std::string& path) {
  auto text = ReadSimInput(path);
  if (!text) return tl::unexpected(text.error());
  ViewStream in(*text);
  return ParseExpected(in, path);
}

std::string StudyPolicyName(const std::string& policy) {
  static const std::map<std::string, std::string> names{{"random", "01-Random"},
                                                        {"dotprod", "02-DotProd"},
                                                        {"gpu-clustering", "03-GpuClustering"},
                                                        {"gpu-packing", "04-GpuPacking"},
                                                        {"best-fit", "05-BestFit"},
                                                        {"fgd", "06-FGD"}};
  auto it = names.find(policy);
  return it == names.end() ? "" : it->second;
}

// ---------------------------------------------------------------- summaries

std::vector<PolicySummary> Summarise(const std::vector<ExperimentResult>& results,
                                     const ReportContext& context) {
  std::vector<PolicySummary> out;
  for (const std::string& policy : context.policies) {
    PolicySummary s;
    s.policy = policy;
    std::vector<double> a100, a130, un130, failed, frag130, wall, e100, e130;
    std::vector<const Curve*> curves, study_curves;
    for (const auto& r : results) {
      if (r.policy != policy) continue;
      ++s.runs;
      a100.push_back(r.alloc_pct_at_100.value_or(NAN));
      a130.push_back(r.alloc_pct_at_130.value_or(NAN));
      un130.push_back(r.unallocated_gpus_at_130);
      failed.push_back(static_cast<double>(r.failed_pods));
      frag130.push_back(r.frag_pct_at_130);
      wall.push_back(r.wall_ms);
      curves.push_back(&r.alloc_curve);
      if (context.expected != nullptr) {
        const ExpectedRow* e = context.expected->Find(r.workload, policy, r.load, r.seed);
        if (e != nullptr && e->curve[100] && e->curve[130]) {
          e100.push_back(*e->curve[100]);
          e130.push_back(*e->curve[130]);
          study_curves.push_back(&e->curve);
        }
      }
    }
    if (s.runs == 0) continue;
    s.alloc_100_mean = MeanOf(a100);
    s.alloc_100_std = StdOf(a100);
    s.alloc_130_mean = MeanOf(a130);
    s.alloc_130_std = StdOf(a130);
    s.unallocated_gpus_130_mean = MeanOf(un130);
    s.failed_pods_mean = MeanOf(failed);
    s.frag_pct_130_mean = MeanOf(frag130);
    std::sort(wall.begin(), wall.end());
    s.wall_ms_median = wall.size() % 2 == 1
                           ? wall[wall.size() / 2]
                           : (wall[wall.size() / 2 - 1] + wall[wall.size() / 2]) / 2;
    s.mean_curve = MeanCurve(curves);
    if (!e130.empty() && static_cast<int>(e130.size()) == s.runs) {
      s.study_100_mean = MeanOf(e100);
      s.study_130_mean = MeanOf(e130);
      s.study_100_std = StdOf(e100);
      s.study_130_std = StdOf(e130);
      s.study_mean_curve = MeanCurve(study_curves);
    }
    out.push_back(std::move(s));
  }
  return out;
}

// ---------------------------------------------------------------- table

void WriteTable(std::ostream& out, const std::vector<ExperimentResult>& results,
                const ReportContext& ctx) {
  const auto summaries = Summarise(results, ctx);
  out << "gpumux simulate: " << ctx.workload << " on " << core::Plural(ctx.nodes, "node") << " / "
      << core::Plural(ctx.gpus, "GPU") << ", load " << LoadString(ctx.load) << ", "
      << (ctx.replay_dir ? "replay " + *ctx.replay_dir : "seeds " + JoinSeeds(ctx.seeds)) << "\n";
  if (ctx.percentage_of_nodes_to_score < 100) {
    out << "each pod decided among the nodes kube-scheduler samples with "
           "percentageOfNodesToScore "
        << ctx.percentage_of_nodes_to_score
        << (ctx.percentage_of_nodes_to_score == 0 ? " (adaptive)" : "") << "\n";
  }
  out << "GPU allocation ratio (% of all GPU capacity) when arrived GPU demand reaches 100% and "
         "130% of capacity"
      << (ctx.seeds.size() > 1 && !ctx.replay_dir ? "; mean ± std over seeds" : "") << "\n\n";
  const bool study = std::any_of(summaries.begin(), summaries.end(), [](const PolicySummary& s) {
    return s.study_130_mean.has_value();
  });
  const bool spread = ctx.seeds.size() > 1 && !ctx.replay_dir;
  char line[512];
  std::snprintf(line, sizeof line, "%-15s %14s %14s", "policy", "alloc@100", "alloc@130");
  out << line;
  if (study) {
    std::snprintf(line, sizeof line, " %14s %14s %7s", "study@100", "study@130", "Δ@130");
    out << line;
  }
  std::snprintf(line, sizeof line, " %12s %10s %10s %9s\n", "idle GPUs@130", "failed", "frag%@130",
                "ms/run");
  out << line;
  auto cell = [&](double mean, double sd) -> std::string {
    if (std::isnan(mean)) return "-";  // e.g. alloc@130 when the load stops below 130%
    return spread ? Fixed(mean, 2) + " ± " + Fixed(sd, 2) : Fixed(mean, 2);
  };
  for (const auto& s : summaries) {
    std::snprintf(line, sizeof line, "%-15s %14s %14s", s.policy.c_str(),
                  cell(s.alloc_100_mean, s.alloc_100_std).c_str(),
                  cell(s.alloc_130_mean, s.alloc_130_std).c_str());
    out << line;
    if (study) {
      if (s.study_130_mean) {
        std::snprintf(line, sizeof line, " %14s %14s %+7.2f",
                      cell(*s.study_100_mean, *s.study_100_std).c_str(),
                      cell(*s.study_130_mean, *s.study_130_std).c_str(),
                      std::isnan(s.alloc_130_mean) ? 0.0 : s.alloc_130_mean - *s.study_130_mean);
      } else {
        std::snprintf(line, sizeof line, " %14s %14s %7s", "-", "-", "");
      }
      out << line;
    }
    // A count is a whole number for one run, a mean (one decimal) over seeds.
    const std::string failed = spread ? Fixed(s.failed_pods_mean, 1) : Fixed(s.failed_pods_mean, 0);
    std::snprintf(line, sizeof line, " %12.1f %10s %10.2f %9.0f\n", s.unallocated_gpus_130_mean,
                  failed.c_str(), s.frag_pct_130_mean, ctx.timing ? s.wall_ms_median : 0.0);
    out << line;
  }
  out << "\n"
      << (study ? "Δ@130: alloc@130 minus study@130, percentage points. " : "")
      << "idle GPUs@130: unallocated GPU capacity, in GPUs;\nfailed: pods placed nowhere"
      << (spread ? " (mean over seeds)" : "")
      << "; frag%@130: the share of idle GPU capacity that is fragmented\n(FGD's measure); "
         "ms/run: median wall time of one run.\n";
  if (study && !ctx.replay_dir) {
    out << "\nstudy: the FGD authors' published results for the same seed numbers. gpumux draws "
           "its "
           "own random\nstreams, not Go's math/rand, so single seeds differ by the seed-to-seed "
           "spread; compare means over\nseeds (--seeds 42-51), or replay the study's own arrival "
           "order pod by pod (--replay).\n";
  }
  if (std::find(ctx.policies.begin(), ctx.policies.end(), "exclusive") != ctx.policies.end()) {
    out << "\nexclusive: every GPU pod holds whole GPUs; allocation counts the compute the pods "
           "asked for.\n";
  }
  for (const auto& r : results) {
    if (r.replay_mismatches < 0) continue;
    out << "\nreplay " << r.policy << ": " << (r.pods - r.replay_mismatches) << "/" << r.pods
        << " placements equal the study's";
    if (r.replay_mismatches > 0) out << "; first difference: " << r.first_mismatch;
    out << "\n";
  }
}

// ---------------------------------------------------------------- json / csv

void WriteJson(std::ostream& out, const std::vector<ExperimentResult>& results,
               const ReportContext& ctx) {
  Json j;
  j["tool"] = "gpumux simulate";
  Json config;
  config["nodes"] = ctx.nodes_source;
  config["pods"] = ctx.pods_source;
  config["workload"] = ctx.workload;
  config["cluster_nodes"] = ctx.nodes;
  config["cluster_gpus"] = ctx.gpus;
  config["load"] = ctx.load;
  config["seeds"] = ctx.seeds;
  config["policies"] = ctx.policies;
  config["replay"] = ctx.replay_dir ? Json(*ctx.replay_dir) : Json(nullptr);
  if (ctx.percentage_of_nodes_to_score < 100) {
    config["percentage_of_nodes_to_score"] = ctx.percentage_of_nodes_to_score;
  }
  j["config"] = config;
  Json runs = Json::array();
  for (const auto& r : results) {
    Json o;
    o["policy"] = r.policy;
    o["seed"] = r.seed;
    o["alloc_pct_at_100"] = OptNumber(r.alloc_pct_at_100);
    o["alloc_pct_at_130"] = OptNumber(r.alloc_pct_at_130);
    o["unallocated_gpus_at_100"] = r.unallocated_gpus_at_100;
    o["unallocated_gpus_at_130"] = r.unallocated_gpus_at_130;
    o["frag_pct_at_100"] = RoundHalfEven(r.frag_pct_at_100, 4);
    o["frag_pct_at_130"] = RoundHalfEven(r.frag_pct_at_130, 4);
    o["pods"] = r.pods;
    o["placed_pods"] = r.placed;
    o["failed_pods"] = r.failed_pods;
    o["used_gpu_milli"] = r.used_gpu_milli;
    o["busy_gpus"] = r.busy_gpus;
    o["wall_ms"] = ctx.timing ? RoundHalfEven(r.wall_ms, 1) : 0.0;
    if (r.replay_mismatches >= 0) {
      o["replay_mismatches"] = r.replay_mismatches;
      o["first_mismatch"] = r.first_mismatch;
    }
    if (ctx.expected != nullptr) {
      const ExpectedRow* e = ctx.expected->Find(r.workload, r.policy, r.load, r.seed);
      o["study_alloc_pct_at_100"] = e != nullptr ? OptNumber(e->curve[100]) : Json(nullptr);
      o["study_alloc_pct_at_130"] = e != nullptr ? OptNumber(e->curve[130]) : Json(nullptr);
    }
    Json curve = Json::array();
    for (const auto& v : r.alloc_curve) curve.push_back(OptNumber(v));
    o["alloc_curve"] = curve;
    runs.push_back(o);
  }
  j["runs"] = runs;
  Json summary = Json::array();
  for (const auto& s : Summarise(results, ctx)) {
    Json o;
    o["policy"] = s.policy;
    o["runs"] = s.runs;
    o["alloc_pct_at_100_mean"] = RoundHalfEven(s.alloc_100_mean, 4);
    o["alloc_pct_at_100_std"] = RoundHalfEven(s.alloc_100_std, 4);
    o["alloc_pct_at_130_mean"] = RoundHalfEven(s.alloc_130_mean, 4);
    o["alloc_pct_at_130_std"] = RoundHalfEven(s.alloc_130_std, 4);
    o["study_alloc_pct_at_130_mean"] =
        s.study_130_mean ? Json(RoundHalfEven(*s.study_130_mean, 4)) : Json(nullptr);
    summary.push_back(o);
  }
  j["summary"] = summary;
  out << j.dump(2) << "\n";
}

void WriteCsv(std::ostream& out, const std::vector<ExperimentResult>& results,
              const ReportContext& ctx) {
  // The study's analysis_allo_discrete.csv layout, plus gpumux's own columns at the end.
  out << "workload,sc_policy,tune,seed,total_gpus";
  for (int x = 0; x <= 130; ++x) out << ',' << x;
  out << ",policy,failed_pods,unallocated_gpus_at_130,wall_ms\n";
  for (const auto& r : results) {
    const std::string study = StudyPolicyName(r.policy);
    out << r.workload << ',' << (study.empty() ? r.policy : study) << ',' << LoadString(r.load)
        << ',' << r.seed << ',' << ctx.gpus;
    for (int x = 0; x <= 130; ++x) {
      out << ',';
      const auto& v = r.alloc_curve[static_cast<std::size_t>(x)];
      if (v) out << Fixed(*v, 2);
    }
    out << ',' << r.policy << ',' << r.failed_pods << ',' << Fixed(r.unallocated_gpus_at_130, 3)
        << ',' << Fixed(ctx.timing ? r.wall_ms : 0.0, 1) << "\n";
  }
}

core::Result<void> WritePlacements(const std::string& path, const ExperimentResult& result,
                                   const Workload& workload, const ArrivalPlan& plan) {
  return report_format::WriteAtomically(path, [&](std::ostream& out) {
    out << "seq,pod,source_pod,node,gpu_index\n";
    char prefix[32];
    for (const auto& p : result.placements) {
      out << p.seq << ',' << p.pod << ',' << p.source_pod << ',';
      if (p.node >= 0) {
        std::snprintf(prefix, sizeof prefix, "%04lld-",
                      static_cast<long long>(plan.node_rank[static_cast<std::size_t>(p.node)]));
        out << prefix << workload.cluster.node(p.node).name;
      }
      out << ',';
      for (std::size_t i = 0; i < p.gpus.size(); ++i) out << (i ? "-" : "") << p.gpus[i];
      out << "\n";
    }
  });
}

}  // namespace gpumux::sim
