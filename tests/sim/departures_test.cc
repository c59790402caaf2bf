#include "gpumux/sim/departures.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "tests/sim/sim_fixtures.h"
#include "tests/testing/builders.h"

namespace gpumux::sim {
namespace {

using test::ClusterBuilder;
using test::RequestBuilder;

TracePod Timed(core::Request r, std::int64_t created, std::int64_t deleted,
               std::int64_t scheduled = -1) {
  TracePod p;
  p.request = std::move(r);
  p.creation_s = created;
  p.deletion_s = deleted;
  p.scheduled_s = scheduled;
  return p;
}

TEST(PodDurations, TheTracesRunTimeCappedAndADrawnOneWithout) {
  const std::vector<TracePod> timed = {
      Timed(RequestBuilder("a").Gpus(1), 0, 100),          // 100 s
      Timed(RequestBuilder("b").Gpus(1), 10, 50'000, 20),  // scheduled at 20: capped
      Timed(RequestBuilder("c").Gpus(1), 0, -1),           // no deletion: drawn
      Timed(RequestBuilder("d").Gpus(1), 5, 5)};           // zero: drawn
  auto d = PodDurations(timed, 42, 1000);
  ASSERT_TRUE(d.has_value()) << d.error().message;
  ASSERT_EQ(d->size(), 4u);
  EXPECT_EQ((*d)[0], 100);
  EXPECT_EQ((*d)[1], 1000);
  for (std::size_t i : {2u, 3u}) EXPECT_TRUE((*d)[i] == 100 || (*d)[i] == 1000) << (*d)[i];
  const std::vector<TracePod> none = {Timed(RequestBuilder("x").Gpus(1), 0, -1)};
  EXPECT_FALSE(PodDurations(none, 42, 1000).has_value());
}

// A small cluster, long pods: the books balance (every GPU pod placed at once, after waiting,
// or never), waits are not negative, and a run is a function of its inputs.
TEST(RunWithDepartures, AccountsForEveryPodAndRepeatsItself) {
  const std::vector<core::NodeSpec> nodes =
      ClusterBuilder().Node("n1", 16000, 65536).Gpus(2).Node("n2", 16000, 65536).Gpus(2).Specs();
  std::vector<core::Request> pods = {
      RequestBuilder("whole").Cpu(1000).Gpus(1), RequestBuilder("two").Cpu(1000).Gpus(2),
      RequestBuilder("share").Cpu(500).Share(300), RequestBuilder("cpu").Cpu(2000)};
  auto w = MakeWorkload("small", nodes, pods);
  ASSERT_TRUE(w.has_value()) << w.error().message;
  const std::vector<double> durations = {600, 900, 300, 100};
  DepartureOptions o;
  o.load = 1.5;  // more than fits: pods wait
  o.rounds = 20;
  o.max_duration_s = 900;
  for (const char* policy : {"fgd", "fgd-sat-reserve", "best-fit"}) {
    SCOPED_TRACE(policy);
    auto r = RunWithDepartures(*w, durations, policy, 7, o);
    ASSERT_TRUE(r.has_value()) << r.error().message;
    std::int64_t gpu_pods = 0, waited = 0;
    for (PodKind k : kPodKinds) {
      const KindWaits& kw = r->waits[static_cast<std::size_t>(k)];
      EXPECT_EQ(kw.placed + kw.never_placed, kw.arrived) << PodKindName(k);
      EXPECT_GE(kw.mean_wait_s, 0);
      EXPECT_GE(kw.p95_wait_s, 0);
      gpu_pods += kw.arrived;
      waited += kw.waited + kw.never_placed;
    }
    EXPECT_GT(gpu_pods, 0);
    EXPECT_LT(gpu_pods, r->pods) << "CPU-only pods arrive too, and are not counted by kind";
    EXPECT_GT(waited, 0) << "at 1.5x the capacity, some pods wait";
    EXPECT_GT(r->mean_alloc_pct, 50);
    EXPECT_LE(r->mean_alloc_pct, 100);
    ASSERT_EQ(r->alloc_over_time.size(), static_cast<std::size_t>(kTimeColumns) + 1);
    auto again = RunWithDepartures(*w, durations, policy, 7, o);
    ASSERT_TRUE(again.has_value());
    EXPECT_EQ(again->mean_alloc_pct, r->mean_alloc_pct);
    EXPECT_EQ(again->alloc_over_time, r->alloc_over_time);
  }
}

// At a low offered load nothing waits, and the allocation is about the load.
TEST(RunWithDepartures, AtALowLoadNothingWaitsAndTheAllocationIsTheLoad) {
  const Workload& w = testing_fixtures::EmbeddedWorkload();
  std::istringstream in{std::string(EmbeddedPodList())};
  auto timed = ParseTimedPodList(in, "<embedded>");
  ASSERT_TRUE(timed.has_value());
  auto durations = PodDurations(*timed, 42, 6 * 3600);
  ASSERT_TRUE(durations.has_value());
  DepartureOptions o;
  o.load = 0.5;
  o.rounds = 5;
  auto r = RunWithDepartures(w, *durations, "fgd", 42, o);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  for (PodKind k : kPodKinds) {
    EXPECT_EQ(r->waits[static_cast<std::size_t>(k)].waited, 0) << PodKindName(k);
    EXPECT_EQ(r->waits[static_cast<std::size_t>(k)].never_placed, 0) << PodKindName(k);
  }
  EXPECT_NEAR(r->mean_alloc_pct, 50, 10) << "Little's law, over a short run";
  EXPECT_GT(r->span_s, r->warmup_s);
}

TEST(RunWithDepartures, RefusesWhatItCannotRun) {
  const Workload& w = testing_fixtures::EmbeddedWorkload();
  const std::vector<double> durations(w.pods.size(), 100.0);
  DepartureOptions o;
  o.load = 0;
  EXPECT_FALSE(RunWithDepartures(w, durations, "fgd", 1, o).has_value());
  o.load = 1;
  EXPECT_FALSE(RunWithDepartures(w, durations, "nosuch", 1, o).has_value());
  const std::vector<double> short_list(3, 100.0);
  EXPECT_FALSE(RunWithDepartures(w, short_list, "fgd", 1, o).has_value());
}

}  // namespace
}  // namespace gpumux::sim
