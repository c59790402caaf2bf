// gpumux simulate --departures: the table, the JSON and the refusals.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/cli/cli_fixtures.h"

namespace gpumux::cli {
namespace {

TEST(DeparturesCli, PrintsAllocationAndWaitsPerPolicy) {
  const CliRun r = Gpumux({"simulate", "--departures", "--policy", "fgd,fgd-sat-reserve",
                           "--departure-rounds", "3", "--load", "0.9", "-q"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_NE(r.out.find("offered GPU load 0.9, 3 cluster capacities of arrivals"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("\n  fgd "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\n  fgd-sat-reserve "), std::string::npos) << r.out;
}

TEST(DeparturesCli, JsonHasEachRunsCurveAndWaitsByKind) {
  const CliRun r =
      Gpumux({"simulate", "--departures", "--policy", "fgd", "--seeds", "1-2", "--departure-rounds",
              "2", "--max-duration", "3600", "--format", "json", "--no-timing", "-q"});
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["protocol"], "departures");
  EXPECT_EQ(j["load"], 1.0) << "--departures offers load 1 unless --load is given";
  EXPECT_EQ(j["max_duration_s"], 3600.0);
  ASSERT_EQ(j["runs"].size(), 2u);
  for (const nlohmann::json& run : j["runs"]) {
    EXPECT_EQ(run["alloc_over_time"].size(), 101u);
    for (const char* kind : {"share", "whole", "multi"}) {
      const nlohmann::json& k = run["waits"][kind];
      EXPECT_EQ(k["placed"].get<int>() + k["never_placed"].get<int>(), k["arrived"].get<int>())
          << kind;
    }
    EXPECT_EQ(run["wall_ms"], 0.0);
  }
  // Byte-identical when run again.
  const CliRun again =
      Gpumux({"simulate", "--departures", "--policy", "fgd", "--seeds", "1-2", "--departure-rounds",
              "2", "--max-duration", "3600", "--format", "json", "--no-timing", "-q"});
  EXPECT_EQ(again.out, r.out);
}

class DeparturesUsage : public ::testing::TestWithParam<UsageCase> {};
TEST_P(DeparturesUsage, IsRefusedWithTheReason) { ExpectUsageError(GetParam()); }
INSTANTIATE_TEST_SUITE_P(
    Cases, DeparturesUsage,
    ::testing::Values(UsageCase{"rounds_without_departures",
                                {"simulate", "--departure-rounds", "5", "--no-report"},
                                {"--departure-rounds applies only with --departures"}},
                      UsageCase{"max_duration_without_departures",
                                {"simulate", "--max-duration", "60", "--no-report"},
                                {"--max-duration applies only with --departures"}},
                      UsageCase{"replay_with_departures",
                                {"simulate", "--departures", "--replay", "somewhere"},
                                {"--replay belongs to the study's protocol"}},
                      UsageCase{"sampled_nodes_with_departures",
                                {"simulate", "--departures", "--percentage-of-nodes-to-score", "0"},
                                {"--percentage-of-nodes-to-score belongs to the study's protocol"}},
                      UsageCase{"csv_with_departures",
                                {"simulate", "--departures", "--format", "csv"},
                                {"--format csv does not apply with --departures"}},
                      UsageCase{"departures_with_dl",
                                {"simulate", "--workload", "dl", "--departures"},
                                {"--departures belongs to --workload fgd"}},
                      UsageCase{"zero_rounds",
                                {"simulate", "--departures", "--departure-rounds", "0"},
                                {"--departure-rounds"}}),
    [](const auto& c) { return std::string(c.param.name); });

}  // namespace
}  // namespace gpumux::cli
