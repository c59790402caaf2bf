// Runs measured on a cluster, in the JCT report's terms: the statistics, the GPU lanes, and the
// tables and page the simulator's report code writes for them.
#include "gpumux/sim/dl_measured.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>

#include "gpumux/sim/dl_report.h"
#include "src/sim/report_format.h"

namespace gpumux::sim {
namespace {

core::Micros Us(double seconds) { return static_cast<core::Micros>(seconds * 1e6); }

MeasuredJob Job(const std::string& id, const std::string& cls, double submit, double start,
                double finish, std::vector<std::string> gpus, bool succeeded = true) {
  MeasuredJob j;
  j.id = id;
  j.cls = cls;
  j.submit_us = Us(submit);
  if (start >= 0) j.start_us = Us(start);
  if (finish >= 0) j.finish_us = Us(finish);
  j.succeeded = succeeded && finish >= 0;
  j.gpus = std::move(gpus);
  return j;
}

// j1 and j2 share n1/0; j3 holds n2/0 and n2/1; j4 failed; j5 never started; j6 still runs.
std::vector<MeasuredJob> Jobs() {
  return {Job("j1", "vgg16", 0, 2, 10, {"n1/0"}),
          Job("j2", "lstm", 1, 5, 21, {"n1/0"}),
          Job("j3", "neumf", 4, 4, 8, {"n2/1", "n2/0"}),
          Job("j4", "vgg16", 6, 7, 9, {"n1/10"}, false),
          Job("j5", "lstm", 7, -1, -1, {}),
          Job("j6", "lstm", 8, 12, -1, {"n1/2"})};
}

TEST(MeasuredRun, CountsOnlyJobsThatSucceededInTheJctStatistics) {
  const DlResult r = MeasuredRun("least-delay", 100, Jobs());
  EXPECT_TRUE(r.measured);
  EXPECT_EQ(r.policy, "least-delay");
  EXPECT_EQ(r.load, 100);
  ASSERT_EQ(r.jobs.size(), 3u);  // j1, j2, j3
  // JCTs 10, 20, 4 s; queueing 2, 4, 0 s.
  EXPECT_DOUBLE_EQ(r.metrics.avg_jct_s, 34.0 / 3);
  EXPECT_DOUBLE_EQ(r.metrics.median_jct_s, 10);
  EXPECT_DOUBLE_EQ(r.metrics.p95_jct_s, 20);
  EXPECT_DOUBLE_EQ(r.metrics.makespan_s, 21);  // first submit 0, last finish 21
  EXPECT_DOUBLE_EQ(r.metrics.avg_queue_s, 2);
  EXPECT_TRUE(std::isnan(r.metrics.gpu_util));
  EXPECT_EQ(r.jobs[2].gpu, "n2/1+n2/0");
}

TEST(MeasuredRun, NamesOneLanePerGpuInNodeAndIndexOrderAndMeasuresBusyTime) {
  const DlResult r = MeasuredRun("least-delay", 1, Jobs(), {"n3/0"});
  EXPECT_EQ(r.gpu_names,
            (std::vector<std::string>{"n1/0", "n1/2", "n1/10", "n2/0", "n2/1", "n3/0"}));
  // Segments: j1, j2 on lane 0; j3 on lanes 4 and 3; j4 on lane 2; j6 open on lane 1.
  ASSERT_EQ(r.timeline.size(), 6u);
  EXPECT_EQ(r.timeline[0].gpu, 0);
  EXPECT_EQ(r.timeline[2].gpu, 4);
  EXPECT_EQ(r.timeline[3].gpu, 3);
  EXPECT_EQ(r.timeline[5].job, "j6");
  EXPECT_EQ(r.timeline[5].end_us, -1);
  // Over [0, 21] s on 6 GPUs: n1/0 busy 2..21 (19 s), n1/2 12..21 (9 s), n1/10 7..9 (2 s),
  // n2/0 and n2/1 4..8 (4 s each), n3/0 idle: 38 of 126 GPU-seconds.
  EXPECT_NEAR(r.metrics.gpu_busy, 38.0 / 126.0, 1e-12);
}

TEST(MeasuredRun, AJobSeenOnlyOnceFinishedStartsAtItsFinish) {
  const DlResult r = MeasuredRun("x", 1, {Job("a", "c", 1, -1, 5, {"n/0"})});
  ASSERT_EQ(r.jobs.size(), 1u);
  EXPECT_EQ(r.jobs[0].start_us, Us(5));
  EXPECT_DOUBLE_EQ(r.metrics.avg_queue_s, 4);
}

TEST(MeasuredRun, NoJobThatSucceededGivesEmptyStatistics) {
  const DlResult r = MeasuredRun("x", 1, {Job("a", "c", 1, 2, -1, {"n/0"})});
  EXPECT_TRUE(r.jobs.empty());
  EXPECT_EQ(r.metrics.avg_jct_s, 0);
  EXPECT_EQ(r.timeline.size(), 1u);
}

DlReportContext MeasuredContext() {
  DlReportContext ctx;
  ctx.measured = true;
  ctx.workload = "run-a.jsonl (6 jobs)";
  ctx.notes = {"run-a.jsonl: run a, time scale 0.01 (load 100x)", "j5: did not start"};
  ctx.policies = {"least-delay", "iadeep"};
  ctx.loads = {100};
  ctx.baseline = "iadeep";
  return ctx;
}

TEST(MeasuredReport, TheTableSaysMeasuredAndLeavesUtilOut) {
  std::vector<DlResult> runs = {MeasuredRun("least-delay", 100, Jobs()),
                                MeasuredRun("iadeep", 100, Jobs())};
  runs[1].metrics.avg_jct_s *= 2;
  std::ostringstream out;
  WriteDlTable(out, runs, MeasuredContext());
  const std::string text = out.str();
  EXPECT_EQ(text.rfind("JCT measured on a cluster: run-a.jsonl (6 jobs)\n", 0), 0u) << text;
  EXPECT_NE(text.find("j5: did not start\n"), std::string::npos);
  EXPECT_EQ(text.find("profile:"), std::string::npos);
  EXPECT_NE(text.find("load 100x"), std::string::npos);
  // busy: 38 of 5 GPUs x 21 s (the lanes of the GPUs the jobs held).
  EXPECT_NE(text.find("  least-delay -             11s       10s       20s        21s        2s  "
                      "36.2%      -\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("least-delay vs iadeep: average JCT 50.0% lower"), std::string::npos) << text;
}

TEST(MeasuredReport, JsonAndPageSayMeasuredAndNameTheGpus) {
  const std::vector<DlResult> runs = {MeasuredRun("least-delay", 100, Jobs())};
  std::ostringstream json_text;
  WriteDlJson(json_text, runs, MeasuredContext());
  const auto j = nlohmann::json::parse(json_text.str());
  EXPECT_EQ(j["measured"], true);
  EXPECT_EQ(j["notes"][1], "j5: did not start");
  EXPECT_TRUE(j["runs"][0]["metrics"]["gpu_util"].is_null());
  std::ostringstream html;
  WriteDlHtml(html, runs, MeasuredContext());
  const std::string page = html.str();
  EXPECT_NE(page.find("measured on a cluster</h1>"), std::string::npos);
  EXPECT_NE(page.find("<li>j5: did not start</li>"), std::string::npos);
  EXPECT_NE(page.find(">n1/10</text>"), std::string::npos);
  EXPECT_NE(page.find("<td>-</td></tr>"), std::string::npos);  // util
  EXPECT_NE(page.find("gpumux report --from-cluster"), std::string::npos);
  EXPECT_EQ(page.find("Profile error"), std::string::npos);
}

// A cluster run at time scale 0.05 shows as load 20: written as a number, not "2e+01".
TEST(LoadString, IsTheShortestPlainNumberThatReadsBack) {
  using report_format::LoadString;
  EXPECT_EQ(LoadString(1.3), "1.3");
  EXPECT_EQ(LoadString(4), "4");
  EXPECT_EQ(LoadString(20), "20");
  EXPECT_EQ(LoadString(1000), "1000");
  EXPECT_EQ(LoadString(1.0 / 0.05), "20");
  EXPECT_EQ(LoadString(0.001), "0.001");
  EXPECT_EQ(LoadString(1e20), "1e+20");
}

}  // namespace
}  // namespace gpumux::sim
