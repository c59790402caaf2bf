// Truths that are not the belief (sim/dl_truth.h), the hedged predictor beyond pairs
// (policy::HedgedInterference) and a belief that learns within a run
// (policy::LearningInterference, DlSimOptions::learn).
#include "gpumux/sim/dl_truth.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "gpumux/policy/interference.h"
#include "gpumux/policy/observations.h"
#include "gpumux/sim/dl_sim.h"
#include "gpumux/sim/dl_workload.h"
#include "src/sim/dl_sim_state.h"
#include "tests/sim/dl_fixtures.h"

namespace gpumux::sim {
namespace {

using dl_testing::Job;
using dl_testing::OneGpu;
using dl_testing::TinyProfile;

// The tiny profile with two measured pairs: short+long (1.2, 1.5) and short+heavy (1.4, 1.1).
// long+heavy, and every pair of one class with itself, are not measured.
policy::WorkloadProfile PairsProfile() {
  policy::WorkloadProfile p = TinyProfile();
  p.measured = {policy::MeasuredSet{{"short", "long"}, {100, 100}, {1.2, 1.5}, "made up"},
                policy::MeasuredSet{{"heavy", "short"}, {100, 100}, {1.1, 1.4}, "made up"}};
  return p;
}

std::vector<double> Slowdowns(const policy::InterferenceModel& m,
                              const std::vector<policy::Member>& members) {
  std::vector<double> s(members.size());
  m.Predict(members, s);
  return s;
}

TEST(TruthRule, NamesParseAndUnknownOnesAreRefused) {
  EXPECT_EQ(TruthRuleNames(), (std::vector<std::string>{"predictor", "pair-max", "pair-sum"}));
  for (const std::string& n : TruthRuleNames()) {
    auto r = ParseTruthRule(n);
    ASSERT_TRUE(r.has_value()) << n;
    EXPECT_EQ(TruthRuleName(*r), n);
  }
  auto bad = ParseTruthRule("oracle");
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message.find("pair-max"), std::string::npos) << bad.error().message;
}

TEST(PairRule, MeasuredPairsAnswerAsMeasuredAndTheRestIsARankOneFill) {
  const policy::WorkloadProfile p = PairsProfile();
  const auto* s = p.Find("short");
  const auto* l = p.Find("long");
  const auto* h = p.Find("heavy");
  auto sum = PairRuleInterference::Make(p, TruthRule::kPairSum);
  ASSERT_TRUE(sum.has_value()) << sum.error().message;
  // Measured: e(short|long) = 0.2, e(long|short) = 0.5, e(short|heavy) = 0.4, e(heavy|short) = 0.1.
  EXPECT_NEAR(sum->PairExcess(s, l), 0.2, 1e-12);
  EXPECT_NEAR(sum->PairExcess(l, s), 0.5, 1e-12);
  EXPECT_NEAR(sum->PairExcess(s, h), 0.4, 1e-12);
  EXPECT_NEAR(sum->PairExcess(h, s), 0.1, 1e-12);
  EXPECT_TRUE(sum->PairMeasured(s, l));
  EXPECT_FALSE(sum->PairMeasured(l, h));
  // Fill: mean 0.3; rows: short 0.3, long 0.5, heavy 0.1; columns: long 0.2, heavy 0.4,
  // short 0.3. e(long|heavy) = 0.5 * 0.4 / 0.3; e(heavy|long) = 0.1 * 0.2 / 0.3;
  // e(short|short) = 0.3 * 0.3 / 0.3.
  EXPECT_NEAR(sum->PairExcess(l, h), 0.5 * 0.4 / 0.3, 1e-12);
  EXPECT_NEAR(sum->PairExcess(h, l), 0.1 * 0.2 / 0.3, 1e-12);
  EXPECT_NEAR(sum->PairExcess(s, s), 0.3, 1e-12);
  const auto pair = Slowdowns(*sum, {{s, 100}, {l, 100}});
  EXPECT_NEAR(pair[0], 1.2, 1e-12);
  EXPECT_NEAR(pair[1], 1.5, 1e-12);
  EXPECT_EQ(Slowdowns(*sum, {{s, 100}})[0], 1.0);
}

TEST(PairRule, SumAddsCompanionsAndMaxTakesTheWorstPlusGrowth) {
  const policy::WorkloadProfile p = PairsProfile();
  const auto* s = p.Find("short");
  const auto* l = p.Find("long");
  const auto* h = p.Find("heavy");
  auto sum = PairRuleInterference::Make(p, TruthRule::kPairSum);
  auto max = PairRuleInterference::Make(p, TruthRule::kPairMax);
  ASSERT_TRUE(sum && max);
  const std::vector<policy::Member> triple{{s, 100}, {l, 100}, {h, 100}};
  const auto additive = Slowdowns(*sum, triple);
  const auto worst = Slowdowns(*max, triple);
  // short beside long (0.2) and heavy (0.4).
  EXPECT_NEAR(additive[0], 1.0 + 0.2 + 0.4, 1e-12);
  EXPECT_NEAR(worst[0], (1.0 + 0.4) * (1.0 + kPairMaxGrowth), 1e-12);
  for (std::size_t k = 0; k < triple.size(); ++k) EXPECT_LE(worst[k], additive[k] + 1e-12);
}

TEST(PairRule, ABusierBatchSuffersMore) {
  policy::WorkloadProfile p = PairsProfile();
  // short at batch 200 is busier on the GPU (0.5 -> 0.8).
  for (auto& c : p.classes) {
    if (c.name == "short") c.solo = {{100, 0.1, 1000, 0.5}, {200, 0.2, 2000, 0.8}};
  }
  auto sum = PairRuleInterference::Make(p, TruthRule::kPairSum);
  ASSERT_TRUE(sum.has_value());
  const auto* s = p.Find("short");
  const auto* l = p.Find("long");
  const auto at_200 = Slowdowns(*sum, {{s, 200}, {l, 100}});
  EXPECT_NEAR(at_200[0], 1.0 + 0.2 * std::sqrt(0.8 / 0.5), 1e-12);
  EXPECT_NEAR(at_200[1], 1.0 + 0.5 * std::sqrt(0.8 / 0.5), 1e-12);
}

TEST(PairRule, NeedsMeasuredPairs) {
  auto none = PairRuleInterference::Make(TinyProfile(), TruthRule::kPairMax);
  ASSERT_FALSE(none.has_value());
  EXPECT_NE(none.error().message.find("measured pairs"), std::string::npos);
  EXPECT_FALSE(PairRuleInterference::Make(PairsProfile(), TruthRule::kPredictor).has_value());
  // And RunDl says so before running.
  DlSimOptions o = OneGpu("first-fit");
  o.truth_model = "pair-sum";
  auto r = RunDl(TinyProfile(), {Job("a", "short", 0)}, o);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("measured pairs"), std::string::npos) << r.error().message;
  o.truth_model = "oracle";
  EXPECT_FALSE(RunDl(TinyProfile(), {Job("a", "short", 0)}, o).has_value());
}

// Two jobs sharing the one GPU under each truth: a measured pair finishes as measured whatever
// the rule; the rules differ on sets nobody measured.
TEST(PairRule, TheSimulatedGpusFollowTheTruthModel) {
  const policy::WorkloadProfile truth = PairsProfile();
  DlSimOptions o = OneGpu("first-fit");
  o.max_jobs_per_gpu = 3;
  const std::vector<JobSpec> pair{Job("a", "short", 0), Job("b", "long", 0)};
  const std::vector<JobSpec> triple{Job("a", "short", 0), Job("b", "long", 0),
                                    Job("c", "heavy", 0)};
  std::map<std::string, double> triple_avg;
  for (const std::string& rule : TruthRuleNames()) {
    SCOPED_TRACE(rule);
    o.truth_model = rule;
    auto r = RunDl(TinyProfile(), pair, o, &truth);
    ASSERT_TRUE(r.has_value()) << r.error().message;
    // short runs 1.2x slower beside long: its 2 s of work take 2.4 s.
    EXPECT_NEAR(static_cast<double>(r->jobs[0].finish_us) / 1e6, 2.4, 1e-3);
    auto t = RunDl(TinyProfile(), triple, o, &truth);
    ASSERT_TRUE(t.has_value()) << t.error().message;
    triple_avg[rule] = t->metrics.avg_jct_s;
  }
  EXPECT_LT(triple_avg["pair-max"], triple_avg["pair-sum"]);
  EXPECT_NE(triple_avg["pair-max"], triple_avg["predictor"]);
}

TEST(Hedged, PairsAreTheBaseModelsAndLargerSetsLieBetweenWorstPairAndPredictor) {
  const policy::WorkloadProfile p = TinyProfile();
  const policy::ProfileInterference base(p);
  const policy::HedgedInterference mid(base, 2, 0.5);
  const policy::HedgedInterference as_is(base, 2, 1.0);
  const auto* h = p.Find("heavy");
  const std::vector<policy::Member> pair{{h, 100}, {h, 100}};
  EXPECT_EQ(Slowdowns(mid, pair), Slowdowns(base, pair));
  const std::vector<policy::Member> triple{{h, 100}, {h, 100}, {h, 100}};
  const auto full = Slowdowns(base, triple);
  const auto hedged = Slowdowns(mid, triple);
  EXPECT_EQ(Slowdowns(as_is, triple), full) << "position 1 is the base model";
  std::vector<double> lo(3), hi(3);
  mid.PredictRange(triple, lo, hi);
  // heavy + heavy: 1.875 (dl_fixtures.h); the predictor for three heavy jobs says more.
  EXPECT_NEAR(lo[0], 1.875, 1e-9);
  EXPECT_NEAR(hi[0], full[0], 1e-12);
  EXPECT_GT(full[0], 1.875);
  EXPECT_NEAR(hedged[0], 0.5 * (1.875 + full[0]), 1e-9);
  // A measured triple is the base model's answer, hedged or not.
  policy::WorkloadProfile measured = TinyProfile();
  measured.measured = {
      policy::MeasuredSet{{"heavy", "heavy", "heavy"}, {100, 100, 100}, {2, 2, 2}, "made up"}};
  const policy::ProfileInterference base2(measured);
  const policy::HedgedInterference mid2(base2, 2, 0.5);
  const std::vector<policy::Member> measured_triple{
      {measured.Find("heavy"), 100}, {measured.Find("heavy"), 100}, {measured.Find("heavy"), 100}};
  EXPECT_EQ(Slowdowns(mid2, measured_triple), (std::vector<double>{2, 2, 2}));
}

// Learning, where the reported slowdowns of the sets seen fell in their ranges moves the
// position from its prior: both ways, or (cautious) only toward the predictor.
TEST(Hedged, ReportsMoveThePositionToWhereTheSetsSeenFell) {
  const policy::WorkloadProfile p = TinyProfile();
  const policy::ProfileInterference base(p);
  policy::HedgedInterference fixed(base, 2, 0.5);
  policy::HedgedInterference learning(base, 2, 0.5, policy::kLearnBoth);
  policy::HedgedInterference cautious(base, 2, 0.5, policy::kLearnCautious);
  const auto* h = p.Find("heavy");
  const std::vector<policy::Member> triple{{h, 100}, {h, 100}, {h, 100}};
  std::vector<double> lo(3), hi(3);
  learning.PredictRange(triple, lo, hi);
  const double width = hi[0] - lo[0];
  ASSERT_GT(width, 0);
  // Every member reported the predictor's answer: p = (3 width + 0.5 w) / (3 width + w).
  const std::uint64_t v0 = learning.Version();
  learning.Report(1, triple, hi);
  cautious.Report(1, triple, hi);
  fixed.Report(1, triple, hi);
  EXPECT_EQ(cautious.Position(), learning.Position()) << "toward the predictor: both learn";
  const double w = policy::kHedgePrior;
  EXPECT_NEAR(learning.Position(), (3 * width + 0.5 * w) / (3 * width + w), 1e-12);
  EXPECT_NE(learning.Version(), v0);
  EXPECT_EQ(fixed.Position(), 0.5) << "without learn, reports change nothing";
  EXPECT_NEAR(Slowdowns(learning, triple)[0], lo[0] + learning.Position() * width, 1e-12);
  // The same GPU's set reported again replaces its report: at the worst pair, p falls below
  // the prior; a member without a report (0) is left out; the position stays in [0, 1].
  learning.Report(1, triple, std::vector<double>{lo[0], lo[0], 0});
  EXPECT_NEAR(learning.Position(), 0.5 * w / (2 * width + w), 1e-12);
  cautious.Report(1, triple, std::vector<double>{lo[0], lo[0], 0});
  EXPECT_EQ(cautious.Position(), 0.5) << "never bolder than its prior";
  learning.Report(2, triple, std::vector<double>{1.0, 1.0, 1.0});
  EXPECT_GE(learning.Position(), 0.0);
  // Pairs are outside any range: their reports teach nothing.
  policy::HedgedInterference pairs_only(base, 2, 0.5, policy::kLearnBoth);
  const std::vector<policy::Member> pair{{h, 100}, {h, 100}};
  pairs_only.Report(3, pair, std::vector<double>{3.0, 3.0});
  EXPECT_EQ(pairs_only.Position(), 0.5);
}

// A report counts only when its whole window ran with the set as it is now.
TEST(StepReport, IsSteadyOnlyWhenTheWindowFollowsTheLastChange) {
  dl_state::Job j;
  j.batch = 100;
  EXPECT_FALSE(dl_state::ReportSteady(j, 0)) << "no progress yet";
  j.progress = {{0, 0.0}, {5'000'000, 4000.0}};  // the rate changed at t = 5 s
  j.raw = 4000;
  j.updated = 5'000'000;
  j.raw_rate = 1000;  // 10 steps per second since
  EXPECT_FALSE(dl_state::ReportSteady(j, 6'000'000)) << "10 steps since the change";
  EXPECT_TRUE(dl_state::ReportSteady(j, 7'000'000)) << "20 steps since the change";
}

TEST(Learning, ObservationsJoinTheBeliefAsTheExtendersDoAndMoveTheVersion) {
  const policy::WorkloadProfile p = TinyProfile();
  policy::LearningInterference learning(p);
  const policy::ProfileInterference plain(p);
  const std::vector<policy::Member> pair{{p.Find("short"), 100}, {p.Find("long"), 100}};
  EXPECT_EQ(Slowdowns(learning, pair), Slowdowns(plain, pair));
  EXPECT_FALSE(learning.Measured(pair));
  const std::uint64_t v0 = learning.Version();
  policy::Observation o;
  o.classes = {"short", "long"};
  o.batches = {100, 100};
  o.slowdown = {1.6, 1.4};
  o.count = 1;
  learning.Observe(o);
  learning.Refresh();
  EXPECT_NE(learning.Version(), v0);
  EXPECT_TRUE(learning.Measured(pair));
  auto s = Slowdowns(learning, pair);
  EXPECT_NEAR(s[0], 1.6, 1e-12);
  EXPECT_NEAR(s[1], 1.4, 1e-12);
  // A second window of the same set: the running mean, as MergeObservations writes it.
  o.slowdown = {1.2, 1.2};
  learning.Observe(o);
  const std::uint64_t v1 = learning.Version();
  learning.Refresh();
  EXPECT_NE(learning.Version(), v1);
  s = Slowdowns(learning, pair);
  EXPECT_NEAR(s[0], 1.4, 1e-12);
  EXPECT_NEAR(s[1], 1.3, 1e-12);
  EXPECT_EQ(learning.observed(), 1u);
  const std::uint64_t v2 = learning.Version();
  learning.Refresh();
  EXPECT_EQ(learning.Version(), v2) << "nothing new, nothing rebuilt";
}

// With learn, the belief takes in the measured windows during the run (and so places
// differently); without a tuner nothing is measured, so nothing changes.
TEST(Learning, WithinARunTheBeliefLearnsWhatItsTunerMeasures) {
  const auto& belief = *EmbeddedProfile("iadeep-fitted");
  const auto& truth = *EmbeddedProfile("iadeep-measured");
  const std::vector<JobSpec> jobs = dl_testing::Generated(belief, 11);
  ASSERT_FALSE(jobs.empty());
  DlSimOptions o;
  o.policy = "least-delay";
  o.tuner = "joint";
  o.queue = "fifo";
  o.nodes = 2;
  o.gpus_per_node = 4;
  o.truth_model = "pair-max";
  o.check_invariants = true;
  auto without = RunDl(belief, jobs, o, &truth);
  o.learn = true;
  auto with = RunDl(belief, jobs, o, &truth);
  ASSERT_TRUE(without && with);
  EXPECT_EQ(without->learned_sets, 0);
  EXPECT_GT(with->learned_sets, 0);
  EXPECT_TRUE(with->observations.empty()) << "learning records nothing unless asked";
  ASSERT_FALSE(with->belief_error_by_size.empty()) << "the belief's error on what it measured";
  EXPECT_NE(without->metrics.avg_jct_s, with->metrics.avg_jct_s) << "what it learns, it uses";
  o.tuner = "none";
  o.learn = false;
  auto none = RunDl(belief, jobs, o, &truth);
  o.learn = true;
  auto none_learning = RunDl(belief, jobs, o, &truth);
  ASSERT_TRUE(none && none_learning);
  EXPECT_EQ(none_learning->learned_sets, 0);
  EXPECT_EQ(none->metrics.avg_jct_s, none_learning->metrics.avg_jct_s);
}

// The calibration: reports of one set size correct every unmeasured set of that size, the
// prior keeps it at the base model without reports, and a set's newer reports replace its older.
TEST(Calibrated, ReportsOfOneSetSizeCorrectEveryUnmeasuredSetOfThatSize) {
  const policy::WorkloadProfile p = TinyProfile();
  const policy::ProfileInterference base(p);
  policy::CalibratedInterference cal(base);
  const auto* h = p.Find("heavy");
  const auto* s = p.Find("short");
  const std::vector<policy::Member> hh{{h, 100}, {h, 100}};
  EXPECT_EQ(Slowdowns(cal, hh), Slowdowns(base, hh));
  EXPECT_EQ(cal.Factor(2), 1.0);
  // heavy + heavy predicted 1.875 each (excess 0.875 x 2 = 1.75); reported 1.4375 each (0.875).
  const std::uint64_t v0 = cal.Version();
  cal.Report(7, hh, std::vector<double>{1.4375, 1.4375});
  EXPECT_NEAR(cal.Factor(2),
              (0.875 + policy::kCalibrationPrior) / (1.75 + policy::kCalibrationPrior), 1e-12);
  EXPECT_NE(cal.Version(), v0);
  // Another pair, never reported, is corrected by the same factor.
  const std::vector<policy::Member> sh{{s, 100}, {h, 100}};
  const auto before = Slowdowns(base, sh);
  const auto after = Slowdowns(cal, sh);
  EXPECT_NEAR(after[0] - 1.0, cal.Factor(2) * (before[0] - 1.0), 1e-12);
  // The same set reported again replaces its entry: reported as predicted, the factor is 1.
  cal.Report(7, hh, std::vector<double>{1.875, 1.875});
  EXPECT_NEAR(cal.Factor(2), 1.0, 1e-12);
  EXPECT_EQ(cal.Factor(3), 1.0) << "no triple reported";
}

// The step time a job reports is the mean over its last kReportSteps steps, not its rate now:
// 10 steps of 0.1 s after 10 of 0.125 s (a companion left) read 0.1125 s.
TEST(StepReport, IsTheMeanOverTheLastStepsNotTheRateNow) {
  dl_state::Job j;
  j.batch = 100;
  EXPECT_EQ(dl_state::ReportedStep(j, 0), 0) << "no progress yet";
  // From t = 0 at 0.125 s per step (800 samples/s); at t = 5 s the companion leaves.
  j.progress = {{0, 0.0}, {5'000'000, 4000.0}};
  j.raw = 4000;
  j.updated = 5'000'000;
  j.raw_rate = 1000;  // 0.1 s per step now
  EXPECT_NEAR(dl_state::ReportedStep(j, 6'000'000), (10 * 0.1 + 10 * 0.125) / 20, 1e-9);
  EXPECT_NEAR(dl_state::ReportedStep(j, 7'000'000), 0.1, 1e-9) << "20 steps since it left";
  // Fewer than 20 steps since it (re)started: the mean over those; none before one step.
  dl_state::Job fresh;
  fresh.batch = 100;
  fresh.progress = {{0, 0.0}};
  fresh.raw_rate = 800;
  EXPECT_NEAR(dl_state::ReportedStep(fresh, 1'000'000), 0.125, 1e-9);
  EXPECT_EQ(dl_state::ReportedStep(fresh, 100'000), 0) << "not one whole step yet";
  fresh.raw_rate = 0;
  EXPECT_EQ(dl_state::ReportedStep(fresh, 1'000'000), 0) << "paused: no report";
}

}  // namespace
}  // namespace gpumux::sim
