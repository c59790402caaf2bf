#include "gpumux/sim/dl_report.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "gpumux/sim/dl_workload.h"
#include "src/sim/report_palette.h"
#include "tests/sim/report_test_looks.h"
#include "tests/testing/builders.h"

namespace gpumux::sim {
namespace {

core::Micros Us(double seconds) { return static_cast<core::Micros>(seconds * 1e6); }

DlJobResult Job(const std::string& id, const std::string& cls, double submit_s, double start_s,
                double finish_s) {
  DlJobResult j;
  j.id = id;
  j.cls = cls;
  j.submit_us = Us(submit_s);
  j.start_us = Us(start_s);
  j.finish_us = Us(finish_s);
  j.gpu = "node-0/0";
  j.final_batch = 32;
  return j;
}

DlSegment Segment(int gpu, const std::string& job, const std::string& cls, double start_s,
                  double end_s) {
  return {gpu, job, cls, Us(start_s), end_s < 0 ? -1 : Us(end_s)};
}

// Two jobs that share GPU 0 from 50 s to 100 s, and a third that follows the first on GPU 0.
DlResult MakeRun(const std::string& policy, double load, double avg_jct_s) {
  DlResult r;
  r.policy = policy;
  r.tuner = policy == "exclusive" ? "none" : "joint";
  r.load = load;
  r.seed = 42;
  r.jobs = {Job("j1", "vgg16", 0, 0, 100), Job("j2", "lstm", 50, 50, 150),
            Job("j3", "neumf", 60, 100, 200)};
  r.timeline = {Segment(0, "j1", "vgg16", 0, 100), Segment(0, "j2", "lstm", 50, 150),
                Segment(0, "j3", "neumf", 100, 200)};
  r.metrics.avg_jct_s = avg_jct_s;
  r.metrics.median_jct_s = 100;
  r.metrics.p95_jct_s = 140;
  r.metrics.makespan_s = 200;
  r.metrics.avg_queue_s = 13.3;
  r.metrics.gpu_busy = 0.5;
  r.metrics.gpu_util = 0.45;
  return r;
}

DlReportContext Context(const std::vector<std::string>& policies,
                        const std::vector<double>& loads) {
  DlReportContext ctx;
  ctx.workload = "3 hand-made jobs";
  ctx.mix = "iadeep";
  ctx.profile = "test profile";
  ctx.gpus = 2;
  ctx.seed = 42;
  ctx.options.nodes = 1;
  ctx.options.gpus_per_node = 2;
  ctx.policies = policies;
  ctx.loads = loads;
  return ctx;
}

// least-delay and iadeep at loads 1 and 2; least-delay is 20% faster on average.
std::vector<DlResult> TwoPoliciesTwoLoads() {
  return {MakeRun("iadeep", 1, 100), MakeRun("least-delay", 1, 80), MakeRun("iadeep", 2, 120),
          MakeRun("least-delay", 2, 90)};
}

std::string Html(const std::vector<DlResult>& results, const DlReportContext& ctx) {
  std::ostringstream out;
  WriteDlHtml(out, results, ctx);
  return out.str();
}

std::size_t Count(std::string_view text, std::string_view what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string_view::npos;
       at = text.find(what, at + what.size())) {
    ++n;
  }
  return n;
}

// Every piece of `text` from `open` to the next `close` (inclusive).
std::vector<std::string> Blocks(const std::string& text, const std::string& open,
                                const std::string& close) {
  std::vector<std::string> out;
  for (std::size_t at = text.find(open); at != std::string::npos; at = text.find(open, at + 1)) {
    const std::size_t end = text.find(close, at);
    if (end == std::string::npos) break;
    out.push_back(text.substr(at, end + close.size() - at));
  }
  return out;
}

std::string Attribute(const std::string& element, const std::string& name) {
  const std::string key = " " + name + "=\"";
  const std::size_t at = element.find(key);
  if (at == std::string::npos) return "";
  const std::size_t from = at + key.size();
  return element.substr(from, element.find('"', from) - from);
}

// The rectangle drawn for `job` in `timeline` (an SVG), found by its tooltip.
std::string SegmentRect(const std::string& timeline, const std::string& job) {
  const std::size_t title = timeline.find("<title>" + job + " ");
  if (title == std::string::npos) return "";
  const std::size_t rect = timeline.rfind("<rect", title);
  return timeline.substr(rect, title - rect);
}

TEST(DlReportHtml, IsOneSelfContainedPageWithoutScripts) {
  const std::string html = Html(TwoPoliciesTwoLoads(), Context({"iadeep", "least-delay"}, {1, 2}));
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0U);
  EXPECT_NE(html.find("</html>\n"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("src=\"http"), std::string::npos);
  EXPECT_EQ(html.find("href=\"http"), std::string::npos);
}

TEST(DlReportHtml, SaysWhatWasSimulatedAndExplainsThePolicies) {
  auto ctx = Context({"exclusive", "first-fit", "iadeep", "least-delay"}, {1});
  ctx.options.max_jobs_per_gpu = 3;
  ctx.options.tuner = "joint";
  ctx.options.queue = "fifo";
  ctx.options.work_spread = 1;
  ctx.truth = "measured truth";
  ctx.gpus = 20;
  ctx.seed = 7;
  const std::string html = Html({MakeRun("exclusive", 1, 300), MakeRun("first-fit", 1, 200),
                                 MakeRun("iadeep", 1, 100), MakeRun("least-delay", 1, 80)},
                                ctx);
  for (const char* text :
       {"3 hand-made jobs", "iadeep", "test profile", "20 GPUs", "at most 3 jobs per GPU",
        "<b>Seed</b> 7", "<b>Tuner</b> joint", "<b>Queue</b> fifo", "<b>Truth</b> measured truth",
        "<b>Work spread</b> 1.00", "<b>Noise-scale spread</b> 0.30", "Kubernetes", "AntMan",
        "IADeep (SC&#39;23)", "gpumux&#39;s own policy"}) {
    EXPECT_NE(html.find(text), std::string::npos) << text;
  }
}

TEST(DlReportHtml, TabulatesEveryPolicyAtEveryLoad) {
  const std::string html = Html(TwoPoliciesTwoLoads(), Context({"iadeep", "least-delay"}, {1, 2}));
  const auto tables = Blocks(html, "<table class=\"jct\">", "</table>");
  ASSERT_EQ(tables.size(), 2U);
  for (const auto& t : tables) {
    EXPECT_EQ(Count(t, "<tr>"), 3U);  // header and one row per policy
    EXPECT_NE(t.find("iadeep</td><td class=\"tuner\">joint</td><td>3</td>"), std::string::npos);
    EXPECT_NE(t.find(">13</td>"), std::string::npos);     // average queueing
    EXPECT_NE(t.find(">50.0%</td>"), std::string::npos);  // GPU busy
    EXPECT_NE(t.find(">45.0%</td>"), std::string::npos);  // GPU util
  }
  EXPECT_NE(tables[0].find("<td class=\"best\">80</td>"), std::string::npos);
  EXPECT_NE(tables[1].find("<td class=\"best\">90</td>"), std::string::npos);
}

TEST(DlReportHtml, StatesTheMarginOfGpumuxOverIadeepAtEachLoad) {
  const std::string html = Html(TwoPoliciesTwoLoads(), Context({"iadeep", "least-delay"}, {1, 2}));
  EXPECT_NE(html.find("least-delay vs iadeep: average JCT 20.0% lower"), std::string::npos);
  EXPECT_NE(html.find("least-delay vs iadeep: average JCT 25.0% lower"), std::string::npos);

  const std::string slower = Html({MakeRun("iadeep", 1, 100), MakeRun("least-delay", 1, 110)},
                                  Context({"iadeep", "least-delay"}, {1}));
  EXPECT_NE(slower.find("least-delay vs iadeep: average JCT 10.0% higher"), std::string::npos);
}

TEST(DlReportHtml, HasNoMarginLineWithoutTheBaseline) {
  const std::string html = Html({MakeRun("exclusive", 1, 100), MakeRun("least-delay", 1, 80)},
                                Context({"exclusive", "least-delay"}, {1}));
  EXPECT_EQ(html.find("least-delay vs"), std::string::npos);
}

TEST(DlReportHtml, DrawsOneJctCdfPerLoadWithALineAndALegendEntryPerPolicy) {
  const std::string html = Html(TwoPoliciesTwoLoads(), Context({"iadeep", "least-delay"}, {1, 2}));
  const auto charts = Blocks(html, "<svg class=\"chart cdf\"", "</svg>");
  ASSERT_EQ(charts.size(), 2U);
  for (const auto& chart : charts) {
    const auto legends = Blocks(chart, "<g class=\"legend\">", "</g>");
    ASSERT_EQ(legends.size(), 1U);
    EXPECT_NE(legends[0].find(">iadeep</text>"), std::string::npos);
    EXPECT_NE(legends[0].find(">least-delay</text>"), std::string::npos);
    EXPECT_EQ(Count(chart, "<path d=\"M"), 2U);
  }
}

using testing_looks::SeenLooks;

// The DL default's four policies, and one the FGD report also draws.
std::vector<DlResult> FivePolicies() {
  std::vector<DlResult> results;
  for (const char* p : {"exclusive", "first-fit", "iadeep", "least-delay", "fgd"}) {
    results.push_back(MakeRun(p, 1, 100));
  }
  return results;
}

TEST(DlReportHtml, GivesEachPolicyItsOwnLookEverywhereWhateverTheContextOrder) {
  const std::vector<std::string> policies = {"exclusive", "first-fit", "iadeep", "least-delay",
                                             "fgd"};
  const std::vector<std::string> reversed(policies.rbegin(), policies.rend());
  // The CDF draws and keys a line per policy; the list, the table and the timelines key it.
  for (const auto& order : {policies, reversed}) {
    testing_looks::ExpectOneLookPerPolicy(Html(FivePolicies(), Context(order, {1})), policies);
  }
}

// CIE L*a*b* (D65) of an sRGB "#RRGGBB", for the CIE76 colour difference.
std::array<double, 3> Lab(std::string_view hex) {
  double linear[3];
  for (std::size_t i = 0; i < 3; ++i) {
    const double c = std::stoi(std::string(hex.substr(1 + 2 * i, 2)), nullptr, 16) / 255.0;
    linear[i] = c <= 0.04045 ? c / 12.92 : std::pow((c + 0.055) / 1.055, 2.4);
  }
  const auto [r, g, b] = linear;
  const double x = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047;
  const double y = 0.2126 * r + 0.7152 * g + 0.0722 * b;
  const double z = (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883;
  auto f = [](double t) { return t > 0.008856 ? std::cbrt(t) : 7.787 * t + 16.0 / 116.0; };
  return {116 * f(y) - 16, 500 * (f(x) - f(y)), 200 * (f(y) - f(z))};
}

double DeltaE(std::string_view a, std::string_view b) {
  const auto p = Lab(a);
  const auto q = Lab(b);
  return std::hypot(p[0] - q[0], p[1] - q[1], p[2] - q[2]);
}

TEST(DlReportPalette, ClassColoursAreTheirOwnFarFromEveryPolicyColourAndEachOther) {
  EXPECT_NEAR(DeltaE("#000000", "#FFFFFF"), 100, 0.01);
  for (std::string_view c : report_palette::kClassColours) {
    for (const auto& e : report_palette::BuiltinLooks()) {
      EXPECT_GE(DeltaE(c, e.look.colour), 20) << c << " is close to " << e.policy << "'s colour";
    }
    for (std::string_view p : report_palette::kPolicyColours) EXPECT_GE(DeltaE(c, p), 20) << c;
    for (std::string_view other : report_palette::kClassColours) {
      if (other != c) {
        EXPECT_GE(DeltaE(c, other), 20) << c << " vs " << other;
      }
    }
    EXPECT_LE(Lab(c)[0], 85) << c << " is too light for a thin bar on a white lane";
  }
}

// The default profile's classes each have their own fill (two shared one when there were seven).
TEST(DlReportPalette, EveryClassOfTheDefaultProfileHasItsOwnFill) {
  const std::size_t classes = sim::DefaultProfile().classes.size();
  ASSERT_GE(classes, 8u);
  std::set<std::string_view> fills;
  for (std::size_t i = 0; i < classes; ++i) fills.insert(report_palette::ClassColour(i));
  EXPECT_EQ(fills.size(), classes);
}

TEST(DlReportHtml, FillsTheClassesWithColoursNoPolicyIsDrawnIn) {
  const std::string html = Html(FivePolicies(), Context({}, {1}));
  std::set<std::string> policy_colours;
  for (const auto& s : SeenLooks(html)) policy_colours.insert(s.colour);
  ASSERT_FALSE(policy_colours.empty());
  // Classes sorted by name: lstm c0, neumf c1, vgg16 c2.
  for (std::size_t i = 0; i < 3; ++i) {
    const std::string rule = "rect.c" + std::to_string(i) + " { fill: ";
    const std::size_t at = html.find(rule);
    ASSERT_NE(at, std::string::npos) << rule;
    const std::string fill = html.substr(at + rule.size(), 7);
    EXPECT_EQ(fill, report_palette::ClassColour(i));
    EXPECT_EQ(policy_colours.count(fill), 0U) << fill;
  }
}

TEST(DlReportHtml, StepsTheCdfUpToOneAtTheLongestJct) {
  DlResult r = MakeRun("least-delay", 1, 100);
  r.jobs = {Job("a", "vgg16", 0, 0, 100), Job("b", "vgg16", 0, 0, 200)};
  const std::string html = Html({r}, Context({"least-delay"}, {1}));
  const auto charts = Blocks(html, "<svg class=\"chart cdf\"", "</svg>");
  ASSERT_EQ(charts.size(), 1U);
  const std::size_t path = charts[0].find("<path d=\"");
  ASSERT_NE(path, std::string::npos);
  const std::string d = Attribute(charts[0].substr(path), "d");
  // x from 66 to 650 over 0..200 s, y from 330 (0) to 20 (1): half the jobs by 100 s, all
  // by 200 s.
  EXPECT_EQ(d, "M66.0 330.0 H358.0 V175.0 H650.0 V20.0 H650.0");
}

TEST(DlReportHtml, DrawsAPerGpuTimelinePerLoadAndPolicyEveryOneOpen) {
  const std::string html = Html(TwoPoliciesTwoLoads(), Context({"iadeep", "least-delay"}, {1, 2}));
  const auto timelines = Blocks(html, "<details class=\"timeline\"", "</details>");
  ASSERT_EQ(timelines.size(), 4U);
  for (const auto& t : timelines) {
    EXPECT_EQ(t.rfind("<details class=\"timeline\" open>", 0), 0U);
    EXPECT_EQ(Count(t, "<svg class=\"chart timeline\""), 1U);
    EXPECT_NE(t.find(">GPU 0</text>"), std::string::npos);
    EXPECT_NE(t.find(">GPU 1</text>"), std::string::npos);  // idle, but in the cluster
    EXPECT_EQ(Count(t, "<rect class=\"c"), 3U);
  }
  // Load-major, then the policies in context order.
  EXPECT_NE(timelines[0].find("iadeep at load 1×"), std::string::npos);
  EXPECT_NE(timelines[1].find("least-delay at load 1×"), std::string::npos);
  EXPECT_NE(timelines[2].find("iadeep at load 2×"), std::string::npos);
  EXPECT_NE(timelines[3].find("least-delay at load 2×"), std::string::npos);
}

TEST(DlReportHtml, LinksEveryLoadsResultsAndTimelinesFromTheTop) {
  const std::string html =
      Html(TwoPoliciesTwoLoads(), Context({"iadeep", "least-delay"}, {1, 2, 4}));
  const std::size_t nav = html.find("<b>Jump to</b>");
  ASSERT_NE(nav, std::string::npos);
  const std::string links = html.substr(nav, html.find("</p>", nav) - nav);
  for (const char* id : {"load-0", "timelines-0", "load-1", "timelines-1", "load-2"}) {
    EXPECT_NE(links.find(std::string("href=\"#") + id + "\""), std::string::npos) << id;
    EXPECT_EQ(Count(html, std::string(" id=\"") + id + "\""), 1U) << id;
  }
  // Load 4 has no runs: no timelines to link to.
  EXPECT_EQ(links.find("#timelines-2"), std::string::npos);
  EXPECT_EQ(html.find(" id=\"timelines-2\""), std::string::npos);
}

TEST(DlReportHtml, StacksJobsThatShareAGpuInSubRowsThatNeverOverlap) {
  const std::string html = Html({MakeRun("least-delay", 1, 80)}, Context({"least-delay"}, {1}));
  const auto timelines = Blocks(html, "<svg class=\"chart timeline\"", "</svg>");
  ASSERT_EQ(timelines.size(), 1U);
  const std::string j1 = SegmentRect(timelines[0], "j1");
  const std::string j2 = SegmentRect(timelines[0], "j2");
  const std::string j3 = SegmentRect(timelines[0], "j3");
  ASSERT_FALSE(j1.empty());
  ASSERT_FALSE(j2.empty());
  ASSERT_FALSE(j3.empty());
  const double y1 = std::stod(Attribute(j1, "y"));
  const double y2 = std::stod(Attribute(j2, "y"));
  const double h1 = std::stod(Attribute(j1, "height"));
  // j1 and j2 overlap in time: one above the other, not touching.
  EXPECT_GE(y2, y1 + h1);
  // j3 starts when j1 ends: it takes j1's row again.
  EXPECT_EQ(Attribute(j3, "y"), Attribute(j1, "y"));
  // x over 0..200 s from 66 to 840.
  EXPECT_EQ(Attribute(j1, "x"), "66.0");
  EXPECT_EQ(Attribute(j1, "width"), "387.0");
  EXPECT_EQ(Attribute(j3, "x"), "453.0");
}

TEST(DlReportHtml, ColoursSegmentsByWorkloadClassWithALegend) {
  const std::string html = Html({MakeRun("least-delay", 1, 80)}, Context({"least-delay"}, {1}));
  // Classes sorted by name: lstm c0, neumf c1, vgg16 c2.
  const auto timelines = Blocks(html, "<svg class=\"chart timeline\"", "</svg>");
  ASSERT_EQ(timelines.size(), 1U);
  EXPECT_EQ(Attribute(SegmentRect(timelines[0], "j2"), "class"), "c0");
  EXPECT_EQ(Attribute(SegmentRect(timelines[0], "j3"), "class"), "c1");
  EXPECT_EQ(Attribute(SegmentRect(timelines[0], "j1"), "class"), "c2");
  EXPECT_NE(html.find("rect.c2 { fill: "), std::string::npos);
  const auto legends = Blocks(html, "<p class=\"small classes\">", "</p>");
  ASSERT_EQ(legends.size(), 1U);
  for (const char* cls : {"lstm", "neumf", "vgg16"}) {
    EXPECT_NE(legends[0].find(std::string("</span>") + cls + "</span>"), std::string::npos) << cls;
  }
}

TEST(DlReportHtml, DrawsASegmentLeftOpenToTheEndOfTheRun) {
  DlResult r = MakeRun("least-delay", 1, 80);
  r.timeline[2].end_us = -1;  // j3, still on the GPU; the run ends at 200 s (j3's finish)
  const std::string html = Html({r}, Context({"least-delay"}, {1}));
  EXPECT_NE(html.find("<title>j3 neumf 100.0-200.0</title>"), std::string::npos);
  const std::string j3 = SegmentRect(html, "j3");
  EXPECT_EQ(Attribute(j3, "width"), "387.0");
}

TEST(DlReportHtml, EscapesHtmlInJobIdsClassesAndNames) {
  DlResult r = MakeRun("least-delay", 1, 80);
  r.jobs[0].id = "<b>&\"x\"";
  r.timeline[0].job = "<b>&\"x\"";
  r.timeline[0].cls = "<i>";
  r.jobs[0].cls = "<i>";
  auto ctx = Context({"least-delay"}, {1});
  ctx.workload = "jobs <script>.csv";
  ctx.mix = "a&b";
  const std::string html = Html({r}, ctx);
  EXPECT_EQ(html.find("<b>&"), std::string::npos);
  EXPECT_EQ(html.find("<i>"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_NE(html.find("&lt;b&gt;&amp;&quot;x&quot; &lt;i&gt; 0.0-100.0"), std::string::npos);
  EXPECT_NE(html.find("jobs &lt;script&gt;.csv"), std::string::npos);
  EXPECT_NE(html.find("a&amp;b"), std::string::npos);
}

TEST(DlReportHtml, IsByteIdenticalForIdenticalInput) {
  const auto results = TwoPoliciesTwoLoads();
  const auto ctx = Context({"iadeep", "least-delay"}, {1, 2});
  EXPECT_EQ(Html(results, ctx), Html(results, ctx));
}

TEST(DlReportHtml, WritesAPageEvenWithoutJobs) {
  DlResult r;
  r.policy = "least-delay";
  const std::string html = Html({r}, Context({"least-delay"}, {1}));
  EXPECT_NE(html.find("</html>\n"), std::string::npos);
  EXPECT_EQ(Count(html, "<svg class=\"chart cdf\""), 1U);
  EXPECT_EQ(html.find("=\"-\""), std::string::npos);  // what Fixed() writes for NaN
}

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(DlReportDir, WritesThePageTheJsonAndTheJobsCsv) {
  test::ScratchDir scratch;
  const std::filesystem::path dir = scratch.path() / "report";
  const auto results = TwoPoliciesTwoLoads();
  const auto ctx = Context({"iadeep", "least-delay"}, {1, 2});
  auto written = WriteDlReportDir(dir.string(), results, ctx);
  ASSERT_TRUE(written.has_value()) << written.error().message;

  EXPECT_EQ(ReadFile(dir / "index.html"), Html(results, ctx));

  const auto json = nlohmann::json::parse(ReadFile(dir / "results.json"));
  ASSERT_EQ(json["runs"].size(), 4U);
  EXPECT_EQ(json["runs"][1]["policy"], "least-delay");
  EXPECT_EQ(json["runs"][1]["load"], 1.0);
  EXPECT_EQ(json["runs"][1]["metrics"]["avg_jct_s"], 80.0);
  ASSERT_EQ(json["least_delay_margin"].size(), 2U);
  EXPECT_EQ(json["least_delay_margin"][0]["baseline"], "iadeep");
  EXPECT_DOUBLE_EQ(json["least_delay_margin"][0]["avg_jct_lower_pct"].get<double>(), 20.0);
  EXPECT_DOUBLE_EQ(json["least_delay_margin"][1]["avg_jct_lower_pct"].get<double>(), 25.0);

  std::istringstream csv(ReadFile(dir / "jobs.csv"));
  std::string line;
  std::vector<std::string> lines;
  while (std::getline(csv, line)) lines.push_back(line);
  ASSERT_EQ(lines.size(), 1U + 4U * 3U);
  EXPECT_EQ(lines[0].rfind("load,policy,job,class,submit_s,start_s,finish_s,jct_s", 0), 0U);
  EXPECT_EQ(lines[1].rfind("1,iadeep,j1,vgg16,", 0), 0U);
  EXPECT_EQ(lines[12].rfind("2,least-delay,j3,neumf,", 0), 0U);
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    files.push_back(entry.path().filename().string());
  }
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{"index.html", "jobs.csv", "results.json"}));
}

}  // namespace
}  // namespace gpumux::sim
