#include "gpumux/sim/report.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <ostream>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "gpumux/policy/registry.h"
#include "src/sim/report_palette.h"
#include "tests/sim/report_test_looks.h"
#include "tests/sim/sim_fixtures.h"
#include "tests/testing/builders.h"

namespace gpumux::sim {
namespace {

using test::ClusterBuilder;
using test::RequestBuilder;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(ExpectedResults, TheEmbeddedTableHasTheStudysSixtyDefaultRows) {
  const ExpectedTable& t = testing_fixtures::EmbeddedExpected();
  EXPECT_EQ(t.rows.size(), 60U);
  for (const ExpectedRow& row : t.rows) {
    EXPECT_EQ(row.workload, "openb_pod_list_default");
    EXPECT_EQ(row.tune, "1.3");
    EXPECT_EQ(row.curve.size(), 131U);
    EXPECT_TRUE(row.curve[130].has_value());
  }
  const ExpectedRow* fgd = t.Find("openb_pod_list_default", "fgd", 1.3, 42);
  ASSERT_NE(fgd, nullptr);
  EXPECT_EQ(fgd->policy, "06-FGD");
  EXPECT_EQ(fgd->seed, 42U);
  EXPECT_EQ(fgd->curve[100], 95.14);
  EXPECT_EQ(fgd->curve[130], 95.29);
  EXPECT_EQ(t.Find("openb_pod_list_default", "fgd", 1.3 + 1e-12, 42), fgd);
  EXPECT_EQ(t.Find("openb_pod_list_default", "fgd", 1.2, 42), nullptr);
  EXPECT_EQ(t.Find("openb_pod_list_default", "exclusive", 1.3, 42), nullptr);
  EXPECT_EQ(t.Find("other", "fgd", 1.3, 42), nullptr);
  EXPECT_EQ(t.Find("openb_pod_list_default", "fgd", 1.3, 7), nullptr);
}

std::string ExpectedHeader() {
  std::string h = "workload,sc_policy,tune,seed,total_gpus";
  for (int x = 0; x <= 130; ++x) {
    h += ',';
    h += std::to_string(x);
  }
  return h + "\n";
}

std::string ExpectedRowText(const std::string& seed, const std::string& col5) {
  std::string r = "w,06-FGD,1.3," + seed + ",8";
  for (int x = 0; x <= 130; ++x) {
    r += ',';
    if (x == 5) r += col5;
  }
  return r + "\n";
}

TEST(ExpectedResults, ParsesEmptyColumnsAsMissingValues) {
  std::istringstream in(ExpectedHeader() + ExpectedRowText("3", "12.5"));
  auto t = ParseExpected(in, "e.csv");
  ASSERT_TRUE(t.has_value()) << t.error().message;
  ASSERT_EQ(t->rows.size(), 1U);
  EXPECT_EQ(t->source, "e.csv");
  EXPECT_EQ(t->rows[0].curve[5], 12.5);
  EXPECT_FALSE(t->rows[0].curve[6].has_value());
}

struct ExpectedErrorCase {
  const char* name;
  std::string content;
  const char* message;
};
void PrintTo(const ExpectedErrorCase& c, std::ostream* os) { *os << c.name; }

class ExpectedResultsReject : public ::testing::TestWithParam<ExpectedErrorCase> {};

TEST_P(ExpectedResultsReject, WithFileAndLine) {
  std::istringstream in(GetParam().content);
  auto t = ParseExpected(in, "e.csv");
  ASSERT_FALSE(t.has_value());
  EXPECT_NE(t.error().message.find(GetParam().message), std::string::npos) << t.error().message;
}

INSTANTIATE_TEST_SUITE_P(
    Table, ExpectedResultsReject,
    ::testing::Values(
        ExpectedErrorCase{"a_missing_curve_column", "workload,sc_policy,tune,seed,0,1\n",
                          "e.csv:1: missing column '2'"},
        ExpectedErrorCase{"a_value_that_is_not_a_number",
                          ExpectedHeader() + ExpectedRowText("3", "abc"),
                          "e.csv:2: column '5': 'abc' is not a number"},
        ExpectedErrorCase{"a_negative_seed", ExpectedHeader() + ExpectedRowText("-3", "1"),
                          "e.csv:2: negative seed"},
        ExpectedErrorCase{"a_nan_value", ExpectedHeader() + ExpectedRowText("3", "nan"),
                          "e.csv:2: column '5': nan is not a finite number"},
        ExpectedErrorCase{"an_infinite_value", ExpectedHeader() + ExpectedRowText("3", "inf"),
                          "e.csv:2: column '5': inf is not a finite number"},
        ExpectedErrorCase{"an_empty_file", "", "e.csv: empty file"}),
    test::CaseName());

TEST(StudyPolicyName, MapsTheSixStudyPoliciesAndNothingElse) {
  EXPECT_EQ(StudyPolicyName("random"), "01-Random");
  EXPECT_EQ(StudyPolicyName("dotprod"), "02-DotProd");
  EXPECT_EQ(StudyPolicyName("gpu-clustering"), "03-GpuClustering");
  EXPECT_EQ(StudyPolicyName("gpu-packing"), "04-GpuPacking");
  EXPECT_EQ(StudyPolicyName("best-fit"), "05-BestFit");
  EXPECT_EQ(StudyPolicyName("fgd"), "06-FGD");
  EXPECT_EQ(StudyPolicyName("exclusive"), "");
  EXPECT_EQ(StudyPolicyName(""), "");
}

// One hand-made run on an 8-GPU workload "w": allocation a100 and a130 at 100 and 130.
ExperimentResult HandMadeRun(const std::string& policy, std::uint64_t seed, double a100,
                             double a130, double wall) {
  ExperimentResult r;
  r.workload = "w";
  r.policy = policy;
  r.seed = seed;
  r.load = 1.3;
  r.pods = 10;
  r.placed = 9;
  r.failed_pods = static_cast<std::int64_t>(seed);
  r.alloc_curve.assign(131, std::nullopt);
  r.alloc_curve[5] = 1.5;
  r.alloc_curve[100] = a100;
  r.alloc_curve[130] = a130;
  r.alloc_pct_at_100 = a100;
  r.alloc_pct_at_130 = a130;
  r.unallocated_gpus_at_130 = 0.25 * static_cast<double>(seed);
  r.frag_pct_at_130 = 10;
  r.wall_ms = wall;
  return r;
}

// Hand-made results: two fgd runs and one best-fit run.
std::vector<ExperimentResult> HandMadeResults() {
  return {HandMadeRun("fgd", 1, 90, 92, 30.0), HandMadeRun("fgd", 2, 94, 96, 10.0),
          HandMadeRun("best-fit", 1, 80, 81, 20.0)};
}

ReportContext HandMadeContext() {
  ReportContext ctx;
  ctx.nodes_source = "nodes.csv";
  ctx.pods_source = "pods.csv";
  ctx.workload = "w";
  ctx.nodes = 2;
  ctx.gpus = 8;
  ctx.load = 1.3;
  ctx.policies = {"fgd", "best-fit"};
  ctx.seeds = {1, 2};
  ctx.timing = false;
  return ctx;
}

TEST(Summarise, AveragesEachPolicyOverItsSeeds) {
  const auto summaries = Summarise(HandMadeResults(), HandMadeContext());
  ASSERT_EQ(summaries.size(), 2U);
  const PolicySummary& fgd = summaries[0];
  EXPECT_EQ(fgd.policy, "fgd");
  EXPECT_EQ(fgd.runs, 2);
  EXPECT_DOUBLE_EQ(fgd.alloc_100_mean, 92.0);
  EXPECT_DOUBLE_EQ(fgd.alloc_130_mean, 94.0);
  EXPECT_DOUBLE_EQ(fgd.alloc_130_std, std::sqrt(8.0)) << "sample standard deviation";
  EXPECT_DOUBLE_EQ(fgd.failed_pods_mean, 1.5);
  EXPECT_DOUBLE_EQ(fgd.unallocated_gpus_130_mean, 0.375);
  EXPECT_DOUBLE_EQ(fgd.wall_ms_median, 20.0);
  ASSERT_EQ(fgd.mean_curve.size(), 131U);
  EXPECT_EQ(fgd.mean_curve[130], 94.0);
  EXPECT_EQ(fgd.mean_curve[5], 1.5);
  EXPECT_FALSE(fgd.mean_curve[6].has_value());
  EXPECT_FALSE(fgd.study_130_mean.has_value()) << "no expected table given";
  const PolicySummary& bf = summaries[1];
  EXPECT_EQ(bf.runs, 1);
  EXPECT_DOUBLE_EQ(bf.alloc_130_std, 0.0);
  EXPECT_DOUBLE_EQ(bf.wall_ms_median, 20.0);
}

TEST(WriteCsv, WritesTheStudysLayoutThenGpumuxsColumns) {
  std::ostringstream out;
  WriteCsv(out, HandMadeResults(), HandMadeContext());
  std::istringstream lines(out.str());
  std::string header, first;
  std::getline(lines, header);
  std::getline(lines, first);
  EXPECT_EQ(header.rfind("workload,sc_policy,tune,seed,total_gpus,0,1,", 0), 0U);
  EXPECT_TRUE(header.ends_with(",129,130,policy,failed_pods,unallocated_gpus_at_130,wall_ms"))
      << header;
  std::string expected = "w,06-FGD,1.3,1,8";
  for (int x = 0; x <= 130; ++x) {
    expected += ",";
    if (x == 5) expected += "1.50";
    if (x == 100) expected += "90.00";
    if (x == 130) expected += "92.00";
  }
  expected += ",fgd,1,0.250,0.0";
  EXPECT_EQ(first, expected);
}

TEST(WriteJson, WritesConfigRunsAndSummaryWithWallTimesOff) {
  std::ostringstream out;
  WriteJson(out, HandMadeResults(), HandMadeContext());
  const auto j = nlohmann::json::parse(out.str());
  EXPECT_EQ(j["tool"], "gpumux simulate");
  EXPECT_EQ(j["config"]["workload"], "w");
  EXPECT_EQ(j["config"]["cluster_gpus"], 8);
  EXPECT_EQ(j["config"]["seeds"], nlohmann::json::array({1, 2}));
  EXPECT_TRUE(j["config"]["replay"].is_null());
  ASSERT_EQ(j["runs"].size(), 3U);
  const auto& run = j["runs"][0];
  EXPECT_EQ(run["policy"], "fgd");
  EXPECT_EQ(run["seed"], 1);
  EXPECT_EQ(run["alloc_pct_at_130"], 92.0);
  EXPECT_EQ(run["wall_ms"], 0.0);
  EXPECT_EQ(run["alloc_curve"].size(), 131U);
  EXPECT_TRUE(run["alloc_curve"][0].is_null());
  EXPECT_FALSE(run.contains("replay_mismatches"));
  EXPECT_FALSE(run.contains("study_alloc_pct_at_130")) << "no expected table given";
  ASSERT_EQ(j["summary"].size(), 2U);
  EXPECT_EQ(j["summary"][0]["alloc_pct_at_130_mean"], 94.0);
  EXPECT_EQ(j["summary"][0]["alloc_pct_at_130_std"], 2.8284);
}

TEST(WriteJson, WallTimesAppearWhenTimingIsOn) {
  ReportContext ctx = HandMadeContext();
  ctx.timing = true;
  std::ostringstream out;
  WriteJson(out, HandMadeResults(), ctx);
  const auto j = nlohmann::json::parse(out.str());
  EXPECT_EQ(j["runs"][0]["wall_ms"], 30.0);
}

TEST(WriteTable, ShowsEachPolicyWithMeanAndSpread) {
  std::ostringstream out;
  WriteTable(out, HandMadeResults(), HandMadeContext());
  const std::string t = out.str();
  EXPECT_NE(t.find("w on 2 nodes / 8 GPUs, load 1.3, seeds 1,2"), std::string::npos) << t;
  EXPECT_NE(t.find("alloc@130"), std::string::npos);
  EXPECT_NE(t.find("fgd"), std::string::npos);
  EXPECT_NE(t.find("94.00 ± 2.83"), std::string::npos) << t;
  EXPECT_NE(t.find("best-fit"), std::string::npos);
}

TEST(WritePlacements, WritesTheStudysArrivalFormatWithRankPrefixes) {
  auto w = MakeWorkload(
      "w", ClusterBuilder().Node("n-a", 8000, 8192).Gpus(2).Node("n-b", 8000, 8192).Gpus(2).Specs(),
      {RequestBuilder("p").Gpus(2)});
  ASSERT_TRUE(w.has_value());
  ArrivalPlan plan;
  plan.node_rank = {3, 12};
  ExperimentResult r;
  r.placements = {PlacementRecord{0, "p", "p", 1, {0, 1}},
                  PlacementRecord{1, "p-tuned-0", "p", -1, {}}};
  test::ScratchDir dir;
  const std::string path = (dir.path() / "placements.csv").string();
  ASSERT_TRUE(WritePlacements(path, r, *w, plan).has_value());
  EXPECT_EQ(ReadFile(path),
            "seq,pod,source_pod,node,gpu_index\n"
            "0,p,p,0012-n-b,0-1\n"
            "1,p-tuned-0,p,,\n");
  auto bad = WritePlacements((dir.path() / "no" / "such" / "dir.csv").string(), r, *w, plan);
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().code, core::ErrorCode::kIo);
}

TEST(WriteReportDir, WritesIndexResultsAndCurves) {
  test::ScratchDir dir;
  const std::string out = (dir.path() / "report").string();
  auto written = WriteReportDir(out, HandMadeResults(), HandMadeContext());
  ASSERT_TRUE(written.has_value()) << written.error().message;
  const std::string index = ReadFile(out + "/index.html");
  EXPECT_NE(index.find("<svg"), std::string::npos);
  EXPECT_NE(index.find("fgd"), std::string::npos);
  const auto results = nlohmann::json::parse(ReadFile(out + "/results.json"));
  EXPECT_EQ(results["runs"].size(), 3U);
  std::ostringstream csv;
  WriteCsv(csv, HandMadeResults(), HandMadeContext());
  EXPECT_EQ(ReadFile(out + "/curves.csv"), csv.str());
}

// ---------------------------------------------------------------- one look per policy

using report_palette::kDotted;
using report_palette::LineLook;
using report_palette::PolicyLook;
using report_palette::PolicyLooks;
using testing_looks::SeenLooks;
using testing_looks::Text;

std::vector<std::string> BuiltinNames() { return policy::BuiltinPolicies().names(); }

TEST(PolicyLook, GivesEveryBuiltinPolicyALookNoOtherPolicyHas) {
  std::map<std::string, std::string> owner;  // look -> policy
  for (const std::string& name : BuiltinNames()) {
    const auto [it, fresh] = owner.emplace(Text(PolicyLook(name)), name);
    EXPECT_TRUE(fresh) << name << " looks like " << it->second << ": " << it->first;
  }
  EXPECT_EQ(owner.size(), BuiltinNames().size());
}

TEST(PolicyLook, GivesEachDefaultRunsPoliciesColoursOfTheirOwn) {
  // `gpumux simulate` runs every policy without co-location state; `--workload dl` runs these
  // four (src/cli). Within each, not even the colours repeat.
  const std::vector<std::string> fgd = policy::BuiltinPolicies().names(policy::Workload::kPods);
  const std::vector<std::string> dl =
      policy::BuiltinPolicies().names(policy::Workload::kTrainingJobs);
  ASSERT_FALSE(fgd.empty());
  ASSERT_FALSE(dl.empty());
  for (const auto& run : {fgd, dl}) {
    std::set<std::string_view> colours;
    for (const auto& name : run) {
      EXPECT_TRUE(colours.insert(PolicyLook(name).colour).second) << name;
    }
  }
}

TEST(PolicyLooks, AreTheSameWhicheverPoliciesRunTogetherAndInWhateverOrder) {
  const std::vector<std::string> all = BuiltinNames();
  const std::vector<LineLook> looks = PolicyLooks(all);
  const std::vector<std::string> reversed(all.rbegin(), all.rend());
  const std::vector<LineLook> reversed_looks = PolicyLooks(reversed);
  for (std::size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(PolicyLooks({all[i]})[0], looks[i]) << all[i];
    EXPECT_EQ(reversed_looks[all.size() - 1 - i], looks[i]) << all[i];
  }
}

TEST(PolicyLooks, KeepNamesOutsideTheTableApartFromEachOtherAndFromTheBuiltins) {
  std::vector<std::string> names = BuiltinNames();
  for (int i = 0; i < 9; ++i) names.push_back("custom-" + std::to_string(i));
  names.push_back("custom-3");  // named twice: one policy, one look
  const std::vector<LineLook> looks = PolicyLooks(names);
  std::set<std::string> distinct;
  for (std::size_t i = 0; i + 1 < names.size(); ++i) {
    EXPECT_TRUE(distinct.insert(Text(looks[i])).second) << names[i];
    if (names[i].starts_with("custom-")) {
      EXPECT_EQ(looks[i].dash, kDotted) << names[i];
    }
  }
  EXPECT_EQ(looks.back(), looks[BuiltinNames().size() + 3]);
  EXPECT_EQ(PolicyLook("custom-3"), PolicyLook("custom-3"));
}

// The index.html of one hand-made run per policy.
std::string PageOfOneRunPer(const std::vector<std::string>& policies) {
  std::vector<ExperimentResult> results;
  for (std::size_t i = 0; i < policies.size(); ++i) {
    const double a = 80 + static_cast<double>(i);
    results.push_back(HandMadeRun(policies[i], 1, a, a + 0.5, 10));
  }
  ReportContext ctx = HandMadeContext();
  ctx.policies = policies;
  ctx.seeds = {1};
  test::ScratchDir dir;
  const std::string out = (dir.path() / "report").string();
  EXPECT_TRUE(WriteReportDir(out, results, ctx).has_value());
  return ReadFile(out + "/index.html");
}

TEST(WriteReportDir, DrawsEveryPolicyInItsOwnLookInTheChartsTheLegendsAndTheTable) {
  // Both charts draw a curve and a legend entry per policy; the tables key every row.
  testing_looks::ExpectOneLookPerPolicy(PageOfOneRunPer(BuiltinNames()), BuiltinNames());
}

TEST(WriteReportDir, DrawsAPolicyInTheSameLookWhicheverPoliciesRanWithIt) {
  // Before: the colour was the policy's index in the run, so spread took random's blue.
  auto looks_of_spread = [](const std::vector<std::string>& policies) {
    std::set<std::string> looks;
    for (const auto& s : SeenLooks(PageOfOneRunPer(policies))) {
      if (s.policy == "spread") looks.insert(Text(s));
    }
    return looks;
  };
  const auto alone = looks_of_spread({"spread"});
  EXPECT_EQ(alone, std::set<std::string>{Text(PolicyLook("spread"))});
  EXPECT_EQ(looks_of_spread({"random", "dotprod", "spread"}), alone);
  EXPECT_EQ(looks_of_spread(BuiltinNames()), alone);
}

}  // namespace
}  // namespace gpumux::sim
