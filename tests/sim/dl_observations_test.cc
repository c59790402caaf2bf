// The JCT simulator and learned interference observations: what it records with
// record_observations (what node coordinators would have measured), and a belief with
// observations added (policy::WithObservations) changing the policies, never the GPUs.
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "gpumux/policy/interference.h"
#include "gpumux/policy/observations.h"
#include "gpumux/sim/dl_sim.h"
#include "gpumux/sim/dl_workload.h"
#include "tests/sim/dl_fixtures.h"

namespace gpumux::sim {
namespace {

using dl_testing::Generated;
using dl_testing::Job;
using dl_testing::OneGpu;
using dl_testing::TinyProfile;

DlResult RunOk(const policy::WorkloadProfile& profile, const std::vector<JobSpec>& jobs,
               const DlSimOptions& options, const policy::WorkloadProfile* truth = nullptr) {
  auto r = RunDl(profile, jobs, options, truth);
  if (!r) {
    ADD_FAILURE() << r.error().message;
    return {};
  }
  return std::move(*r);
}

DlSimOptions EightGpus(std::string policy) {
  DlSimOptions o;
  o.policy = std::move(policy);
  o.nodes = 2;
  o.gpus_per_node = 4;
  o.check_invariants = true;
  return o;
}

const policy::WorkloadProfile& Belief() { return *EmbeddedProfile("iadeep-fitted"); }
const policy::WorkloadProfile& Truth() { return *EmbeddedProfile("iadeep-measured"); }

void ExpectSameJobs(const DlResult& a, const DlResult& b) {
  ASSERT_EQ(a.jobs.size(), b.jobs.size());
  for (std::size_t i = 0; i < a.jobs.size(); ++i) {
    EXPECT_EQ(a.jobs[i].finish_us, b.jobs[i].finish_us) << a.jobs[i].id;
    EXPECT_EQ(a.jobs[i].gpu, b.jobs[i].gpu) << a.jobs[i].id;
    EXPECT_EQ(a.jobs[i].final_batch, b.jobs[i].final_batch) << a.jobs[i].id;
  }
  EXPECT_EQ(a.metrics.measurement_windows, b.metrics.measurement_windows);
}

TEST(DlSimObservations, RecordingThemChangesNoResult) {
  const auto jobs = Generated(Belief(), 7);
  for (const char* policy : {"least-delay", "iadeep"}) {
    SCOPED_TRACE(policy);
    DlSimOptions o = EightGpus(policy);
    const DlResult without = RunOk(Belief(), jobs, o, &Truth());
    o.record_observations = true;
    const DlResult with = RunOk(Belief(), jobs, o, &Truth());
    ExpectSameJobs(without, with);
    EXPECT_TRUE(without.observations.empty()) << "recorded only when asked";
    EXPECT_FALSE(with.observations.empty()) << "60 jobs at load 2 on 8 GPUs share GPUs";
  }
}

TEST(DlSimObservations, AreValidCanonicalPerSetAndParseBack) {
  DlSimOptions o = EightGpus("least-delay");
  o.record_observations = true;
  const DlResult r = RunOk(Belief(), Generated(Belief(), 8), o, &Truth());
  ASSERT_FALSE(r.observations.empty());
  std::int64_t windows = 0;
  for (std::size_t i = 0; i < r.observations.size(); ++i) {
    const policy::Observation& ob = r.observations[i];
    SCOPED_TRACE(policy::SerializeObservation(ob));
    EXPECT_TRUE(policy::CheckObservation(ob).has_value());
    const policy::Observation c = policy::Canonical(ob);
    EXPECT_EQ(c.classes, ob.classes) << "canonical order";
    EXPECT_EQ(c.batches, ob.batches);
    EXPECT_EQ(ob.node, "simulator");
    EXPECT_EQ(ob.gpu_model, Truth().gpu_model) << "measured on the truth's GPUs";
    EXPECT_TRUE(ob.solo == "measured" || ob.solo == "profile");
    if (i > 0) {
      const policy::Observation& prev = r.observations[i - 1];
      EXPECT_LT(std::tie(prev.classes, prev.batches), std::tie(ob.classes, ob.batches))
          << "one per set, in key order";
    }
    windows += ob.count;
  }
  EXPECT_LE(windows, r.metrics.measurement_windows) << "at most one per window";
  const std::string text = policy::SerializeObservations(r.observations);
  auto back = policy::ParseObservations(text, "out.json");
  ASSERT_TRUE(back.has_value()) << back.error().message;
  ASSERT_EQ(back->size(), r.observations.size());
  for (std::size_t i = 0; i < back->size(); ++i) {
    EXPECT_EQ((*back)[i].slowdown, r.observations[i].slowdown);
    EXPECT_EQ((*back)[i].count, r.observations[i].count);
  }
  // They all name the belief's classes, so they all join it.
  policy::ObservationSummary summary;
  const policy::WorkloadProfile learned = policy::WithObservations(Belief(), *back, &summary);
  EXPECT_TRUE(learned.Validate().has_value());
  EXPECT_EQ(summary.used, back->size());
  EXPECT_EQ(summary.observed_sets(), back->size());
}

// A measured pair in the truth that the belief gets wrong: short and long slow by 2 and 2.5
// where the belief predicts 1.25 each. Without measurement noise, what the coordinator would
// record is the truth, not the belief.
TEST(DlSimObservations, MeasureWhatTheGpusDoNotWhatThePoliciesBelieve) {
  const policy::WorkloadProfile belief = TinyProfile();
  policy::WorkloadProfile truth = TinyProfile();
  truth.measured = {policy::MeasuredSet{{"short", "long"}, {100, 100}, {2.0, 2.5}, "made up"}};
  DlSimOptions o = OneGpu("least-delay");
  o.tuner = "joint";
  o.queue = "fifo";
  o.measure_noise = 0;
  o.reconfigure_s = 0;
  o.record_observations = true;
  const DlResult r = RunOk(
      belief,
      {Job("a", "long", 0), Job("b", "short", 10), Job("c", "long", 20), Job("d", "short", 20)}, o,
      &truth);
  ASSERT_FALSE(r.observations.empty());
  bool pair = false;
  for (const policy::Observation& ob : r.observations) {
    if (ob.classes != std::vector<std::string>{"long", "short"}) continue;
    pair = true;
    SCOPED_TRACE(policy::SerializeObservation(ob));
    // The tiny classes' busy fractions do not change with the batch size, so the truth's
    // slowdowns hold at every batch size the tuner tried.
    EXPECT_NEAR(ob.slowdown[0], 2.5, 1e-6);
    EXPECT_NEAR(ob.slowdown[1], 2.0, 1e-6);
  }
  EXPECT_TRUE(pair) << "long and short shared the GPU";
  EXPECT_GT(r.belief_error_members, 0);
  EXPECT_GT(r.belief_abs_error / static_cast<double>(r.belief_error_members), 0.5)
      << "the belief said 1.25 where the GPUs did 2 and 2.5";
  // The truth as the belief: nothing left to learn, and nothing noisy to blur it (first-fit
  // shares the GPU whatever it believes).
  o.policy = "first-fit";
  const DlResult same = RunOk(
      truth,
      {Job("a", "long", 0), Job("b", "short", 10), Job("c", "long", 20), Job("d", "short", 20)}, o,
      &truth);
  ASSERT_GT(same.belief_error_members, 0);
  EXPECT_NEAR(same.belief_abs_error, 0, 1e-6);
}

// The belief with observations added changes the policies' predictions; the GPUs keep doing
// what the truth says. First-fit without a tuner ignores the belief, so its jobs finish exactly
// as before; least-delay reads it and places differently.
TEST(DlSimObservations, AddedToTheBeliefTheyChangeThePoliciesNeverTheGpus) {
  const auto jobs = Generated(Belief(), 9);
  // Hand-made observations: the light classes, which the busy-time predictor pairs freely
  // (their busy fractions sum to less than 1), are terrible together at their default batches.
  const std::vector<std::string> light{"adgcl", "googlenet", "neumf", "squeezenet"};
  std::vector<policy::Observation> observations;
  for (std::size_t i = 0; i < light.size(); ++i) {
    for (std::size_t k = i + 1; k < light.size(); ++k) {
      policy::Observation o;
      o.classes = {light[i], light[k]};
      o.batches = {Belief().Find(light[i])->default_batch, Belief().Find(light[k])->default_batch};
      o.slowdown = {3.6, 3.9};
      o.count = 10;
      observations.push_back(o);
    }
  }
  const policy::WorkloadProfile learned = policy::WithObservations(Belief(), observations);
  const policy::Observation& bad = observations.front();

  const policy::ProfileInterference before(Belief());
  const policy::ProfileInterference after(learned);
  const policy::Member pair[] = {{Belief().Find(bad.classes[0]), bad.batches[0]},
                                 {Belief().Find(bad.classes[1]), bad.batches[1]}};
  const policy::Member learned_pair[] = {{learned.Find(bad.classes[0]), bad.batches[0]},
                                         {learned.Find(bad.classes[1]), bad.batches[1]}};
  double s_before[2], s_after[2];
  before.Predict(pair, s_before);
  after.Predict(learned_pair, s_after);
  EXPECT_LT(s_before[0], 2.0);
  EXPECT_NEAR(s_after[0], 3.6, 1e-9);
  EXPECT_NEAR(s_after[1], 3.9, 1e-9);

  DlSimOptions ff = EightGpus("first-fit");
  ff.tuner = "none";
  ff.queue = "fifo";
  ExpectSameJobs(RunOk(Belief(), jobs, ff, &Truth()), RunOk(learned, jobs, ff, &Truth()));

  DlSimOptions g = EightGpus("least-delay");
  const DlResult plain = RunOk(Belief(), jobs, g, &Truth());
  const DlResult with = RunOk(learned, jobs, g, &Truth());
  bool differs = false;
  for (std::size_t i = 0; i < plain.jobs.size(); ++i) {
    differs = differs || plain.jobs[i].gpu != with.jobs[i].gpu ||
              plain.jobs[i].finish_us != with.jobs[i].finish_us;
  }
  EXPECT_TRUE(differs) << "least-delay reads the belief";
}

TEST(DlSimObservations, AFixedTruthSeedKeepsTheGpusAcrossSeeds) {
  // Without model error the seed draws nothing about the GPUs; with it, the truth seed does.
  const auto jobs = Generated(Belief(), 10);
  DlSimOptions o = EightGpus("first-fit");
  o.tuner = "none";
  o.work_spread = 0;
  o.noise_scale_spread = 0;
  o.model_error = 0.5;
  o.truth_seed = 5;
  o.seed = 1;
  const DlResult a = RunOk(Belief(), jobs, o, &Belief());
  o.seed = 2;
  const DlResult b = RunOk(Belief(), jobs, o, &Belief());
  ExpectSameJobs(a, b);
  o.truth_seed = 6;
  const DlResult c = RunOk(Belief(), jobs, o, &Belief());
  bool differs = false;
  for (std::size_t i = 0; i < a.jobs.size(); ++i) {
    differs = differs || a.jobs[i].finish_us != c.jobs[i].finish_us;
  }
  EXPECT_TRUE(differs) << "another truth seed, other hidden deviations";
}

}  // namespace
}  // namespace gpumux::sim
