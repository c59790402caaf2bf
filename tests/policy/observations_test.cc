#include "gpumux/policy/observations.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gpumux/policy/interference.h"
#include "tests/policy/colocation_fixtures.h"

namespace gpumux::policy {
namespace {

using test::BusyClass;
using test::MakeProfile;
using test::Measured;

Observation Obs(std::vector<std::string> classes, std::vector<int> batches,
                std::vector<double> slowdown, std::int64_t count, std::string node = "n1") {
  Observation o;
  o.classes = std::move(classes);
  o.batches = std::move(batches);
  o.slowdown = std::move(slowdown);
  o.count = count;
  o.node = std::move(node);
  return o;
}

// Classes a, b, c (busy 0.9, 0.6, 0.3) and one shipped set: b@200 with a@100.
WorkloadProfile ThreeClasses() {
  return MakeProfile({BusyClass("a", 0.9), BusyClass("b", 0.6), BusyClass("c", 0.3)}, 0.05,
                     {Measured({"b", "a"}, {200, 100}, {1.5, 1.2})});
}

TEST(ObservationTest, CanonicalSortsMembersByClassThenBatchAndPermutesSlowdowns) {
  const Observation c =
      Canonical(Obs({"resnet", "lstm", "lstm"}, {64, 64, 32}, {1.52, 1.31, 1.2}, 1));
  EXPECT_EQ(c.classes, (std::vector<std::string>{"lstm", "lstm", "resnet"}));
  EXPECT_EQ(c.batches, (std::vector<int>{32, 64, 64}));
  EXPECT_EQ(c.slowdown, (std::vector<double>{1.2, 1.31, 1.52}));
}

TEST(ObservationTest, MergeIsTheCountWeightedRunningMean) {
  Observation a = Obs({"a", "b"}, {10, 20}, {1.2, 1.4}, 3, "node-1");
  a.solo = "measured";
  a.updated = "2026-11-24T02:00:00Z";
  // The same co-location written in the other member order.
  Observation b = Obs({"b", "a"}, {20, 10}, {1.0, 1.6}, 1, "node-2");
  b.solo = "profile";
  b.updated = "2026-11-24T03:00:00Z";
  auto m = MergeObservations(a, b);
  ASSERT_TRUE(m.has_value()) << m.error().message;
  EXPECT_EQ(m->classes, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(m->batches, (std::vector<int>{10, 20}));
  // {(3 * 1.2 + 1.6) / 4, (3 * 1.4 + 1.0) / 4} = {1.3, 1.3}
  ASSERT_EQ(m->slowdown.size(), 2u);
  EXPECT_NEAR(m->slowdown[0], 1.3, 1e-12);
  EXPECT_NEAR(m->slowdown[1], 1.3, 1e-12);
  EXPECT_EQ(m->count, 4);
  EXPECT_EQ(m->node, "node-1");
  EXPECT_EQ(m->solo, "profile");
  EXPECT_EQ(m->updated, "2026-11-24T03:00:00Z");
}

TEST(ObservationTest, MergeRefusesDifferentCoLocationsAndInvalidInput) {
  const Observation a = Obs({"a", "b"}, {10, 20}, {1.2, 1.4}, 3);
  EXPECT_FALSE(MergeObservations(a, Obs({"a", "b"}, {10, 40}, {1.2, 1.4}, 1)).has_value());
  EXPECT_FALSE(MergeObservations(a, Obs({"a", "c"}, {10, 20}, {1.2, 1.4}, 1)).has_value());
  auto bad = MergeObservations(a, Obs({"a", "b"}, {10, 20}, {1.2, 1.4}, 0));
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message.find("\"count\""), std::string::npos) << bad.error().message;
}

TEST(ObservationTest, CheckNamesTheFieldOutOfRange) {
  struct Case {
    const char* name;
    Observation o;
    const char* field;
  };
  const std::vector<Case> cases = {
      {"one member", Obs({"a"}, {10}, {1.2}, 1), "\"classes\""},
      {"a zero batch", Obs({"a", "b"}, {0, 10}, {1.2, 1.2}, 1), "\"batches\""},
      {"a slowdown below 1", Obs({"a", "b"}, {10, 10}, {0.9, 1.2}, 1), "\"slowdown\""},
      {"a slowdown past the limit", Obs({"a", "b"}, {10, 10}, {1001, 1.2}, 1), "\"slowdown\""},
      {"no windows", Obs({"a", "b"}, {10, 10}, {1.1, 1.2}, 0), "\"count\""},
  };
  for (const Case& c : cases) {
    auto ok = CheckObservation(c.o);
    ASSERT_FALSE(ok.has_value()) << c.name;
    EXPECT_NE(ok.error().message.find(c.field), std::string::npos)
        << c.name << ": " << ok.error().message;
  }
  EXPECT_TRUE(CheckObservation(Obs({"a", "b"}, {10, 10}, {1.0, 1000}, 1)).has_value());
}

TEST(ObservationTest, ParsesTheDocumentedFormat) {
  auto o = ParseObservation(
      R"({"classes": ["lstm", "resnet"], "batches": [32, 64], "slowdown": [1.31, 1.52],
          "count": 4, "node": "gpu-node-1", "gpu_model": "NVIDIA H200", "solo": "measured",
          "updated": "2026-11-24T02:00:00Z"})",
      "key /gpumux/observations/lstm+resnet/32+64/gpu-node-1");
  ASSERT_TRUE(o.has_value()) << o.error().message;
  EXPECT_EQ(o->classes, (std::vector<std::string>{"lstm", "resnet"}));
  EXPECT_EQ(o->batches, (std::vector<int>{32, 64}));
  EXPECT_EQ(o->slowdown, (std::vector<double>{1.31, 1.52}));
  EXPECT_EQ(o->count, 4);
  EXPECT_EQ(o->node, "gpu-node-1");
  EXPECT_EQ(o->gpu_model, "NVIDIA H200");
  EXPECT_EQ(o->solo, "measured");
  EXPECT_EQ(o->updated, "2026-11-24T02:00:00Z");
}

TEST(ObservationTest, ParseErrorsNameTheSourceTheIndexAndTheField) {
  struct Case {
    const char* name;
    const char* text;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {"not JSON", "[{", "obs.json: not JSON (line 1, column 3: "},
      {"not an array", "{}", "obs.json: expected a JSON array"},
      {"not an object", "[1]", "obs.json: observation 0: an observation is a JSON object"},
      {"no count",
       R"([{"classes":["a","b"],"batches":[1,2],"slowdown":[1,1],"count":1},
           {"classes":["a","b"],"batches":[1,2],"slowdown":[1,1]}])",
       "obs.json: observation 1: \"count\" must be an integer"},
      {"a fractional batch",
       R"([{"classes":["a","b"],"batches":[1,2.5],"slowdown":[1,1],"count":1}])",
       "observation 0: \"batches\" must be an array of integer"},
      {"a string slowdown",
       R"([{"classes":["a","b"],"batches":[1,2],"slowdown":[1,"x"],"count":1}])",
       "observation 0: \"slowdown\" must be an array of numbers"},
      {"a short batch list", R"([{"classes":["a","b"],"batches":[1],"slowdown":[1,1],"count":1}])",
       "\"batches\" (1)"},
      {"a numeric node",
       R"([{"classes":["a","b"],"batches":[1,2],"slowdown":[1,1],"count":1,"node":3}])",
       "observation 0: \"node\" must be a string"},
      {"a fractional count",
       R"([{"classes":["a","b"],"batches":[1,2],"slowdown":[1,1],"count":1.5}])",
       "\"count\" must be an integer"},
  };
  for (const Case& c : cases) {
    auto parsed = ParseObservations(c.text, "obs.json");
    ASSERT_FALSE(parsed.has_value()) << c.name;
    EXPECT_NE(parsed.error().message.find(c.expect), std::string::npos)
        << c.name << ": " << parsed.error().message;
  }
}

TEST(ObservationTest, SerialiseRoundTrips) {
  Observation a = Obs({"a", "b"}, {10, 20}, {1.0 / 3.0 + 1, 1.7}, 12, "node-1");
  a.gpu_model = "T4";
  a.solo = "measured";
  a.updated = "2026-11-24T02:00:00Z";
  const Observation b = Obs({"a", "c", "c"}, {1, 2, 3}, {1.1, 1.2, 1.3}, 1, "");
  auto back = ParseObservations(SerializeObservations(std::vector<Observation>{a, b}), "text");
  ASSERT_TRUE(back.has_value()) << back.error().message;
  ASSERT_EQ(back->size(), 2u);
  EXPECT_EQ((*back)[0].slowdown, a.slowdown);  // bit for bit
  EXPECT_EQ((*back)[0].count, 12);
  EXPECT_EQ((*back)[0].gpu_model, "T4");
  EXPECT_EQ((*back)[0].updated, a.updated);
  EXPECT_EQ((*back)[1].classes, b.classes);
  EXPECT_EQ((*back)[1].node, "");
  EXPECT_EQ(SerializeObservation(b),
            R"({"classes":["a","c","c"],"batches":[1,2,3],"slowdown":[1.1,1.2,1.3],"count":1})");
  EXPECT_EQ(SerializeObservations({}), "[]\n");
}

TEST(WithObservationsTest, CombinesNodesReplacesTheMatchingSetAndAddsTheRestMostWindowsFirst) {
  const WorkloadProfile profile = ThreeClasses();
  const std::vector<Observation> observations = {
      Obs({"a", "b"}, {100, 200}, {1.3, 1.6}, 1, "node-1"),
      Obs({"b", "a"}, {200, 100}, {1.9, 1.1}, 3, "node-2"),  // the same set, other order
      Obs({"a", "c"}, {100, 50}, {1.4, 1.2}, 2, "node-1"),
      Obs({"a", "a"}, {100, 100}, {1.7, 1.7}, 5, "node-3"),
      Obs({"a", "zz"}, {100, 100}, {1.7, 1.7}, 5, "node-3"),  // unknown class
      Obs({"a", "b"}, {100, 100}, {0.9, 1.7}, 5, "node-3"),   // out of range
      Obs({"a", "b"}, {100, 100}, {1.2, 1.7}, 0, "node-3"),   // no windows
  };
  ObservationSummary summary;
  const WorkloadProfile out = WithObservations(profile, observations, &summary);
  ASSERT_TRUE(out.Validate().has_value()) << out.Validate().error().message;
  ASSERT_EQ(out.measured.size(), 3u);
  // Replaced in place, canonical: a: (1 * 1.3 + 3 * 1.1) / 4 = 1.15, b: (1.6 + 3 * 1.9) / 4
  // = 1.825.
  const MeasuredSet& ab = out.measured[0];
  EXPECT_EQ(ab.classes, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(ab.batches, (std::vector<int>{100, 200}));
  EXPECT_NEAR(ab.slowdown[0], 1.15, 1e-12);
  EXPECT_NEAR(ab.slowdown[1], 1.825, 1e-12);
  EXPECT_EQ(ab.source, "observed: 4 windows on 2 nodes");
  // Added: a+a (5 windows) before a+c (2 windows).
  EXPECT_EQ(out.measured[1].classes, (std::vector<std::string>{"a", "a"}));
  EXPECT_EQ(out.measured[1].source, "observed: 5 windows on 1 node");
  EXPECT_EQ(out.measured[2].classes, (std::vector<std::string>{"a", "c"}));
  EXPECT_EQ(out.measured[2].batches, (std::vector<int>{100, 50}));
  EXPECT_EQ(out.measured[2].slowdown, (std::vector<double>{1.4, 1.2}));

  EXPECT_EQ(summary.read, 7u);
  EXPECT_EQ(summary.used, 4u);
  EXPECT_EQ(summary.unknown_class, 1u);
  EXPECT_EQ(summary.out_of_range, 2u);
  EXPECT_EQ(summary.sets_replaced, 1u);
  EXPECT_EQ(summary.sets_added, 2u);
  EXPECT_EQ(summary.observed_sets(), 3u);
  EXPECT_EQ(summary.windows, 11);
  EXPECT_EQ(summary.nodes, 3u);
  ASSERT_EQ(summary.skipped.size(), 3u);
  EXPECT_NE(summary.skipped[0].find("observation 4: class 'zz'"), std::string::npos);
  EXPECT_EQ(summary.Describe(),
            "7 observations: 3 observed sets (1 replaces a profile set), 11 windows on 3 nodes; "
            "skipped 3 (1 unknown class, 2 out of range)");
  // The input profile is a value: untouched.
  EXPECT_EQ(profile.measured.size(), 1u);
  EXPECT_EQ(profile.measured[0].source, "made up for a test");
}

TEST(WithObservationsTest, AnObservedSetBecomesThePredictionAtItsBatchesAndScalesToOthers) {
  const WorkloadProfile profile = ThreeClasses();
  const WorkloadProfile out = WithObservations(
      profile, std::vector<Observation>{Obs({"c", "b"}, {100, 100}, {2.5, 1.4}, 2)});
  const ProfileInterference before(profile);
  const ProfileInterference after(out);
  const Member members[] = {{out.Find("b"), 100}, {out.Find("c"), 100}};
  double s[2];
  after.Predict(members, s);
  EXPECT_NEAR(s[0], 1.4, 1e-12);
  EXPECT_NEAR(s[1], 2.5, 1e-12);
  const Member old_members[] = {{profile.Find("b"), 100}, {profile.Find("c"), 100}};
  double p[2];
  before.Predict(old_members, p);
  EXPECT_NE(p[1], s[1]);  // the busy-time predictor said something else (sum 0.9: 1.05 each)
  EXPECT_NEAR(p[1], 1.05, 1e-12);
  // At another batch size: the observation scaled by the predictor (here a factor of 1,
  // since these classes' busy fractions do not depend on the batch size).
  const Member other[] = {{out.Find("b"), 150}, {out.Find("c"), 100}};
  after.Predict(other, s);
  EXPECT_NEAR(s[0], 1.4, 1e-12);
  EXPECT_NEAR(s[1], 2.5, 1e-12);
}

TEST(WithObservationsTest, SetsWithFewerWindowsThanTheMinimumAreLeftOut) {
  ObservationSummary summary;
  ObservationOptions options;
  options.min_count = 3;
  const WorkloadProfile out =
      WithObservations(ThreeClasses(),
                       std::vector<Observation>{Obs({"a", "c"}, {100, 50}, {1.4, 1.2}, 2, "n1"),
                                                Obs({"a", "c"}, {100, 50}, {1.4, 1.2}, 1, "n2"),
                                                Obs({"b", "c"}, {100, 50}, {1.4, 1.2}, 2, "n1")},
                       &summary, options);
  ASSERT_EQ(out.measured.size(), 2u);
  EXPECT_EQ(out.measured[1].source, "observed: 3 windows on 2 nodes");
  EXPECT_EQ(summary.used, 2u);
  EXPECT_EQ(summary.too_few, 1u);
}

TEST(WithObservationsTest, StopsAtTheMeasuredSetLimitKeepingTheBestMeasured) {
  std::vector<Observation> many;
  for (int i = 0; i < static_cast<int>(kMaxMeasuredSets) + 5; ++i) {
    many.push_back(Obs({"a", "b"}, {1 + i, 1}, {1.1, 1.1}, i < 3 ? 100 : 1));
  }
  ObservationSummary summary;
  const WorkloadProfile out = WithObservations(ThreeClasses(), many, &summary);
  ASSERT_TRUE(out.Validate().has_value());
  EXPECT_EQ(out.measured.size(), kMaxMeasuredSets);
  EXPECT_EQ(summary.over_limit, 6u);  // the shipped set takes one place
  EXPECT_EQ(out.measured[1].source, "observed: 100 windows on 1 node");
}

// The forgery of the issue: "slowdown 1000/1000" for two jobs. And a loaded host measured
// against the profile's solo time (9x for two jobs): both beyond what sharing one GPU explains.
TEST(WithObservationsTest, ImplausibleObservationsAreLeftOutNamingTheBound) {
  EXPECT_TRUE(CheckPlausible(Obs({"a", "b"}, {100, 50}, {4.0, 1.0}, 1)).has_value());
  auto forged = CheckPlausible(Obs({"a", "b"}, {100, 50}, {1000, 1000}, 1));
  ASSERT_FALSE(forged.has_value());
  EXPECT_NE(forged.error().message.find("slowdown 1000 of a@100 is above 4 for 2 jobs"),
            std::string::npos)
      << forged.error().message;
  ObservationSummary summary;
  const WorkloadProfile out =
      WithObservations(ThreeClasses(),
                       std::vector<Observation>{Obs({"a", "b"}, {100, 200}, {1000, 1000}, 50),
                                                Obs({"a", "c"}, {100, 50}, {9.0, 1.2}, 3),
                                                Obs({"a", "c"}, {100, 50}, {1.4, 1.2}, 1)},
                       &summary);
  EXPECT_EQ(summary.implausible, 2u);
  EXPECT_EQ(summary.used, 1u);
  ASSERT_EQ(out.measured.size(), 2u);
  EXPECT_EQ(out.measured[0].slowdown, ThreeClasses().measured[0].slowdown)
      << "the shipped b+a set is not replaced by the forgery";
  EXPECT_NEAR(out.measured[1].slowdown[0], 1.4, 1e-12) << "the 9x window is not averaged in";
  EXPECT_NE(summary.Describe().find("2 implausible"), std::string::npos) << summary.Describe();
}

TEST(WithObservationsTest, ProfileRelativeOnesWeighAQuarterOtherGpusAreLeftOutWhenAsked) {
  Observation relative = Obs({"a", "c"}, {100, 50}, {1.8, 1.2}, 5);
  relative.solo = "profile";
  Observation measured = Obs({"a", "c"}, {100, 50}, {1.4, 1.2}, 1);
  measured.solo = "measured";
  measured.gpu_model = "NVIDIA H200";
  Observation other = Obs({"a", "c"}, {100, 50}, {1.1, 1.1}, 1);
  other.gpu_model = "Tesla T4";
  const std::vector<Observation> all = {relative, measured, other};
  ObservationSummary summary;
  ObservationOptions options;
  options.gpu_model = "NVIDIA H200";
  WorkloadProfile out = WithObservations(ThreeClasses(), all, &summary, options);
  EXPECT_EQ(summary.other_gpu, 1u);
  ASSERT_EQ(out.measured.size(), 2u);
  // 5 profile-relative windows weigh as 1.25 measured ones.
  EXPECT_NEAR(out.measured[1].slowdown[0], (1.25 * 1.8 + 1.4) / 2.25, 1e-12);
  EXPECT_EQ(out.measured[1].source, "observed: 6 windows on 1 node");
  options.measured_only = true;
  out = WithObservations(ThreeClasses(), all, &summary, options);
  EXPECT_EQ(summary.profile_relative, 1u);
  EXPECT_NEAR(out.measured[1].slowdown[0], 1.4, 1e-12);
}

TEST(WithObservationsTest, NoObservationsLeaveTheProfileAsItWas) {
  ObservationSummary summary;
  const WorkloadProfile out = WithObservations(ThreeClasses(), {}, &summary);
  ASSERT_EQ(out.measured.size(), 1u);
  EXPECT_EQ(out.measured[0].source, "made up for a test");
  EXPECT_EQ(summary.observed_sets(), 0u);
  EXPECT_EQ(summary.Describe(), "0 observations: 0 observed sets, 0 windows on 0 nodes");
}

}  // namespace
}  // namespace gpumux::policy
