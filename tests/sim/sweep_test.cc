#include "gpumux/sim/sweep.h"

#include <gtest/gtest.h>

#include <chrono>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "gpumux/sim/report.h"
#include "tests/sim/sim_fixtures.h"

namespace gpumux::sim {
namespace {

using testing_fixtures::EmbeddedWorkload;

ReportContext ContextFor(const Workload& w, const SweepConfig& config) {
  ReportContext ctx;
  ctx.nodes_source = "<embedded>";
  ctx.pods_source = "<embedded>";
  ctx.workload = w.name;
  ctx.nodes = w.cluster.size();
  ctx.gpus = w.cluster.total_gpus();
  ctx.load = config.load;
  ctx.policies = config.policies;
  ctx.seeds = config.seeds;
  ctx.expected = &testing_fixtures::EmbeddedExpected();
  ctx.timing = false;
  return ctx;
}

std::string Json(const std::vector<ExperimentResult>& results, const ReportContext& ctx) {
  std::ostringstream out;
  WriteJson(out, results, ctx);
  return out.str();
}

// Two policies x two seeds on the default trace, once on one thread and once on two: the
// results come back in (policy, seed) order and the JSON report (wall times off) is the same
// byte for byte, so neither the run nor the thread count leaks into the output.
TEST(RunSweep, ResultsAndReportsDoNotDependOnTheRunOrTheThreadCount) {
  const Workload& w = EmbeddedWorkload();
  SweepConfig config;
  config.policies = {"fgd", "random"};
  config.seeds = {42, 43};
  config.load = 1.3;

  config.threads = 1;
  std::vector<std::size_t> done_seen;
  auto one = RunSweep(w, config, [&](const ExperimentResult&, std::size_t done, std::size_t total) {
    EXPECT_EQ(total, 4U);
    done_seen.push_back(done);
  });
  ASSERT_TRUE(one.has_value()) << one.error().message;
  EXPECT_EQ(done_seen, (std::vector<std::size_t>{1, 2, 3, 4}));

  config.threads = 2;
  auto two = RunSweep(w, config);
  ASSERT_TRUE(two.has_value()) << two.error().message;

  ASSERT_EQ(one->size(), 4U);
  const std::vector<std::pair<std::string, std::uint64_t>> order{
      {"fgd", 42}, {"fgd", 43}, {"random", 42}, {"random", 43}};
  for (std::size_t i = 0; i < order.size(); ++i) {
    EXPECT_EQ((*one)[i].policy, order[i].first);
    EXPECT_EQ((*one)[i].seed, order[i].second);
    EXPECT_EQ((*two)[i].policy, order[i].first);
    EXPECT_EQ((*two)[i].seed, order[i].second);
    EXPECT_EQ((*one)[i].alloc_curve, (*two)[i].alloc_curve) << i;
    EXPECT_EQ((*one)[i].origin, "seed " + std::to_string(order[i].second));
  }
  EXPECT_NE((*one)[0].alloc_curve, (*one)[1].alloc_curve) << "another seed, another run";

  const ReportContext ctx = ContextFor(w, config);
  const std::string json_one = Json(*one, ctx);
  EXPECT_EQ(json_one, Json(*two, ctx));
  EXPECT_NE(json_one.find("\"wall_ms\": 0.0"), std::string::npos);
}

TEST(RunSweep, RefusesAnUnknownPolicyNoSeedsAndANonPositiveLoad) {
  const Workload& w = EmbeddedWorkload();
  SweepConfig config;
  config.policies = {"fgd", "nosuch"};
  auto r = RunSweep(w, config);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("unknown policy 'nosuch'"), std::string::npos);

  config.policies = {"fgd"};
  config.seeds = {};
  r = RunSweep(w, config);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("no seeds"), std::string::npos);

  config.seeds = {1};
  for (double load : {0.0, -1.0}) {
    config.load = load;
    r = RunSweep(w, config);
    ASSERT_FALSE(r.has_value());
    EXPECT_NE(r.error().message.find("load must be positive"), std::string::npos);
  }
}

// reliability-repros/simulate-tiny-pod-resample: one 1-milli pod resampled to 1.3 x the
// embedded cluster is about 8 million arrivals; refused before any experiment runs.
TEST(RunSweep, ASeedWhosePlanPassesTheArrivalLimitIsRefusedUpFront) {
  const Workload& e = EmbeddedWorkload();
  std::vector<core::NodeSpec> nodes(e.cluster.nodes().begin(), e.cluster.nodes().end());
  core::Request tiny;
  tiny.name = "p1";
  tiny.cpu_milli = 100;
  tiny.gpu_count = 1;
  tiny.gpu_milli = 1;
  auto w = MakeWorkload("tiny", std::move(nodes), {tiny});
  ASSERT_TRUE(w.has_value()) << w.error().message;
  SweepConfig config;
  config.policies = {"best-fit"};
  config.seeds = {42};
  config.limit = ArrivalLimit{1'000'000, "--max-arrivals"};
  int ran = 0;
  const auto start = std::chrono::steady_clock::now();
  auto r = RunSweep(*w, config, [&](const ExperimentResult&, std::size_t, std::size_t) { ++ran; });
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().message,
            "seed 42: resampling the 1 pod to load 1.3 makes more than 1000000 arrivals, the "
            "limit per experiment (--max-arrivals)");
  EXPECT_EQ(ran, 0);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

TEST(RunSweep, RefusesMoreSeedsThanTheLimitAndALoadAboveAHundred) {
  const Workload& w = EmbeddedWorkload();
  SweepConfig config;
  config.policies = {"fgd"};
  config.seeds.resize(kMaxSweepSeeds + 1);
  auto r = RunSweep(w, config);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().message, "10001 seeds, more than the 10000 a sweep may run");
  config.seeds = {1};
  for (double load :
       {101.0, std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN()}) {
    config.load = load;
    r = RunSweep(w, config);
    ASSERT_FALSE(r.has_value()) << load;
    EXPECT_NE(r.error().message.find("load must be positive and at most 100"), std::string::npos)
        << r.error().message;
  }
}

TEST(RunSweep, AReplayRunsOncePerPolicyWithTheFirstSeed) {
  const auto dir = testing_fixtures::StudyReplayDir();
  if (!dir) GTEST_SKIP() << testing_fixtures::kNoReplayReason;
  const Workload& w = EmbeddedWorkload();
  SweepConfig config;
  config.policies = {"fgd"};
  config.seeds = {42, 43};
  config.replay_dir = *dir;
  auto r = RunSweep(w, config);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  ASSERT_EQ(r->size(), 1U);
  EXPECT_EQ((*r)[0].seed, 42U);
  EXPECT_EQ((*r)[0].replay_mismatches, 0) << (*r)[0].first_mismatch;
}

}  // namespace
}  // namespace gpumux::sim
