// The workload profile (interpolation, efficiency, validation, batch candidates) and the
// interference model (busy-time predictor, measured sets, goodput) on small hand-made cases.
#include "gpumux/policy/interference.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "gpumux/policy/workload_profile.h"
#include "tests/policy/colocation_fixtures.h"
#include "tests/testing/builders.h"

namespace gpumux::policy {
namespace {

using test::BusyClass;
using test::CaseName;
using test::LinearClass;
using test::MakeClass;
using test::MakeProfile;
using test::Measured;

// The stretch x solves sum_k b_k / ((1 - b_k) + x b_k) = 1; this is that left side.
double SaturationSum(const std::vector<double>& busy, double x) {
  double s = 0;
  for (double b : busy) s += b / ((1.0 - b) + x * b);
  return s;
}

std::vector<double> Predict(const InterferenceModel& model, const std::vector<Member>& members) {
  std::vector<double> slowdown(members.size(), -1.0);
  model.Predict(members, slowdown);
  return slowdown;
}

std::vector<double> PredictFromBusyTime(const ProfileInterference& model,
                                        const std::vector<Member>& members) {
  std::vector<double> slowdown(members.size(), -1.0);
  model.PredictFromBusyTime(members, slowdown);
  return slowdown;
}

// ---------------------------------------------------------------- Stretch

struct StretchCase {
  const char* name;
  std::vector<double> busy;
  double stretch;  // the root, to 1e-3
};

void PrintTo(const StretchCase& c, std::ostream* os) { *os << c.name; }

class Stretch : public ::testing::TestWithParam<StretchCase> {};

TEST_P(Stretch, IsTheRootThatExactlySaturatesTheGpu) {
  const StretchCase& c = GetParam();
  const double x = ProfileInterference::Stretch(c.busy);
  EXPECT_NEAR(x, c.stretch, 1e-3);
  double total = 0;
  for (double b : c.busy) total += b;
  if (total > 1.0) {
    EXPECT_NEAR(SaturationSum(c.busy, x), 1.0, 1e-9);
  }
}

// Stretch() bisects on [1, sum of busy], but sum_k b_k / ((1 - b_k) + T b_k) >= 1 at T = the
// sum (Cauchy-Schwarz), so the root is never below the sum and Stretch returns the sum itself
// whenever the sum exceeds 1. The correct bracket is [1, n]: f(n) <= sum b / (n b) = 1.

INSTANTIATE_TEST_SUITE_P(
    Table, Stretch,
    ::testing::Values(
        StretchCase{"an_empty_set_does_not_stretch", {}, 1.0},
        StretchCase{"a_single_gpu_bound_job_does_not_stretch", {1.0}, 1.0},
        StretchCase{"busy_fractions_summing_below_one_do_not_stretch", {0.4, 0.55}, 1.0},
        StretchCase{"busy_fractions_summing_to_exactly_one_do_not_stretch", {0.5, 0.25, 0.25}, 1.0},
        StretchCase{"two_gpu_bound_jobs_stretch_by_two", {1.0, 1.0}, 2.0},
        StretchCase{"three_gpu_bound_jobs_stretch_by_three", {1.0, 1.0, 1.0}, 3.0},
        StretchCase{"busy_0_9_and_0_6_stretch_by_1_649", {0.9, 0.6}, 1.649},
        StretchCase{"busy_0_9_and_0_4_stretch_by_1_412", {0.9, 0.4}, 1.412},
        StretchCase{"three_jobs_with_busy_0_9_stretch_by_2_889", {0.9, 0.9, 0.9}, 2.889},
        StretchCase{"busy_0_5_and_0_6_stretch_by_1_180", {0.5, 0.6}, 1.180}),
    CaseName());

TEST(StretchBounds, IsAtLeastOneAndAtMostTheNumberOfJobs) {
  const std::vector<std::vector<double>> sets{
      {0.9, 0.6}, {0.2, 0.95}, {0.7, 0.7, 0.7}, {0.01, 1.0}, {1.0, 1.0, 1.0, 1.0}};
  for (const auto& busy : sets) {
    const double x = ProfileInterference::Stretch(busy);
    EXPECT_GE(x, 1.0);
    EXPECT_LE(x, static_cast<double>(busy.size()) + 1e-9);
  }
}

TEST(StretchBounds, GrowsWhenAJobBecomesBusier) {
  const double lighter = ProfileInterference::Stretch(std::vector<double>{0.6, 0.6});
  const double heavier = ProfileInterference::Stretch(std::vector<double>{0.6, 0.8});
  EXPECT_GT(heavier, lighter);
}

// ---------------------------------------------------------------- busy-time predictor

TEST(BusyTimePredictor, WorkedExampleOfTheHeaderBusy09And06) {
  const WorkloadProfile p = MakeProfile({BusyClass("a", 0.9), BusyClass("b", 0.6)}, 0.05);
  const ProfileInterference model(p);
  const std::vector<double> s = Predict(model, {{&p.classes[0], 100}, {&p.classes[1], 100}});
  EXPECT_NEAR(ProfileInterference::Stretch(std::vector<double>{0.9, 0.6}), 1.649, 5e-4);
  EXPECT_NEAR(s[0], 1.663, 5e-4);
  EXPECT_NEAR(s[1], 1.459, 5e-4);
}

TEST(BusyTimePredictor, WorkedExampleOfTheHeaderBusy04And055OnlyPaysTheOverhead) {
  const WorkloadProfile p = MakeProfile({BusyClass("a", 0.4), BusyClass("b", 0.55)}, 0.05);
  const ProfileInterference model(p);
  const std::vector<double> s = Predict(model, {{&p.classes[0], 100}, {&p.classes[1], 100}});
  EXPECT_DOUBLE_EQ(s[0], 1.05);
  EXPECT_DOUBLE_EQ(s[1], 1.05);
}

TEST(BusyTimePredictor, FollowsTheFormulaWithTheStretchOfTheSet) {
  // s_k = ((1 - b_k) + x b_k) (1 + beta (n - 1)), x = Stretch(busy), for any set.
  const WorkloadProfile p =
      MakeProfile({BusyClass("a", 0.9), BusyClass("b", 0.6), BusyClass("c", 0.3)}, 0.1);
  const ProfileInterference model(p);
  const std::vector<Member> members{
      {&p.classes[0], 100}, {&p.classes[1], 150}, {&p.classes[2], 200}};
  const std::vector<double> busy{0.9, 0.6, 0.3};
  const double x = ProfileInterference::Stretch(busy);
  const std::vector<double> s = PredictFromBusyTime(model, members);
  for (std::size_t k = 0; k < busy.size(); ++k) {
    EXPECT_NEAR(s[k], ((1.0 - busy[k]) + x * busy[k]) * 1.2, 1e-12) << "member " << k;
  }
  EXPECT_EQ(Predict(model, members), s) << "no measured set: Predict is the predictor";
}

TEST(BusyTimePredictor, AClassOwnOverheadReplacesTheProfilesForItsMembersOnly) {
  // Busy 0.2 and 0.3 fit into each other's gaps (x = 1): each member pays its own overhead.
  WorkloadProfile p = MakeProfile({BusyClass("own", 0.2), BusyClass("shared", 0.3)}, 0.05);
  p.classes[0].companion_overhead = 0.25;
  ASSERT_TRUE(p.Validate().has_value());
  const ProfileInterference model(p);
  const std::vector<double> s =
      Predict(model, {{&p.classes[0], 100}, {&p.classes[1], 100}, {nullptr, 0}});
  const double x = ProfileInterference::Stretch(std::vector<double>{0.2, 0.3, 1.0});
  EXPECT_NEAR(s[0], (0.8 + x * 0.2) * (1 + 0.25 * 2), 1e-12) << "its own, per companion";
  EXPECT_NEAR(s[1], (0.7 + x * 0.3) * (1 + 0.05 * 2), 1e-12) << "the profile's";
  EXPECT_NEAR(s[2], x * (1 + 0.05 * 2), 1e-12) << "an unknown class: the profile's";
}

TEST(BusyTimePredictor, AClassOwnOverheadOfZeroIsZeroNotTheProfiles) {
  WorkloadProfile p = MakeProfile({BusyClass("a", 0.2), BusyClass("b", 0.3)}, 0.05);
  p.classes[0].companion_overhead = 0.0;
  const ProfileInterference model(p);
  const std::vector<double> s = Predict(model, {{&p.classes[0], 100}, {&p.classes[1], 100}});
  EXPECT_DOUBLE_EQ(s[0], 1.0);
  EXPECT_DOUBLE_EQ(s[1], 1.05);
  EXPECT_DOUBLE_EQ(p.CompanionOverhead(&p.classes[1]), 0.05) << "negative: none of its own";
}

TEST(BusyTimePredictor, ASingleMemberHasNoSlowdown) {
  const WorkloadProfile p = MakeProfile({BusyClass("a", 1.0)}, 0.3);
  const ProfileInterference model(p);
  EXPECT_EQ(Predict(model, {{&p.classes[0], 100}}), (std::vector<double>{1.0}));
  EXPECT_EQ(Predict(model, {{nullptr, 0}}), (std::vector<double>{1.0}));
}

TEST(BusyTimePredictor, ThreeLightJobsPayTwoOverheads) {
  const WorkloadProfile p = MakeProfile({BusyClass("a", 0.2), BusyClass("b", 0.3)}, 0.05);
  const ProfileInterference model(p);
  const std::vector<double> s =
      Predict(model, {{&p.classes[0], 100}, {&p.classes[1], 100}, {&p.classes[0], 150}});
  for (double v : s) EXPECT_DOUBLE_EQ(v, 1.1);
}

TEST(BusyTimePredictor, WithoutOverheadLightJobsDoNotSlowDown) {
  const WorkloadProfile p = MakeProfile({BusyClass("a", 0.2), BusyClass("b", 0.3)}, 0.0);
  const ProfileInterference model(p);
  EXPECT_EQ(Predict(model, {{&p.classes[0], 100}, {&p.classes[1], 100}}),
            (std::vector<double>{1.0, 1.0}));
}

TEST(BusyTimePredictor, AnUnknownClassIsTreatedAsGpuBound) {
  const WorkloadProfile p = MakeProfile({BusyClass("light", 0.3), BusyClass("bound", 1.0)});
  const ProfileInterference model(p);
  const std::vector<double> unknown = Predict(model, {{&p.classes[0], 100}, {nullptr, 0}});
  const std::vector<double> bound = Predict(model, {{&p.classes[0], 100}, {&p.classes[1], 100}});
  EXPECT_EQ(unknown, bound);
  const double x = ProfileInterference::Stretch(std::vector<double>{0.3, 1.0});
  EXPECT_NEAR(unknown[1], x * 1.05, 1e-12) << "busy 1: the whole step stretches";
  EXPECT_GT(unknown[0], 1.05) << "the sum 1.3 exceeds 1: the light job stretches too";
}

TEST(BusyTimePredictor, UsesTheBusyFractionAtTheMembersBatchSize) {
  // busy 0.2 at 100 and 0.6 at 200: 0.4 at 150, so with 0.55 the sum is 0.95 <= 1; at 200 the
  // sum is 1.15 > 1 and both stretch.
  LinearClass ramp;
  ramp.name = "ramp";
  ramp.lo_busy = 0.2;
  ramp.hi_busy = 0.6;
  const WorkloadProfile p = MakeProfile({MakeClass(ramp), BusyClass("b", 0.55)});
  const ProfileInterference model(p);
  const std::vector<double> at150 = Predict(model, {{&p.classes[0], 150}, {&p.classes[1], 100}});
  EXPECT_DOUBLE_EQ(at150[0], 1.05);
  EXPECT_DOUBLE_EQ(at150[1], 1.05);
  const std::vector<double> at200 = Predict(model, {{&p.classes[0], 200}, {&p.classes[1], 100}});
  EXPECT_GT(at200[0], 1.05);
  EXPECT_GT(at200[1], 1.05);
}

TEST(BusyTimePredictor, MoreThanEightMembersArePredictedLikeFewer) {
  // The predictor keeps up to 8 busy fractions on the stack: 9 takes the other path.
  const WorkloadProfile p = MakeProfile({BusyClass("a", 0.05)}, 0.01);
  const ProfileInterference model(p);
  const std::vector<Member> nine(9, Member{&p.classes[0], 100});
  const std::vector<double> s = Predict(model, nine);
  for (double v : s) EXPECT_DOUBLE_EQ(v, 1.08) << "sum 0.45 <= 1: only 8 overheads";
}

// ---------------------------------------------------------------- measured sets

// a: busy 0.3 at 100 rising to 0.5 at 200; b: busy 0.6 always. Measured together at 100/100:
// a 1.2, b 1.3 (the predictor says 1.05 each there: sum 0.9).
WorkloadProfile MeasuredPair(std::vector<MeasuredSet> measured) {
  LinearClass a;
  a.name = std::string("a");  // not = "a": GCC 12 -O3 warns falsely (-Wrestrict, PR 105651)
  a.lo_busy = 0.3;
  a.hi_busy = 0.5;
  return MakeProfile({MakeClass(a), BusyClass("b", 0.6)}, 0.05, std::move(measured));
}

TEST(MeasuredSets, AtTheMeasuredBatchesTheMeasuredSlowdownsAreReturned) {
  const WorkloadProfile p = MeasuredPair({Measured({"a", "b"}, {100, 100}, {1.2, 1.3})});
  const ProfileInterference model(p);
  const std::vector<double> s = Predict(model, {{&p.classes[0], 100}, {&p.classes[1], 100}});
  EXPECT_DOUBLE_EQ(s[0], 1.2);
  EXPECT_DOUBLE_EQ(s[1], 1.3);
}

TEST(MeasuredSets, TheOrderOfTheMembersDoesNotMatter) {
  const WorkloadProfile p = MeasuredPair({Measured({"a", "b"}, {100, 100}, {1.2, 1.3})});
  const ProfileInterference model(p);
  const std::vector<double> s = Predict(model, {{&p.classes[1], 100}, {&p.classes[0], 100}});
  EXPECT_DOUBLE_EQ(s[0], 1.3);
  EXPECT_DOUBLE_EQ(s[1], 1.2);
}

TEST(MeasuredSets, TheOrderOfTheClassesInTheSetDoesNotMatter) {
  const WorkloadProfile p = MeasuredPair({Measured({"b", "a"}, {100, 100}, {1.3, 1.2})});
  const ProfileInterference model(p);
  const std::vector<double> s = Predict(model, {{&p.classes[0], 100}, {&p.classes[1], 100}});
  EXPECT_DOUBLE_EQ(s[0], 1.2);
  EXPECT_DOUBLE_EQ(s[1], 1.3);
}

TEST(MeasuredSets, OtherBatchesScaleByThePredictedRatio) {
  // At a = 200 the predictor stretches (sum 1.1): the measured slowdowns scale by
  // predicted(200, 100) / predicted(100, 100) = predicted(200, 100) / 1.05.
  const WorkloadProfile p = MeasuredPair({Measured({"a", "b"}, {100, 100}, {1.2, 1.3})});
  const ProfileInterference model(p);
  const std::vector<Member> members{{&p.classes[0], 200}, {&p.classes[1], 100}};
  const std::vector<double> predicted = PredictFromBusyTime(model, members);
  const double x = ProfileInterference::Stretch(std::vector<double>{0.5, 0.6});
  EXPECT_NEAR(predicted[0], (0.5 + 0.5 * x) * 1.05, 1e-12);
  EXPECT_NEAR(predicted[1], (0.4 + 0.6 * x) * 1.05, 1e-12);
  const std::vector<double> s = Predict(model, members);
  EXPECT_NEAR(s[0], 1.2 * predicted[0] / 1.05, 1e-12);
  EXPECT_NEAR(s[1], 1.3 * predicted[1] / 1.05, 1e-12);
  EXPECT_GT(s[0], 1.2);
}

TEST(MeasuredSets, ScaledSlowdownsNeverFallBelowOne) {
  // Measured 1.0 at 200/100 (where the predictor stretches); at 100/100 the prediction is
  // lower, so the scaled value would be < 1.
  const WorkloadProfile p = MeasuredPair({Measured({"a", "b"}, {200, 100}, {1.0, 1.0})});
  const ProfileInterference model(p);
  const std::vector<double> s = Predict(model, {{&p.classes[0], 100}, {&p.classes[1], 100}});
  EXPECT_EQ(s, (std::vector<double>{1.0, 1.0}));
}

TEST(MeasuredSets, RepeatedClassesInTheMeasuredOrderGetTheirSlowdowns) {
  const WorkloadProfile p =
      MakeProfile({BusyClass("c", 0.3)}, 0.05, {Measured({"c", "c"}, {100, 200}, {1.4, 1.1})});
  const ProfileInterference model(p);
  const std::vector<double> s = Predict(model, {{&p.classes[0], 100}, {&p.classes[0], 200}});
  EXPECT_DOUBLE_EQ(s[0], 1.4);
  EXPECT_DOUBLE_EQ(s[1], 1.1);
}

TEST(MeasuredSets, RepeatedClassesInAnyOrderGetTheSlowdownOfTheirBatch) {
  const WorkloadProfile p =
      MakeProfile({BusyClass("c", 0.3)}, 0.05, {Measured({"c", "c"}, {100, 200}, {1.4, 1.1})});
  const ProfileInterference model(p);
  const std::vector<double> s = Predict(model, {{&p.classes[0], 200}, {&p.classes[0], 100}});
  EXPECT_DOUBLE_EQ(s[0], 1.1);
  EXPECT_DOUBLE_EQ(s[1], 1.4);
}

TEST(MeasuredSets, AnExactMatchWinsOverAnEarlierSetOfTheSameClasses) {
  const WorkloadProfile p = MeasuredPair(
      {Measured({"a", "b"}, {100, 100}, {1.2, 1.3}), Measured({"a", "b"}, {200, 100}, {1.7, 1.8})});
  const ProfileInterference model(p);
  const std::vector<double> s = Predict(model, {{&p.classes[0], 200}, {&p.classes[1], 100}});
  EXPECT_DOUBLE_EQ(s[0], 1.7);
  EXPECT_DOUBLE_EQ(s[1], 1.8);
}

TEST(MeasuredSets, ASetOfOtherClassesOrSizeIsNotUsed) {
  const WorkloadProfile p = MakeProfile(
      {BusyClass("a", 0.3), BusyClass("b", 0.4), BusyClass("c", 0.2)}, 0.05,
      {Measured({"a", "b"}, {100, 100}, {1.5, 1.5}), Measured({"a", "a"}, {100, 100}, {2, 2})});
  const ProfileInterference model(p);
  const ClassProfile* a = &p.classes[0];
  const ClassProfile* b = &p.classes[1];
  const ClassProfile* c = &p.classes[2];
  EXPECT_EQ(Predict(model, {{a, 100}, {c, 100}}), (std::vector<double>{1.05, 1.05}));
  EXPECT_EQ(Predict(model, {{a, 100}, {b, 100}, {c, 100}}),
            PredictFromBusyTime(model, {{a, 100}, {b, 100}, {c, 100}}));
  // An unknown member matches no set.
  EXPECT_EQ(Predict(model, {{a, 100}, {nullptr, 0}}),
            PredictFromBusyTime(model, {{a, 100}, {nullptr, 0}}));
  EXPECT_EQ(Predict(model, {{a, 100}, {a, 100}}), (std::vector<double>{2.0, 2.0}));
}

// ---------------------------------------------------------------- goodput

TEST(GoodputOfASharedGpu, IsBatchOverSlowedStepTimesEfficiency) {
  // Default class a: t(b) = 0.04 + 0.0004 b, phi = 100, b0 = 100. At 200: t = 0.12 s,
  // E = 200 / 300, alone 200 / 0.12 * 2/3 = 1111.1 samples/s; with b (busy 0.3 + 0.3 <= 1)
  // both slow by 1.05: 1058.2. b at 100: 100 / 0.08 / 1.05 = 1190.5.
  const WorkloadProfile p = MakeProfile({BusyClass("a", 0.3), BusyClass("b", 0.3)}, 0.05);
  const ProfileInterference model(p);
  const std::vector<Member> members{{&p.classes[0], 200}, {&p.classes[1], 100}};
  std::vector<double> goodput(2);
  Goodput(model, members, goodput);
  EXPECT_NEAR(goodput[0], 200.0 / (0.12 * 1.05) * (200.0 / 300.0), 1e-9);
  EXPECT_NEAR(goodput[0], 1058.201, 1e-3);
  EXPECT_NEAR(goodput[1], 100.0 / (0.08 * 1.05), 1e-9);
}

TEST(GoodputOfASharedGpu, AloneItIsTheSoloGoodput) {
  const WorkloadProfile p = MakeProfile({BusyClass("a", 0.9)});
  const ProfileInterference model(p);
  std::vector<double> goodput(1);
  Goodput(model, std::vector<Member>{{&p.classes[0], 150}}, goodput);
  EXPECT_DOUBLE_EQ(goodput[0], p.classes[0].SoloGoodput(150));
}

TEST(GoodputOfASharedGpu, UnknownClassesAndZeroBatchesMakeNoProgress) {
  const WorkloadProfile p = MakeProfile({BusyClass("a", 0.3)});
  const ProfileInterference model(p);
  std::vector<double> goodput(3, -1.0);
  Goodput(model, std::vector<Member>{{&p.classes[0], 100}, {nullptr, 100}, {&p.classes[0], 0}},
          goodput);
  EXPECT_GT(goodput[0], 0.0);
  EXPECT_EQ(goodput[1], 0.0);
  EXPECT_EQ(goodput[2], 0.0);
}

// ---------------------------------------------------------------- class profile

// Three points: 100 -> 0.1 s, 1000 MiB, busy 0.2; 200 -> 0.3 s, 1500 MiB, 0.6;
// 400 -> 0.5 s, 3000 MiB, 1.0.
ClassProfile ThreePoints() {
  ClassProfile c;
  c.name = "three";
  c.solo = {{100, 0.1, 1000, 0.2}, {200, 0.3, 1500, 0.6}, {400, 0.5, 3000, 1.0}};
  c.default_batch = 200;
  c.noise_scale = 200;
  c.dataset_samples = 1000;
  c.target_epochs = 3;
  return c;
}

struct InterpolationCase {
  const char* name;
  int batch;
  double step_s;
  core::MiB memory_mib;
  double busy;
};

void PrintTo(const InterpolationCase& c, std::ostream* os) { *os << c.name; }

class ClassProfileInterpolation : public ::testing::TestWithParam<InterpolationCase> {};

TEST_P(ClassProfileInterpolation, IsLinearBetweenPointsAndBeyondTheEnds) {
  const InterpolationCase& c = GetParam();
  const ClassProfile p = ThreePoints();
  EXPECT_NEAR(p.StepSeconds(c.batch), c.step_s, 1e-12);
  EXPECT_EQ(p.MemoryMib(c.batch), c.memory_mib);
  EXPECT_NEAR(p.GpuBusy(c.batch), c.busy, 1e-12);
}

INSTANTIATE_TEST_SUITE_P(
    Table, ClassProfileInterpolation,
    ::testing::Values(
        InterpolationCase{"at_a_tabulated_point_it_is_that_point", 200, 0.3, 1500, 0.6},
        InterpolationCase{"halfway_in_the_first_segment", 150, 0.2, 1250, 0.4},
        InterpolationCase{"a_quarter_into_the_second_segment", 250, 0.35, 1875, 0.7},
        InterpolationCase{"memory_is_rounded_up_to_a_whole_mib", 201, 0.301, 1508, 0.602},
        InterpolationCase{"beyond_the_last_point_it_extrapolates_the_last_segment", 500, 0.6, 3750,
                          1.0},
        InterpolationCase{"below_the_first_point_it_extrapolates_the_first_segment", 75, 0.05, 875,
                          0.1},
        InterpolationCase{"far_below_the_step_time_stays_positive_and_busy_at_least_0_01", 40, 1e-6,
                          700, 0.01}),
    CaseName());

TEST(ClassProfileModel, BusyIsClampedToOneAboveTheTable) {
  EXPECT_EQ(ThreePoints().GpuBusy(800), 1.0);
}

TEST(ClassProfileModel, MemoryIsAtLeastOneMib) {
  ClassProfile c = ThreePoints();
  c.solo = {{100, 0.1, 100, 0.5}, {200, 0.2, 1000, 0.5}};
  EXPECT_EQ(c.MemoryMib(50), 1);
}

TEST(ClassProfileModel, ASinglePointIsConstant) {
  ClassProfile c = ThreePoints();
  c.solo = {{128, 0.25, 4096, 0.7}};
  for (int b : {1, 64, 128, 1000}) {
    EXPECT_EQ(c.StepSeconds(b), 0.25);
    EXPECT_EQ(c.MemoryMib(b), 4096);
    EXPECT_EQ(c.GpuBusy(b), 0.7);
  }
}

TEST(ClassProfileModel, WorkedExampleOfTheHeaderVgg16) {
  // b0 = 512, t(512) = 0.1652 s, phi = 2164: E(768) = 2676 / 2932 = 0.9127, goodput(512) =
  // 512 / 0.1652 = 3099 samples/s. (The default profile's vgg16 has phi = 2182.737, so there
  // E(768) = 0.9132; the header's phi is an older value.)
  ClassProfile c;
  c.name = "vgg16";
  c.solo = {{512, 0.1652, 5120, 0.9}};
  c.default_batch = 512;
  c.noise_scale = 2164;
  EXPECT_NEAR(c.Efficiency(768), 0.9127, 5e-5);
  EXPECT_NEAR(c.SoloGoodput(512), 3099.27, 5e-3);
  EXPECT_EQ(c.Efficiency(512), 1.0);
  EXPECT_NEAR(c.Efficiency(256), 2676.0 / 2420.0, 1e-12);
}

TEST(ClassProfileModel, EfficiencyIsNoiseScalePlusB0OverNoiseScalePlusBatch) {
  const ClassProfile c = MakeClass(LinearClass{});  // phi 100, b0 100
  EXPECT_DOUBLE_EQ(c.Efficiency(100), 1.0);
  EXPECT_DOUBLE_EQ(c.Efficiency(300), 0.5);
  EXPECT_DOUBLE_EQ(c.Efficiency(50), 200.0 / 150.0);
}

TEST(ClassProfileModel, SoloSecondsIsTheWorkOverTheSoloGoodputAtB0) {
  // 12500 samples x 10 epochs at 100 / 0.08 = 1250 samples/s: 100 s.
  const ClassProfile c = MakeClass(LinearClass{});
  EXPECT_DOUBLE_EQ(c.WorkSamples(), 125000.0);
  EXPECT_DOUBLE_EQ(c.SoloGoodput(100), 1250.0);
  EXPECT_NEAR(c.SoloSeconds(), 100.0, 1e-9);
  // At 200: 200 / 0.12 * (200 / 300) = 1111.1 < 1250 (the optimum is 100 = sqrt(a phi / c)).
  EXPECT_NEAR(c.SoloGoodput(200), 1111.111, 1e-3);
}

TEST(ClassProfileModel, FindReturnsTheClassOrNull) {
  const WorkloadProfile p = MakeProfile({BusyClass("a", 0.3), BusyClass("b", 0.4)});
  EXPECT_EQ(p.Find("b"), &p.classes[1]);
  EXPECT_EQ(p.Find("zzz"), nullptr);
  EXPECT_EQ(p.Find(""), nullptr);
}

// ---------------------------------------------------------------- validation

WorkloadProfile ValidProfile() {
  return MakeProfile({BusyClass("a", 0.3), BusyClass("b", 0.4)}, 0.05,
                     {Measured({"a", "b"}, {100, 100}, {1.2, 1.3}),
                      Measured({"b", "b", "a"}, {100, 150, 200}, {1.5, 1.5, 1.6})});
}

struct ValidationCase {
  const char* name;
  std::function<void(WorkloadProfile&)> spoil;
  const char* message;  // a part of the error; empty = valid
};

void PrintTo(const ValidationCase& c, std::ostream* os) { *os << c.name; }

class ProfileValidation : public ::testing::TestWithParam<ValidationCase> {};

TEST_P(ProfileValidation, NamesTheClassOrSetAtFault) {
  const ValidationCase& c = GetParam();
  WorkloadProfile p = ValidProfile();
  c.spoil(p);
  const core::Result<void> r = p.Validate();
  if (c.message[0] == '\0') {
    EXPECT_TRUE(r.has_value()) << r.error().message;
    return;
  }
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, core::ErrorCode::kInvalidArgument);
  EXPECT_NE(r.error().message.find(c.message), std::string::npos) << r.error().message;
}

INSTANTIATE_TEST_SUITE_P(
    Table, ProfileValidation,
    ::testing::Values(
        ValidationCase{"a_valid_profile_passes", [](WorkloadProfile&) {}, ""},
        ValidationCase{"no_measured_sets_is_valid", [](WorkloadProfile& p) { p.measured.clear(); },
                       ""},
        ValidationCase{"zero_gpu_memory", [](WorkloadProfile& p) { p.gpu_memory_mib = 0; },
                       "gpu memory_mib 0 is outside 1..4294967296"},
        ValidationCase{"an_overhead_of_one", [](WorkloadProfile& p) { p.companion_overhead = 1.0; },
                       "companion_overhead 1 is outside [0, 1)"},
        ValidationCase{"a_negative_overhead",
                       [](WorkloadProfile& p) { p.companion_overhead = -0.01; },
                       "companion_overhead"},
        ValidationCase{"a_class_overhead_of_one",
                       [](WorkloadProfile& p) { p.classes[1].companion_overhead = 1.0; },
                       "workload class 'b': companion_overhead 1 is outside [0, 1)"},
        ValidationCase{"a_class_overhead_that_is_nan",
                       [](WorkloadProfile& p) {
                         p.classes[0].companion_overhead = std::numeric_limits<double>::quiet_NaN();
                       },
                       "workload class 'a': companion_overhead nan is outside [0, 1)"},
        ValidationCase{"a_class_overhead_of_zero_is_valid",
                       [](WorkloadProfile& p) { p.classes[0].companion_overhead = 0.0; }, ""},
        ValidationCase{"a_negative_class_overhead_means_none_and_is_valid",
                       [](WorkloadProfile& p) { p.classes[0].companion_overhead = -0.5; }, ""},
        ValidationCase{"no_classes", [](WorkloadProfile& p) { p.classes.clear(); },
                       "at least one workload class"},
        ValidationCase{"an_empty_class_name", [](WorkloadProfile& p) { p.classes[1].name.clear(); },
                       "empty name"},
        ValidationCase{"a_duplicate_class",
                       [](WorkloadProfile& p) { p.classes[1].name = p.classes[0].name; },
                       "duplicate workload class 'a'"},
        ValidationCase{"no_solo_points", [](WorkloadProfile& p) { p.classes[1].solo.clear(); },
                       "workload class 'b' has no solo points"},
        ValidationCase{"a_busy_fraction_above_one",
                       [](WorkloadProfile& p) { p.classes[1].solo[1].gpu_busy = 1.5; },
                       "workload class 'b': solo point 1: gpu_busy 1.5 is outside (0, 1]"},
        ValidationCase{"a_zero_step_time",
                       [](WorkloadProfile& p) { p.classes[0].solo[0].step_s = 0; },
                       "workload class 'a': solo point 0: step_s 0 is outside [1e-06, 86400]"},
        ValidationCase{"a_zero_memory",
                       [](WorkloadProfile& p) { p.classes[1].solo[0].memory_mib = 0; },
                       "workload class 'b': solo point 0: memory_mib 0 is outside 1..4294967296"},
        ValidationCase{"batches_not_ascending",
                       [](WorkloadProfile& p) { p.classes[1].solo[1].batch = 100; },
                       "workload class 'b': solo points must have ascending batch sizes"},
        ValidationCase{"a_zero_default_batch",
                       [](WorkloadProfile& p) { p.classes[1].default_batch = 0; },
                       "workload class 'b': default_batch 0 is outside 1..1048576"},
        ValidationCase{"a_zero_noise_scale",
                       [](WorkloadProfile& p) { p.classes[0].noise_scale = 0; },
                       "workload class 'a': noise_scale 0 is outside (0, 1e+12]"},
        ValidationCase{"no_dataset_samples",
                       [](WorkloadProfile& p) { p.classes[1].dataset_samples = 0; },
                       "workload class 'b': dataset_samples 0 is outside 1..1000000000000"},
        ValidationCase{"no_target_epochs",
                       [](WorkloadProfile& p) { p.classes[1].target_epochs = 0; },
                       "workload class 'b': target_epochs 0 is outside (0, 1e+06]"},
        ValidationCase{"a_set_of_one_class",
                       [](WorkloadProfile& p) { p.measured[1] = Measured({"a"}, {100}, {1.1}); },
                       "measured set 1 needs at least two classes"},
        ValidationCase{"a_set_with_too_few_slowdowns",
                       [](WorkloadProfile& p) { p.measured[1].slowdown.pop_back(); },
                       "measured set 1: classes, batches and slowdown must have the same length"},
        ValidationCase{"a_set_naming_an_unknown_class",
                       [](WorkloadProfile& p) { p.measured[0].classes[1] = std::string("zzz"); },
                       "measured set 0 names unknown workload class 'zzz'"},
        ValidationCase{"a_set_with_a_zero_batch",
                       [](WorkloadProfile& p) { p.measured[1].batches[2] = 0; },
                       "measured set 1: batch 0 is outside 1..1048576"},
        ValidationCase{"a_set_with_a_speedup",
                       [](WorkloadProfile& p) { p.measured[0].slowdown[0] = 0.9; },
                       "measured set 0: slowdowns must be >= 1"}),
    CaseName());

// ---------------------------------------------------------------- batch candidates

TEST(BatchCandidatesOf, B0Of100GivesThirtyThreeGeometricValuesFrom67To200PlusB0) {
  // 100 * 0.67 * (2 / 0.67)^(i / 32), rounded: 33 distinct values, none of them 100.
  const std::vector<int> c = BatchCandidates(MakeClass(LinearClass{}), 0);
  EXPECT_EQ(c, (std::vector<int>{67,  69,  72,  74,  77,  79,  82,  85,  88,  91,  94,  98,
                                 100, 101, 104, 108, 112, 116, 120, 124, 128, 133, 137, 142,
                                 147, 152, 157, 163, 169, 174, 181, 187, 193, 200}));
}

TEST(BatchCandidatesOf, SmallB0DeduplicatesRoundedValues) {
  LinearClass s;
  s.default_batch = 3;
  EXPECT_EQ(BatchCandidates(MakeClass(s), 0), (std::vector<int>{2, 3, 4, 5, 6}));
}

TEST(BatchCandidatesOf, AreAscendingDistinctAndIncludeB0) {
  for (int b0 : {1, 7, 64, 333, 512, 1000}) {
    LinearClass s;
    s.default_batch = b0;
    const std::vector<int> c = BatchCandidates(MakeClass(s), 0);
    EXPECT_TRUE(std::is_sorted(c.begin(), c.end())) << b0;
    EXPECT_EQ(std::adjacent_find(c.begin(), c.end()), c.end()) << b0;
    EXPECT_NE(std::find(c.begin(), c.end(), b0), c.end()) << b0;
    EXPECT_LE(c.size(), 34U) << b0;
    EXPECT_GE(c.front(), 1) << b0;
    EXPECT_EQ(c.back(), 2 * b0) << b0;
  }
}

TEST(BatchCandidatesOf, OnlyBatchesWhoseMemoryFitsTheLimit) {
  // Memory 2000 + 20 (b - 100) MiB: a limit of 2400 allows b <= 120.
  const ClassProfile c = MakeClass(LinearClass{});
  EXPECT_EQ(c.MemoryMib(120), 2400);
  EXPECT_EQ(c.MemoryMib(124), 2480);
  const std::vector<int> fit = BatchCandidates(c, 2400);
  EXPECT_EQ(fit, (std::vector<int>{67, 69, 72, 74, 77, 79, 82, 85, 88, 91, 94, 98, 100, 101, 104,
                                   108, 112, 116, 120}));
}

// Each key holds its latest report; past kMaxReportEntries keys the oldest goes, its sums too.
TEST(ReportSums, LatestPerKeyAndTheOldestGoFirst) {
  ReportSums sums;
  EXPECT_EQ(sums.a(3), 0.0);
  sums.Put(1, 3, 2.0, 4.0);
  sums.Put(2, 2, 1.0, 1.0);
  sums.Put(1, 3, 0.5, 1.0);  // replaces key 1's report
  EXPECT_EQ(sums.a(3), 0.5);
  EXPECT_EQ(sums.b(3), 1.0);
  EXPECT_EQ(sums.a(2), 1.0);
  for (std::uint64_t key = 100; key < 100 + kMaxReportEntries - 2; ++key) sums.Put(key, 0, 1, 1);
  EXPECT_EQ(sums.a(3), 0.5) << "at the bound, nothing has gone yet";
  sums.Put(9, 0, 1, 1);  // one more: key 1, the oldest, goes
  EXPECT_EQ(sums.a(3), 0.0);
  EXPECT_EQ(sums.a(2), 1.0);
  EXPECT_EQ(sums.a(0), static_cast<double>(kMaxReportEntries - 1));
}

TEST(BatchCandidatesOf, B0IsLeftOutWhenItDoesNotFit) {
  const ClassProfile c = MakeClass(LinearClass{});  // 1340 MiB at 67, 2000 at 100
  EXPECT_EQ(BatchCandidates(c, 1450), (std::vector<int>{67, 69, 72}));
  EXPECT_TRUE(BatchCandidates(c, 1000).empty());
}

TEST(BatchCandidatesOf, ASingleCountIsB0Alone) {
  EXPECT_EQ(BatchCandidates(MakeClass(LinearClass{}), 0, 1), (std::vector<int>{100}));
}

TEST(BatchCandidatesOf, CustomRangeAndCount) {
  // 3 values from 0.5 b0 to 2 b0: 50, 100, 200.
  EXPECT_EQ(BatchCandidates(MakeClass(LinearClass{}), 0, 3, 0.5, 2.0),
            (std::vector<int>{50, 100, 200}));
}

}  // namespace
}  // namespace gpumux::policy
