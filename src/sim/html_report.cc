// The report directory of `gpumux simulate`: results.json, curves.csv and index.html, one
// self-contained static page (inline CSS and SVG, no JavaScript, nothing fetched) with the
// allocation-ratio charts of the FGD paper's Fig. 9a and the tables of the terminal report.
// Every file is written to "<name>.tmp" and renamed over its final name, so that a crash never
// leaves a half-written report. The page depends only on its inputs (no timestamps).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "gpumux/core/plural.h"
#include "gpumux/io/atomic_file.h"
#include "gpumux/sim/report.h"
#include "src/sim/report_format.h"
#include "src/sim/report_palette.h"
#include "src/sim/report_style.h"

namespace gpumux::sim {
namespace {

namespace fs = std::filesystem;
using report_format::Fixed;
using report_format::HtmlEscape;
using report_format::JoinSeeds;
using report_format::LoadString;
using report_format::Scale;
using report_format::SvgCoord;
using report_format::TickStep;
using report_format::WriteAtomically;
using report_palette::LineKey;
using report_palette::LineLook;
using report_palette::LookMap;
using report_palette::LookOf;
using report_palette::StrokeAttributes;

// ---------------------------------------------------------------- formatting

std::string Signed(double v, int decimals) {
  std::string s = Fixed(v, decimals);
  return s[0] == '-' ? s : "+" + s;
}

// ---------------------------------------------------------------- charts

constexpr double kWidth = 860;
constexpr double kPlotLeft = 66;
constexpr double kPlotTop = 30;
constexpr double kPlotRight = 650;
constexpr double kPlotBottom = 470;

// The columns x_lo..x_hi of a curve as an SVG path; empty columns break the line.
std::string CurvePath(const Curve& curve, int x_lo, int x_hi, const Scale& sx, const Scale& sy) {
  std::string d;
  bool pen_down = false;
  for (int x = std::max(x_lo, 0); x <= x_hi && x < static_cast<int>(curve.size()); ++x) {
    const auto& v = curve[static_cast<std::size_t>(x)];
    if (!v) {
      pen_down = false;
      continue;
    }
    d += pen_down ? " L" : (d.empty() ? "M" : " M");
    d += SvgCoord(sx(x)) + " " + SvgCoord(sy(*v));
    pen_down = true;
  }
  return d;
}

std::optional<std::pair<int, double>> LastPoint(const Curve& curve, int x_lo, int x_hi) {
  for (int x = std::min(x_hi, static_cast<int>(curve.size()) - 1); x >= x_lo && x >= 0; --x) {
    if (const auto& v = curve[static_cast<std::size_t>(x)]) return std::make_pair(x, *v);
  }
  return std::nullopt;
}

struct ChartFrame {
  std::string id;
  double height = 0;
  Scale sx, sy;
  int x_lo = 0, x_hi = 0;
};

void OpenChart(std::ostream& o, const ChartFrame& f, const std::string& label) {
  o << "<svg class=\"chart\" viewBox=\"0 0 " << SvgCoord(kWidth) << " " << SvgCoord(f.height)
    << "\" width=\"" << SvgCoord(kWidth) << "\" height=\"" << SvgCoord(f.height)
    << "\" role=\"img\" aria-label=\"" << HtmlEscape(label)
    << "\" xmlns=\"http://www.w3.org/2000/svg\">\n"
    << "<title>" << HtmlEscape(label) << "</title>\n"
    << "<defs><clipPath id=\"" << f.id << "-plot\"><rect x=\"" << SvgCoord(kPlotLeft) << "\" y=\""
    << SvgCoord(kPlotTop) << "\" width=\"" << SvgCoord(kPlotRight - kPlotLeft) << "\" height=\""
    << SvgCoord(kPlotBottom - kPlotTop) << "\"/></clipPath></defs>\n";
}

// One line per policy, in the policy's look: its mean curve over seeds.
void DrawPolicyCurves(std::ostream& o, const ChartFrame& f,
                      const std::vector<PolicySummary>& summaries, const LookMap& looks) {
  for (const auto& s : summaries) {
    const std::string d = CurvePath(s.mean_curve, f.x_lo, f.x_hi, f.sx, f.sy);
    if (d.empty()) continue;
    o << "<path d=\"" << d << "\"" << StrokeAttributes(LookOf(looks, s.policy)) << "><title>"
      << HtmlEscape(s.policy) << "</title></path>\n";
  }
}

// Gridlines, axes, ticks, axis labels, and the x = 100 (demand = capacity) marker.
void DrawAxes(std::ostream& o, const ChartFrame& f) {
  const double x_step = TickStep(f.sx.hi - f.sx.lo, 14);
  const double y_step = TickStep(f.sy.hi - f.sy.lo, 12);
  o << "<g class=\"grid\">\n";
  for (double x = std::ceil(f.sx.lo / x_step) * x_step; x <= f.sx.hi + 1e-9; x += x_step) {
    o << "<line x1=\"" << SvgCoord(f.sx(x)) << "\" y1=\"" << SvgCoord(kPlotTop) << "\" x2=\""
      << SvgCoord(f.sx(x)) << "\" y2=\"" << SvgCoord(kPlotBottom) << "\"/>\n";
  }
  for (double y = std::ceil(f.sy.lo / y_step) * y_step; y <= f.sy.hi + 1e-9; y += y_step) {
    o << "<line x1=\"" << SvgCoord(kPlotLeft) << "\" y1=\"" << SvgCoord(f.sy(y)) << "\" x2=\""
      << SvgCoord(kPlotRight) << "\" y2=\"" << SvgCoord(f.sy(y)) << "\"/>\n";
  }
  o << "</g>\n<g class=\"ticks\">\n";
  for (double x = std::ceil(f.sx.lo / x_step) * x_step; x <= f.sx.hi + 1e-9; x += x_step) {
    o << "<line x1=\"" << SvgCoord(f.sx(x)) << "\" y1=\"" << SvgCoord(kPlotBottom) << "\" x2=\""
      << SvgCoord(f.sx(x)) << "\" y2=\"" << SvgCoord(kPlotBottom + 5) << "\"/><text x=\""
      << SvgCoord(f.sx(x)) << "\" y=\"" << SvgCoord(kPlotBottom + 21)
      << "\" text-anchor=\"middle\">" << Fixed(x, 0) << "</text>\n";
  }
  for (double y = std::ceil(f.sy.lo / y_step) * y_step; y <= f.sy.hi + 1e-9; y += y_step) {
    o << "<line x1=\"" << SvgCoord(kPlotLeft - 5) << "\" y1=\"" << SvgCoord(f.sy(y)) << "\" x2=\""
      << SvgCoord(kPlotLeft) << "\" y2=\"" << SvgCoord(f.sy(y)) << "\"/><text x=\""
      << SvgCoord(kPlotLeft - 9) << "\" y=\"" << SvgCoord(f.sy(y) + 4.5)
      << "\" text-anchor=\"end\">" << Fixed(y, 0) << "</text>\n";
  }
  o << "</g>\n";
  o << "<rect class=\"frame\" x=\"" << SvgCoord(kPlotLeft) << "\" y=\"" << SvgCoord(kPlotTop)
    << "\" width=\"" << SvgCoord(kPlotRight - kPlotLeft) << "\" height=\""
    << SvgCoord(kPlotBottom - kPlotTop) << "\"/>\n";
  o << "<text class=\"axis-label\" x=\"" << SvgCoord((kPlotLeft + kPlotRight) / 2) << "\" y=\""
    << SvgCoord(kPlotBottom + 46)
    << "\" text-anchor=\"middle\">Arrived GPU demand (% of the cluster's GPU capacity)</text>\n";
  o << "<text class=\"axis-label\" transform=\"translate(18 "
    << SvgCoord((kPlotTop + kPlotBottom) / 2)
    << ") rotate(-90)\" text-anchor=\"middle\">GPU allocation ratio (%)</text>\n";
  if (f.sx.lo < 100 && f.sx.hi > 100) {
    o << "<line class=\"capacity\" x1=\"" << SvgCoord(f.sx(100)) << "\" y1=\""
      << SvgCoord(kPlotTop - 4) << "\" x2=\"" << SvgCoord(f.sx(100)) << "\" y2=\""
      << SvgCoord(kPlotBottom) << "\"/>\n"
      << "<text class=\"note\" x=\"" << SvgCoord(f.sx(100)) << "\" y=\"" << SvgCoord(kPlotTop - 9)
      << "\" text-anchor=\"middle\">demand = capacity</text>\n";
  }
}

// y = x from x_lo to x_hi, clipped to the plot.
void DrawDiagonal(std::ostream& o, const ChartFrame& f) {
  const double from = std::max(f.sx.lo, f.sy.lo);
  const double to = std::min(f.sx.hi, f.sy.hi);
  if (from >= to) return;
  o << "<line class=\"diagonal\" x1=\"" << SvgCoord(f.sx(from)) << "\" y1=\""
    << SvgCoord(f.sy(from)) << "\" x2=\"" << SvgCoord(f.sx(to)) << "\" y2=\"" << SvgCoord(f.sy(to))
    << "\"><title>all demand placed (y = x)</title></line>\n";
}

// A legend's sample of a line, kSampleLength long from (x, y); `attributes` give its look.
constexpr double kSampleLength = 34;
void LegendSample(std::ostream& o, double x, double y, const std::string& attributes) {
  o << "<line x1=\"" << SvgCoord(x) << "\" y1=\"" << SvgCoord(y) << "\" x2=\""
    << SvgCoord(x + kSampleLength) << "\" y2=\"" << SvgCoord(y) << "\"" << attributes << "/>\n";
}

// The last column with data in any curve, rounded up to a multiple of 10 (130 at the default
// load of 1.3; less when the load stops earlier).
int MaxColumn(const std::vector<PolicySummary>& summaries) {
  std::size_t len = 0;
  int last = -1;
  for (const auto& s : summaries) {
    len = std::max(len, s.mean_curve.size());
    for (std::size_t x = s.mean_curve.size(); x-- > 0;) {
      if (s.mean_curve[x]) {
        last = std::max(last, static_cast<int>(x));
        break;
      }
    }
  }
  if (len < 2 || last < 1) return 130;
  return std::min(static_cast<int>(len) - 1, (last + 9) / 10 * 10);
}

std::string SeedsPhrase(const std::vector<PolicySummary>& summaries, const ReportContext& ctx) {
  if (ctx.replay_dir) return "replay of the study's arrivals";
  int runs = 0;
  for (const auto& s : summaries) runs = std::max(runs, s.runs);
  return runs > 1 ? "mean over " + std::to_string(runs) + " seeds" : "seed " + JoinSeeds(ctx.seeds);
}

// Chart 1: the full range, 0..max column by 0..100, with a legend right of the plot.
void FullChart(std::ostream& o, const std::vector<PolicySummary>& summaries, const LookMap& looks,
               const ReportContext& ctx) {
  ChartFrame f;
  f.id = "full";
  f.height = 520;
  f.x_lo = 0;
  f.x_hi = MaxColumn(summaries);
  f.sx = {0, static_cast<double>(f.x_hi), kPlotLeft, kPlotRight};
  f.sy = {0, 100, kPlotBottom, kPlotTop};
  OpenChart(
      o, f,
      "GPU allocation ratio against arrived GPU demand, 0 to " + std::to_string(f.x_hi) + "%");
  DrawAxes(o, f);
  DrawDiagonal(o, f);
  o << "<g clip-path=\"url(#full-plot)\" class=\"curves\">\n";
  DrawPolicyCurves(o, f, summaries, looks);
  o << "</g>\n<g class=\"legend\">\n";
  const double lx = kPlotRight + 18;
  const double tx = lx + kSampleLength + 8;
  double ly = kPlotTop + 12;
  for (const auto& s : summaries) {
    LegendSample(o, lx, ly, " stroke-width=\"2.5\"" + StrokeAttributes(LookOf(looks, s.policy)));
    o << "<text x=\"" << SvgCoord(tx) << "\" y=\"" << SvgCoord(ly + 4.5) << "\">"
      << HtmlEscape(s.policy) << "</text>\n";
    ly += 22;
  }
  ly += 10;
  LegendSample(o, lx, ly, " class=\"diagonal\"");
  o << "<text x=\"" << SvgCoord(tx) << "\" y=\"" << SvgCoord(ly + 4.5)
    << "\">all demand placed</text>\n"
    << "<text class=\"note\" x=\"" << SvgCoord(tx) << "\" y=\"" << SvgCoord(ly + 21)
    << "\">(y = x)</text>\n";
  ly += 44;
  o << "<text class=\"note\" x=\"" << SvgCoord(lx) << "\" y=\"" << SvgCoord(ly) << "\">"
    << HtmlEscape(SeedsPhrase(summaries, ctx)) << "</text>\n";
  o << "</g>\n</svg>\n";
}

// The zoom chart's end labels, pushed apart so that they never overlap, joined to their
// curves by a leader; opens the legend group.
void ZoomEndLabels(std::ostream& o, const ChartFrame& f,
                   const std::vector<PolicySummary>& summaries, const LookMap& looks) {
  struct Label {
    std::size_t index;
    double value, curve_x, curve_y, y;
  };
  std::vector<Label> labels;
  for (std::size_t i = 0; i < summaries.size(); ++i) {
    auto last = LastPoint(summaries[i].mean_curve, f.x_lo, f.x_hi);
    if (!last) continue;
    const double y = f.sy(last->second);
    labels.push_back({i, last->second, f.sx(last->first), y, y});
  }
  std::stable_sort(labels.begin(), labels.end(),
                   [](const Label& a, const Label& b) { return a.curve_y < b.curve_y; });
  constexpr double kGap = 18;
  for (std::size_t k = 1; k < labels.size(); ++k) {
    labels[k].y = std::max(labels[k].y, labels[k - 1].y + kGap);
  }
  const double bottom = kPlotBottom + 20;
  if (!labels.empty() && labels.back().y > bottom) {
    labels.back().y = bottom;
    for (std::size_t k = labels.size() - 1; k-- > 0;) {
      labels[k].y = std::min(labels[k].y, labels[k + 1].y - kGap);
    }
  }
  o << "<g class=\"legend\">\n";
  const double lx = kPlotRight + 6;
  for (const auto& l : labels) {
    const std::size_t i = l.index;
    // A thin grey leader from just right of the curve's end, then a sample of the line.
    if (std::fabs(l.y - l.curve_y) > 0.5 || l.curve_x < kPlotRight - 0.5) {
      o << "<line class=\"leader\" x1=\"" << SvgCoord(l.curve_x + 3) << "\" y1=\""
        << SvgCoord(l.curve_y) << "\" x2=\"" << SvgCoord(lx + 10) << "\" y2=\"" << SvgCoord(l.y)
        << "\"/>\n";
    }
    LegendSample(o, lx + 10, l.y,
                 " stroke-width=\"2.5\"" + StrokeAttributes(LookOf(looks, summaries[i].policy)));
    o << "<text x=\"" << SvgCoord(lx + 10 + kSampleLength + 6) << "\" y=\"" << SvgCoord(l.y + 4.5)
      << "\">" << HtmlEscape(summaries[i].policy) << " <tspan class=\"value\">" << Fixed(l.value, 2)
      << "</tspan></text>\n";
  }
}

// Chart 2: the tail, 80..max column, y from just under the lowest plotted value to 100. Each
// curve is labelled at its right end with its last value; the study's published mean is dashed.
void ZoomChart(std::ostream& o, const std::vector<PolicySummary>& summaries, const LookMap& looks,
               const ReportContext& ctx) {
  ChartFrame f;
  f.id = "zoom";
  f.height = 560;
  f.x_hi = MaxColumn(summaries);
  f.x_lo = std::max(0, std::min(80, f.x_hi - 10));
  double min_v = 100;
  bool any = false;
  bool any_study = false;
  for (const auto& s : summaries) {
    for (const Curve* c : {&s.mean_curve, &s.study_mean_curve}) {
      for (int x = f.x_lo; x <= f.x_hi && x < static_cast<int>(c->size()); ++x) {
        if (const auto& v = (*c)[static_cast<std::size_t>(x)]) {
          min_v = std::min(min_v, *v);
          any = true;
        }
      }
    }
    any_study |= !s.study_mean_curve.empty();
  }
  double y_lo = any ? std::floor(min_v) - 1 : 0;
  y_lo = std::clamp(y_lo, 0.0, 99.0);
  f.sx = {static_cast<double>(f.x_lo), static_cast<double>(f.x_hi), kPlotLeft, kPlotRight};
  f.sy = {y_lo, 100, kPlotBottom, kPlotTop};
  OpenChart(o, f,
            "GPU allocation ratio, zoomed into arrived demand " + std::to_string(f.x_lo) + " to " +
                std::to_string(f.x_hi) + "%");
  DrawAxes(o, f);
  DrawDiagonal(o, f);
  o << "<g clip-path=\"url(#zoom-plot)\" class=\"curves\">\n";
  for (const auto& s : summaries) {
    const std::string d = CurvePath(s.study_mean_curve, f.x_lo, f.x_hi, f.sx, f.sy);
    if (d.empty()) continue;
    o << "<path class=\"study\" d=\"" << d << "\" stroke=\"" << LookOf(looks, s.policy).colour
      << "\"><title>" << HtmlEscape(s.policy) << ": FGD study's published mean</title></path>\n";
  }
  DrawPolicyCurves(o, f, summaries, looks);
  o << "</g>\n";

  ZoomEndLabels(o, f, summaries, looks);
  // What thick and thin lines are, below the axis label (in grey: the colours are the policies').
  const double ry = f.height - 18;
  double rx = kPlotLeft;
  auto entry = [&](const std::string& attributes, const std::string& text) {
    LegendSample(o, rx, ry, attributes);
    o << "<text x=\"" << SvgCoord(rx + kSampleLength + 8) << "\" y=\"" << SvgCoord(ry + 4.5)
      << "\">" << HtmlEscape(text) << "</text>\n";
    // 7.2 px per character: an upper bound at 13 px for the labels used here.
    rx += kSampleLength + 8 + 7.2 * static_cast<double>(text.size()) + 24;
  };
  entry(" stroke=\"#444\" stroke-width=\"2.5\"", "thick: gpumux, " + SeedsPhrase(summaries, ctx));
  if (any_study) entry(" class=\"study\" stroke=\"#444\"", "thin: the FGD study's published mean");
  entry(" class=\"diagonal\"", "y = x");
  o << "</g>\n</svg>\n";
}

// ---------------------------------------------------------------- page

// Every policy on the page (ctx.policies, then any other policy of the results) -> its look.
LookMap PageLooks(const std::vector<ExperimentResult>& results, const ReportContext& ctx) {
  std::vector<std::string> names = ctx.policies;
  for (const auto& r : results) {
    if (std::find(names.begin(), names.end(), r.policy) == names.end()) names.push_back(r.policy);
  }
  return report_palette::PolicyLookMap(names);
}

std::string OptCell(const std::optional<double>& v) { return v ? Fixed(*v, 2) : "–"; }

// 1. Title, configuration, what is plotted.
void PageConfig(std::ostream& o, const std::string& title, const ReportContext& ctx) {
  o << "<h1>" << HtmlEscape(title) << "</h1>\n<p class=\"config\">";
  o << "<span><b>Cluster</b> " << core::Plural(ctx.nodes, "node") << " / "
    << core::Plural(ctx.gpus, "GPU") << "</span>";
  o << "<span><b>Load</b> " << HtmlEscape(LoadString(ctx.load)) << "</span>";
  if (!ctx.replay_dir) o << "<span><b>Seeds</b> " << HtmlEscape(JoinSeeds(ctx.seeds)) << "</span>";
  o << "<span><b>Policies</b> ";
  for (std::size_t i = 0; i < ctx.policies.size(); ++i) {
    o << (i ? ", " : "") << HtmlEscape(ctx.policies[i]);
  }
  o << "</span></p>\n";
  if (ctx.replay_dir) {
    o << "<p class=\"config\"><span><b>Replay</b> <code>" << HtmlEscape(*ctx.replay_dir)
      << "</code> (the study's arrival order)</span></p>\n";
  }
  if (ctx.percentage_of_nodes_to_score < 100) {
    o << "<p class=\"config\"><span><b>Sampled nodes</b> each pod decided among the nodes "
         "kube-scheduler samples with percentageOfNodesToScore "
      << ctx.percentage_of_nodes_to_score
      << (ctx.percentage_of_nodes_to_score == 0 ? " (adaptive)" : "")
      << ", not among every node as in the study</span></p>\n";
  }
  o << "<p class=\"config\"><span><b>Nodes</b> <code>" << HtmlEscape(ctx.nodes_source)
    << "</code></span><span><b>Pods</b> <code>" << HtmlEscape(ctx.pods_source) << "</code></span>";
  if (ctx.expected != nullptr) {
    o << "<span><b>Study results</b> <code>" << HtmlEscape(ctx.expected->source)
      << "</code></span>";
  }
  o << "</p>\n";
  o << "<p>GPU allocation ratio: GPU compute allocated to pods as a share of the cluster's total, "
       "against GPU demand that has arrived (including pods that could not be placed), as in "
       "Fig.&nbsp;9a of the FGD paper (Weng et al., USENIX ATC'23). Pods arrive one at a time "
       "and never leave; a pod that no node can take is counted as failed and its demand still "
       "counts as arrived. Past 100% the cluster is oversubscribed, and a policy that fragments "
       "GPUs less keeps more of the demand placed.</p>\n";
}

// 2. and 3. Charts.
void PageCharts(std::ostream& o, const std::vector<PolicySummary>& summaries, const LookMap& looks,
                const ReportContext& ctx, bool study) {
  o << "<h2>Allocation ratio</h2>\n<figure>\n";
  FullChart(o, summaries, looks, ctx);
  o << "<figcaption>Each line is one policy (" << HtmlEscape(SeedsPhrase(summaries, ctx))
    << "); the dotted diagonal is where every arrived pod has been placed.</figcaption>\n"
       "</figure>\n";
  o << "<h2>Where the policies separate</h2>\n<figure>\n";
  ZoomChart(o, summaries, looks, ctx);
  o << "<figcaption>The same curves from 80% of arrived demand on, with the value at the last "
       "column next to each line"
    << (study ? "; thin pale lines in the same colour are the FGD study's published mean for "
                "the same seeds (hidden under the thick line where the two agree)"
              : "")
    << ".</figcaption>\n</figure>\n";
}

// 4. Summary table.
void PageSummary(std::ostream& o, const std::vector<PolicySummary>& summaries, const LookMap& looks,
                 const ReportContext& ctx, bool spread, bool study) {
  o << "<h2>Summary</h2>\n<div class=\"scroll\"><table "
       "class=\"summary\">\n<thead><tr><th>policy</th>"
    << "<th title=\"allocation ratio (%) when arrived demand reached 100% of "
       "capacity\">alloc@100</th>"
    << "<th title=\"allocation ratio (%) when arrived demand reached 130% of "
       "capacity\">alloc@130</th>";
  if (study) {
    o << "<th title=\"the FGD study's published allocation ratio (%) at 100%\">study@100</th>"
      << "<th title=\"the FGD study's published allocation ratio (%) at 130%\">study@130</th>"
      << "<th title=\"alloc@130 minus study@130, percentage points\">Δ@130</th>";
  }
  o << "<th title=\"idle GPU capacity, in GPUs, at 130%\">idle GPUs@130</th>"
    << "<th>failed pods</th><th title=\"fragmented share of idle GPU capacity at "
       "130%\">frag%@130</th>"
    << "<th>median ms/run</th></tr></thead>\n<tbody>\n";
  auto cell = [&](double mean, double sd) {
    if (std::isnan(mean)) return std::string("<span class=\"dim\">–</span>");
    return spread ? Fixed(mean, 2) + " <span class=\"sd\">± " + Fixed(sd, 2) + "</span>"
                  : Fixed(mean, 2);
  };
  for (const auto& s : summaries) {
    o << "<tr><td>" << LineKey(LookOf(looks, s.policy)) << HtmlEscape(s.policy) << "</td><td>"
      << cell(s.alloc_100_mean, s.alloc_100_std) << "</td><td>"
      << cell(s.alloc_130_mean, s.alloc_130_std) << "</td>";
    if (study) {
      if (s.study_130_mean) {
        o << "<td>" << cell(*s.study_100_mean, *s.study_100_std) << "</td><td>"
          << cell(*s.study_130_mean, *s.study_130_std) << "</td><td>"
          << (std::isnan(s.alloc_130_mean) ? std::string("<span class=\"dim\">–</span>")
                                           : Signed(s.alloc_130_mean - *s.study_130_mean, 2))
          << "</td>";
      } else {
        o << "<td class=\"dim\">–</td><td class=\"dim\">–</td><td></td>";
      }
    }
    o << "<td>" << Fixed(s.unallocated_gpus_130_mean, 1) << "</td><td>"
      << Fixed(s.failed_pods_mean, 1) << "</td><td>" << Fixed(s.frag_pct_130_mean, 2) << "</td><td>"
      << Fixed(ctx.timing ? s.wall_ms_median : 0.0, 0) << "</td></tr>\n";
  }
  o << "</tbody>\n</table></div>\n<p class=\"small\">alloc@100 and alloc@130: GPU allocation ratio "
       "(%) "
       "when arrived GPU demand reached 100% and 130% of the cluster's capacity"
    << (spread ? "; mean ± sample standard deviation over seeds" : "")
    << ". idle GPUs@130: unallocated GPU capacity, in GPUs; frag%@130: the fragmented share of "
       "it.";
  if (study && !ctx.replay_dir) {
    o << "</p>\n<p class=\"small\">study: the FGD authors' published results for the same seed "
         "numbers. gpumux draws its "
         "own random streams, not Go's math/rand, so single seeds differ by the seed-to-seed "
         "spread; compare means over seeds (<code>--seeds 42-51</code>), or replay the study's "
         "own arrival order pod by pod (<code>--replay</code>).";
  }
  if (std::find(ctx.policies.begin(), ctx.policies.end(), "exclusive") != ctx.policies.end()) {
    o << "</p>\n<p class=\"small\">exclusive: every GPU pod holds whole GPUs; allocation counts "
         "the compute the pods "
         "asked for.";
  }
  o << "</p>\n";
}

// 5. Per-run table, and replay agreement.
void PageRuns(std::ostream& o, const std::vector<ExperimentResult>& results, const LookMap& looks,
              const ReportContext& ctx) {
  const bool collapse = results.size() > 12;
  o << "<h2>Runs</h2>\n";
  if (collapse) {
    o << "<details>\n<summary>All " << core::Plural(results.size(), "run") << "</summary>\n";
  }
  o << "<div class=\"scroll\"><table class=\"runs\">\n<thead><tr><th>policy</th><th "
       "class=\"seed\">seed</th>"
       "<th>alloc@100</th><th>alloc@130</th><th>failed pods</th><th>unallocated GPUs@130</th>"
       "<th>wall ms</th></tr></thead>\n<tbody>\n";
  for (const auto& r : results) {
    o << "<tr><td>" << LineKey(LookOf(looks, r.policy)) << HtmlEscape(r.policy)
      << "</td><td class=\"seed\">" << r.seed << "</td><td>" << OptCell(r.alloc_pct_at_100)
      << "</td><td>" << OptCell(r.alloc_pct_at_130) << "</td><td>" << r.failed_pods << "</td><td>"
      << Fixed(r.unallocated_gpus_at_130, 1) << "</td><td>"
      << Fixed(ctx.timing ? r.wall_ms : 0.0, 0) << "</td></tr>\n";
  }
  o << "</tbody>\n</table></div>\n";
  if (collapse) o << "</details>\n";
  bool replay_header = false;
  for (const auto& r : results) {
    if (r.replay_mismatches < 0) continue;
    if (!replay_header) {
      o << "<p>Replay of the study's arrival order and placements:</p>\n<ul class=\"replay\">\n";
      replay_header = true;
    }
    o << "<li><b>" << HtmlEscape(r.policy) << "</b>: " << (r.pods - r.replay_mismatches) << "/"
      << r.pods << " placements equal the study's";
    if (r.replay_mismatches > 0) {
      o << "; first difference: <code>" << HtmlEscape(r.first_mismatch) << "</code>";
    }
    o << "</li>\n";
  }
  if (replay_header) o << "</ul>\n";
}

void WritePage(std::ostream& o, const std::vector<ExperimentResult>& results,
               const ReportContext& ctx) {
  const auto summaries = Summarise(results, ctx);
  const LookMap looks = PageLooks(results, ctx);
  const bool spread = ctx.seeds.size() > 1 && !ctx.replay_dir;
  const bool study = std::any_of(summaries.begin(), summaries.end(), [](const PolicySummary& s) {
    return s.study_130_mean.has_value();
  });
  const std::string title = "gpumux simulate — " + ctx.workload;
  o << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
    << "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
    << "<title>" << HtmlEscape(title) << "</title>\n<style>" << kReportStyle
    << "</style>\n</head>\n<body>\n<main>\n";

  PageConfig(o, title, ctx);
  PageCharts(o, summaries, looks, ctx, study);
  PageSummary(o, summaries, looks, ctx, spread, study);
  PageRuns(o, results, looks, ctx);
  // 6. Footer.
  o << "<footer>Data: <a href=\"results.json\">results.json</a> · "
       "<a href=\"curves.csv\">curves.csv</a> (the study's analysis_allo_discrete.csv layout). "
       "Generated by <code>gpumux simulate</code>.</footer>\n</main>\n</body>\n</html>\n";
}

}  // namespace

core::Result<void> report_format::WriteAtomically(const std::filesystem::path& path,
                                                  const std::function<void(std::ostream&)>& write) {
  std::ostringstream text;
  write(text);
  return io::WriteFileAtomically(path.string(), text.str());
}

core::Result<void> WriteReportDir(const std::string& dir,
                                  const std::vector<ExperimentResult>& results,
                                  const ReportContext& context) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return core::MakeError(core::ErrorCode::kIo, dir + ": " + ec.message());
  if (!fs::is_directory(dir, ec)) {
    return core::MakeError(core::ErrorCode::kIo, dir + ": not a directory");
  }
  const fs::path base(dir);
  if (auto w = WriteAtomically(base / "results.json",
                               [&](std::ostream& o) { WriteJson(o, results, context); });
      !w) {
    return w;
  }
  if (auto w = WriteAtomically(base / "curves.csv",
                               [&](std::ostream& o) { WriteCsv(o, results, context); });
      !w) {
    return w;
  }
  // The page last: once index.html is there, the files it links to are too.
  return WriteAtomically(base / "index.html",
                         [&](std::ostream& o) { WritePage(o, results, context); });
}

}  // namespace gpumux::sim
