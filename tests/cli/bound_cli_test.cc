// gpumux bound: the table, the JSON and the refusals.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/cli/cli_fixtures.h"

namespace gpumux::cli {
namespace {

TEST(BoundCli, PrintsTheBestPackingAndTheBoundPerSeedAndDemand) {
  const CliRun r = Gpumux({"bound", "--seeds", "42-43", "--demand", "50,130", "-q"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "") << "-q: no progress";
  EXPECT_NE(r.out.find("openb_pod_list_default (1213 nodes, 6212 GPUs)"), std::string::npos)
      << r.out;
  const std::vector<std::string> lines = Lines(r.out);
  int rows = 0, means = 0;
  for (const std::string& l : lines) {
    rows += l.rfind("  42 ", 0) == 0 || l.rfind("  43 ", 0) == 0 ? 1 : 0;
    means += l.rfind("  mean ", 0) == 0 ? 1 : 0;
  }
  EXPECT_EQ(rows, 4) << r.out;
  EXPECT_EQ(means, 2) << "a mean per demand point for several seeds:\n" << r.out;
}

TEST(BoundCli, JsonHasARowPerSeedAndDemandAndTheMeans) {
  const CliRun r = Gpumux({"bound", "--demand", "100", "--format", "json", "-q"});
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["rows"].size(), 1u);
  const nlohmann::json& row = j["rows"][0];
  EXPECT_EQ(row["seed"], 42);
  EXPECT_EQ(row["demand_pct"], 100.0);
  EXPECT_LE(row["hindsight_pct"].get<double>(), row["lp_bound_pct"].get<double>());
  EXPECT_GT(row["lp_variables"].get<int>(), 0);
  EXPECT_GT(row["lp_gpu_configurations"].get<int>(), 1000) << "the ways to fill one GPU";
  ASSERT_EQ(j["mean"].size(), 1u);
  EXPECT_EQ(j["mean"][0]["seeds"], 1);
}

TEST(BoundCli, AtLeastAddsThePolicyAndTheBoundAboveItsCurve) {
  const CliRun r =
      Gpumux({"bound", "--demand", "95", "--at-least", "fgd", "--format", "json", "-q"});
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["at_least"], "fgd");
  const nlohmann::json& row = j["rows"][0];
  EXPECT_LE(row["at_least_pct"].get<double>(), row["lp_bound_at_least_pct"].get<double>());
  EXPECT_LE(row["lp_bound_at_least_pct"].get<double>(), row["lp_bound_pct"].get<double>() + 1e-9);
  EXPECT_TRUE(j["mean"][0].contains("lp_bound_at_least_pct"));
  const CliRun table = Gpumux({"bound", "--demand", "95", "--at-least", "fgd", "-q"});
  ASSERT_EQ(table.code, 0) << table.err;
  EXPECT_NE(table.out.find("LP, >= fgd"), std::string::npos) << table.out;
}

class BoundUsage : public ::testing::TestWithParam<UsageCase> {};
TEST_P(BoundUsage, IsRefusedWithTheReason) { ExpectUsageError(GetParam()); }
INSTANTIATE_TEST_SUITE_P(
    Cases, BoundUsage,
    ::testing::Values(
        UsageCase{"demand_not_a_number", {"bound", "--demand", "lots"}, {"--demand \"lots\""}},
        UsageCase{"demand_zero", {"bound", "--demand", "0"}, {"whole percents"}},
        UsageCase{"demand_fraction", {"bound", "--demand", "99.5"}, {"whole percents"}},
        UsageCase{"demand_empty", {"bound", "--demand", ""}, {"no demand point"}},
        UsageCase{"a_training_job_policy",
                  {"bound", "--hindsight-policy", "iadeep"},
                  {"'iadeep' is not a policy for pods"}},
        UsageCase{"at_least_unknown",
                  {"bound", "--at-least", "nope"},
                  {"--at-least: 'nope' is not a policy for pods"}},
        UsageCase{"no_such_pods_file",
                  {"bound", "--pods", "/nonexistent/pods.csv"},
                  {"/nonexistent/pods.csv"}},
        UsageCase{"bad_seeds", {"bound", "--seeds", "x"}, {"seed"}}),
    [](const auto& c) { return std::string(c.param.name); });

}  // namespace
}  // namespace gpumux::cli
