// What every gpumux subcommand promises about its options and help: no option is silently
// ignored (a combination that cannot apply is exit 2 naming both options), every number is
// checked by name (NaN, infinities, negatives, garbage, overflow), every help line fits in 100
// columns, every subcommand has a gpumux help, and each simulation has its own report folder.
// The examples of every --help are run by tests/cli/help_examples.py against the binary.
#include "src/cli/options.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/cli/cli_fixtures.h"
#include "tests/testing/builders.h"

namespace gpumux::cli {
namespace {

constexpr const char* kNodes =
    "sn,cpu_milli,memory_mib,gpu,model\n"
    "n0,32000,65536,2,T4\n"
    "n1,64000,131072,4,V100M32\n";
constexpr const char* kPods =
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
    "p00,4000,8192,1,500,\n"
    "p01,8000,8192,1,1000,T4\n"
    "p02,2000,4096,0,0,\n";

// The subcommands `gpumux --help` lists.
std::vector<std::string> Subcommands() {
  const CliRun r = Gpumux({"--help"});
  std::vector<std::string> names;
  bool in_list = false;
  for (const std::string& line : Lines(r.out)) {
    if (line == "Subcommands:") {
      in_list = true;
    } else if (in_list && line.rfind("  ", 0) == 0 && line.size() > 2 && line[2] != ' ') {
      names.push_back(line.substr(2, line.find(' ', 2) - 2));
    } else if (in_list && line.empty()) {
      break;
    }
  }
  return names;
}

// Runs `args` in `dir` as the working folder (the default report folders are relative).
class InFolder {
 public:
  explicit InFolder(const std::filesystem::path& dir) : old_(std::filesystem::current_path()) {
    std::filesystem::current_path(dir);
  }
  ~InFolder() { std::filesystem::current_path(old_); }
  InFolder(const InFolder&) = delete;
  InFolder& operator=(const InFolder&) = delete;

 private:
  std::filesystem::path old_;
};

// ---------------------------------------------------------------------------------------------
// Help

TEST(Help, ListsEverySubcommand) {
  EXPECT_EQ(Subcommands(), (std::vector<std::string>{
                               "simulate", "bound", "policies", "jobgen", "extender",
                               "device-plugin", "webhook", "hook", "oci-runtime", "enforce", "gpus",
                               "coordinator", "profile", "inspect", "submit", "report", "call"}));
}

TEST(Help, NoLineOfAnyHelpIsWiderThan100Columns) {
  std::vector<std::vector<std::string>> helps{{"--help"}, {}};
  for (const std::string& sub : Subcommands()) helps.push_back({sub, "--help"});
  helps.push_back({"oci-runtime", "-h"});
  for (const auto& args : helps) {
    const CliRun r = Gpumux(args);
    const std::string what = args.empty() ? "gpumux" : "gpumux " + args.front();
    EXPECT_EQ(r.code, 0) << what << ": " << r.err;
    EXPECT_GT(r.out.size(), 100U) << what;
    for (const std::string& line : Lines(r.out)) {
      EXPECT_LE(line.size(), kHelpWidth) << what << ": " << line;
    }
  }
}

TEST(Help, TheTopLevelListShowsOneSummaryPerSubcommand) {
  const CliRun r = Gpumux({"--help"});
  // The hook's stages are in its own help, not in the list.
  EXPECT_EQ(r.out.find("poststop"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Run 'gpumux <command> --help'"), std::string::npos) << r.out;
  EXPECT_NE(Gpumux({"hook", "--help"}).out.find("poststop: release"), std::string::npos);
}

TEST(Help, OciRuntimeHasAGpumuxHelpThatSaysWhereTheRuntimesHelpIs) {
  for (const std::vector<std::string>& args : {std::vector<std::string>{"oci-runtime", "--help"},
                                               {"oci-runtime", "-h"},
                                               {"oci-runtime"}}) {
    const std::string flag = args.size() > 1 ? args[1] : "(no arguments)";
    const CliRun r = Gpumux(args);
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.err, "");
    for (const char* text : {"Usage: gpumux oci-runtime", "runs the real runtime", "GPUMUX_RUNTIME",
                             "GPUMUX_STATE_DIR", "GPUMUX_GPUS_FILE", "--runtime-help",
                             "HOUDINI_GPU_REQUESTED", "gpumux-oci-runtime", "Examples:"}) {
      EXPECT_NE(r.out.find(text), std::string::npos) << flag << ": no '" << text << "' in\n"
                                                     << r.out;
    }
  }
}

TEST(Help, DaemonsOfferACheckThatNeedsNoCluster) {
  for (const char* daemon : {"extender", "device-plugin"}) {
    const CliRun r = Gpumux({daemon, "--help"});
    EXPECT_NE(r.out.find("--check"), std::string::npos) << daemon;
    EXPECT_NE(r.out.find("add --check to try one"), std::string::npos) << daemon;
  }
}

TEST(Help, EachSimulationNamesItsOwnDefaultReportFolder) {
  const CliRun r = Gpumux({"simulate", "--help"});
  EXPECT_NE(r.out.find("./gpumux-report/"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("./gpumux-report-dl/"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("--mix light --jobs"), std::string::npos)
      << "the example that combined --mix with --jobs is gone";
}

struct WrapCase {
  const char* name;
  std::string text;
  std::size_t width;
  std::string wrapped;
};
void PrintTo(const WrapCase& c, std::ostream* os) { *os << c.name; }

class WrapLinesTable : public ::testing::TestWithParam<WrapCase> {};

TEST_P(WrapLinesTable, BreaksAtSpacesWithinTheWidth) {
  EXPECT_EQ(WrapLines(GetParam().text, GetParam().width), GetParam().wrapped);
}

INSTANTIATE_TEST_SUITE_P(
    Table, WrapLinesTable,
    ::testing::Values(
        WrapCase{"a_short_line_is_kept", "one two", 20, "one two"},
        WrapCase{"a_long_line_breaks_at_the_last_space", "aaa bbb ccc ddd", 8, "aaa bbb\nccc ddd"},
        WrapCase{"an_indented_line_hangs_two_further", "  aaa bbb ccc", 9, "  aaa bbb\n    ccc"},
        WrapCase{"each_line_on_its_own", "aa bb\ncc dd ee", 5, "aa bb\ncc dd\nee"},
        WrapCase{"a_word_longer_than_the_width_stays_whole", "abcdefghij k", 4, "abcdefghij\nk"},
        WrapCase{"a_trailing_newline_is_kept", "aa bb cc\n", 5, "aa bb\ncc\n"},
        WrapCase{"empty", "", 10, ""}),
    test::CaseName());

// ---------------------------------------------------------------------------------------------
// Numbers: every numeric flag of every subcommand refuses NaN, infinities, negatives, garbage
// and overflow with exit 2 and a message that names the flag.

struct NumericFlag {
  std::vector<std::string> command;  // the subcommand and what it needs besides the flag
  std::string flag;
};

std::vector<NumericFlag> NumericFlags() {
  const std::vector<std::string> simulate{"simulate", "--no-report", "-q"};
  const std::vector<std::string> dl{"simulate", "--workload", "dl", "--no-report", "-q"};
  const std::vector<std::string> jobgen{"jobgen"};
  const std::vector<std::string> extender{"extender", "--offline-nodes", "/nonexistent.json"};
  const std::vector<std::string> plugin{"device-plugin", "--node-name",     "n",
                                        "--offline",     "--backend",       "fake",
                                        "--gpus-file",   "/nonexistent.csv"};
  std::vector<NumericFlag> flags;
  for (const char* f : {"--seeds", "--load", "--threads", "--max-arrivals"}) {
    flags.push_back({simulate, f});
  }
  for (const char* f : {"--seeds", "--threads", "--count", "--loads", "--max-jobs-per-gpu",
                        "--gpus", "--model-error", "--reconfigure-s", "--measure-noise"}) {
    flags.push_back({dl, f});
  }
  for (const char* f : {"--count", "--rate", "--load", "--min-gib", "--max-gib", "--seed"}) {
    flags.push_back({jobgen, f});
  }
  for (const char* f : {"--default-gpu-memory-mib", "--grant-ttl-seconds",
                        "--node-lock-ttl-seconds", "--bind-wait-ms", "--gpu-mem-unit-mib",
                        "--threads", "--max-connections", "--request-read-timeout-ms"}) {
    // The three flags that do not apply offline are refused for that first; the values are
    // still checked before (a garbage value never reaches the combination check).
    flags.push_back({extender, f});
  }
  for (const char* f : {"--gpu-mem-unit-mib", "--health-interval-ms", "--xid-recovery-seconds"}) {
    flags.push_back({plugin, f});
  }
  return flags;
}

TEST(Numbers, EveryNumericFlagRefusesNanInfinityNegativesGarbageAndOverflowByName) {
  for (const NumericFlag& f : NumericFlags()) {
    for (const char* value : {"nan", "inf", "-inf", "-1", "abc", "1.5x", "",
                              "99999999999999999999999", "-99999999999999999999999"}) {
      std::vector<std::string> args = f.command;
      args.push_back(f.flag);
      args.push_back(value);
      const CliRun r = Gpumux(args);
      const std::string what = f.command.front() + " " + f.flag + " '" + value + "'";
      EXPECT_EQ(r.code, 2) << what << "\n" << r.err;
      EXPECT_NE(r.err.find(f.flag), std::string::npos) << what << ": the flag is not named:\n"
                                                       << r.err;
      EXPECT_EQ(r.out, "") << what;
      EXPECT_EQ(r.err.find("Could not convert"), std::string::npos) << what << "\n" << r.err;
    }
  }
}

struct NumberMessageCase {
  const char* name;
  std::vector<std::string> args;
  std::string message;  // the whole first line of stderr
};
void PrintTo(const NumberMessageCase& c, std::ostream* os) { *os << c.name; }

class NumberMessages : public ::testing::TestWithParam<NumberMessageCase> {};

TEST_P(NumberMessages, SayWhatIsWrongWithTheValue) {
  const CliRun r = Gpumux(GetParam().args);
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err.substr(0, r.err.find('\n')), GetParam().message) << r.err;
}

INSTANTIATE_TEST_SUITE_P(
    Table, NumberMessages,
    ::testing::Values(
        NumberMessageCase{"garbage_is_not_a_number",
                          {"simulate", "--load", "abc"},
                          "gpumux simulate: --load: 'abc' is not a number in [0.01, 100]"},
        NumberMessageCase{"nan_is_not_finite",
                          {"simulate", "--load", "nan"},
                          "gpumux simulate: --load: nan is not a finite number in [0.01, 100]"},
        NumberMessageCase{"a_number_outside_the_range",
                          {"simulate", "--load", "101"},
                          "gpumux simulate: --load: 101 is outside [0.01, 100]"},
        NumberMessageCase{"an_open_lower_end",
                          {"jobgen", "--rate", "0"},
                          "gpumux jobgen: --rate: 0 is outside (0, 1e+09]"},
        NumberMessageCase{"a_decimal_for_an_integer",
                          {"simulate", "--threads", "1e2"},
                          "gpumux simulate: --threads: '1e2' is not an integer in 0..1024"},
        NumberMessageCase{"a_negative_seed",
                          {"jobgen", "--seed", "-1"},
                          "gpumux jobgen: --seed: -1 is outside 0..18446744073709551615"},
        NumberMessageCase{"a_seed_past_64_bits",
                          {"jobgen", "--seed", "18446744073709551616"},
                          "gpumux jobgen: --seed: 18446744073709551616 is outside "
                          "0..18446744073709551615"},
        NumberMessageCase{"a_seed_list_entry_with_too_many_digits",
                          {"simulate", "--seeds", "99999999999999999999"},
                          "gpumux simulate: --seeds: 99999999999999999999 is outside "
                          "0..999999999999999999"},
        NumberMessageCase{"an_integer_past_its_type",
                          {"extender", "--offline-nodes", "x", "--threads", "99999999999"},
                          "gpumux extender: --threads: 99999999999 is out of range"},
        NumberMessageCase{
            "a_ttl_past_a_day",
            {"extender", "--in-cluster", "--grant-ttl-seconds", "9223372036854775807"},
            "gpumux extender: --grant-ttl-seconds must be at least 1 and at most "
            "86400 (a day)"},
        NumberMessageCase{
            "gpu_memory_past_what_a_gpu_may_have",
            {"extender", "--in-cluster", "--default-gpu-memory-mib", "9223372036854775807"},
            "gpumux extender: --default-gpu-memory-mib must be at most 4294967296 "
            "(the most one GPU may have)"},
        NumberMessageCase{"an_xid_recovery_that_would_overflow_milliseconds",
                          {"device-plugin", "--node-name", "n", "--offline",
                           "--xid-recovery-seconds", "9223372036854775807"},
                          "gpumux device-plugin: --xid-recovery-seconds must be in 0..604800 "
                          "(a week)"},
        NumberMessageCase{"a_health_interval_past_an_hour",
                          {"device-plugin", "--node-name", "n", "--offline", "--health-interval-ms",
                           "9223372036854775807"},
                          "gpumux device-plugin: --health-interval-ms must be at least 10 and at "
                          "most 3600000 (an hour)"}),
    test::CaseName());

// ---------------------------------------------------------------------------------------------
// Combinations that cannot apply: exit 2, both options named, nothing run.

class Conflicts : public ::testing::TestWithParam<UsageCase> {};

TEST_P(Conflicts, ExitTwoNamingBothOptions) { ExpectUsageError(GetParam()); }

std::vector<std::string> Sim(std::vector<std::string> extra) {
  std::vector<std::string> args{"simulate", "-q"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

INSTANTIATE_TEST_SUITE_P(
    Simulate, Conflicts,
    ::testing::Values(
        UsageCase{"load_with_the_dl_workload",
                  Sim({"--workload", "dl", "--load", "2"}),
                  {"--load", "--workload dl", "--loads"}},
        UsageCase{"loads_with_the_fgd_workload", Sim({"--loads", "1"}), {"--loads", "--workload"}},
        UsageCase{"mix_with_jobs",
                  Sim({"--workload", "dl", "--jobs", "jobs.csv", "--mix", "light"}),
                  {"--mix", "--jobs"}},
        UsageCase{"count_with_jobs",
                  Sim({"--workload", "dl", "--jobs", "jobs.csv", "--count", "10"}),
                  {"--count", "--jobs"}},
        UsageCase{
            "out_with_no_report", Sim({"--out", "r", "--no-report"}), {"--out", "--no-report"}},
        UsageCase{"an_empty_out", Sim({"--out", ""}), {"--out", "--no-report"}},
        UsageCase{"dl_out_with_no_report",
                  Sim({"--workload", "dl", "--out", "r", "--no-report"}),
                  {"--out", "--no-report"}},
        UsageCase{"replay_with_three_seeds",
                  Sim({"--replay", "/nonexistent", "--seeds", "1-3"}),
                  {"--replay", "--seeds 1-3", "3 seeds"}},
        UsageCase{"csv_with_the_dl_workload",
                  Sim({"--workload", "dl", "--format", "csv"}),
                  {"--format csv", "--workload"}}),
    test::CaseName());

// Every option of one workload, given to the other.
std::vector<UsageCase> WorkloadCases() {
  std::vector<UsageCase> cases;
  const std::vector<std::pair<std::string, std::string>> fgd_only{
      {"--nodes", "n.csv"},    {"--pods", "p.csv"}, {"--load", "2"},
      {"--expect", "e.csv"},   {"--replay", "dir"}, {"--placements", "x.csv"},
      {"--max-arrivals", "5"}, {"--no-timing", ""}, {"--percentage-of-nodes-to-score", "0"}};
  for (const auto& [flag, value] : fgd_only) {
    std::vector<std::string> args{"simulate", "-q", "--workload", "dl", flag};
    if (!value.empty()) args.push_back(value);
    cases.push_back({"fgd_only", args, {flag, "--workload fgd", "--workload dl"}});
  }
  const std::vector<std::pair<std::string, std::string>> dl_only{
      {"--jobs", "j.csv"},         {"--profile", "p.json"}, {"--mix", "light"},
      {"--count", "10"},           {"--loads", "1"},        {"--tuner", "none"},
      {"--max-jobs-per-gpu", "2"}, {"--gpus", "8"},         {"--model-error", "0"},
      {"--reconfigure-s", "1"},    {"--measure-noise", "0"}};
  for (const auto& [flag, value] : dl_only) {
    cases.push_back({"dl_only", {"simulate", "-q", flag, value}, {flag, "--workload dl"}});
  }
  return cases;
}

TEST(WorkloadOptions, NoOptionOfOneWorkloadIsIgnoredByTheOther) {
  for (const UsageCase& c : WorkloadCases()) {
    SCOPED_TRACE(c.args[c.args.size() - 2] + " " + c.args.back());
    ExpectUsageError(c);
  }
}

INSTANTIATE_TEST_SUITE_P(
    OtherCommands, Conflicts,
    ::testing::Values(
        UsageCase{"jobgen_rate_with_an_arrival_file",
                  {"jobgen", "--arrival", "times.txt", "--rate", "2"},
                  {"--rate", "--arrival times.txt"}},
        UsageCase{"extender_grant_ttl_offline",
                  {"extender", "--offline-nodes", "n.json", "--grant-ttl-seconds", "30"},
                  {"--grant-ttl-seconds", "--offline-nodes"}},
        UsageCase{"extender_node_lock_ttl_offline",
                  {"extender", "--offline-nodes", "n.json", "--node-lock-ttl-seconds", "30"},
                  {"--node-lock-ttl-seconds", "--offline-nodes"}},
        UsageCase{"extender_bind_wait_offline",
                  {"extender", "--offline-nodes", "n.json", "--bind-wait-ms", "10"},
                  {"--bind-wait-ms", "--offline-nodes"}},
        UsageCase{"extender_typical_pods_without_fgd",
                  {"extender", "--in-cluster", "--policy", "best-fit", "--typical-pods", "p.csv"},
                  {"--typical-pods", "--policy best-fit"}},
        UsageCase{"device_plugin_nvml_library_with_the_fake_backend",
                  {"device-plugin", "--node-name", "n", "--offline", "--backend", "fake",
                   "--gpus-file", "g.csv", "--nvml-library", "x.so"},
                  {"--nvml-library", "--backend fake"}},
        UsageCase{"device_plugin_dev_dir_without_injecting",
                  {"device-plugin", "--node-name", "n", "--offline", "--dev-dir", "/dev"},
                  {"--dev-dir", "--inject-devices"}},
        UsageCase{"device_plugin_context_without_a_kubeconfig",
                  {"device-plugin", "--node-name", "n", "--in-cluster", "--context", "c"},
                  {"--context", "--kubeconfig"}},
        UsageCase{"gpus_nvml_library_without_nvml",
                  {"gpus", "--backend", "fake", "--gpus-file", "g.csv", "--nvml-library", "x"},
                  {"--nvml-library", "--backend fake"}},
        UsageCase{"gpus_a_gpu_file_with_nvml",
                  {"gpus", "--backend", "nvml", "--gpus-file", "g.csv"},
                  {"--gpus-file", "--backend nvml"}},
        UsageCase{"gpus_dev_dir_with_the_fake_backend",
                  {"gpus", "--backend", "fake", "--gpus-file", "g.csv", "--dev-dir", "/dev"},
                  {"--dev-dir", "--backend fake"}},
        UsageCase{"gpus_both_spellings_of_the_gpu_file",
                  {"gpus", "--gpus", "a.csv", "--gpus-file", "b.csv"},
                  {"--gpus", "--gpus-file"}}),
    test::CaseName());

// ---------------------------------------------------------------------------------------------
// Report folders and load-time warnings

TEST(ReportFolders, FgdAndDlEachWriteTheirOwnDefaultFolder) {
  test::ScratchDir dir;
  const std::string nodes = dir.Write("nodes.csv", kNodes);
  const std::string pods = dir.Write("pods.csv", kPods);
  InFolder here(dir.path());
  const CliRun fgd =
      Gpumux({"simulate", "--nodes", nodes, "--pods", pods, "--policy", "fgd", "-q"});
  ASSERT_EQ(fgd.code, 0) << fgd.err;
  const std::filesystem::path fgd_dir = dir.path() / "gpumux-report";
  ASSERT_TRUE(std::filesystem::is_regular_file(fgd_dir / "results.json"));
  const std::string fgd_results = ReadFile(fgd_dir / "results.json");

  const CliRun dl = Gpumux({"simulate", "--workload", "dl", "--count", "5", "--loads", "1",
                            "--policy", "exclusive", "-q"});
  ASSERT_EQ(dl.code, 0) << dl.err;
  const std::filesystem::path dl_dir = dir.path() / "gpumux-report-dl";
  for (const char* f : {"index.html", "results.json", "jobs.csv"}) {
    EXPECT_TRUE(std::filesystem::is_regular_file(dl_dir / f)) << f;
  }
  EXPECT_EQ(ReadFile(fgd_dir / "results.json"), fgd_results)
      << "the DL run left the FGD report alone";
  EXPECT_FALSE(std::filesystem::exists(fgd_dir / "jobs.csv"));
  EXPECT_FALSE(std::filesystem::exists(dl_dir / "curves.csv"));
}

TEST(ReportFolders, NoReportWritesNeitherFolder) {
  test::ScratchDir dir;
  const std::string nodes = dir.Write("nodes.csv", kNodes);
  const std::string pods = dir.Write("pods.csv", kPods);
  InFolder here(dir.path());
  ASSERT_EQ(
      Gpumux({"simulate", "--nodes", nodes, "--pods", pods, "--policy", "fgd", "-q", "--no-report"})
          .code,
      0);
  ASSERT_EQ(Gpumux({"simulate", "--workload", "dl", "--count", "5", "--loads", "1", "--policy",
                    "exclusive", "-q", "--no-report"})
                .code,
            0);
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "gpumux-report"));
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "gpumux-report-dl"));
}

TEST(LoadWarnings, PodsAskingOnlyForModelsNoNodeHasAreCountedOnceAtLoadTime) {
  test::ScratchDir dir;
  const std::string nodes = dir.Write("nodes.csv", kNodes);  // T4 and V100M32
  const std::string pods = dir.Write("pods.csv", std::string(kPods) +
                                                     "p03,1000,1024,1,500,A100\n"
                                                     "p04,1000,1024,1,500,H100|A100\n"
                                                     "p05,1000,1024,1,500,H100|T4\n");
  for (const char* quiet : {"-q", "--threads=1"}) {
    const CliRun r = Gpumux({"simulate", "--nodes", nodes, "--pods", pods, "--policy",
                             "best-fit,fgd", "--seeds", "1-3", "--no-report", quiet});
    ASSERT_EQ(r.code, 0) << r.err;
    const std::string warning = "gpumux simulate: warning: 2 pods of " + pods +
                                " ask only for GPU models that no node of " + nodes +
                                " has (gpu_spec A100, H100); they are never placed\n";
    const std::size_t at = r.err.find(warning);
    EXPECT_NE(at, std::string::npos) << r.err;
    EXPECT_EQ(r.err.find(warning, at + 1), std::string::npos) << "once, not per run: " << r.err;
  }
  const std::string one = dir.Write("one.csv", std::string(kPods) + "p03,1000,1024,1,500,A100\n");
  const CliRun r =
      Gpumux({"simulate", "--nodes", nodes, "--pods", one, "--policy", "fgd", "--no-report", "-q"});
  EXPECT_NE(r.err.find("warning: 1 pod of " + one + " asks"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace gpumux::cli
