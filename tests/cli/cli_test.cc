#include "gpumux/cli/cli.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "gpumux/policy/registry.h"
#include "tests/cli/cli_fixtures.h"
#include "tests/testing/builders.h"

namespace gpumux::cli {
namespace {

// A small trace: three nodes (one CPU-only), a dozen pods.
constexpr const char* kNodes =
    "sn,cpu_milli,memory_mib,gpu,model\n"
    "n0,32000,65536,2,T4\n"
    "n1,64000,131072,4,V100M32\n"
    "n2,16000,32768,0,\n";
constexpr const char* kPods =
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
    "p00,4000,8192,1,500,\n"
    "p01,8000,8192,1,1000,\n"
    "p02,2000,4096,0,0,\n"
    "p03,4000,8192,1,250,T4\n"
    "p04,4000,8192,2,1000,V100M32\n"
    "p05,1000,1024,1,300,\n"
    "p06,1000,1024,1,700,\n"
    "p07,6000,8192,1,1000,\n"
    "p08,0,512,0,0,\n"
    "p09,2000,2048,1,600,T4|V100M32\n"
    "p10,2000,2048,1,100,\n"
    "p11,16000,32768,1,1000,\n";

TEST(Cli, HelpExitsZeroAndListsTheSubcommands) {
  const CliRun r = Gpumux({"--help"});
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("simulate"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("policies"), std::string::npos);
  EXPECT_EQ(r.err, "");
}

TEST(Cli, SimulateHelpExitsZeroAndDescribesTheFlags) {
  const CliRun r = Gpumux({"simulate", "--help"});
  EXPECT_EQ(r.code, 0);
  for (const char* flag :
       {"--policy", "--seeds", "--load", "--format", "--replay", "--no-report"}) {
    EXPECT_NE(r.out.find(flag), std::string::npos) << flag;
  }
}

TEST(Cli, NoArgumentsShowTheUsage) {
  const CliRun r = Gpumux({});
  EXPECT_EQ(r.code, 0);
  EXPECT_NE((r.out + r.err).find("simulate"), std::string::npos) << r.out << r.err;
}

TEST(Cli, VersionExitsZero) {
  const CliRun r = Gpumux({"--version"});
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out.rfind("gpumux ", 0), 0U) << r.out;
}

class CliUsageError : public ::testing::TestWithParam<UsageCase> {};

TEST_P(CliUsageError, ExitsTwoWithAMessage) { ExpectUsageError(GetParam()); }

INSTANTIATE_TEST_SUITE_P(
    Table, CliUsageError,
    ::testing::Values(
        UsageCase{"an_unknown_subcommand", {"frobnicate"}, {"gpumux: ", "--help"}},
        UsageCase{"an_unknown_flag", {"simulate", "--frob"}, {"--frob"}},
        // CLI11 reports the missing subcommand first ("A subcommand is required"), so the
        // message does not name --frob.
        UsageCase{"an_unknown_top_level_flag", {"--frob"}, {"gpumux: ", "--help"}},
        UsageCase{"an_unknown_policy",
                  {"simulate", "--policy", "nosuch"},
                  {"unknown policy 'nosuch'", "random", "dotprod", "gpu-clustering", "gpu-packing",
                   "best-fit", "fgd", "exclusive"}},
        UsageCase{"one_unknown_policy_among_known_ones",
                  {"simulate", "--policy", "fgd,nosuch"},
                  {"unknown policy 'nosuch'"}},
        UsageCase{"a_seed_with_letters",
                  {"simulate", "--seeds", "4x"},
                  {"--seeds: '4x' is not a non-negative integer"}},
        UsageCase{"a_descending_seed_range",
                  {"simulate", "--seeds", "9-3"},
                  {"--seeds: bad range '9-3'"}},
        UsageCase{"a_negative_seed", {"simulate", "--seeds", "-1"}, {"--seeds"}},
        UsageCase{"an_empty_seed_in_a_list", {"simulate", "--seeds", "1,,2"}, {"--seeds"}},
        UsageCase{"a_zero_load", {"simulate", "--load", "0"}, {"--load"}},
        UsageCase{"an_unknown_format", {"simulate", "--format", "xml"}, {"--format"}},
        UsageCase{"a_replay_folder_without_its_files",
                  {"simulate", "--policy", "fgd", "--replay", "/nonexistent/replay", "--no-report"},
                  {"--replay: /nonexistent/replay/arrival.csv: cannot open"}},
        UsageCase{"placements_with_two_policies",
                  {"simulate", "--policy", "fgd,random", "--placements", "x.csv"},
                  {"--placements needs exactly one policy"}}),
    test::CaseName());

TEST(Cli, APodListWithABadRowExitsTwoNamingFileAndLine) {
  test::ScratchDir dir;
  const std::string pods = dir.Write("pods.csv", std::string(kPods) + "p12,1000,1024,1,half,\n");
  const CliRun r = Gpumux({"simulate", "--pods", pods, "--no-report", "-q"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find(pods + ":14: column 'gpu_milli': 'half' is not an integer"),
            std::string::npos)
      << r.err;
}

// Issue 33: what a new user types wrong gets gpumux's words, not the parser's.
TEST(Cli, AMistypedOptionNamesTheCommandAndTheClosestOption) {
  CliRun r = Gpumux({"simulate", "--polcy", "fgd"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "gpumux simulate: unknown option --polcy (did you mean --policy?)\n"
            "Run 'gpumux simulate --help' for its options.\n");
  r = Gpumux({"inspect", "nodes", "--kubeconfg=x"});  // an option of the command above
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("gpumux inspect nodes: unknown option --kubeconfg (did you mean "
                       "--kubeconfig?)"),
            std::string::npos)
      << r.err;
  r = Gpumux({"jobgen", "--zzzzzz"});  // nothing close
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err.find("did you mean"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("gpumux jobgen: unknown option --zzzzzz"), std::string::npos) << r.err;
}

TEST(Cli, ABinaryNodeListIsNotEchoedToTheTerminal) {
  test::ScratchDir dir;
  const std::string path = dir.Write("nodes.csv", std::string("\x1b[2J\x00\x01"
                                                              "binary\xff\n",
                                                              14) +
                                                      "n0,1,2\n");
  const CliRun r = Gpumux({"simulate", "--nodes", path, "--no-report", "-q"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find(path + ":1: binary data, not CSV text (it begins '\\x1b[2J\\x00\\x01"
                              "binary\\xff')"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find('\x1b'), std::string::npos);
}

TEST(Cli, AnOutputInAFolderThatDoesNotExistNamesTheFolder) {
  test::ScratchDir dir;
  const std::string out = (dir.path() / "absent" / "jobs.csv").string();
  const CliRun r = Gpumux({"jobgen", "-o", out});
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find(out + ": cannot write: no folder " + (dir.path() / "absent").string()),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find(".tmp"), std::string::npos) << r.err;
}

TEST(Cli, AMissingNodeListExitsTwoNamingThePath) {
  test::ScratchDir dir;
  const std::string path = (dir.path() / "absent.csv").string();
  const CliRun r = Gpumux({"simulate", "--nodes", path, "--no-report", "-q"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find(path + ": cannot open"), std::string::npos) << r.err;
}

TEST(Cli, AMissingExpectFileExitsTwo) {
  test::ScratchDir dir;
  const std::string nodes = dir.Write("nodes.csv", kNodes);
  const std::string pods = dir.Write("pods.csv", kPods);
  const CliRun r = Gpumux({"simulate", "--nodes", nodes, "--pods", pods, "--expect",
                           (dir.path() / "nope.csv").string(), "--no-report", "-q"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("nope.csv"), std::string::npos) << r.err;
}

TEST(Cli, SimulateFgdOnTheDefaultTracePrintsJson) {
  const CliRun r = Gpumux({"simulate", "--policy", "fgd", "--seeds", "42", "--format", "json",
                           "--no-report", "--no-timing", "-q"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "") << "-q prints nothing on stderr";
  nlohmann::json j;
  ASSERT_NO_THROW(j = nlohmann::json::parse(r.out)) << r.out;
  ASSERT_TRUE(j["runs"].is_array());
  ASSERT_EQ(j["runs"].size(), 1U);
  const auto& run = j["runs"][0];
  for (const char* key : {"policy", "seed", "alloc_pct_at_100", "alloc_pct_at_130",
                          "unallocated_gpus_at_130", "failed_pods", "wall_ms"}) {
    EXPECT_TRUE(run.contains(key)) << key;
  }
  EXPECT_EQ(run["policy"], "fgd");
  EXPECT_EQ(run["seed"], 42);
  EXPECT_EQ(run["wall_ms"], 0.0) << "--no-timing";
  EXPECT_TRUE(run["alloc_pct_at_130"].is_number());
  EXPECT_GT(run["alloc_pct_at_130"].get<double>(), 80.0);
  EXPECT_LE(run["alloc_pct_at_130"].get<double>(), 100.0);
  EXPECT_EQ(j["config"]["cluster_nodes"], 1213);
  EXPECT_EQ(j["config"]["cluster_gpus"], 6212);
  EXPECT_EQ(j["config"]["workload"], "openb_pod_list_default");
  EXPECT_TRUE(run["study_alloc_pct_at_130"].is_number())
      << "the embedded expected results are used with the embedded trace";
}

// kube-scheduler's sampling (percentageOfNodesToScore) is named in the output; 100, every node,
// is the study's protocol and leaves the output as it was.
TEST(Cli, SimulateWithSampledNodesSaysSo) {
  const std::vector<std::string> args{"simulate",    "--policy",    "fgd", "--seeds", "42",
                                      "--no-report", "--no-timing", "-q",  "--load",  "0.5"};
  const CliRun every = Gpumux(args);
  auto with = [&](const char* pct, const char* format) {
    std::vector<std::string> a = args;
    a.insert(a.end(), {"--percentage-of-nodes-to-score", pct, "--format", format});
    return Gpumux(a);
  };
  ASSERT_EQ(every.code, 0) << every.err;
  EXPECT_EQ(with("100", "table").out, every.out);
  const CliRun sampled = with("0", "table");
  ASSERT_EQ(sampled.code, 0) << sampled.err;
  EXPECT_NE(sampled.out.find("percentageOfNodesToScore 0 (adaptive)"), std::string::npos)
      << sampled.out;
  const nlohmann::json j = nlohmann::json::parse(with("10", "json").out);
  EXPECT_EQ(j["config"]["percentage_of_nodes_to_score"], 10);
  EXPECT_FALSE(nlohmann::json::parse(with("100", "json").out)["config"].contains(
      "percentage_of_nodes_to_score"));
  // The report page says so too.
  test::ScratchDir dir;
  const std::string report = (dir.path() / "report").string();
  const CliRun page = Gpumux({"simulate", "--policy", "fgd", "--seeds", "42", "-q", "--load", "0.5",
                              "--percentage-of-nodes-to-score", "0", "--out", report});
  ASSERT_EQ(page.code, 0) << page.err;
  std::ifstream html(report + "/index.html");
  const std::string text((std::istreambuf_iterator<char>(html)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("percentageOfNodesToScore 0 (adaptive)"), std::string::npos);
}

TEST(Cli, SimulateWritesTheStudysCsvLayout) {
  test::ScratchDir dir;
  const std::string nodes = dir.Write("nodes.csv", kNodes);
  const std::string pods = dir.Write("openb_pod_list_small.csv", kPods);
  const CliRun r =
      Gpumux({"simulate", "--nodes", nodes, "--pods", pods, "--policy", "best-fit,fgd", "--seeds",
              "1-2", "--format", "csv", "--no-report", "--no-timing", "-q"});
  ASSERT_EQ(r.code, 0) << r.err;
  std::istringstream lines(r.out);
  std::string line;
  std::vector<std::string> rows;
  while (std::getline(lines, line)) rows.push_back(line);
  ASSERT_EQ(rows.size(), 5U) << r.out;
  EXPECT_EQ(rows[0].rfind("workload,sc_policy,tune,seed,total_gpus,0,1,", 0), 0U) << rows[0];
  EXPECT_EQ(rows[1].rfind("openb_pod_list_small,05-BestFit,1.3,1,6,", 0), 0U) << rows[1];
  EXPECT_EQ(rows[2].rfind("openb_pod_list_small,05-BestFit,1.3,2,6,", 0), 0U) << rows[2];
  EXPECT_EQ(rows[3].rfind("openb_pod_list_small,06-FGD,1.3,1,6,", 0), 0U) << rows[3];
  EXPECT_EQ(rows[4].rfind("openb_pod_list_small,06-FGD,1.3,2,6,", 0), 0U) << rows[4];
}

TEST(Cli, SimulateOutputIsByteIdenticalAcrossRunsAndThreadCounts) {
  test::ScratchDir dir;
  const std::string nodes = dir.Write("nodes.csv", kNodes);
  const std::string pods = dir.Write("pods.csv", kPods);
  auto run = [&](const char* threads) {
    return Gpumux({"simulate", "--nodes", nodes, "--pods", pods, "--seeds", "1-3", "--format",
                   "json", "--no-report", "--no-timing", "-q", "--threads", threads});
  };
  const CliRun a = run("1");
  const CliRun b = run("1");
  const CliRun c = run("2");
  ASSERT_EQ(a.code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
  EXPECT_EQ(a.out, c.out);
}

TEST(Cli, SimulatePrintsATableByDefault) {
  test::ScratchDir dir;
  const std::string nodes = dir.Write("nodes.csv", kNodes);
  const std::string pods = dir.Write("pods.csv", kPods);
  const CliRun r = Gpumux(
      {"simulate", "--nodes", nodes, "--pods", pods, "--policy", "study", "--no-report", "-q"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("alloc@130"), std::string::npos) << r.out;
  for (const auto& name : policy::FgdStudyPolicies()) {
    EXPECT_NE(r.out.find(name), std::string::npos) << name;
  }
  EXPECT_EQ(r.out.find("exclusive"), std::string::npos) << "'study' is the six study policies";
}

TEST(Cli, SimulateWritesThePlacementsFileForOneRun) {
  test::ScratchDir dir;
  const std::string nodes = dir.Write("nodes.csv", kNodes);
  const std::string pods = dir.Write("pods.csv", kPods);
  const std::string placements = (dir.path() / "placements.csv").string();
  const CliRun r = Gpumux({"simulate", "--nodes", nodes, "--pods", pods, "--policy", "fgd",
                           "--placements", placements, "--no-report", "-q"});
  ASSERT_EQ(r.code, 0) << r.err;
  std::ifstream in(placements);
  std::string header;
  ASSERT_TRUE(std::getline(in, header));
  EXPECT_EQ(header, "seq,pod,source_pod,node,gpu_index");
  int rows = 0;
  for (std::string line; std::getline(in, line);) ++rows;
  EXPECT_GE(rows, 12) << "every arrival, original pods and copies";
}

TEST(Cli, SimulateWritesTheReportFolder) {
  test::ScratchDir dir;
  const std::string nodes = dir.Write("nodes.csv", kNodes);
  const std::string pods = dir.Write("pods.csv", kPods);
  const std::string report = (dir.path() / "report").string();
  const CliRun r = Gpumux(
      {"simulate", "--nodes", nodes, "--pods", pods, "--policy", "fgd", "--out", report, "-q"});
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* f : {"/index.html", "/results.json", "/curves.csv"}) {
    EXPECT_TRUE(std::filesystem::exists(report + f)) << f;
  }
}

// Grouped by the workload each places (issue 33: which policy is for what), every policy with
// its summary; exclusive, the baseline of both, in both groups.
TEST(Cli, PoliciesListsEveryPolicyWithItsSummaryUnderItsWorkload) {
  const CliRun r = Gpumux({"policies"});
  EXPECT_EQ(r.code, 0);
  std::istringstream lines(r.out);
  std::map<std::string, std::vector<std::string>> listed;  // group title -> names
  std::string group;
  for (std::string line; std::getline(lines, line);) {
    if (line.empty()) continue;
    if (line[0] != ' ') {
      group = line;
      continue;
    }
    std::istringstream words(line);
    std::string name, summary_start;
    words >> name >> summary_start;
    EXPECT_FALSE(summary_start.empty()) << "a summary follows the name: " << line;
    listed[group].push_back(name);
  }
  ASSERT_EQ(listed.size(), 2u) << r.out;
  for (const auto& e : policy::BuiltinPolicies().entries()) {
    int groups = 0;
    for (const auto& [title, names] : listed) {
      const bool dl = title.find("--workload dl") != std::string::npos;
      const bool in = std::count(names.begin(), names.end(), e.name) == 1;
      EXPECT_EQ(in, e.For(dl ? policy::Workload::kTrainingJobs : policy::Workload::kPods))
          << e.name << " under " << title;
      groups += in;
    }
    EXPECT_GE(groups, 1) << e.name;
  }
}

// reliability-repros/simulate-tiny-pod-resample: a 1-milli pod resampled to 1.3 x the cluster
// is one arrival per milli-GPU. Refused before anything runs, naming the flag that raises it.
TEST(Cli, AResampleBeyondMaxArrivalsIsRefusedUpFrontNamingTheFlag) {
  test::ScratchDir dir;
  const std::string nodes = dir.Write("nodes.csv", kNodes);  // 6 GPUs: 7,800 milli at 1.3
  const std::string pods = dir.Write("pods.csv",
                                     "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
                                     "p1,0,0,1,1\n");
  const CliRun refused = Gpumux({"simulate", "--nodes", nodes, "--pods", pods, "--policy",
                                 "best-fit", "--max-arrivals", "5000", "--no-report", "-q"});
  EXPECT_EQ(refused.code, 2);
  EXPECT_EQ(refused.err,
            "gpumux simulate: seed 42: resampling the 1 pod to load 1.3 makes more than 5000 "
            "arrivals, the limit per experiment (--max-arrivals)\n");
  EXPECT_EQ(refused.out, "");
  const CliRun raised =
      Gpumux({"simulate", "--nodes", nodes, "--pods", pods, "--policy", "best-fit",
              "--max-arrivals", "8000", "--no-report", "-q", "--format", "json"});
  ASSERT_EQ(raised.code, 0) << raised.err;
  EXPECT_EQ(nlohmann::json::parse(raised.out)["runs"][0]["pods"], 7800);
}

TEST(Cli, MaxArrivalsIsDocumentedWithItsDefault) {
  const CliRun r = Gpumux({"simulate", "--help"});
  ASSERT_EQ(r.code, 0);
  const std::size_t at = r.out.find("--max-arrivals");
  ASSERT_NE(at, std::string::npos) << r.out;
  EXPECT_NE(r.out.find("1000000", at), std::string::npos) << r.out;
}

struct BoundCase {
  const char* name;
  std::vector<std::string> args;
  std::string message;  // on stderr
};
void PrintTo(const BoundCase& c, std::ostream* os) { *os << c.name; }

class CliSimulateBound : public ::testing::TestWithParam<BoundCase> {};

TEST_P(CliSimulateBound, ExitsTwoNamingTheFlag) {
  std::vector<std::string> args{"simulate", "--no-report", "-q"};
  args.insert(args.end(), GetParam().args.begin(), GetParam().args.end());
  const CliRun r = Gpumux(args);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find(GetParam().message), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
}

INSTANTIATE_TEST_SUITE_P(
    Table, CliSimulateBound,
    ::testing::Values(
        BoundCase{"a_billion_seeds",
                  {"--seeds", "0-999999999"},
                  "--seeds: '0-999999999' gives more "
                  "than 10000 seeds"},
        BoundCase{"many_ranges_adding_up_past_the_limit",
                  {"--seeds", "0-5000,10000-15000"},
                  "gives more than 10000 seeds"},
        BoundCase{"a_nan_load", {"--load", "nan"}, "--load: nan is not a finite number"},
        BoundCase{"a_million_threads", {"--threads", "1000000"}, "--threads"},
        BoundCase{"no_arrivals_allowed", {"--max-arrivals", "0"}, "--max-arrivals"},
        BoundCase{"a_percentage_over_100",
                  {"--percentage-of-nodes-to-score", "101"},
                  "--percentage-of-nodes-to-score"},
        BoundCase{"a_folder_as_the_pod_list", {"--pods", "/"}, "/: cannot open: is a directory"},
        BoundCase{"a_folder_as_the_node_list", {"--nodes", "/"}, "/: cannot open: is a directory"},
        BoundCase{"a_folder_as_the_expected_results",
                  {"--expect", "/", "--policy", "fgd"},
                  "/: cannot open: is a directory"}),
    test::CaseName());

// reliability-repros/replay-duplicate-arrival: an arrival listed twice aborted the simulator
// ("internal invariant violated"); now exit 2 naming the file and line.
TEST(Cli, AReplayWithTheSameArrivalTwiceExitsTwoNamingFileAndLine) {
  test::ScratchDir dir;
  const std::string nodes = dir.Write("nodes.csv", kNodes);
  const std::string pods = dir.Write("pods.csv", kPods);
  std::filesystem::create_directory(dir.path() / "replay");
  dir.Write("replay/nodes.csv", "node_prefixed,node,prefix\n0-n0,n0,0\n1-n1,n1,1\n2-n2,n2,2\n");
  const std::string arrivals = dir.Write("replay/arrival.csv",
                                         "seq,pod,source_pod,node,gpu_index\n"
                                         "0,p00,p00,0-n0,0\n"
                                         "0,p00,p00,0-n0,0\n");
  const CliRun r = Gpumux({"simulate", "--nodes", nodes, "--pods", pods, "--policy", "best-fit",
                           "--replay", (dir.path() / "replay").string(), "--no-report", "-q"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "gpumux simulate: --replay: " + arrivals +
                       ":3: seq 0 where 1 is expected (arrivals are numbered 0, 1, 2, ... in row "
                       "order)\n");
}

}  // namespace
}  // namespace gpumux::cli
