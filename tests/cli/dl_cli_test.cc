// `gpumux simulate --workload dl` and `gpumux jobgen`, through gpumux::cli::Main.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "gpumux/cli/cli.h"
#include "gpumux/policy/observations.h"
#include "gpumux/policy/registry.h"
#include "gpumux/sim/dl_workload.h"
#include "tests/cli/cli_fixtures.h"
#include "tests/testing/builders.h"

namespace gpumux::cli {
namespace {

// `simulate --workload dl --no-report -q` plus `extra`.
CliRun SimulateDl(std::vector<std::string> extra) {
  std::vector<std::string> args{"simulate", "--workload", "dl", "--no-report", "-q"};
  args.insert(args.end(), extra.begin(), extra.end());
  return Gpumux(args);
}

const std::vector<std::string> kPolicies =
    policy::BuiltinPolicies().names(policy::Workload::kTrainingJobs);

TEST(DlCli, EachPolicysOwnLeversAreAnExplicitChoice) {
  const CliRun r = SimulateDl(
      {"--count", "20", "--loads", "1", "--queue", "auto", "--tuner", "auto", "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  std::map<std::string, std::pair<std::string, std::string>> levers;
  for (const auto& run : j["runs"]) levers[run["policy"]] = {run["tuner"], run["queue"]};
  EXPECT_EQ(levers["exclusive"], (std::pair<std::string, std::string>{"none", "fifo"}));
  EXPECT_EQ(levers["iadeep"], (std::pair<std::string, std::string>{"iadeep", "fifo"}));
  EXPECT_EQ(levers["least-delay"], (std::pair<std::string, std::string>{"joint", "shortest"}));
}

TEST(DlCli, TheTableShowsEveryDefaultPolicyAtEveryLoadAndTheMargin) {
  const CliRun r = SimulateDl({"--count", "40", "--loads", "1,2"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "") << "-q prints nothing on stderr";
  EXPECT_NE(r.out.find("40 generated jobs"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("mix uniform"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("profile: iadeep-rtx3090-fitted (embedded); truth: "
                       "iadeep-rtx3090-measured-truth (embedded)"),
            std::string::npos)
      << "the policies believe the fitted profile; the GPUs do what IADeep measured\n"
      << r.out;
  EXPECT_NE(r.out.find("20 GPUs"), std::string::npos) << r.out;
  const std::size_t one = r.out.find("\nload 1x\n");
  const std::size_t two = r.out.find("\nload 2x\n");
  ASSERT_NE(one, std::string::npos) << r.out;
  ASSERT_NE(two, std::string::npos) << r.out;
  ASSERT_LT(one, two);
  for (const std::string& section : {r.out.substr(one, two - one), r.out.substr(two)}) {
    std::size_t at = 0;
    for (const auto& p : kPolicies) {
      const std::size_t row = section.find("\n  " + p + " ", at);
      EXPECT_NE(row, std::string::npos) << p << " in:\n" << section;
      if (row != std::string::npos) at = row + 1;  // rows in the policy order
    }
    EXPECT_NE(section.find("\n  least-delay vs iadeep: average JCT "), std::string::npos)
        << section;
    EXPECT_NE(section.find("avg JCT"), std::string::npos) << "a header row";
  }
}

TEST(DlCli, JsonHasOneRunPerPolicyAndLoad) {
  const CliRun r = SimulateDl({"--count", "40", "--loads", "1,2", "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  nlohmann::json j;
  ASSERT_NO_THROW(j = nlohmann::json::parse(r.out)) << r.out;
  ASSERT_TRUE(j["runs"].is_array());
  ASSERT_EQ(j["runs"].size(), 8U);
  EXPECT_EQ(j["policies"], nlohmann::json(kPolicies));
  EXPECT_EQ(j["loads"], nlohmann::json({1.0, 2.0}));
  EXPECT_EQ(j["gpus"], 20);
  EXPECT_EQ(j["seed"], 42);
  EXPECT_EQ(j["mix"], "uniform");
  for (std::size_t i = 0; i < 8; ++i) {
    const auto& run = j["runs"][i];
    SCOPED_TRACE(i);
    EXPECT_EQ(run["policy"], kPolicies[i % 4]) << "load-major, then policy order";
    EXPECT_EQ(run["load"], i < 4 ? 1.0 : 2.0);
    EXPECT_EQ(run["jobs"], 40);
    ASSERT_TRUE(run["metrics"].is_object());
    for (const char* key : {"avg_jct_s", "median_jct_s", "p95_jct_s", "makespan_s", "avg_queue_s",
                            "gpu_busy", "gpu_util", "tuning_sessions", "measurement_windows",
                            "locked_gpu_s", "paused_job_s", "declined"}) {
      EXPECT_TRUE(run["metrics"].contains(key)) << key;
    }
    EXPECT_GT(run["metrics"]["avg_jct_s"].get<double>(), 0);
  }
  // Equal levers by default: every policy with the joint tuner and FIFO.
  for (const auto& run : j["runs"]) {
    EXPECT_EQ(run["tuner"], "joint");
    EXPECT_EQ(run["queue"], "fifo");
  }
  ASSERT_EQ(j["least_delay_margin"].size(), 6U)
      << "least-delay against each other policy at each load";
  EXPECT_EQ(j["least_delay_margin"][0]["baseline"], "exclusive");
  EXPECT_EQ(j["least_delay_margin"][2]["baseline"], "iadeep");
  for (const char* key : {"avg_jct_lower_pct", "p95_jct_lower_pct", "makespan_lower_pct"}) {
    EXPECT_TRUE(j["least_delay_margin"][2][key].is_number()) << key;
  }
}

TEST(DlCli, SeveralSeedsRunEachSeedAndTheTableShowsTheMean) {
  const std::vector<std::string> args{"--seeds", "1-2", "--count",  "20",
                                      "--loads", "1",   "--policy", "first-fit,least-delay"};
  std::vector<std::string> json_args = args;
  json_args.insert(json_args.end(), {"--format", "json"});
  const CliRun r = SimulateDl(json_args);
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["seeds"], nlohmann::json({1, 2}));
  ASSERT_EQ(j["runs"].size(), 4U);
  const int seeds[] = {1, 1, 2, 2};
  for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(j["runs"][i]["seed"], seeds[i]) << i;
  const CliRun table = SimulateDl(args);
  ASSERT_EQ(table.code, 0) << table.err;
  EXPECT_NE(table.out.find("2 seeds (1..2; every figure is the mean over the seeds)"),
            std::string::npos)
      << table.out;
  EXPECT_NE(table.out.find(" of 2 seeds)"), std::string::npos) << table.out;
}

TEST(DlCli, ProfilesAreFilesOrEmbeddedNames) {
  const CliRun assumed = SimulateDl({"--profile", "iadeep5-assumed", "--mix", "iadeep", "--count",
                                     "10", "--loads", "1", "--policy", "first-fit"});
  EXPECT_EQ(assumed.code, 0) << assumed.err;
  EXPECT_NE(assumed.out.find("truth: the same profile"), std::string::npos) << assumed.out;
  const CliRun no_mix = SimulateDl({"--mix", "iadeep", "--count", "10", "--loads", "1"});
  EXPECT_EQ(no_mix.code, 2);
  EXPECT_NE(no_mix.err.find("iadeep5-assumed"), std::string::npos) << no_mix.err;
  const CliRun missing = SimulateDl({"--truth-profile", "nosuch.json", "--count", "10"});
  EXPECT_EQ(missing.code, 2);
  EXPECT_NE(missing.err.find("--truth-profile"), std::string::npos) << missing.err;
  EXPECT_NE(missing.err.find("nosuch.json"), std::string::npos) << missing.err;
  EXPECT_EQ(SimulateDl({"--work-spread", "3"}).code, 2);
}

TEST(DlCli, OutputIsByteIdenticalAcrossRunsAndThreadCounts) {
  const CliRun a = SimulateDl({"--count", "30", "--loads", "1,2", "--format", "json"});
  const CliRun b = SimulateDl({"--count", "30", "--loads", "1,2", "--format", "json"});
  const CliRun c =
      SimulateDl({"--count", "30", "--loads", "1,2", "--format", "json", "--threads", "1"});
  ASSERT_EQ(a.code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
  EXPECT_EQ(a.out, c.out);
  const CliRun t1 = SimulateDl({"--count", "30", "--loads", "1"});
  const CliRun t2 = SimulateDl({"--count", "30", "--loads", "1"});
  ASSERT_EQ(t1.code, 0) << t1.err;
  EXPECT_EQ(t1.out, t2.out);
  const CliRun other =
      SimulateDl({"--count", "30", "--loads", "1,2", "--format", "json", "--seeds", "43"});
  ASSERT_EQ(other.code, 0) << other.err;
  EXPECT_NE(a.out, other.out) << "another seed, another workload";
}

// --seeds 1-2: every (seed, load) input runs under every policy; the runs come seed-major,
// then load, then policy.
TEST(DlCli, SeveralSeedsRunEveryPolicyOnEachSeed) {
  const CliRun r = SimulateDl({"--seeds", "1-2", "--count", "20", "--loads", "1", "--policy",
                               "first-fit,least-delay", "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  nlohmann::json j;
  ASSERT_NO_THROW(j = nlohmann::json::parse(r.out)) << r.out;
  EXPECT_EQ(j["seeds"], nlohmann::json({1, 2}));
  ASSERT_EQ(j["runs"].size(), 4U);
  const std::vector<std::uint64_t> seeds{1, 1, 2, 2};
  const std::vector<std::string> policies{"first-fit", "least-delay", "first-fit", "least-delay"};
  for (std::size_t i = 0; i < 4; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(j["runs"][i]["seed"], seeds[i]);
    EXPECT_EQ(j["runs"][i]["policy"], policies[i]);
    EXPECT_EQ(j["runs"][i]["jobs"], 20);
  }
  EXPECT_NE(j["runs"][0]["metrics"], j["runs"][2]["metrics"]) << "another seed, another run";
}

TEST(DlCli, TheTableOfSeveralSeedsSaysHowManyAndOnHowManyGpumuxWon) {
  const CliRun r = SimulateDl(
      {"--seeds", "1-2", "--count", "20", "--loads", "1", "--policy", "first-fit,least-delay"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("2 seeds (1..2; every figure is the mean over the seeds)"),
            std::string::npos)
      << r.out;
  const std::size_t margin = r.out.find("\n  least-delay vs first-fit: average JCT ");
  ASSERT_NE(margin, std::string::npos) << r.out;
  const std::string line = r.out.substr(margin + 1, r.out.find('\n', margin + 1) - margin - 1);
  bool counted = false;
  for (const char* wins : {"0", "1", "2"}) {
    counted = counted || line.find(std::string("(average lower on ") + wins + " of 2 seeds)") !=
                             std::string::npos;
  }
  EXPECT_TRUE(counted) << line;
  const CliRun one = SimulateDl(
      {"--seeds", "1", "--count", "20", "--loads", "1", "--policy", "first-fit,least-delay"});
  ASSERT_EQ(one.code, 0) << one.err;
  EXPECT_NE(one.out.find("seed 1\n"), std::string::npos) << one.out;
  EXPECT_EQ(one.out.find("of 1 seeds"), std::string::npos) << "no count for one seed";
}

// The policy was called "gpumux" before its name collided with the product's in every report;
// the old name still runs it, and the results carry the new one.
TEST(DlCli, TheOldPolicyNameRunsLeastDelayUnderItsNewName) {
  const CliRun r = SimulateDl({"--seeds", "1", "--count", "20", "--loads", "1", "--policy",
                               "first-fit,gpumux", "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["policies"], nlohmann::json({"first-fit", "least-delay"}));
  EXPECT_EQ(j["runs"][1]["policy"], "least-delay");
  ASSERT_EQ(j["least_delay_margin"].size(), 1U);
  EXPECT_EQ(r.out.find("\"gpumux\""), std::string::npos) << "no result under the old name";
}

TEST(DlCli, AnEmbeddedProfileRunsByItsName) {
  const CliRun r = SimulateDl({"--profile", "iadeep5-assumed", "--mix", "iadeep", "--count", "10",
                               "--loads", "1", "--policy", "exclusive,least-delay"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("profile: iadeep-rtx3090-derived (embedded); truth: the same profile"),
            std::string::npos)
      << "a profile of its own classes: its own truth\n"
      << r.out;
  const CliRun truth =
      SimulateDl({"--profile", "iadeep-fitted", "--truth-profile", "iadeep-measured", "--count",
                  "10", "--loads", "1", "--policy", "exclusive"});
  ASSERT_EQ(truth.code, 0) << truth.err;
  EXPECT_NE(truth.out.find("truth: iadeep-rtx3090-measured-truth (embedded)"), std::string::npos)
      << truth.out;
}

TEST(DlCli, TheJobsCsvOfSeveralSeedsEndsEveryRowWithItsSeed) {
  test::ScratchDir dir;
  const std::string report = (dir.path() / "report").string();
  const CliRun r = Gpumux({"simulate", "--workload", "dl", "--seeds", "1-2", "--count", "5",
                           "--loads", "1", "--policy", "exclusive", "--out", report, "-q"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto rows = Lines(ReadFile(report + "/jobs.csv"));
  ASSERT_EQ(rows.size(), 1U + 2U * 5U);
  EXPECT_EQ(rows[0].substr(rows[0].rfind(',')), ",seed") << rows[0];
  for (std::size_t i = 1; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i].substr(rows[i].rfind(',')), i <= 5 ? ",1" : ",2") << rows[i];
  }
}

TEST(DlCli, JobgenPrintsAHeaderAndOneRowPerJob) {
  const CliRun r = Gpumux({"jobgen", "--count", "5"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  const auto lines = Lines(r.out);
  ASSERT_EQ(lines.size(), 6U) << r.out;
  EXPECT_EQ(lines[0], "job,class,submit_s,gpu_mib");
  for (int i = 1; i <= 5; ++i) {
    EXPECT_EQ(lines[static_cast<std::size_t>(i)].rfind("j000" + std::to_string(i) + ",", 0), 0U)
        << lines[static_cast<std::size_t>(i)];
    EXPECT_EQ(std::count(lines[static_cast<std::size_t>(i)].begin(),
                         lines[static_cast<std::size_t>(i)].end(), ','),
              3);
  }
  EXPECT_EQ(lines[1].find(",0.000000,"), lines[1].find(',', lines[1].find(',') + 1))
      << "the first job arrives at 0: " << lines[1];
  EXPECT_EQ(Gpumux({"jobgen", "--count", "5"}).out, r.out) << "deterministic";
  EXPECT_NE(Gpumux({"jobgen", "--count", "5", "--seed", "43"}).out, r.out);
}

TEST(DlCli, JobgenHonoursTheMixArrivalAndMemoryOptions) {
  test::ScratchDir dir;
  const std::string times = dir.Write("times.txt", "# seconds\n0\n4\n10\n");
  const CliRun r = Gpumux({"jobgen", "--count", "3", "--mix", "alexnet=1", "--arrival", times,
                           "--load", "2", "--min-gib", "6", "--max-gib", "6"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out,
            "job,class,submit_s,gpu_mib\n"
            "j0001,alexnet,0.000000,6144\n"
            "j0002,alexnet,2.000000,6144\n"
            "j0003,alexnet,5.000000,6144\n");
}

TEST(DlCli, JobgenWritesTheFileGivenWithDashO) {
  test::ScratchDir dir;
  const std::string path = (dir.path() / "jobs.csv").string();
  const CliRun r = Gpumux({"jobgen", "--count", "7", "--seed", "9", "-o", path});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "") << "the file, not stdout";
  const CliRun printed = Gpumux({"jobgen", "--count", "7", "--seed", "9"});
  EXPECT_EQ(ReadFile(path), printed.out);
  EXPECT_EQ(Lines(ReadFile(path)).size(), 8U);
}

TEST(DlCli, SimulateRunsAJobFileWrittenByJobgen) {
  test::ScratchDir dir;
  const std::string path = (dir.path() / "jobs.csv").string();
  ASSERT_EQ(Gpumux({"jobgen", "--count", "12", "--seed", "3", "-o", path}).code, 0);
  const CliRun r = SimulateDl(
      {"--jobs", path, "--loads", "1,2", "--policy", "exclusive,least-delay", "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  nlohmann::json j;
  ASSERT_NO_THROW(j = nlohmann::json::parse(r.out)) << r.out;
  ASSERT_EQ(j["runs"].size(), 4U);
  for (const auto& run : j["runs"]) EXPECT_EQ(run["jobs"], 12);
  EXPECT_EQ(j["workload"], path + " (12 jobs)");
  EXPECT_EQ(j["mix"], "from the job list");
  EXPECT_EQ(j["policies"], nlohmann::json({"exclusive", "least-delay"}));
  ASSERT_EQ(j["least_delay_margin"].size(), 2U) << "least-delay against exclusive at each load";
  EXPECT_EQ(j["least_delay_margin"][0]["baseline"], "exclusive");
}

TEST(DlCli, EachLoadDividesTheSubmitTimesOfAJobFile) {
  test::ScratchDir dir;
  const std::string jobs = dir.Write("jobs.csv",
                                     "job,class,submit_s,gpu_mib\n"
                                     "a,vgg16,0,6144\n"
                                     "b,neumf,10.000001,4096\n");
  const std::string report = (dir.path() / "report").string();
  const CliRun r = Gpumux({"simulate", "--workload", "dl", "--jobs", jobs, "--loads", "1,2",
                           "--policy", "exclusive", "--out", report, "-q"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto rows = Lines(ReadFile(report + "/jobs.csv"));
  ASSERT_EQ(rows.size(), 5U);
  EXPECT_EQ(rows[0].rfind("load,policy,job,class,submit_s,start_s,finish_s,jct_s,queue_s,gpu,", 0),
            0U)
      << rows[0];
  EXPECT_EQ(rows[2].rfind("1,exclusive,b,neumf,10.000001,10.000001,", 0), 0U) << rows[2];
  EXPECT_EQ(rows[4].rfind("2,exclusive,b,neumf,5.000001,5.000001,", 0), 0U)
      << "10.000001 / 2, rounded half away: " << rows[4];
}

TEST(DlCli, SimulateWritesTheReportFolder) {
  test::ScratchDir dir;
  const std::string report = (dir.path() / "report").string();
  const CliRun r = Gpumux(
      {"simulate", "--workload", "dl", "--count", "10", "--loads", "1", "--out", report, "-q"});
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* f : {"/index.html", "/results.json", "/jobs.csv"}) {
    EXPECT_TRUE(std::filesystem::is_regular_file(report + f)) << f;
  }
  nlohmann::json j;
  ASSERT_NO_THROW(j = nlohmann::json::parse(ReadFile(report + "/results.json")));
  EXPECT_EQ(j["runs"].size(), 4U);
  EXPECT_EQ(Lines(ReadFile(report + "/jobs.csv")).size(), 1U + 4U * 10U)
      << "a header and a row per (load, policy, job)";
  EXPECT_NE(ReadFile(report + "/index.html").find("<html"), std::string::npos);
}

TEST(DlCli, NoReportWithOutIsAContradictionNotAnIgnoredFlag) {
  test::ScratchDir dir;
  const std::string report = (dir.path() / "report").string();
  const CliRun r = SimulateDl({"--count", "5", "--loads", "1", "--out", report});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "gpumux simulate: --out and --no-report contradict each other: --no-report writes "
            "no report folder\n");
  EXPECT_FALSE(std::filesystem::exists(report));
}

TEST(DlCli, WithoutQuietTheSummaryGoesToStderr) {
  test::ScratchDir dir;
  const std::string report = (dir.path() / "report").string();
  const CliRun r = Gpumux({"simulate", "--workload", "dl", "--count", "5", "--loads", "1",
                           "--policy", "exclusive", "--out", report});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("report written to " + report + "/index.html"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("gpumux simulate: 1 simulation in "), std::string::npos)
      << "one simulation, singular: " << r.err;
  EXPECT_EQ(r.out.find("report written"), std::string::npos) << "stdout is the table alone";
}

TEST(DlCli, SimulateHelpDescribesTheDlOptions) {
  const CliRun r = Gpumux({"simulate", "--help"});
  EXPECT_EQ(r.code, 0);
  for (const char* flag :
       {"--workload", "--jobs", "--profile", "--mix", "--count", "--loads", "--tuner", "--gpus",
        "--max-jobs-per-gpu", "--model-error", "--reconfigure-s", "--measure-noise"}) {
    EXPECT_NE(r.out.find(flag), std::string::npos) << flag;
  }
  const CliRun j = Gpumux({"jobgen", "--help"});
  EXPECT_EQ(j.code, 0);
  for (const char* flag : {"--count", "--mix", "--arrival", "--rate", "--load", "--min-gib",
                           "--max-gib", "--seed", "--out"}) {
    EXPECT_NE(j.out.find(flag), std::string::npos) << flag;
  }
}

class DlCliUsageError : public ::testing::TestWithParam<UsageCase> {};

TEST_P(DlCliUsageError, ExitsTwoNamingTheProblem) { ExpectUsageError(GetParam()); }

std::vector<std::string> Dl(std::vector<std::string> extra) {
  std::vector<std::string> args{"simulate", "--workload", "dl", "--no-report",
                                "-q",       "--count",    "5"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

INSTANTIATE_TEST_SUITE_P(
    Table, DlCliUsageError,
    ::testing::Values(
        UsageCase{"an_unknown_class_in_the_mix",
                  Dl({"--mix", "bert=1"}),
                  {"gpumux simulate: ", "no workload class 'bert'"}},
        UsageCase{"an_unknown_named_mix", Dl({"--mix", "heavy"}), {"'heavy' is not class=weight"}},
        UsageCase{"loads_that_are_not_numbers",
                  Dl({"--loads", "abc"}),
                  {"--loads: 'abc' is not a load factor"}},
        UsageCase{"a_zero_load", Dl({"--loads", "1,0"}), {"--loads: '0'"}},
        UsageCase{"an_empty_load_in_a_list", Dl({"--loads", "1,,2"}), {"--loads: ''"}},
        UsageCase{"a_missing_job_file",
                  {"simulate", "--workload", "dl", "--no-report", "-q", "--jobs",
                   "/nonexistent/jobs.csv"},
                  {"/nonexistent/jobs.csv: cannot open"}},
        UsageCase{"a_missing_profile",
                  Dl({"--profile", "/nonexistent/profile.json"}),
                  {"/nonexistent/profile.json: cannot open",
                   "no embedded profile has this name (iadeep-fitted"}},
        UsageCase{"fgd_pods_with_the_dl_workload",
                  Dl({"--pods", "pods.csv"}),
                  {"--pods belongs to --workload fgd and does not apply to --workload dl"}},
        UsageCase{"fgd_nodes_with_the_dl_workload",
                  Dl({"--nodes", "nodes.csv"}),
                  {"--nodes belongs to --workload fgd"}},
        UsageCase{"a_bad_seed", Dl({"--seeds", "x"}), {"--seeds: 'x'"}},
        UsageCase{"a_missing_truth_profile",
                  Dl({"--truth-profile", "nosuch.json"}),
                  {"--truth-profile", "nosuch.json"}},
        UsageCase{"the_iadeep_mix_with_the_default_profile",
                  Dl({"--mix", "iadeep"}),
                  {"iadeep5-assumed"}},
        UsageCase{"a_work_spread_above_two", Dl({"--work-spread", "3"}), {"--work-spread"}},
        UsageCase{"a_negative_noise_scale_spread",
                  Dl({"--noise-scale-spread", "-0.5"}),
                  {"--noise-scale-spread"}},
        UsageCase{
            "gpus_not_a_multiple_of_four", Dl({"--gpus", "6"}), {"--gpus must be a multiple of 4"}},
        UsageCase{"csv_on_stdout", Dl({"--format", "csv"}), {"jobs.csv"}},
        UsageCase{"an_unknown_policy", Dl({"--policy", "nosuch"}), {"unknown policy 'nosuch'"}},
        UsageCase{"an_unknown_tuner", Dl({"--tuner", "bogus"}), {"--tuner"}},
        UsageCase{"an_unknown_workload",
                  {"simulate", "--workload", "video", "--no-report"},
                  {"--workload"}},
        UsageCase{"a_zero_count", Dl({"--count", "0"}), {"--count"}},
        UsageCase{"jobgen_with_an_unknown_class",
                  {"jobgen", "--mix", "bert=1"},
                  {"gpumux jobgen: ", "no workload class 'bert'"}},
        UsageCase{"jobgen_with_a_memory_ceiling_below_the_floor",
                  {"jobgen", "--min-gib", "5", "--max-gib", "2"},
                  {"--max-gib is below --min-gib"}},
        UsageCase{"jobgen_with_a_missing_arrival_file",
                  {"jobgen", "--arrival", "/nonexistent/times.txt"},
                  {"--arrival: /nonexistent/times.txt: cannot open"}},
        UsageCase{"jobgen_with_a_zero_count", {"jobgen", "--count", "0"}, {"--count"}},
        UsageCase{"jobgen_with_a_zero_rate", {"jobgen", "--rate", "0"}, {"--rate"}},
        // reliability-repros/jobgen-tiny-rate: submit times overflowed, exit 0.
        UsageCase{"jobgen_with_a_rate_that_overflows_time",
                  {"jobgen", "--rate", "1e-300", "--count", "3"},
                  {"past the largest submit time 999999999999.999999 s", "--rate 1e-300",
                   "raise --rate or --load"}},
        UsageCase{"jobgen_with_a_load_that_overflows_time",
                  {"jobgen", "--load", "1e-300", "--count", "3"},
                  {"--load 1e-300", "raise --rate or --load"}},
        UsageCase{"jobgen_with_a_nan_rate", {"jobgen", "--rate", "nan"}, {"--rate", "nan"}},
        UsageCase{"jobgen_with_an_infinite_rate", {"jobgen", "--rate", "inf"}, {"--rate"}},
        UsageCase{"jobgen_with_a_negative_load", {"jobgen", "--load", "-2"}, {"--load"}},
        UsageCase{"jobgen_with_a_nan_load", {"jobgen", "--load", "nan"}, {"--load"}},
        UsageCase{
            "jobgen_with_more_jobs_than_the_limit", {"jobgen", "--count", "1000001"}, {"--count"}},
        UsageCase{"a_nan_model_error", Dl({"--model-error", "nan"}), {"--model-error"}},
        UsageCase{
            "a_nan_reconfiguration_pause", Dl({"--reconfigure-s", "nan"}), {"--reconfigure-s"}},
        UsageCase{"a_nan_measure_noise", Dl({"--measure-noise", "nan"}), {"--measure-noise"}},
        UsageCase{"a_nan_load_factor", Dl({"--loads", "nan"}), {"--loads: 'nan'"}},
        UsageCase{"more_load_factors_than_the_limit",
                  Dl({"--loads",
                      "1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,"
                      "1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1"}),
                  {"--loads: more than 64 load factors"}},
        UsageCase{"more_jobs_over_all_loads_than_the_limit",
                  {"simulate", "--workload", "dl", "--no-report", "-q", "--count", "1000000",
                   "--loads", "1,2,4"},
                  {"--count 1000000 x 3 load factors (--loads): 3000000 jobs to simulate, more "
                   "than 2000000"}},
        UsageCase{"a_folder_as_the_job_list",
                  {"simulate", "--workload", "dl", "--no-report", "-q", "--jobs", "/"},
                  {"/: cannot open: is a directory"}},
        UsageCase{
            "a_folder_as_the_profile", Dl({"--profile", "/"}), {"/: cannot open: is a directory"}},
        UsageCase{"jobgen_with_a_folder_of_arrivals",
                  {"jobgen", "--arrival", "/"},
                  {"--arrival: /: cannot open: is a directory"}}),
    test::CaseName());

TEST(DlCli, AJobFileWithABadRowExitsTwoNamingFileAndLine) {
  test::ScratchDir dir;
  const std::string jobs = dir.Write("jobs.csv",
                                     "job,class,submit_s,gpu_mib\n"
                                     "a,vgg16,0,6144\n"
                                     "b,bert,1,6144\n");
  const CliRun r = SimulateDl({"--jobs", jobs});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find(jobs + ":3: unknown workload class 'bert'"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
}

TEST(DlCli, AnArrivalFileThatGoesBackInTimeExitsTwoNamingTheLine) {
  test::ScratchDir dir;
  const std::string times = dir.Write("times.txt", "0\n5\n3\n");
  const CliRun r = Gpumux({"jobgen", "--count", "3", "--arrival", times});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find(times + ":3: submit times must not decrease"), std::string::npos) << r.err;
}

// reliability-repros/dl-jobs-submit-overflow: 999999999999.999999 s at --loads 0.001 overflowed
// int64 microseconds and the run then blamed the cluster.
TEST(DlCli, ALoadThatPushesASubmitTimePastTheLargestNamesTheJob) {
  test::ScratchDir dir;
  const std::string jobs = dir.Write("jobs.csv",
                                     "job,class,submit_s,gpu_mib\n"
                                     "j1,alexnet,0,8192\n"
                                     "j2,alexnet,999999999999.999999,8192\n");
  const CliRun r = SimulateDl({"--jobs", jobs, "--policy", "exclusive", "--loads", "0.001"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "gpumux simulate: " + jobs +
                       ": job 'j2': submit time 999999999999.999999 s at load 0.001 becomes 1e+15 "
                       "s, past the largest submit time 999999999999.999999 s (--loads)\n");
  EXPECT_EQ(r.err.find("never ran"), std::string::npos);
}

// reliability-repros/dl-profile-overflow: target_epochs 1e300 passed validation and the run
// never finished; a solo memory of INT64_MAX overflowed a conversion.
TEST(DlCli, AProfileFieldOutOfRangeExitsTwoNamingTheFileAndTheField) {
  test::ScratchDir dir;
  const std::string text(sim::DefaultProfileJson());
  nlohmann::json profile = nlohmann::json::parse(text);
  profile["classes"][0]["target_epochs"] = 1e300;
  const std::string epochs = dir.Write("epochs.json", profile.dump());
  CliRun r = SimulateDl({"--profile", epochs, "--count", "15", "--policy", "exclusive"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "gpumux simulate: " + epochs +
                       ": workload class 'vgg16': target_epochs 1e+300 is outside (0, 1e+06]\n");
  profile = nlohmann::json::parse(text);
  profile["classes"][0]["solo"][0]["memory_mib"] = std::numeric_limits<std::int64_t>::max();
  const std::string memory = dir.Write("memory.json", profile.dump());
  r = SimulateDl({"--profile", memory, "--count", "15", "--policy", "exclusive"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find(memory + ": workload class 'vgg16': solo point 0: memory_mib "
                                "9223372036854775807 is outside 1..4294967296"),
            std::string::npos)
      << r.err;
}

// ---------------------------------------------------------------------------------------------
// Learned interference observations: --observations (added to the belief) and
// --observations-out (what coordinators would have measured).

// The light classes, which the fitted predictor pairs freely, observed to be terrible together.
std::string TerribleLightPairs() {
  const std::vector<std::string> light{"adgcl", "googlenet", "neumf", "squeezenet"};
  const auto& profile = *sim::EmbeddedProfile("iadeep-fitted");
  nlohmann::json list = nlohmann::json::array();
  for (std::size_t i = 0; i < light.size(); ++i) {
    for (std::size_t k = i + 1; k < light.size(); ++k) {
      list.push_back(
          {{"classes", {light[i], light[k]}},
           {"batches",
            {profile.Find(light[i])->default_batch, profile.Find(light[k])->default_batch}},
           {"slowdown", {3.6, 3.9}},
           {"count", 10},
           {"node", "gpu-node-1"}});
    }
  }
  return list.dump();
}

// Runs of (policy, load) in a --format json output, by index.
std::vector<nlohmann::json> Metrics(const CliRun& r) {
  std::vector<nlohmann::json> out;
  const auto j = nlohmann::json::parse(r.out);
  for (const auto& run : j["runs"]) out.push_back(run["metrics"]);
  return out;
}

TEST(DlCli, ObservationsChangeWhatThePoliciesBelieveNeverWhatTheGpusDo) {
  test::ScratchDir dir;
  const std::string obs = dir.Write("obs.json", TerribleLightPairs());
  // first-fit without a tuner reads no belief: its runs are the same with the observations.
  // least-delay reads it: its placements change. Both with the default truth (iadeep-measured) and
  // with the profile as the truth (only --profile): the observations never reach the truth.
  for (const std::vector<std::string>& truth :
       {std::vector<std::string>{}, std::vector<std::string>{"--profile", "iadeep-fitted"}}) {
    std::vector<std::string> args{"--count",  "60",   "--loads",  "2",
                                  "--gpus",   "8",    "--policy", "first-fit,least-delay",
                                  "--queue",  "fifo", "--tuner",  "none",
                                  "--format", "json"};
    args.insert(args.end(), truth.begin(), truth.end());
    SCOPED_TRACE(truth.empty() ? "default truth" : "the profile as the truth");
    const CliRun plain = SimulateDl(args);
    args.insert(args.end(), {"--observations", obs});
    const CliRun learned = SimulateDl(args);
    ASSERT_EQ(plain.code, 0) << plain.err;
    ASSERT_EQ(learned.code, 0) << learned.err;
    const auto a = Metrics(plain);
    const auto b = Metrics(learned);
    ASSERT_EQ(a.size(), 2U);
    ASSERT_EQ(b.size(), 2U);
    EXPECT_EQ(a[0], b[0]) << "first-fit: the same GPUs";
    EXPECT_NE(a[1], b[1]) << "least-delay: another belief";
    const auto j = nlohmann::json::parse(learned.out);
    EXPECT_NE(j["profile"].get<std::string>().find(" + 6 observed sets from " + obs),
              std::string::npos)
        << j["profile"];
    if (!truth.empty()) {
      EXPECT_EQ(j["truth"], "the same profile (without the observations)");
    }
  }
}

TEST(DlCli, ObservationsOutWritesWhatParsesBackAndFeedsAnotherRun) {
  test::ScratchDir dir;
  const std::string out = (dir.path() / "learned.json").string();
  const CliRun learn =
      Gpumux({"simulate", "--workload", "dl", "--no-report", "--count", "60", "--loads", "2",
              "--gpus", "8", "--policy", "iadeep,least-delay", "--observations-out", out});
  ASSERT_EQ(learn.code, 0) << learn.err;
  EXPECT_NE(learn.err.find("observed sets ("), std::string::npos) << learn.err;
  EXPECT_NE(learn.err.find(") written to " + out), std::string::npos) << learn.err;
  std::ifstream in(out);
  std::stringstream text;
  text << in.rdbuf();
  auto observations = policy::ParseObservations(text.str(), out);
  ASSERT_TRUE(observations.has_value()) << observations.error().message;
  ASSERT_FALSE(observations->empty());
  for (const auto& o : *observations) {
    EXPECT_TRUE(policy::CheckObservation(o).has_value()) << policy::SerializeObservation(o);
  }
  const CliRun use =
      Gpumux({"simulate", "--workload", "dl", "--no-report", "--count", "60", "--loads", "2",
              "--gpus", "8", "--policy", "least-delay", "--seeds", "43", "--observations", out});
  ASSERT_EQ(use.code, 0) << use.err;
  const std::string said = "--observations " + out + ": " + std::to_string(observations->size()) +
                           " observations: " + std::to_string(observations->size()) +
                           " observed sets";
  EXPECT_NE(use.err.find(said), std::string::npos) << use.err;
}

TEST(DlCli, BadObservationsExitTwoNamingTheFileAndTheField) {
  test::ScratchDir dir;
  const std::string bad = dir.Write(
      "bad.json",
      R"([{"classes": ["vgg16", "vgg19"], "batches": [512, 256], "slowdown": [1.2, 1.3]}])");
  const CliRun r = SimulateDl({"--count", "5", "--observations", bad});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--observations: " + bad + ": observation 0: \"count\""), std::string::npos)
      << r.err;
  const CliRun missing = SimulateDl({"--count", "5", "--observations", "/nonexistent/obs.json"});
  EXPECT_EQ(missing.code, 2);
  EXPECT_NE(missing.err.find("--observations: /nonexistent/obs.json: no such file"),
            std::string::npos)
      << missing.err;
  const CliRun fgd = Gpumux({"simulate", "--no-report", "--observations", bad});
  EXPECT_EQ(fgd.code, 2);
  EXPECT_NE(fgd.err.find("--observations belongs to --workload dl"), std::string::npos) << fgd.err;
}

}  // namespace
}  // namespace gpumux::cli
