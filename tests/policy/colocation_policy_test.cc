// The co-location policies (first-fit, iadeep, gpumux) driven through policy::Engine on small
// clusters, with a fake JobView that reports the state of each placed job. The worked
// examples of first_fit.h, iadeep.h and interference_aware.h come first in their sections.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "gpumux/core/ledger.h"
#include "gpumux/core/request.h"
#include "gpumux/policy/colocation.h"
#include "gpumux/policy/engine.h"
#include "gpumux/policy/first_fit.h"
#include "gpumux/policy/iadeep.h"
#include "gpumux/policy/interference.h"
#include "gpumux/policy/interference_aware.h"
#include "gpumux/policy/registry.h"
#include "gpumux/policy/tuner.h"
#include "tests/policy/colocation_fixtures.h"
#include "tests/testing/builders.h"
#include "tests/testing/policy_harness.h"

namespace gpumux::policy {
namespace {

using test::BusyClass;
using test::CaseName;
using test::ClusterBuilder;
using test::LinearClass;
using test::MakeClass;
using test::MakeProfile;
using test::Measured;
using test::RequestBuilder;

// The driver's view of the jobs, as a test sets it.
class FakeJobs final : public JobView {
 public:
  std::optional<JobSnapshot> Job(core::TenantIndex t) const override {
    auto it = jobs.find(t);
    if (it == jobs.end()) return std::nullopt;
    return it->second;
  }
  int QueuedAhead() const override { return ahead; }

  std::map<core::TenantIndex, JobSnapshot> jobs;
  int ahead = 0;
};

// Nodes with `gpus` T4s (16 GiB) each, plenty of CPU, memory and pods.
std::vector<core::NodeSpec> Nodes(int nodes, int gpus) {
  ClusterBuilder b;
  for (int n = 0; n < nodes; ++n) b.Node(test::Numbered("n", n), 64000, 262144).Gpus(gpus);
  return b.Specs();
}

// A cluster, a profile with its interference model, a fake job view and a policy context
// pointing at them. Not copyable (the context points into it).
class Bed {
 public:
  Bed(std::vector<core::NodeSpec> nodes, WorkloadProfile profile)
      : profile_(std::move(profile)), model_(profile_), h_(std::move(nodes)) {
    context_.profile = &profile_;
    context_.interference = &model_;
    context_.jobs = &view_;
  }
  Bed(const Bed&) = delete;
  Bed& operator=(const Bed&) = delete;

  // A job request: one GPU, 1 milli of compute (co-located jobs share compute), 2 GiB.
  static core::Request Job(const std::string& name, const std::string& cls,
                           core::MiB gpu_mib = 2000) {
    core::Request r = RequestBuilder(name).Cpu(1000).Memory(1024).Share(1).GpuMemory(gpu_mib);
    r.workload_class = cls;
    return r;
  }

  // Places a job of class `cls` on GPU `gpu` of `node` and tells the view about it: batch b0,
  // all its work left, progressing at its solo goodput (so it drains in SoloSeconds()).
  // An unknown class is placed but the view reports a snapshot without a class.
  core::TenantIndex Add(const std::string& key, const std::string& cls, int gpu,
                        core::NodeIndex node = 0, core::MiB gpu_mib = 2000) {
    auto t = h_.ledger().Assign(key, Job(key, cls, gpu_mib), core::Placement{node, {gpu}});
    if (!t) {
      ADD_FAILURE() << key << ": " << t.error().message;
      return -1;
    }
    JobSnapshot s;
    if (const ClassProfile* c = profile_.Find(cls)) {
      s.cls = c;
      s.batch = c->default_batch;
      s.work_done = 0;                                       // all its work left (the class prior)
      s.observed_step_s = c->StepSeconds(c->default_batch);  // its solo goodput
    }
    view_.jobs[*t] = s;
    return *t;
  }

  template <typename P>
  Decision Decide(const core::Request& request, std::vector<std::int64_t> ranks = {}) {
    P policy(context_);
    return DecideWith(policy, request, std::move(ranks));
  }
  Decision DecideWith(Policy& policy, const core::Request& request,
                      std::vector<std::int64_t> ranks = {}) {
    if (ranks.empty()) {
      for (core::NodeIndex n = 0; n < h_.cluster().size(); ++n) ranks.push_back(n);
    }
    Engine engine(h_.ledger(), policy, ranks, h_.rng());
    return engine.Decide(request);
  }

  const WorkloadProfile& profile() const { return profile_; }
  const ClassProfile* cls(const std::string& name) const { return profile_.Find(name); }
  FakeJobs& view() { return view_; }
  PolicyContext& context() { return context_; }
  core::Ledger& ledger() { return h_.ledger(); }

 private:
  WorkloadProfile profile_;
  ProfileInterference model_;
  test::PolicyHarness h_;
  FakeJobs view_;
  PolicyContext context_;
};

// Light, heavy and in-between classes (busy fraction in the name), all with the default
// timing: 100 s alone at b0 = 100.
WorkloadProfile Classes() {
  return MakeProfile({BusyClass("b10", 0.1), BusyClass("b30", 0.3), BusyClass("b40", 0.4),
                      BusyClass("b50", 0.5), BusyClass("b55", 0.55), BusyClass("b90", 0.9),
                      BusyClass("b98", 0.98), BusyClass("b99", 0.99)},
                     0.05);
}

void ExpectPlacedOn(const Decision& d, core::NodeIndex node, std::vector<int> gpus) {
  ASSERT_TRUE(d.placement.has_value()) << (d.declined ? "declined" : "fits nowhere");
  EXPECT_FALSE(d.declined);
  EXPECT_EQ(d.placement->node, node);
  EXPECT_EQ(d.placement->gpus, gpus);
}

void ExpectDeclined(const Decision& d) {
  EXPECT_FALSE(d.placement.has_value()) << "placed on GPU " << d.placement->gpus.front();
  EXPECT_TRUE(d.declined);
  EXPECT_GT(d.feasible_nodes, 0) << "it fits: the policy made it wait";
}

// ---------------------------------------------------------------- traits

struct TraitsCase {
  const char* name;
  const char* policy;
  QueueOrder order;
  const char* tuner;
};
void PrintTo(const TraitsCase& c, std::ostream* os) { *os << c.name; }

class ColocationTraitsOf : public ::testing::TestWithParam<TraitsCase> {};

TEST_P(ColocationTraitsOf, TellTheDriverHowToQueueAndTune) {
  const TraitsCase& c = GetParam();
  const WorkloadProfile profile = Classes();
  const ProfileInterference model(profile);
  PolicyContext context;
  context.profile = &profile;
  context.interference = &model;
  auto made = BuiltinPolicies().Make(c.policy, context);
  ASSERT_TRUE(made.has_value()) << made.error().message;
  const ColocationTraits* traits = (*made)->colocation();
  ASSERT_NE(traits, nullptr);
  EXPECT_EQ((*made)->name(), c.policy);
  EXPECT_EQ(traits->queue_order, c.order);
  EXPECT_EQ(traits->tuner, c.tuner);
  EXPECT_TRUE(MakeTuner(traits->tuner).has_value()) << "a tuner name MakeTuner knows";
  EXPECT_EQ((*made)->score_kind(), ScoreKind::kUsesFeasibleSet) << "job state: never memoised";
}

INSTANTIATE_TEST_SUITE_P(
    Table, ColocationTraitsOf,
    ::testing::Values(TraitsCase{"first_fit_is_fifo_without_tuning", "first-fit",
                                 QueueOrder::kArrival, "none"},
                      TraitsCase{"iadeep_is_fifo_and_tunes_the_newcomer", "iadeep",
                                 QueueOrder::kArrival, "iadeep"},
                      TraitsCase{"least_delay_is_shortest_first_with_joint_tuning", "least-delay",
                                 QueueOrder::kShortestRemaining, "joint"}),
    CaseName());

TEST(ColocationTraitsOf, OtherPoliciesHaveNone) {
  for (const char* name : {"random", "best-fit", "fgd", "exclusive"}) {
    auto made = BuiltinPolicies().Make(name, PolicyContext{});
    ASSERT_TRUE(made.has_value());
    EXPECT_EQ((*made)->colocation(), nullptr) << name;
  }
}

// ---------------------------------------------------------------- first-fit

TEST(FirstFit, WorkedExampleGoesToGpu1) {
  // GPUs 0..3 hold 3, 1, 0, 2 jobs (limit 3).
  Bed bed(Nodes(1, 4), Classes());
  bed.Add("g0a", "b30", 0);
  bed.Add("g0b", "b30", 0);
  bed.Add("g0c", "b30", 0);
  bed.Add("g1a", "b90", 1);
  bed.Add("g3a", "b30", 3);
  bed.Add("g3b", "b30", 3);
  const Decision d = bed.Decide<FirstFitPolicy>(Bed::Job("new", "b90"));
  ExpectPlacedOn(d, 0, {1});
  EXPECT_EQ(d.score, 0);
}

TEST(FirstFit, DeclinesWhenEveryGpuHoldsTheMaximum) {
  Bed bed(Nodes(1, 2), Classes());
  for (int g = 0; g < 2; ++g) {
    for (int k = 0; k < 3; ++k) bed.Add(test::Numbered("j", g * 3 + k), "b10", g);
  }
  const Decision d = bed.Decide<FirstFitPolicy>(Bed::Job("new", "b10"));
  ExpectDeclined(d);
  EXPECT_EQ(d.feasible_nodes, 1);
}

TEST(FirstFit, HonoursTheConfiguredMaximum) {
  Bed bed(Nodes(1, 3), Classes());
  bed.Add("a", "b10", 0);
  bed.Add("b", "b10", 1);
  bed.context().colocation.max_jobs_per_gpu = 1;
  ExpectPlacedOn(bed.Decide<FirstFitPolicy>(Bed::Job("new", "b10")), 0, {2});
}

TEST(FirstFit, SkipsAGpuWithoutTheMemory) {
  // GPU 0 has 16384 - 15000 MiB left: a 2000 MiB job goes to GPU 1.
  Bed bed(Nodes(1, 2), Classes());
  bed.Add("big", "b10", 0, 0, 15000);
  bed.Add("small", "b10", 1);
  ExpectPlacedOn(bed.Decide<FirstFitPolicy>(Bed::Job("new", "b10")), 0, {1});
}

TEST(FirstFit, TakesTheFirstNodeInRankOrderWithRoom) {
  Bed bed(Nodes(3, 1), Classes());
  for (int k = 0; k < 3; ++k) bed.Add(test::Numbered("full", k), "b10", 0, 1);
  // Ranks: node 1 first, then 2, then 0; node 1 is full.
  ExpectPlacedOn(bed.Decide<FirstFitPolicy>(Bed::Job("new", "b10"), {2, 0, 1}), 2, {0});
}

TEST(FirstFit, ATwoGpuJobTakesTheLowestGpusWithRoom) {
  Bed bed(Nodes(1, 4), Classes());
  for (int k = 0; k < 3; ++k) bed.Add(test::Numbered("full", k), "b10", 0);
  bed.Add("one", "b10", 1);
  core::Request r = Bed::Job("new", "b30");
  r.gpu_count = 2;
  ExpectPlacedOn(bed.Decide<FirstFitPolicy>(r), 0, {1, 2});
}

TEST(FirstFit, ACpuOnlyJobIsPlacedWithScoreZero) {
  Bed bed(Nodes(1, 1), Classes());
  for (int k = 0; k < 3; ++k) bed.Add(test::Numbered("full", k), "b10", 0);
  const Decision d = bed.Decide<FirstFitPolicy>(RequestBuilder("cpu").Cpu(2000));
  ExpectPlacedOn(d, 0, {});
  EXPECT_EQ(d.score, 0);
}

TEST(FirstFit, IgnoresInterferenceAndUnknownClasses) {
  // A job of unknown class goes to the first GPU with room even next to a busy one.
  Bed bed(Nodes(1, 2), Classes());
  bed.Add("busy", "b99", 0);
  bed.context().jobs = nullptr;
  ExpectPlacedOn(bed.Decide<FirstFitPolicy>(Bed::Job("new", "mystery")), 0, {0});
}

// ---------------------------------------------------------------- iadeep

TEST(Iadeep, WorkedExamplePrefersTheGpuWithTheLightCompanion) {
  // Newcomer busy 0.4; GPU 0 holds busy 0.9, GPU 1 busy 0.55. GPU 1: sum 0.95, x = 1,
  // I = 0.05 + 0.05 = 0.1, score -0.1 * 1e6.
  Bed bed(Nodes(1, 2), Classes());
  bed.Add("heavy", "b90", 0);
  bed.Add("light", "b55", 1);
  const Decision d = bed.Decide<IadeepPolicy>(Bed::Job("new", "b40"));
  ExpectPlacedOn(d, 0, {1});
  EXPECT_EQ(d.score, -100000);
}

TEST(Iadeep, TheScoreOfASharedGpuIsMinusTheSummedSlowdownExcess) {
  // GPU A of the worked example alone: I = (s_0.9 - 1) + (s_0.4 - 1) from the model.
  Bed bed(Nodes(1, 1), Classes());
  bed.Add("heavy", "b90", 0);
  std::vector<double> s(2);
  ProfileInterference(bed.profile())
      .Predict(std::vector<Member>{{bed.cls("b90"), 100}, {bed.cls("b40"), 100}}, s);
  const double interference = s[0] + s[1] - 2.0;
  const Decision d = bed.Decide<IadeepPolicy>(Bed::Job("new", "b40"));
  ExpectPlacedOn(d, 0, {0});
  EXPECT_NEAR(static_cast<double>(d.score), -interference * 1e6, 1.0);
  EXPECT_GT(interference, 0.1) << "worse than GPU B of the worked example";
}

TEST(Iadeep, WorkedExampleInterferenceOfTheHeavyGpu) {
  Bed bed(Nodes(1, 1), Classes());
  bed.Add("heavy", "b90", 0);
  const Decision d = bed.Decide<IadeepPolicy>(Bed::Job("new", "b40"));
  ExpectPlacedOn(d, 0, {0});
  EXPECT_NEAR(static_cast<double>(d.score), -0.662e6, 1e3);
}

TEST(Iadeep, TakesAnIdleGpuBeforeAnyShare) {
  Bed bed(Nodes(1, 3), Classes());
  bed.Add("a", "b10", 0);
  bed.Add("b", "b10", 2);
  const Decision d = bed.Decide<IadeepPolicy>(Bed::Job("new", "b10"));
  ExpectPlacedOn(d, 0, {1});
  EXPECT_EQ(d.score, 2000000);
}

TEST(Iadeep, TheLowestIndexedIdleGpuWins) {
  Bed bed(Nodes(1, 3), Classes());
  bed.Add("a", "b10", 0);
  ExpectPlacedOn(bed.Decide<IadeepPolicy>(Bed::Job("new", "b10")), 0, {1});
}

TEST(Iadeep, SkipsAGpuInATuningSession) {
  Bed bed(Nodes(1, 2), Classes());
  bed.Add("heavy", "b90", 0);
  const core::TenantIndex light = bed.Add("light", "b55", 1);
  bed.view().jobs[light].tuning = true;
  ExpectPlacedOn(bed.Decide<IadeepPolicy>(Bed::Job("new", "b40")), 0, {0});
}

TEST(Iadeep, DeclinesWhenTheOnlySharedGpuIsTuning) {
  Bed bed(Nodes(1, 1), Classes());
  const core::TenantIndex t = bed.Add("light", "b10", 0);
  bed.view().jobs[t].tuning = true;
  ExpectDeclined(bed.Decide<IadeepPolicy>(Bed::Job("new", "b10")));
}

struct UtilisationCase {
  const char* name;
  std::vector<std::string> tenants;  // classes on the only GPU
  bool placed;
};
void PrintTo(const UtilisationCase& c, std::ostream* os) { *os << c.name; }

class IadeepUtilisation : public ::testing::TestWithParam<UtilisationCase> {};

TEST_P(IadeepUtilisation, AGpuAtOrAbove99PercentIsNotShared) {
  const UtilisationCase& c = GetParam();
  Bed bed(Nodes(1, 1), Classes());
  for (std::size_t k = 0; k < c.tenants.size(); ++k) {
    bed.Add(test::Numbered("t", static_cast<std::int64_t>(k)), c.tenants[k], 0);
  }
  const Decision d = bed.Decide<IadeepPolicy>(Bed::Job("new", "b10"));
  if (c.placed) {
    ExpectPlacedOn(d, 0, {0});
  } else {
    ExpectDeclined(d);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Table, IadeepUtilisation,
    ::testing::Values(
        UtilisationCase{"busy_0_98_is_shared", {"b98"}, true},
        UtilisationCase{"busy_0_99_is_not", {"b99"}, false},
        UtilisationCase{"two_jobs_summing_to_0_6_are_shared", {"b30", "b30"}, true},
        UtilisationCase{"two_jobs_summing_to_1_are_not", {"b50", "b50"}, false},
        UtilisationCase{"a_job_of_unknown_class_counts_as_busy_1", {"mystery"}, false},
        UtilisationCase{"three_light_jobs_are_the_maximum", {"b10", "b10", "b10"}, false}),
    CaseName());

TEST(Iadeep, WithoutAJobViewOnlyIdleGpusAreTaken) {
  Bed bed(Nodes(1, 2), Classes());
  bed.Add("a", "b10", 0);
  bed.context().jobs = nullptr;
  ExpectPlacedOn(bed.Decide<IadeepPolicy>(Bed::Job("new", "b10")), 0, {1});
  bed.Add("b", "b10", 1);
  ExpectDeclined(bed.Decide<IadeepPolicy>(Bed::Job("new", "b10")));
}

TEST(Iadeep, ANodeScoresAsItsBestGpu) {
  // Node 0: a GPU with busy 0.9; node 1: a GPU with busy 0.3. Ranks favour node 0.
  Bed bed(Nodes(2, 1), Classes());
  bed.Add("heavy", "b90", 0, 0);
  bed.Add("light", "b30", 0, 1);
  ExpectPlacedOn(bed.Decide<IadeepPolicy>(Bed::Job("new", "b40")), 1, {0});
}

// ---------------------------------------------------------------- gpumux: CompletionSum

// a: t(b) = 0.04 + 0.0004 b, 1250 samples/s at b0 = 100 (its solo optimum); b: twice as fast
// (t = 0.02 + 0.0002 b, 2500 samples/s at 100, also optimal). Busy 0.3 and 0.4: together
// both slow by 1.05 whatever the batches, so the joint tuning keeps b0.
WorkloadProfile TwoSpeeds() {
  LinearClass a;
  a.name = "a";
  LinearClass b;
  b.name = "b";
  b.lo_step_s = 0.04;
  b.hi_step_s = 0.06;
  b.lo_busy = 0.4;
  b.hi_busy = 0.4;
  return MakeProfile({MakeClass(a), MakeClass(b)}, 0.05);
}

TEST(GpumuxCompletionSum, OneJobFinishesAfterItsSoloTime) {
  const WorkloadProfile p = TwoSpeeds();
  const ProfileInterference model(p);
  PolicyContext context;
  context.profile = &p;
  context.interference = &model;
  InterferenceAwarePolicy policy(context);
  const auto t = policy.CompletionSum({{&p.classes[0], 0, 125000}});
  ASSERT_TRUE(t.has_value());
  EXPECT_NEAR(*t, 100.0, 1e-9);
  EXPECT_NEAR(*policy.CompletionSum({{&p.classes[1], 0, 125000}}), 50.0, 1e-9);
}

TEST(GpumuxCompletionSum, TwoJobsShareThenTheSurvivorRunsAlone) {
  // Together: a at 1250 / 1.05, b at 2500 / 1.05. b ends at 125000 / 2380.95 = 52.5 s, when
  // a has done 62500; a then runs alone at 1250 for 50 s more: ends at 102.5. T = 155.
  const WorkloadProfile p = TwoSpeeds();
  const ProfileInterference model(p);
  PolicyContext context;
  context.profile = &p;
  context.interference = &model;
  InterferenceAwarePolicy policy(context);
  const auto t = policy.CompletionSum({{&p.classes[0], 0, 125000}, {&p.classes[1], 0, 125000}});
  ASSERT_TRUE(t.has_value());
  EXPECT_NEAR(*t, 155.0, 1e-9);
}

TEST(GpumuxCompletionSum, AMemoryLimitRestrictsTheBatch) {
  // 1340 MiB fits only batch 67: goodput 67 / 0.0668 * 200 / 167.
  const WorkloadProfile p = TwoSpeeds();
  const ProfileInterference model(p);
  PolicyContext context;
  context.profile = &p;
  context.interference = &model;
  InterferenceAwarePolicy policy(context);
  const double goodput = 67.0 / (0.04 + 0.0004 * 67.0) * 200.0 / 167.0;
  EXPECT_NEAR(*policy.CompletionSum({{&p.classes[0], 1340, 125000}}), 125000 / goodput, 1e-6);
}

TEST(GpumuxCompletionSum, NoJobsTakeNoTimeAndUnknownJobsCannotBePredicted) {
  const WorkloadProfile p = TwoSpeeds();
  const ProfileInterference model(p);
  PolicyContext context;
  context.profile = &p;
  context.interference = &model;
  InterferenceAwarePolicy policy(context);
  EXPECT_EQ(policy.CompletionSum({}), 0.0);
  EXPECT_FALSE(policy.CompletionSum({{&p.classes[0], 0, 1000}, {nullptr, 0, 1000}}).has_value());
}

// ---------------------------------------------------------------- gpumux: placement

// The worked example of interference_aware.h: class a (100 s alone at b0, busy 0.3) measured
// with itself at b0: both slowed 1.5x (at any batch: the busy fraction is constant, so the
// predicted ratio is 1, and tuning keeps b0).
WorkloadProfile HalfSpeedPair() {
  return MakeProfile({BusyClass("a", 0.3)}, 0.05, {Measured({"a", "a"}, {100, 100}, {1.5, 1.5})});
}

// GPUs each holding one job of class a with all its work left, draining in `drain_s` at its
// observed rate.
void FillWithDrainingJobs(Bed& bed, const std::vector<double>& drain_s) {
  for (std::size_t g = 0; g < drain_s.size(); ++g) {
    const core::TenantIndex t =
        bed.Add(test::Numbered("run", static_cast<std::int64_t>(g)), "a", static_cast<int>(g));
    JobSnapshot& s = bed.view().jobs[t];
    // At b0 (efficiency 1): rate = batch / step = remaining / drain.
    s.observed_step_s = s.batch * drain_s[g] / s.cls->WorkSamples();
  }
}

TEST(Gpumux, WorkedExampleAnIdleGpuCosts100AndBeatsSharingAt200) {
  Bed bed(Nodes(1, 2), HalfSpeedPair());
  FillWithDrainingJobs(bed, {150});
  const Decision d = bed.Decide<InterferenceAwarePolicy>(Bed::Job("new", "a"));
  ExpectPlacedOn(d, 0, {1});
  EXPECT_NEAR(static_cast<double>(d.score), -100e6, 10.0);
}

TEST(Gpumux, WorkedExampleWithoutAnIdleGpuWaitingAt250LosesToSharingAt200) {
  Bed bed(Nodes(1, 1), HalfSpeedPair());
  FillWithDrainingJobs(bed, {150});
  const Decision d = bed.Decide<InterferenceAwarePolicy>(Bed::Job("new", "a"));
  ExpectPlacedOn(d, 0, {0});
  EXPECT_NEAR(static_cast<double>(d.score), -200e6, 10.0);
}

TEST(Gpumux, WaitsWhenASlotFreesSoonEnough) {
  // W = 50: waiting costs 50 + 100 = 150 < 200.
  Bed bed(Nodes(1, 1), HalfSpeedPair());
  FillWithDrainingJobs(bed, {50});
  ExpectDeclined(bed.Decide<InterferenceAwarePolicy>(Bed::Job("new", "a")));
}

struct AheadCase {
  const char* name;
  int ahead;
  bool placed;
};
void PrintTo(const AheadCase& c, std::ostream* os) { *os << c.name; }

class GpumuxQueuedAhead : public ::testing::TestWithParam<AheadCase> {};

TEST_P(GpumuxQueuedAhead, PicksTheSlotItWouldGet) {
  // Two GPUs draining at 50 s and 150 s. Sharing either costs 200. With q jobs ahead, W is the
  // (q+1)-th drain: q = 0 -> 150 < 200, wait; q = 1 -> 250 > 200, share; q = 2 -> no slot
  // in sight, share.
  const AheadCase& c = GetParam();
  Bed bed(Nodes(1, 2), HalfSpeedPair());
  FillWithDrainingJobs(bed, {50, 150});
  bed.view().ahead = c.ahead;
  const Decision d = bed.Decide<InterferenceAwarePolicy>(Bed::Job("new", "a"));
  if (c.placed) {
    ExpectPlacedOn(d, 0, {0});
    EXPECT_NEAR(static_cast<double>(d.score), -200e6, 10.0);
  } else {
    ExpectDeclined(d);
  }
}

INSTANTIATE_TEST_SUITE_P(Table, GpumuxQueuedAhead,
                         ::testing::Values(AheadCase{"none_ahead_waits_for_the_first_slot", 0,
                                                     false},
                                           AheadCase{"one_ahead_shares_rather_than_wait", 1, true},
                                           AheadCase{"more_ahead_than_slots_shares", 2, true},
                                           AheadCase{"a_negative_count_counts_as_none", -3, false}),
                         CaseName());

TEST(Gpumux, AGpuWhoseJobsHaveNoRateYetIsNotAFreeSlot) {
  // GPU 0's job has no observed rate (0 = not measured yet; the simulator reports 0 while a
  // job is paused) and its GPU is tuning; GPU 1's job drains in 150 s. The only slot in sight
  // is GPU 1's at 150 s: waiting costs 250 > 200, so the newcomer shares GPU 1.
  Bed bed(Nodes(1, 2), HalfSpeedPair());
  FillWithDrainingJobs(bed, {150, 150});
  JobSnapshot& paused = bed.view().jobs.begin()->second;
  paused.observed_step_s = 0;
  paused.tuning = true;
  const Decision d = bed.Decide<InterferenceAwarePolicy>(Bed::Job("new", "a"));
  ExpectPlacedOn(d, 0, {1});
  EXPECT_NEAR(static_cast<double>(d.score), -200e6, 10.0);
}

TEST(Gpumux, PrefersTheCompanionItDelaysLeast) {
  // GPU 0 holds b99 (with the newcomer b10 the busy sum exceeds 1: both stretch); GPU 1 holds
  // b30 (sum 0.4: both slow by 1.05 only, cost 2 * 105 - 100 = 110 s). Slots free in 100 s, so
  // waiting costs 200 s: the cheaper share wins.
  Bed bed(Nodes(1, 2), Classes());
  bed.Add("heavy", "b99", 0);
  bed.Add("light", "b30", 1);
  const Decision d = bed.Decide<InterferenceAwarePolicy>(Bed::Job("new", "b10"));
  ExpectPlacedOn(d, 0, {1});
  EXPECT_NEAR(static_cast<double>(d.score), -110e6, 10.0);
}

TEST(Gpumux, SkipsAGpuInATuningSession) {
  Bed bed(Nodes(1, 2), Classes());
  const core::TenantIndex t = bed.Add("light", "b30", 1);
  bed.Add("heavy", "b90", 0);
  bed.view().jobs[t].tuning = true;
  ExpectPlacedOn(bed.Decide<InterferenceAwarePolicy>(Bed::Job("new", "b10")), 0, {0});
}

TEST(Gpumux, SkipsASaturatedGpuLikeIadeep) {
  // GPU 0's job alone keeps it 99 % busy: it takes no one else, even the lightest job; GPU 1
  // (busy 0.9) still may.
  Bed bed(Nodes(1, 2), Classes());
  bed.Add("saturating", "b99", 0);
  bed.Add("heavy", "b90", 1);
  ExpectPlacedOn(bed.Decide<InterferenceAwarePolicy>(Bed::Job("new", "b10")), 0, {1});
}

TEST(Gpumux, AnUnknownNewcomerGoesToTheEmptiestGpuAndNeverWaits) {
  // Scores are minus the number of jobs: GPU 1 (one job) beats GPU 0 (two). A slot freeing in
  // 1 s does not make it wait: nothing can be predicted.
  Bed bed(Nodes(1, 2), Classes());
  bed.Add("x", "b30", 0);
  bed.Add("y", "b30", 0);
  bed.Add("z", "b30", 1);
  for (auto& [t, s] : bed.view().jobs) {
    if (s.cls != nullptr) s.observed_step_s = s.batch / s.cls->WorkSamples();  // drain in 1 s
  }
  const Decision d = bed.Decide<InterferenceAwarePolicy>(Bed::Job("new", "mystery"));
  ExpectPlacedOn(d, 0, {1});
  EXPECT_EQ(d.score, -1000000);
}

TEST(Gpumux, AnUnknownCompanionIsScoredByJobCount) {
  // GPU 0: one job the view does not know; GPU 1: two known jobs. Known newcomer: GPU 0 scores
  // -1 (no prediction), GPU 1 a predicted cost of over 100 s: GPU 0 wins.
  Bed bed(Nodes(1, 2), Classes());
  bed.Add("unknown", "mystery", 0);
  bed.Add("x", "b30", 1);
  bed.Add("y", "b30", 1);
  const Decision d = bed.Decide<InterferenceAwarePolicy>(Bed::Job("new", "b30"));
  ExpectPlacedOn(d, 0, {0});
  EXPECT_EQ(d.score, -1000000);
}

TEST(Gpumux, WithoutAJobViewTenantsAreUnknownAndNothingWaits) {
  Bed bed(Nodes(1, 1), Classes());
  bed.Add("x", "b30", 0);
  bed.context().jobs = nullptr;
  const Decision d = bed.Decide<InterferenceAwarePolicy>(Bed::Job("new", "b30"));
  ExpectPlacedOn(d, 0, {0});
  EXPECT_EQ(d.score, -1000000);
}

TEST(Gpumux, DeclinesWhenEveryGpuHoldsTheMaximum) {
  Bed bed(Nodes(1, 1), Classes());
  for (int k = 0; k < 3; ++k) bed.Add(test::Numbered("j", k), "b10", 0);
  ExpectDeclined(bed.Decide<InterferenceAwarePolicy>(Bed::Job("new", "mystery")));
}

// ---------------------------------------------------------------------------------------------
// What a policy may know of a placed job: estimates from the prior and the reports.

// E[W - done | W > done] for W = prior * exp(spread Z - spread^2 / 2), by the trapezoid rule over
// z (the reference the closed form must match).
double RemainingByQuadrature(double prior, double spread, double done) {
  const double z0 = (std::log(done / prior) + 0.5 * spread * spread) / spread;
  const int n = 200000;
  const double hi = 12.0;
  const double h = (hi - z0) / n;
  double num = 0, den = 0;
  for (int i = 0; i <= n; ++i) {
    const double z = z0 + i * h;
    const double w = (i == 0 || i == n) ? 0.5 : 1.0;
    const double phi = std::exp(-0.5 * z * z);
    num += w * phi * (prior * std::exp(spread * z - 0.5 * spread * spread) - done);
    den += w * phi;
  }
  return num / den;
}

TEST(EstimatedRemaining, IsThePriorUntilTheJobHasRun) {
  EXPECT_EQ(EstimatedRemainingWork(100, 0.5, 0), 100);
  EXPECT_EQ(EstimatedRemainingWork(100, 0, 0), 100);
}

TEST(EstimatedRemaining, WithoutSpreadIsThePriorMinusTheDoneFlooredAtFivePercent) {
  EXPECT_DOUBLE_EQ(EstimatedRemainingWork(100, 0, 30), 70);
  EXPECT_DOUBLE_EQ(EstimatedRemainingWork(100, 0, 99), 5);
  EXPECT_DOUBLE_EQ(EstimatedRemainingWork(100, 0, 500), 5);
}

TEST(EstimatedRemaining, WithSpreadIsTheLogNormalConditionalMean) {
  for (double done : {20.0, 80.0, 150.0, 400.0}) {
    EXPECT_NEAR(EstimatedRemainingWork(100, 0.5, done), RemainingByQuadrature(100, 0.5, done),
                1e-3 * done)
        << done;
  }
  // Past the prior, the longer a job ran, the longer it is expected to run on.
  EXPECT_GT(EstimatedRemainingWork(100, 0.5, 300), EstimatedRemainingWork(100, 0.5, 150));
  EXPECT_GT(EstimatedRemainingWork(100, 0.5, 150), 0);
}

TEST(EstimatedRemaining, OfASnapshotUsesItsClassPriorAndReportedProgress) {
  const WorkloadProfile p = Classes();
  JobSnapshot s;
  s.cls = &p.classes[0];
  s.batch = s.cls->default_batch;
  s.work_done = 0.25 * s.cls->WorkSamples();
  EXPECT_DOUBLE_EQ(EstimatedRemainingWork(s, 0), 0.75 * s.cls->WorkSamples());
  EXPECT_EQ(EstimatedRemainingWork(JobSnapshot{}, 0.5), 0) << "no class, no estimate";
  EXPECT_EQ(ObservedRate(s), 0) << "no step-time report yet";
  s.observed_step_s = 2 * s.cls->StepSeconds(s.batch);
  EXPECT_DOUBLE_EQ(ObservedRate(s), 0.5 * s.cls->SoloGoodput(s.batch)) << "at b0: batch / step";
}

}  // namespace
}  // namespace gpumux::policy
