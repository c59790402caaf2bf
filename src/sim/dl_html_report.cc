// index.html of `gpumux simulate --workload dl`: one self-contained static page (inline CSS and
// SVG, no JavaScript, nothing fetched) with, per load, a table of the policies' job completion
// times, a JCT CDF of every policy, and per policy a per-GPU timeline of who shared which GPU
// when. The page depends only on its inputs (no timestamps): identical inputs give identical
// bytes.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gpumux/core/plural.h"
#include "gpumux/policy/registry.h"
#include "gpumux/sim/dl_report.h"
#include "src/sim/report_format.h"
#include "src/sim/report_palette.h"
#include "src/sim/report_style.h"

namespace gpumux::sim {
namespace {

using report_format::Fixed;
using report_format::HtmlEscape;
using report_format::LoadString;
using report_format::Scale;
using report_format::SvgCoord;
using report_format::TickStep;
using report_palette::ClassColour;
using report_palette::LineKey;
using report_palette::LookMap;
using report_palette::LookOf;
using report_palette::StrokeAttributes;

// ---------------------------------------------------------------- formatting

double Seconds(core::Micros us) { return static_cast<double>(us) / 1e6; }

// A tick label with as many decimals as the step needs (0 from a step of 1 up).
std::string TickLabel(double v, double step) {
  const int decimals = step >= 1 ? 0 : static_cast<int>(std::ceil(-std::log10(step) - 1e-9));
  return Fixed(v, std::clamp(decimals, 0, 9));
}

// ---------------------------------------------------------------- what the page shows

// Policies in ctx.policies order, then any other policy in the results in order of appearance;
// loads likewise; workload classes sorted by name.
struct Model {
  std::vector<std::string> policies;
  LookMap looks;  // policy -> its line look (report_palette)
  std::vector<double> loads;
  std::map<std::string, std::size_t> classes;  // name -> colour index

  std::size_t PolicyIndex(const std::string& p) const {
    return static_cast<std::size_t>(std::find(policies.begin(), policies.end(), p) -
                                    policies.begin());
  }
};

Model MakeModel(const std::vector<DlResult>& results, const DlReportContext& ctx) {
  Model m;
  for (const auto& p : ctx.policies) {
    if (std::find(m.policies.begin(), m.policies.end(), p) == m.policies.end()) {
      m.policies.push_back(p);
    }
  }
  for (double l : ctx.loads) {
    if (std::find(m.loads.begin(), m.loads.end(), l) == m.loads.end()) m.loads.push_back(l);
  }
  for (const auto& r : results) {
    if (std::find(m.policies.begin(), m.policies.end(), r.policy) == m.policies.end()) {
      m.policies.push_back(r.policy);
    }
    if (std::find(m.loads.begin(), m.loads.end(), r.load) == m.loads.end()) {
      m.loads.push_back(r.load);
    }
    for (const auto& s : r.timeline) m.classes.emplace(s.cls, 0);
    for (const auto& j : r.jobs) m.classes.emplace(j.cls, 0);
  }
  std::size_t i = 0;
  for (auto& [name, index] : m.classes) index = i++;
  m.looks = report_palette::PolicyLookMap(m.policies);
  return m;
}

// The runs at `load`, in policy order.
std::vector<const DlResult*> RunsAt(const std::vector<DlResult>& results, double load,
                                    const Model& m) {
  std::vector<const DlResult*> runs;
  for (const auto& r : results) {
    if (r.load == load) runs.push_back(&r);
  }
  std::stable_sort(runs.begin(), runs.end(), [&](const DlResult* a, const DlResult* b) {
    return m.PolicyIndex(a->policy) < m.PolicyIndex(b->policy);
  });
  return runs;
}

// The end of a run: its last finish or segment end.
core::Micros RunEnd(const DlResult& r) {
  core::Micros end = 0;
  for (const auto& j : r.jobs) end = std::max({end, j.finish_us, j.submit_us});
  for (const auto& s : r.timeline) end = std::max({end, s.start_us, s.end_us});
  return end;
}

std::string PolicyExplanation(const std::string& policy) {
  const policy::PolicyEntry* e = policy::BuiltinPolicies().Find(policy);
  return e != nullptr ? e->explanation : "";
}

// ---------------------------------------------------------------- JCT CDF

constexpr double kWidth = 860;
constexpr double kCdfLeft = 66;
constexpr double kCdfRight = 650;
constexpr double kCdfTop = 20;
constexpr double kCdfBottom = 330;
constexpr double kCdfHeight = 380;

// The empirical CDF of `jct_s` (sorted) as one step line; points that round to the same pixel
// column merge.
std::string CdfPath(const std::vector<double>& jct_s, const Scale& sx, const Scale& sy) {
  std::vector<std::pair<std::string, std::string>> steps;  // (x, y after the step)
  const double n = static_cast<double>(jct_s.size());
  for (std::size_t i = 0; i < jct_s.size(); ++i) {
    std::string x = SvgCoord(sx(jct_s[i]));
    std::string y = SvgCoord(sy(static_cast<double>(i + 1) / n));
    if (!steps.empty() && steps.back().first == x) {
      steps.back().second = std::move(y);
    } else {
      steps.emplace_back(std::move(x), std::move(y));
    }
  }
  // Appended piece by piece: GCC 12 at -O3 warns falsely (-Wrestrict) on "literal" + string.
  std::string d = "M";
  d += SvgCoord(sx.px_lo);
  d += ' ';
  d += SvgCoord(sy(0));
  for (const auto& [x, y] : steps) {
    d += " H";
    d += x;
    d += " V";
    d += y;
  }
  d += " H";
  d += SvgCoord(sx.px_hi);
  return d;
}

void CdfChart(std::ostream& o, const std::vector<const DlResult*>& runs, const Model& m,
              double load) {
  std::vector<std::vector<double>> jcts;
  double max_s = 0;
  for (const DlResult* r : runs) {
    std::vector<double> v;
    v.reserve(r->jobs.size());
    for (const auto& j : r->jobs) v.push_back(std::max(0.0, Seconds(j.jct_us())));
    std::sort(v.begin(), v.end());
    if (!v.empty()) max_s = std::max(max_s, v.back());
    jcts.push_back(std::move(v));
  }
  const double step = TickStep(max_s, 10);
  const double x_hi = std::max(step, std::ceil(max_s / step) * step);
  const Scale sx{0, x_hi, kCdfLeft, kCdfRight};
  const Scale sy{0, 1, kCdfBottom, kCdfTop};
  const std::string label = "JCT CDF at load " + LoadString(load) + "x";

  o << "<svg class=\"chart cdf\" viewBox=\"0 0 " << SvgCoord(kWidth) << " " << SvgCoord(kCdfHeight)
    << "\" width=\"" << SvgCoord(kWidth) << "\" height=\"" << SvgCoord(kCdfHeight)
    << "\" role=\"img\" aria-label=\"" << HtmlEscape(label)
    << "\" xmlns=\"http://www.w3.org/2000/svg\">\n<title>" << HtmlEscape(label)
    << "</title>\n<g class=\"grid\">\n";
  const int x_ticks = static_cast<int>(std::lround(x_hi / step));
  for (int k = 0; k <= x_ticks; ++k) {
    const double px = sx(k * step);
    o << "<line x1=\"" << SvgCoord(px) << "\" y1=\"" << SvgCoord(kCdfTop) << "\" x2=\""
      << SvgCoord(px) << "\" y2=\"" << SvgCoord(kCdfBottom) << "\"/>\n";
  }
  for (int k = 0; k <= 5; ++k) {
    const double py = sy(k / 5.0);
    o << "<line x1=\"" << SvgCoord(kCdfLeft) << "\" y1=\"" << SvgCoord(py) << "\" x2=\""
      << SvgCoord(kCdfRight) << "\" y2=\"" << SvgCoord(py) << "\"/>\n";
  }
  o << "</g>\n<g class=\"ticks\">\n";
  for (int k = 0; k <= x_ticks; ++k) {
    const double px = sx(k * step);
    o << "<line x1=\"" << SvgCoord(px) << "\" y1=\"" << SvgCoord(kCdfBottom) << "\" x2=\""
      << SvgCoord(px) << "\" y2=\"" << SvgCoord(kCdfBottom + 5) << "\"/><text x=\"" << SvgCoord(px)
      << "\" y=\"" << SvgCoord(kCdfBottom + 21) << "\" text-anchor=\"middle\">"
      << TickLabel(k * step, step) << "</text>\n";
  }
  for (int k = 0; k <= 5; ++k) {
    const double py = sy(k / 5.0);
    o << "<line x1=\"" << SvgCoord(kCdfLeft - 5) << "\" y1=\"" << SvgCoord(py) << "\" x2=\""
      << SvgCoord(kCdfLeft) << "\" y2=\"" << SvgCoord(py) << "\"/><text x=\""
      << SvgCoord(kCdfLeft - 9) << "\" y=\"" << SvgCoord(py + 4.5) << "\" text-anchor=\"end\">"
      << Fixed(k / 5.0, 1) << "</text>\n";
  }
  o << "</g>\n<rect class=\"frame\" x=\"" << SvgCoord(kCdfLeft) << "\" y=\"" << SvgCoord(kCdfTop)
    << "\" width=\"" << SvgCoord(kCdfRight - kCdfLeft) << "\" height=\""
    << SvgCoord(kCdfBottom - kCdfTop) << "\"/>\n<text class=\"axis-label\" x=\""
    << SvgCoord((kCdfLeft + kCdfRight) / 2) << "\" y=\"" << SvgCoord(kCdfBottom + 44)
    << "\" text-anchor=\"middle\">job completion time (s)</text>\n"
    << "<text class=\"axis-label\" transform=\"translate(18 "
    << SvgCoord((kCdfTop + kCdfBottom) / 2)
    << ") rotate(-90)\" text-anchor=\"middle\">fraction of jobs</text>\n<g class=\"curves\">\n";
  for (std::size_t i = 0; i < runs.size(); ++i) {
    if (jcts[i].empty()) continue;
    o << "<path d=\"" << CdfPath(jcts[i], sx, sy) << "\""
      << StrokeAttributes(LookOf(m.looks, runs[i]->policy)) << "><title>"
      << HtmlEscape(runs[i]->policy) << "</title></path>\n";
  }
  o << "</g>\n<g class=\"legend\">\n";
  const double lx = kCdfRight + 18;
  double ly = kCdfTop + 12;
  for (const DlResult* r : runs) {
    o << "<line x1=\"" << SvgCoord(lx) << "\" y1=\"" << SvgCoord(ly) << "\" x2=\""
      << SvgCoord(lx + 34) << "\" y2=\"" << SvgCoord(ly) << "\" stroke-width=\"2.5\""
      << StrokeAttributes(LookOf(m.looks, r->policy)) << "/>\n<text x=\"" << SvgCoord(lx + 42)
      << "\" y=\"" << SvgCoord(ly + 4.5) << "\">" << HtmlEscape(r->policy) << "</text>\n";
    ly += 22;
  }
  o << "</g>\n</svg>\n";
}

// ---------------------------------------------------------------- per-GPU timeline

constexpr double kLineLeft = 66;  // the lanes' left edge with labels "GPU 12"
constexpr double kLineRight = 840;
constexpr double kLineTop = 8;
constexpr double kRowHeight = 7;
constexpr double kLaneGap = 5;

struct Placed {
  const DlSegment* segment;
  core::Micros end_us;  // the run's end for a segment still open
  std::size_t row;      // sub-row within the GPU's lane
};

// Segments grouped by GPU, each GPU's in start order, in sub-rows assigned greedily (the first
// row free at the segment's start): overlapping segments never share a row, and a GPU uses as
// many rows as it ever had jobs at once.
std::vector<std::vector<Placed>> PlaceSegments(const DlResult& r, core::Micros run_end,
                                               std::size_t gpus) {
  for (const auto& s : r.timeline) {
    if (s.gpu >= 0) gpus = std::max(gpus, static_cast<std::size_t>(s.gpu) + 1);
  }
  std::vector<std::vector<Placed>> lanes(gpus);
  for (const auto& s : r.timeline) {
    if (s.gpu < 0) continue;
    lanes[static_cast<std::size_t>(s.gpu)].push_back(
        {&s, s.end_us < 0 ? run_end : std::max(s.end_us, s.start_us), 0});
  }
  for (auto& lane : lanes) {
    std::stable_sort(lane.begin(), lane.end(), [](const Placed& a, const Placed& b) {
      if (a.segment->start_us != b.segment->start_us) {
        return a.segment->start_us < b.segment->start_us;
      }
      return a.end_us < b.end_us;
    });
    std::vector<core::Micros> row_end;
    for (auto& p : lane) {
      std::size_t row = 0;
      while (row < row_end.size() && row_end[row] > p.segment->start_us) ++row;
      if (row == row_end.size()) row_end.push_back(0);
      row_end[row] = p.end_us;
      p.row = row;
    }
  }
  return lanes;
}

void Timeline(std::ostream& o, const DlResult& r, const Model& m, core::Micros axis_end,
              std::size_t gpus) {
  const core::Micros run_end = RunEnd(r);
  const auto lanes = PlaceSegments(r, run_end, gpus);
  std::vector<double> lane_top;
  std::vector<std::size_t> lane_rows;
  double y = kLineTop;
  for (const auto& lane : lanes) {
    std::size_t rows = 1;
    for (const auto& p : lane) rows = std::max(rows, p.row + 1);
    lane_top.push_back(y);
    lane_rows.push_back(rows);
    y += static_cast<double>(rows) * kRowHeight + kLaneGap;
  }
  const double bottom = y;
  const double height = bottom + 44;
  const double x_hi_s = std::max(1.0, Seconds(axis_end));
  const double step = TickStep(x_hi_s, 12);
  // Lanes named "node/index" (a measured run) need room for the longest name (~6.2 px a letter).
  std::size_t longest = 0;
  for (const auto& name : r.gpu_names) longest = std::max(longest, name.size());
  const double line_left =
      std::min(kLineRight / 2, std::max(kLineLeft, 12 + 6.2 * static_cast<double>(longest)));
  const Scale sx{0, x_hi_s, line_left, kLineRight};
  const std::string label =
      "Per-GPU timeline of " + r.policy + " at load " + LoadString(r.load) + "x";

  o << "<svg class=\"chart timeline\" viewBox=\"0 0 " << SvgCoord(kWidth) << " " << SvgCoord(height)
    << "\" width=\"" << SvgCoord(kWidth) << "\" height=\"" << SvgCoord(height)
    << "\" role=\"img\" aria-label=\"" << HtmlEscape(label)
    << "\" xmlns=\"http://www.w3.org/2000/svg\">\n<title>" << HtmlEscape(label)
    << "</title>\n<g class=\"lanes\">\n";
  for (std::size_t g = 0; g < lanes.size(); ++g) {
    const double h = static_cast<double>(lane_rows[g]) * kRowHeight;
    o << "<rect" << (g % 2 == 0 ? " class=\"even\"" : "") << " x=\"" << SvgCoord(line_left)
      << "\" y=\"" << SvgCoord(lane_top[g] - kLaneGap / 2) << "\" width=\""
      << SvgCoord(kLineRight - line_left) << "\" height=\"" << SvgCoord(h + kLaneGap)
      << "\"/><text x=\"" << SvgCoord(line_left - 6) << "\" y=\""
      << SvgCoord(lane_top[g] + h / 2 + 3.5) << "\" text-anchor=\"end\">"
      << (g < r.gpu_names.size() ? HtmlEscape(r.gpu_names[g]) : "GPU " + std::to_string(g))
      << "</text>\n";
  }
  o << "</g>\n<g class=\"ticks\">\n";
  const int x_ticks = static_cast<int>(std::floor(x_hi_s / step + 1e-9));
  for (int k = 0; k <= x_ticks; ++k) {
    const double px = sx(k * step);
    o << "<line x1=\"" << SvgCoord(px) << "\" y1=\"" << SvgCoord(kLineTop - kLaneGap / 2)
      << "\" x2=\"" << SvgCoord(px) << "\" y2=\"" << SvgCoord(bottom + 2) << "\"/><text x=\""
      << SvgCoord(px) << "\" y=\"" << SvgCoord(bottom + 17) << "\" text-anchor=\"middle\">"
      << TickLabel(k * step, step) << "</text>\n";
  }
  o << "</g>\n<text class=\"axis-label\" x=\"" << SvgCoord((line_left + kLineRight) / 2)
    << "\" y=\"" << SvgCoord(bottom + 38)
    << "\" text-anchor=\"middle\">time (s)</text>\n<g class=\"segments\">\n";
  for (std::size_t g = 0; g < lanes.size(); ++g) {
    for (const auto& p : lanes[g]) {
      const DlSegment& s = *p.segment;
      const double x0 = sx(std::clamp(Seconds(s.start_us), 0.0, x_hi_s));
      const double x1 = sx(std::clamp(Seconds(p.end_us), 0.0, x_hi_s));
      const auto cls = m.classes.find(s.cls);
      o << "<rect class=\"c" << (cls == m.classes.end() ? 0 : cls->second) << "\" x=\""
        << SvgCoord(x0) << "\" y=\""
        << SvgCoord(lane_top[g] + static_cast<double>(p.row) * kRowHeight + 0.5) << "\" width=\""
        << SvgCoord(std::max(0.5, x1 - x0)) << "\" height=\"" << SvgCoord(kRowHeight - 1)
        << "\"><title>" << HtmlEscape(s.job) << " " << HtmlEscape(s.cls) << " "
        << Fixed(Seconds(s.start_us), 1) << "-" << Fixed(Seconds(p.end_us), 1)
        << "</title></rect>\n";
    }
  }
  o << "</g>\n</svg>\n";
}

// ---------------------------------------------------------------- page

// A square of a workload class's fill.
std::string Swatch(std::string_view colour) {
  std::string s = "<span class=\"swatch\" style=\"background:";
  s += colour;
  s += "\"></span>";
  return s;
}

// The header of a report of runs measured on a cluster: what was run, and how to read it.
void MeasuredHeader(std::ostream& o, const DlReportContext& ctx, const Model& m) {
  o << "<h1>gpumux report — job completion times measured on a cluster</h1>\n"
    << "<p class=\"config\"><span><b>Workload</b> " << HtmlEscape(ctx.workload)
    << "</span><span><b>Loads</b> ";
  for (std::size_t i = 0; i < m.loads.size(); ++i) {
    o << (i ? ", " : "") << HtmlEscape(LoadString(m.loads[i])) << "×";
  }
  o << "</span></p>\n<ul class=\"notes\">\n";
  for (const auto& note : ctx.notes) o << "<li>" << HtmlEscape(note) << "</li>\n";
  o << "</ul>\n<p>Each run is a record of <code>gpumux submit</code>: the jobs were created on the "
       "cluster at their arrival times (times the run's time scale; a load of 100× is a time "
       "scale of 0.01), and their pods watched. The job completion time (JCT) is the pod's "
       "finish minus the job's submission, both seen by <code>gpumux submit</code>'s own clock; "
       "queueing is submission to the pod running. Only jobs that succeeded count; GPU util is "
       "not measured on a cluster.</p>\n<p>The runs:</p>\n<ul class=\"policies\">\n";
  for (const auto& p : m.policies) {
    o << "<li>" << LineKey(LookOf(m.looks, p)) << "<b>" << HtmlEscape(p) << "</b></li>\n";
  }
  o << "</ul>\n";
}

void Header(std::ostream& o, const DlReportContext& ctx, const Model& m) {
  if (ctx.measured) return MeasuredHeader(o, ctx, m);
  const DlSimOptions& opt = ctx.options;
  o << "<h1>gpumux simulate — job completion times of deep-learning jobs sharing GPUs</h1>\n"
    << "<p class=\"config\"><span><b>Workload</b> " << HtmlEscape(ctx.workload)
    << "</span><span><b>Mix</b> " << HtmlEscape(ctx.mix) << "</span><span><b>Profile</b> "
    << HtmlEscape(ctx.profile) << "</span><span><b>Truth</b> " << HtmlEscape(ctx.truth)
    << "</span></p>\n"
    << "<p class=\"config\"><span><b>Cluster</b> " << core::Plural(ctx.gpus, "GPU") << " ("
    << core::Plural(opt.nodes, "node") << " × " << opt.gpus_per_node
    << ")</span><span><b>Co-location</b> at most " << core::Plural(opt.max_jobs_per_gpu, "job")
    << " per GPU</span><span><b>Seed</b> " << ctx.seed << "</span><span><b>Loads</b> ";
  for (std::size_t i = 0; i < m.loads.size(); ++i) {
    o << (i ? ", " : "") << HtmlEscape(LoadString(m.loads[i])) << "×";
  }
  o << "</span></p>\n<p class=\"config\"><span><b>Queue</b> " << HtmlEscape(opt.queue)
    << (opt.queue == "auto" ? " (each policy's own)" : "") << "</span><span><b>Tuner</b> "
    << HtmlEscape(opt.tuner) << (opt.tuner == "auto" ? " (each policy's own)" : "")
    << "</span><span><b>Batch change pause</b> " << Fixed(opt.reconfigure_s, 1)
    << " s</span><span><b>Measurement noise</b> " << Fixed(opt.measure_noise * 100, 0)
    << "%</span><span><b>Truth model</b> " << HtmlEscape(opt.truth_model)
    << "</span><span><b>Profile error</b> ±" << Fixed(opt.model_error * 100, 0)
    << "%</span><span><b>Work spread</b> " << Fixed(opt.work_spread, 2)
    << "</span><span><b>Noise-scale spread</b> " << Fixed(opt.noise_scale_spread, 2)
    << "</span></p>\n";
  o << "<p>Training jobs arrive over time and each runs to completion on one GPU. A policy places "
       "every job, possibly next to others on a GPU it shares; jobs on a shared GPU slow each "
       "other down by how much they interfere. The job completion time (JCT) is finish minus "
       "submit: it counts the time spent queueing as well as running. A load of 2× submits the "
       "same jobs twice as fast. The GPUs behave like the profile says only up to the profile "
       "error; the policies see the profile and the jobs' measured speed.</p>\n"
    << "<p>The policies:</p>\n<ul class=\"policies\">\n";
  for (std::size_t i = 0; i < m.policies.size(); ++i) {
    const std::string& p = m.policies[i];
    const policy::PolicyEntry* entry = policy::BuiltinPolicies().Find(p);
    std::string text = PolicyExplanation(p);
    o << "<li>" << LineKey(LookOf(m.looks, p)) << "<b>" << HtmlEscape(p) << "</b>";
    if (!text.empty()) {
      o << ": " << HtmlEscape(text);
    } else if (entry != nullptr) {
      o << ": " << HtmlEscape(entry->summary);
    }
    o << "</li>\n";
  }
  o << "</ul>\n";
}

void Table(std::ostream& o, const std::vector<const DlResult*>& runs, const Model& m) {
  double best = 0;
  bool any = false;
  for (const DlResult* r : runs) {
    if (!r->jobs.empty() && (!any || r->metrics.avg_jct_s < best)) {
      best = r->metrics.avg_jct_s;
      any = true;
    }
  }
  o << "<div class=\"scroll\"><table class=\"jct\">\n<thead><tr><th>policy</th><th>tuner</th>"
       "<th>jobs</th><th>average JCT (s)</th><th>median JCT (s)</th><th>p95 JCT (s)</th>"
       "<th title=\"last finish minus first submit\">makespan (s)</th>"
       "<th title=\"submit to first placement\">average queueing (s)</th>"
       "<th title=\"time-mean share of GPUs with at least one job\">GPU busy</th>"
       "<th title=\"time-mean of the GPUs' summed busy fractions, at most 1 per GPU\">GPU util</th>"
       "</tr></thead>\n<tbody>\n";
  for (const DlResult* r : runs) {
    const DlMetrics& x = r->metrics;
    const bool is_best = any && !r->jobs.empty() && x.avg_jct_s == best;
    o << "<tr><td>" << LineKey(LookOf(m.looks, r->policy)) << HtmlEscape(r->policy)
      << "</td><td class=\"tuner\">" << HtmlEscape(r->tuner) << "</td><td>" << r->jobs.size()
      << "</td><td" << (is_best ? " class=\"best\"" : "") << ">" << Fixed(x.avg_jct_s, 0)
      << "</td><td>" << Fixed(x.median_jct_s, 0) << "</td><td>" << Fixed(x.p95_jct_s, 0)
      << "</td><td>" << Fixed(x.makespan_s, 0) << "</td><td>" << Fixed(x.avg_queue_s, 0)
      << "</td><td>" << Fixed(x.gpu_busy * 100, 1) << "%</td><td>"
      << (std::isnan(x.gpu_util) ? std::string("-") : Fixed(x.gpu_util * 100, 1) + "%")
      << "</td></tr>\n";
  }
  o << "</tbody>\n</table></div>\n";
}

void ClassLegend(std::ostream& o, const Model& m) {
  o << "<p class=\"small classes\">";
  for (const auto& [name, index] : m.classes) {
    o << "<span class=\"item\">" << Swatch(ClassColour(index)) << HtmlEscape(name) << "</span>";
  }
  o << "</p>\n";
}

void WritePage(std::ostream& o, const std::vector<DlResult>& results, const DlReportContext& ctx) {
  const Model m = MakeModel(results, ctx);
  const std::string title =
      std::string(ctx.measured ? "gpumux report" : "gpumux simulate") + " — JCT — " + ctx.workload;
  o << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
    << "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
    << "<title>" << HtmlEscape(title) << "</title>\n<style>" << kReportStyle;
  for (const auto& [name, index] : m.classes) {
    o << "svg.timeline rect.c" << index << " { fill: " << ClassColour(index) << "; }\n";
  }
  o << "</style>\n</head>\n<body>\n<main>\n";
  Header(o, ctx, m);

  // With every timeline open the page is long: links to each load's results and timelines.
  o << "<p class=\"config\"><b>Jump to</b> ";
  for (std::size_t i = 0; i < m.loads.size(); ++i) {
    o << (i ? " · " : "") << "<a href=\"#load-" << i << "\">load "
      << HtmlEscape(LoadString(m.loads[i])) << "×</a>";
    if (!RunsAt(results, m.loads[i], m).empty()) {
      o << " (<a href=\"#timelines-" << i << "\">timelines</a>)";
    }
  }
  o << "</p>\n";

  const std::size_t gpus = static_cast<std::size_t>(std::max(0, ctx.gpus));
  for (std::size_t load_index = 0; load_index < m.loads.size(); ++load_index) {
    const double load = m.loads[load_index];
    const auto runs = RunsAt(results, load, m);
    o << "<h2 id=\"load-" << load_index << "\">Load " << HtmlEscape(LoadString(load)) << "×</h2>\n";
    if (runs.empty()) {
      o << "<p class=\"small\">No runs at this load.</p>\n";
      continue;
    }
    Table(o, runs, m);
    if (auto margin = DlMargin(results, load, ctx.baseline)) {
      o << "<p class=\"margin\">" << kOwnDlPolicy << " vs " << HtmlEscape(ctx.baseline)
        << ": average JCT " << Fixed(std::fabs(*margin), 1) << "% "
        << (*margin >= 0 ? "lower" : "higher") << "</p>\n";
    }
    o << "<figure>\n";
    CdfChart(o, runs, m, load);
    o << "<figcaption>The share of jobs finished within a given JCT, one line per policy: the "
         "further up and left, the better. A line's height at x is the fraction of jobs whose "
         "completion time was at most x seconds.</figcaption>\n</figure>\n"
      << "<h3 id=\"timelines-" << load_index
      << "\">Who shared which GPU when</h3>\n<p class=\"small\">One lane per GPU, time in "
         "seconds, one bar per job's stay on the GPU, coloured by workload "
         "class; jobs that ran on a GPU at the same time are stacked in the lane. Hover a bar for "
         "the job, its class and its start and end (s). All timelines at this load share the "
         "time axis.</p>\n";
    ClassLegend(o, m);
    core::Micros axis_end = 0;
    for (const DlResult* r : runs) axis_end = std::max(axis_end, RunEnd(*r));
    for (const DlResult* r : runs) {
      // Every timeline open: the page has no script, and a closed one is missed by a reader
      // comparing policies, by find-in-page and by print; its summary still folds it away.
      o << "<details class=\"timeline\" open>\n<summary>" << LineKey(LookOf(m.looks, r->policy))
        << HtmlEscape(r->policy) << " at load " << HtmlEscape(LoadString(load))
        << "×: " << core::Plural(r->timeline.size(), "GPU stay") << " of "
        << core::Plural(r->jobs.size(), "job") << ", last finish at "
        << Fixed(Seconds(RunEnd(*r)), 0) << " s</summary>\n";
      Timeline(o, *r, m, axis_end, gpus);
      o << "</details>\n";
    }
  }

  o << "<footer>Data: <a href=\"results.json\">results.json</a> (every run's metrics) · "
       "<a href=\"jobs.csv\">jobs.csv</a> (every job of every run). Generated by <code>"
    << (ctx.measured ? "gpumux report --from-cluster" : "gpumux simulate --workload dl")
    << "</code>.</footer>\n</main>\n</body>\n</html>\n";
}

}  // namespace

void WriteDlHtml(std::ostream& out, const std::vector<DlResult>& results,
                 const DlReportContext& ctx) {
  WritePage(out, results, ctx);
}

}  // namespace gpumux::sim
