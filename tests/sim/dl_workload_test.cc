// Workloads of the JCT simulator: the profile file, the embedded default profile, job lists,
// seconds, class mixes, the job generator and submit-time files.
#include "gpumux/sim/dl_workload.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "gpumux/policy/workload_profile.h"
#include "tests/testing/builders.h"

namespace gpumux::sim {
namespace {

// gpumux's first embedded profile: these tests were written against its classes and numbers.
const policy::WorkloadProfile& Assumed5Profile() { return *EmbeddedProfile("iadeep5-assumed"); }

using nlohmann::json;

// ---------------------------------------------------------------------------------------------
// ParseProfile

// A measured set of 17 members, one more than a GPU may hold.
const std::string kSeventeenAlphas = [] {
  json set = {{"classes", json::array()}, {"batches", json::array()}, {"slowdown", json::array()}};
  for (int i = 0; i < 17; ++i) {
    set["classes"].push_back("alpha");
    set["batches"].push_back(64);
    set["slowdown"].push_back(1.5);
  }
  return set.dump();
}();

// A valid profile of two classes; the error cases edit it.
json ValidProfile() {
  return json::parse(R"({
    "name": "test",
    "gpu": {"model": "Test GPU", "memory_mib": 16384},
    "companion_overhead": 0.1,
    "classes": [
      {"name": "alpha", "default_batch": 64, "noise_scale": 1000.0, "dataset_samples": 5000,
       "target_epochs": 3,
       "solo": [{"batch": 32, "step_s": 0.05, "memory_mib": 1500, "gpu_busy": 0.5},
                {"batch": 64, "step_s": 0.08, "memory_mib": 2500, "gpu_busy": 0.6}]},
      {"name": "beta", "default_batch": 128, "noise_scale": 500.0, "dataset_samples": 1000,
       "target_epochs": 1.5,
       "solo": [{"batch": 128, "step_s": 0.2, "memory_mib": 4000, "gpu_busy": 0.9}]}
    ],
    "measured": [
      {"classes": ["alpha", "beta"], "batches": [64, 128], "slowdown": [1.2, 1.4],
       "source": "bench"}
    ]
  })");
}

TEST(DlProfile, ParsesEveryField) {
  auto p = ParseProfile(ValidProfile().dump(), "test.json");
  ASSERT_TRUE(p.has_value()) << p.error().message;
  EXPECT_EQ(p->name, "test");
  EXPECT_EQ(p->gpu_model, "Test GPU");
  EXPECT_EQ(p->gpu_memory_mib, 16384);
  EXPECT_DOUBLE_EQ(p->companion_overhead, 0.1);
  ASSERT_EQ(p->classes.size(), 2U);
  const policy::ClassProfile& a = p->classes[0];
  EXPECT_EQ(a.name, "alpha");
  EXPECT_EQ(a.default_batch, 64);
  EXPECT_DOUBLE_EQ(a.noise_scale, 1000.0);
  EXPECT_EQ(a.dataset_samples, 5000);
  EXPECT_DOUBLE_EQ(a.target_epochs, 3.0);
  ASSERT_EQ(a.solo.size(), 2U);
  EXPECT_EQ(a.solo[1].batch, 64);
  EXPECT_DOUBLE_EQ(a.solo[1].step_s, 0.08);
  EXPECT_EQ(a.solo[1].memory_mib, 2500);
  EXPECT_DOUBLE_EQ(a.solo[1].gpu_busy, 0.6);
  ASSERT_EQ(p->measured.size(), 1U);
  EXPECT_EQ(p->measured[0].classes, (std::vector<std::string>{"alpha", "beta"}));
  EXPECT_EQ(p->measured[0].batches, (std::vector<int>{64, 128}));
  EXPECT_EQ(p->measured[0].slowdown, (std::vector<double>{1.2, 1.4}));
  EXPECT_EQ(p->measured[0].source, "bench");
}

TEST(DlProfile, OptionalFieldsTakeTheirDefaults) {
  json j = ValidProfile();
  j.erase("companion_overhead");
  j.erase("measured");
  j.erase("name");
  j["gpu"].erase("model");
  auto p = ParseProfile(j.dump(), "test.json");
  ASSERT_TRUE(p.has_value()) << p.error().message;
  EXPECT_DOUBLE_EQ(p->companion_overhead, 0.05);
  EXPECT_TRUE(p->measured.empty());
  EXPECT_EQ(p->name, "");
  EXPECT_EQ(p->gpu_model, "");
}

TEST(DlProfile, ParsesAClassOwnCompanionOverhead) {
  json j = ValidProfile();
  j["classes"][0]["companion_overhead"] = 0.3;
  auto p = ParseProfile(j.dump(), "test.json");
  ASSERT_TRUE(p.has_value()) << p.error().message;
  EXPECT_DOUBLE_EQ(p->classes[0].companion_overhead, 0.3);
  EXPECT_LT(p->classes[1].companion_overhead, 0) << "absent: none of its own";
  EXPECT_DOUBLE_EQ(p->CompanionOverhead(&p->classes[0]), 0.3);
  EXPECT_DOUBLE_EQ(p->CompanionOverhead(&p->classes[1]), 0.1) << "the profile's";
}

// Keys the parser does not know (a fit's summary, notes, provenance) are documentation: the
// profile parses as if they were absent.
TEST(DlProfile, IgnoresKeysItDoesNotKnow) {
  json j = ValidProfile();
  j["fit"] = {{"form", "a"}, {"in_sample", {{"mean_abs_error_sum", 0.16}}}, {"pairs", 31}};
  j["provenance"] = "made up";
  j["gpu"]["vendor"] = "nobody";
  j["classes"][0]["source"] = "made up";
  j["classes"][0]["solo"][0]["note"] = 1;
  j["measured"][0]["note"] = json::array({1, 2});
  auto with = ParseProfile(j.dump(), "test.json");
  auto without = ParseProfile(ValidProfile().dump(), "test.json");
  ASSERT_TRUE(with.has_value()) << with.error().message;
  ASSERT_TRUE(without.has_value()) << without.error().message;
  EXPECT_EQ(with->classes.size(), without->classes.size());
  EXPECT_EQ(with->classes[0].solo[0].step_s, without->classes[0].solo[0].step_s);
  EXPECT_EQ(with->measured[0].slowdown, without->measured[0].slowdown);
  EXPECT_EQ(with->companion_overhead, without->companion_overhead);
}

// An edit of ValidProfile() as one JSON Patch operation (RFC 6902: "remove" or "replace" the
// value at `path`, or "add" it), or op "text": `value` is the whole text parsed instead.
struct ProfileErrorCase {
  const char* name;
  const char* op;
  const char* path;
  const char* value;                 // JSON text of the new value ("replace"), or the text
  std::vector<std::string> message;  // every one appears in the error
};
void PrintTo(const ProfileErrorCase& c, std::ostream* os) { *os << c.name; }

class DlProfileError : public ::testing::TestWithParam<ProfileErrorCase> {};

TEST_P(DlProfileError, NamesTheSourceAndTheField) {
  const ProfileErrorCase& c = GetParam();
  std::string text = c.value;
  if (std::string(c.op) != "text") {
    json op = {{"op", c.op}, {"path", c.path}};
    if (std::string(c.op) != "remove") op["value"] = json::parse(c.value);
    text = ValidProfile().patch(json::array({op})).dump();
  }
  auto p = ParseProfile(text, "prof.json");
  ASSERT_FALSE(p.has_value()) << text;
  EXPECT_EQ(p.error().message.rfind("prof.json: ", 0), 0U) << p.error().message;
  for (const std::string& m : c.message) {
    EXPECT_NE(p.error().message.find(m), std::string::npos)
        << "'" << m << "' not in: " << p.error().message;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Table, DlProfileError,
    ::testing::Values(
        ProfileErrorCase{
            "invalid_json", "text", "", "{\"name\": ", {"prof.json: not JSON (line 1, column "}},
        ProfileErrorCase{"an_empty_text", "text", "", "", {"prof.json: not JSON (line 1, column "}},
        ProfileErrorCase{"not_an_object", "text", "", "[1, 2]", {"a profile is a JSON object"}},
        ProfileErrorCase{
            "no_gpu_memory", "remove", "/gpu/memory_mib", "", {"gpu: missing field 'memory_mib'"}},
        ProfileErrorCase{"no_gpu_at_all", "remove", "/gpu", "", {"missing field 'memory_mib'"}},
        ProfileErrorCase{"gpu_memory_as_text",
                         "replace",
                         "/gpu/memory_mib",
                         "\"24G\"",
                         {"gpu: field 'memory_mib' has the wrong type"}},
        ProfileErrorCase{"zero_gpu_memory",
                         "replace",
                         "/gpu/memory_mib",
                         "0",
                         {"gpu memory_mib 0 is outside 1..4294967296"}},
        ProfileErrorCase{"no_classes", "remove", "/classes", "", {"missing array 'classes'"}},
        ProfileErrorCase{
            "classes_not_an_array", "replace", "/classes", "{}", {"missing array 'classes'"}},
        ProfileErrorCase{
            "an_empty_class_list", "replace", "/classes", "[]", {"at least one workload class"}},
        ProfileErrorCase{"a_class_without_a_name",
                         "remove",
                         "/classes/0/name",
                         "",
                         {"classes[]: missing field 'name'"}},
        ProfileErrorCase{"a_class_without_default_batch",
                         "remove",
                         "/classes/0/default_batch",
                         "",
                         {"class 'alpha': missing field 'default_batch'"}},
        ProfileErrorCase{"a_default_batch_as_text",
                         "replace",
                         "/classes/0/default_batch",
                         "\"big\"",
                         {"class 'alpha': field 'default_batch' has the wrong type"}},
        // nlohmann would cast 1e300 to int (out of range: UB) and wrap 2^32 + 64.
        ProfileErrorCase{"a_measured_batch_of_1e300",
                         "replace",
                         "/measured/0/batches/0",
                         "1e300",
                         {"measured[]: field 'batches' has the wrong type (an integer"}},
        ProfileErrorCase{"a_measured_batch_beyond_int",
                         "replace",
                         "/measured/0/batches/0",
                         "4294967360",
                         {"measured[]: field 'batches': 4294967360 is outside the range"}},
        ProfileErrorCase{"a_noise_scale_as_text",
                         "replace",
                         "/classes/0/noise_scale",
                         "\"x\"",
                         {"class 'alpha': field 'noise_scale' has the wrong type"}},
        ProfileErrorCase{"a_class_without_dataset_samples",
                         "remove",
                         "/classes/0/dataset_samples",
                         "",
                         {"class 'alpha': missing field 'dataset_samples'"}},
        ProfileErrorCase{"a_class_without_target_epochs",
                         "remove",
                         "/classes/0/target_epochs",
                         "",
                         {"class 'alpha': missing field 'target_epochs'"}},
        ProfileErrorCase{"a_class_without_solo_points",
                         "remove",
                         "/classes/0/solo",
                         "",
                         {"class 'alpha': missing array 'solo'"}},
        ProfileErrorCase{"an_empty_solo_table",
                         "replace",
                         "/classes/0/solo",
                         "[]",
                         {"workload class 'alpha' has no solo points"}},
        ProfileErrorCase{"a_solo_point_without_step_time",
                         "remove",
                         "/classes/0/solo/1/step_s",
                         "",
                         {"class 'alpha' solo: missing field 'step_s'"}},
        ProfileErrorCase{"a_solo_point_with_busy_as_text",
                         "replace",
                         "/classes/0/solo/0/gpu_busy",
                         "\"half\"",
                         {"class 'alpha' solo: field 'gpu_busy' has the wrong type"}},
        ProfileErrorCase{"a_busy_fraction_above_one",
                         "replace",
                         "/classes/0/solo/1/gpu_busy",
                         "1.5",
                         {"workload class 'alpha'", "solo point 1", "gpu_busy"}},
        ProfileErrorCase{"a_zero_busy_fraction",
                         "replace",
                         "/classes/0/solo/0/gpu_busy",
                         "0",
                         {"workload class 'alpha'", "solo point 0"}},
        ProfileErrorCase{"a_negative_step_time",
                         "replace",
                         "/classes/0/solo/0/step_s",
                         "-0.1",
                         {"workload class 'alpha': solo point 0: step_s -0.1 is outside [1e-06, "
                          "86400]"}},
        ProfileErrorCase{"a_zero_batch_in_a_solo_point",
                         "replace",
                         "/classes/0/solo/0/batch",
                         "0",
                         {"workload class 'alpha': solo point 0: batch 0 is outside 1..1048576"}},
        ProfileErrorCase{"descending_solo_batches",
                         "replace",
                         "/classes/0/solo/1/batch",
                         "16",
                         {"workload class 'alpha'", "ascending batch sizes"}},
        ProfileErrorCase{"a_zero_default_batch",
                         "replace",
                         "/classes/0/default_batch",
                         "0",
                         {"workload class 'alpha': default_batch 0 is outside 1..1048576"}},
        ProfileErrorCase{"a_negative_noise_scale",
                         "replace",
                         "/classes/0/noise_scale",
                         "-5.0",
                         {"workload class 'alpha': noise_scale -5 is outside (0, 1e+12]"}},
        ProfileErrorCase{"zero_dataset_samples",
                         "replace",
                         "/classes/0/dataset_samples",
                         "0",
                         {"workload class 'alpha': dataset_samples 0 is outside 1..1000000000000"}},
        ProfileErrorCase{"zero_target_epochs",
                         "replace",
                         "/classes/0/target_epochs",
                         "0",
                         {"workload class 'alpha': target_epochs 0 is outside (0, 1e+06]"}},
        ProfileErrorCase{"a_companion_overhead_of_one",
                         "replace",
                         "/companion_overhead",
                         "1.0",
                         {"companion_overhead 1 is outside [0, 1)"}},
        ProfileErrorCase{"a_negative_companion_overhead",
                         "replace",
                         "/companion_overhead",
                         "-0.1",
                         {"companion_overhead"}},
        ProfileErrorCase{"a_class_companion_overhead_of_one",
                         "add",
                         "/classes/0/companion_overhead",
                         "1.0",
                         {"class 'alpha': companion_overhead 1 is outside [0, 1)"}},
        ProfileErrorCase{"a_negative_class_companion_overhead",
                         "add",
                         "/classes/1/companion_overhead",
                         "-0.1",
                         {"class 'beta': companion_overhead -0.1 is outside [0, 1)"}},
        ProfileErrorCase{"a_class_companion_overhead_as_text",
                         "add",
                         "/classes/0/companion_overhead",
                         "\"0.1\"",
                         {"class 'alpha': field 'companion_overhead' has the wrong type"}},
        ProfileErrorCase{"a_duplicate_class",
                         "replace",
                         "/classes/1/name",
                         "\"alpha\"",
                         {"duplicate workload class 'alpha'"}},
        ProfileErrorCase{"a_measured_set_naming_an_unknown_class",
                         "replace",
                         "/measured/0/classes/1",
                         "\"gamma\"",
                         {"measured set 0", "unknown workload class 'gamma'"}},
        ProfileErrorCase{"a_measured_set_of_one_class",
                         "replace",
                         "/measured/0",
                         R"({"classes": ["alpha"], "batches": [64], "slowdown": [1.2]})",
                         {"measured set 0", "at least two classes"}},
        ProfileErrorCase{"a_measured_set_with_lengths_that_differ",
                         "replace",
                         "/measured/0/slowdown",
                         "[1.2]",
                         {"measured set 0", "same length"}},
        ProfileErrorCase{"a_measured_speedup",
                         "replace",
                         "/measured/0/slowdown/0",
                         "0.9",
                         {"measured set 0", "slowdowns must be >= 1"}},
        ProfileErrorCase{"a_measured_set_without_slowdowns",
                         "remove",
                         "/measured/0/slowdown",
                         "",
                         {"measured[]: missing field 'slowdown'"}},
        ProfileErrorCase{"a_fractional_default_batch",
                         "replace",
                         "/classes/0/default_batch",
                         "64.5",
                         {"default_batch"}},
        ProfileErrorCase{
            "a_fractional_solo_batch", "replace", "/classes/0/solo/0/batch", "32.9", {"batch"}},
        ProfileErrorCase{"a_boolean_default_batch",
                         "replace",
                         "/classes/0/default_batch",
                         "true",
                         {"default_batch"}},
        // Upper bounds: numbers that passed "positive" once, then overflowed an integer
        // conversion or the simulator's clock (reliability-repros/dl-profile-overflow).
        ProfileErrorCase{"gpu_memory_beyond_what_a_gpu_may_have",
                         "replace",
                         "/gpu/memory_mib",
                         "8589934592",
                         {"gpu memory_mib 8589934592 is outside 1..4294967296"}},
        ProfileErrorCase{"a_solo_memory_of_int64_max",
                         "replace",
                         "/classes/0/solo/1/memory_mib",
                         "9223372036854775807",
                         {"workload class 'alpha': solo point 1: memory_mib 9223372036854775807 "
                          "is outside 1..4294967296"}},
        ProfileErrorCase{"a_solo_memory_past_int64",
                         "replace",
                         "/classes/0/solo/1/memory_mib",
                         "18446744073709551615",
                         {"field 'memory_mib': 18446744073709551615 is outside the range"}},
        ProfileErrorCase{"a_default_batch_past_int",
                         "replace",
                         "/classes/0/default_batch",
                         "3000000000",
                         {"field 'default_batch': 3000000000 is outside the range"}},
        ProfileErrorCase{"a_default_batch_below_int",
                         "replace",
                         "/classes/0/default_batch",
                         "-3000000000",
                         {"field 'default_batch': -3000000000 is outside the range"}},
        ProfileErrorCase{"a_batch_past_the_limit",
                         "replace",
                         "/classes/1/solo/0/batch",
                         "2097152",
                         {"workload class 'beta': solo point 0: batch 2097152 is outside "
                          "1..1048576"}},
        ProfileErrorCase{"a_step_time_of_1e300",
                         "replace",
                         "/classes/0/solo/0/step_s",
                         "1e300",
                         {"workload class 'alpha': solo point 0: step_s 1e+300 is outside [1e-06, "
                          "86400]"}},
        ProfileErrorCase{"target_epochs_of_1e300",
                         "replace",
                         "/classes/0/target_epochs",
                         "1e300",
                         {"workload class 'alpha': target_epochs 1e+300 is outside (0, 1e+06]"}},
        ProfileErrorCase{"dataset_samples_of_int64_max",
                         "replace",
                         "/classes/1/dataset_samples",
                         "9223372036854775807",
                         {"workload class 'beta': dataset_samples 9223372036854775807 is outside "
                          "1..1000000000000"}},
        ProfileErrorCase{"a_noise_scale_of_1e300",
                         "replace",
                         "/classes/0/noise_scale",
                         "1e300",
                         {"workload class 'alpha': noise_scale 1e+300 is outside (0, 1e+12]"}},
        // Every field in range, but 10^18 samples at 800 per second: 1.25e15 s alone.
        ProfileErrorCase{"a_solo_time_past_the_limit",
                         "replace",
                         "/classes/0",
                         R"({"name": "alpha", "default_batch": 64, "noise_scale": 1000.0,
                             "dataset_samples": 1000000000000, "target_epochs": 1000000,
                             "solo": [{"batch": 64, "step_s": 0.08, "memory_mib": 2500,
                                       "gpu_busy": 0.6}]})",
                         {"workload class 'alpha': reaching the target alone at the default batch "
                          "takes 1.25e+15 s, more than 1e+09 s"}},
        ProfileErrorCase{"a_measured_set_of_seventeen_classes",
                         "replace",
                         "/measured/0",
                         kSeventeenAlphas.c_str(),
                         {"measured set 0 has 17 classes, more than 16"}},
        ProfileErrorCase{"a_measured_slowdown_of_a_million",
                         "replace",
                         "/measured/0/slowdown/0",
                         "1e6",
                         {"measured set 0: slowdown 1e+06 is outside [1, 1000]"}},
        ProfileErrorCase{"measured_sets_not_in_an_array",
                         "replace",
                         "/measured",
                         "{}",
                         {"'measured' is not an array"}}),
    test::CaseName());

TEST(DlProfile, LoadProfileReadsAFileAndNamesAMissingOne) {
  test::ScratchDir dir;
  const std::string path =
      dir.Write("p.json", std::string(*EmbeddedProfileJson("iadeep5-assumed")));
  auto p = LoadProfile(path);
  ASSERT_TRUE(p.has_value()) << p.error().message;
  EXPECT_EQ(p->classes.size(), 5U);
  const std::string absent = (dir.path() / "absent.json").string();
  auto q = LoadProfile(absent);
  ASSERT_FALSE(q.has_value());
  EXPECT_NE(q.error().message.find(absent + ": cannot open"), std::string::npos)
      << q.error().message;
  const std::string bad = dir.Write("bad.json", "{");
  auto r = LoadProfile(bad);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().message.rfind(bad + ": not JSON (", 0), 0U) << r.error().message;
}

// ---------------------------------------------------------------------------------------------
// The embedded default profile.

TEST(DlEmbeddedProfiles, AreTheFittedTheMeasuredAndTheAssumed) {
  EXPECT_EQ(EmbeddedProfileNames(), (std::vector<std::string>{"iadeep-fitted", "iadeep-measured",
                                                              "iadeep5-assumed", "cpu-example"}));
  for (const std::string& name : EmbeddedProfileNames()) {
    SCOPED_TRACE(name);
    const policy::WorkloadProfile* p = EmbeddedProfile(name);
    ASSERT_NE(p, nullptr);
    EXPECT_TRUE(p->Validate().has_value());
    ASSERT_TRUE(EmbeddedProfileJson(name).has_value());
    auto parsed = ParseProfile(*EmbeddedProfileJson(name), name);
    ASSERT_TRUE(parsed.has_value()) << parsed.error().message;
    EXPECT_EQ(parsed->name, p->name);
    auto by_name = ProfileByNameOrPath(name);
    ASSERT_TRUE(by_name.has_value()) << by_name.error().message;
    EXPECT_EQ(by_name->name, p->name) << "an embedded name, not a file";
  }
  EXPECT_EQ(EmbeddedProfile("nosuch"), nullptr);
  EXPECT_FALSE(EmbeddedProfileJson("nosuch").has_value());
  EXPECT_EQ(EmbeddedProfile("iadeep5-assumed")->classes.size(), 5U);
}

const std::vector<std::string> kIadeepClasses{"vgg16",   "vgg19",     "squeezenet", "googlenet",
                                              "alexnet", "resnet152", "neumf",      "adgcl"};

std::vector<std::string> ClassNames(const policy::WorkloadProfile& p) {
  std::vector<std::string> names;
  for (const auto& c : p.classes) names.push_back(c.name);
  return names;
}

TEST(DlEmbeddedProfiles, TheDefaultIsTheFittedBeliefWithEightClassesAndNoMeasuredSets) {
  const policy::WorkloadProfile& p = DefaultProfile();
  EXPECT_EQ(&p, EmbeddedProfile("iadeep-fitted"));
  EXPECT_EQ(ClassNames(p), kIadeepClasses);
  EXPECT_TRUE(p.measured.empty()) << "a belief predicts; it has no measurements";
  EXPECT_EQ(DefaultProfileJson(), *EmbeddedProfileJson("iadeep-fitted"));
}

TEST(DlEmbeddedProfiles, TheDefaultTruthHasTheSameClassesAndSoloTablesAnd31MeasuredPairs) {
  const policy::WorkloadProfile& belief = DefaultProfile();
  const policy::WorkloadProfile& truth = DefaultTruthProfile();
  EXPECT_EQ(&truth, EmbeddedProfile("iadeep-measured"));
  EXPECT_EQ(ClassNames(truth), kIadeepClasses);
  EXPECT_EQ(truth.gpu_memory_mib, belief.gpu_memory_mib);
  ASSERT_EQ(truth.classes.size(), belief.classes.size());
  for (std::size_t k = 0; k < truth.classes.size(); ++k) {
    const policy::ClassProfile& t = truth.classes[k];
    const policy::ClassProfile& b = belief.classes[k];
    SCOPED_TRACE(t.name);
    EXPECT_EQ(t.default_batch, b.default_batch);
    EXPECT_EQ(t.noise_scale, b.noise_scale);
    EXPECT_EQ(t.dataset_samples, b.dataset_samples);
    EXPECT_EQ(t.target_epochs, b.target_epochs);
    ASSERT_EQ(t.solo.size(), b.solo.size());
    for (std::size_t i = 0; i < t.solo.size(); ++i) {
      EXPECT_EQ(t.solo[i].batch, b.solo[i].batch) << i;
      EXPECT_EQ(t.solo[i].step_s, b.solo[i].step_s) << i;
      EXPECT_EQ(t.solo[i].memory_mib, b.solo[i].memory_mib) << i;
      EXPECT_EQ(t.solo[i].gpu_busy, b.solo[i].gpu_busy) << i;
    }
  }
  ASSERT_EQ(truth.measured.size(), 31U);
  for (const policy::MeasuredSet& m : truth.measured) {
    EXPECT_EQ(m.classes.size(), 2U) << "pairs";
  }
}

TEST(DlAssumedProfile, HasTheFiveIadeepClassesOnAnRtx3090) {
  const policy::WorkloadProfile& p = Assumed5Profile();
  ASSERT_TRUE(p.Validate()) << p.Validate().error().message;
  std::vector<std::string> names;
  for (const auto& c : p.classes) names.push_back(c.name);
  EXPECT_EQ(names, (std::vector<std::string>{"vgg16", "resnet50", "squeezenet", "neumf", "lstm"}));
  EXPECT_EQ(p.gpu_memory_mib, 24576);
  EXPECT_NE(p.gpu_model.find("3090"), std::string::npos) << p.gpu_model;
  auto again = ParseProfile(*EmbeddedProfileJson("iadeep5-assumed"), "embedded");
  ASSERT_TRUE(again.has_value()) << again.error().message;
  EXPECT_EQ(again->classes.size(), p.classes.size());
  EXPECT_EQ(&Assumed5Profile(), &p) << "parsed once";
}

TEST(DlAssumedProfile, SoloTimesMatchIadeepsMeasuredJctWithinOnePercent) {
  const std::map<std::string, double> measured{{"vgg16", 259.08},
                                               {"resnet50", 215.01},
                                               {"squeezenet", 357.81},
                                               {"neumf", 507.47},
                                               {"lstm", 2067.59}};
  for (const auto& [name, jct] : measured) {
    const policy::ClassProfile* c = Assumed5Profile().Find(name);
    ASSERT_NE(c, nullptr) << name;
    EXPECT_NEAR(c->SoloSeconds(), jct, jct * 0.01) << name;
  }
}

TEST(DlAssumedProfile, SoloGoodputPeaksAtTheDefaultBatchAmongTheCandidates) {
  for (const auto& c : Assumed5Profile().classes) {
    const double best = c.SoloGoodput(c.default_batch);
    const auto candidates = policy::BatchCandidates(c, 0);
    ASSERT_GE(candidates.size(), 5U) << c.name;
    EXPECT_NE(std::find(candidates.begin(), candidates.end(), c.default_batch), candidates.end())
        << c.name;
    for (int b : candidates) {
      EXPECT_LE(c.SoloGoodput(b), best * (1 + 1e-12)) << c.name << " at batch " << b;
    }
    EXPECT_LE(c.MemoryMib(c.default_batch), Assumed5Profile().gpu_memory_mib) << c.name;
  }
}

// ---------------------------------------------------------------------------------------------
// Seconds.

struct SecondsCase {
  const char* name;
  const char* text;
  core::Micros want;  // -1: an error
};
void PrintTo(const SecondsCase& c, std::ostream* os) { *os << c.name; }

class DlParseSeconds : public ::testing::TestWithParam<SecondsCase> {};

TEST_P(DlParseSeconds, IsExactOrAnError) {
  auto v = ParseSeconds(GetParam().text);
  if (GetParam().want < 0) {
    ASSERT_FALSE(v.has_value()) << *v;
    EXPECT_NE(v.error().message.find("at most 6 decimals"), std::string::npos) << v.error().message;
    EXPECT_NE(v.error().message.find(std::string("'") + GetParam().text + "'"), std::string::npos)
        << v.error().message;
  } else {
    ASSERT_TRUE(v.has_value()) << v.error().message;
    EXPECT_EQ(*v, GetParam().want);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Table, DlParseSeconds,
    ::testing::Values(
        SecondsCase{"zero", "0", 0}, SecondsCase{"whole_seconds", "12", 12000000},
        SecondsCase{"a_half", "12.5", 12500000}, SecondsCase{"one_microsecond", "0.000001", 1},
        SecondsCase{"six_decimals", "1.123456", 1123456},
        SecondsCase{"leading_zeros", "007.50", 7500000},
        SecondsCase{"twelve_digits", "999999999999", 999999999999000000},
        SecondsCase{"empty", "", -1}, SecondsCase{"negative", "-1", -1},
        SecondsCase{"a_plus_sign", "+1", -1}, SecondsCase{"a_trailing_dot", "1.", -1},
        SecondsCase{"a_leading_dot", ".5", -1}, SecondsCase{"seven_decimals", "1.0000001", -1},
        SecondsCase{"text", "soon", -1}, SecondsCase{"an_exponent", "1e3", -1},
        SecondsCase{"a_space", " 1", -1}, SecondsCase{"two_dots", "1.2.3", -1},
        SecondsCase{"a_comma", "1,5", -1}, SecondsCase{"thirteen_digits", "1234567890123", -1}),
    test::CaseName());

TEST(DlSeconds, FormatWritesSixDecimalsAndRoundTrips) {
  EXPECT_EQ(FormatSeconds(0), "0.000000");
  EXPECT_EQ(FormatSeconds(1), "0.000001");
  EXPECT_EQ(FormatSeconds(12500000), "12.500000");
  EXPECT_EQ(FormatSeconds(86400000000), "86400.000000");
  for (core::Micros us : {core::Micros{0}, core::Micros{1}, core::Micros{999999},
                          core::Micros{1000000}, core::Micros{123456789012}}) {
    auto back = ParseSeconds(FormatSeconds(us));
    ASSERT_TRUE(back.has_value()) << FormatSeconds(us);
    EXPECT_EQ(*back, us);
  }
}

// ---------------------------------------------------------------------------------------------
// Job lists.

core::Result<std::vector<JobSpec>> Read(const std::string& text) {
  std::istringstream in(text);
  return ReadJobs(in, "jobs.csv", Assumed5Profile());
}

TEST(DlJobs, ReadsAGoodFileInRowOrder) {
  auto jobs = Read(
      "job,class,submit_s,gpu_mib\n"
      "a,vgg16,0,6144\n"
      "\n"
      "b,lstm,12.5,4096\n"
      "c,neumf,1.000001,3072\n");
  ASSERT_TRUE(jobs.has_value()) << jobs.error().message;
  ASSERT_EQ(jobs->size(), 3U);
  EXPECT_EQ((*jobs)[0].id, "a");
  EXPECT_EQ((*jobs)[0].cls, "vgg16");
  EXPECT_EQ((*jobs)[0].submit_us, 0);
  EXPECT_EQ((*jobs)[0].gpu_mib, 6144);
  EXPECT_EQ((*jobs)[1].submit_us, 12500000);
  EXPECT_EQ((*jobs)[2].id, "c") << "rows keep their order; submit times need not increase";
  EXPECT_EQ((*jobs)[2].submit_us, 1000001);
}

TEST(DlJobs, ColumnsMayComeInAnyOrderWithExtraOnes) {
  auto jobs = Read(
      "gpu_mib,note,submit_s,class,job\n"
      "3072,hi,2,squeezenet,x\n");
  ASSERT_TRUE(jobs.has_value()) << jobs.error().message;
  ASSERT_EQ(jobs->size(), 1U);
  EXPECT_EQ((*jobs)[0].id, "x");
  EXPECT_EQ((*jobs)[0].cls, "squeezenet");
  EXPECT_EQ((*jobs)[0].submit_us, 2000000);
  EXPECT_EQ((*jobs)[0].gpu_mib, 3072);
}

struct JobsErrorCase {
  const char* name;
  std::string text;
  std::vector<std::string> message;
};
void PrintTo(const JobsErrorCase& c, std::ostream* os) { *os << c.name; }

class DlJobsError : public ::testing::TestWithParam<JobsErrorCase> {};

TEST_P(DlJobsError, NamesTheFileAndLine) {
  auto jobs = Read(GetParam().text);
  ASSERT_FALSE(jobs.has_value());
  for (const std::string& m : GetParam().message) {
    EXPECT_NE(jobs.error().message.find(m), std::string::npos)
        << "'" << m << "' not in: " << jobs.error().message;
  }
}

constexpr const char* kHeader = "job,class,submit_s,gpu_mib\n";

INSTANTIATE_TEST_SUITE_P(
    Table, DlJobsError,
    ::testing::Values(
        JobsErrorCase{"a_missing_column_in_the_header",
                      "job,class,submit_s\na,vgg16,0\n",
                      {"jobs.csv:1: missing column 'gpu_mib'"}},
        JobsErrorCase{"a_row_with_a_missing_field",
                      std::string(kHeader) + "a,vgg16,0,6144\nb,vgg16,6144\n",
                      {"jobs.csv:3: expected 4 fields, found 3"}},
        JobsErrorCase{"a_duplicate_id",
                      std::string(kHeader) + "a,vgg16,0,6144\nb,lstm,1,4096\na,lstm,2,4096\n",
                      {"jobs.csv:4: duplicate job 'a'"}},
        JobsErrorCase{"an_empty_id",
                      std::string(kHeader) + ",vgg16,0,6144\n",
                      {"jobs.csv:2: column 'job' is empty"}},
        JobsErrorCase{"an_unknown_class",
                      std::string(kHeader) + "a,bert,0,6144\n",
                      {"jobs.csv:2: unknown workload class 'bert'",
                       "vgg16, resnet50, squeezenet, neumf, lstm"}},
        JobsErrorCase{"a_negative_submit_time",
                      std::string(kHeader) + "a,vgg16,-1,6144\n",
                      {"jobs.csv:2: column 'submit_s': '-1'"}},
        JobsErrorCase{"a_submit_time_with_seven_decimals",
                      std::string(kHeader) + "a,vgg16,1.0000001,6144\n",
                      {"jobs.csv:2: column 'submit_s': '1.0000001'", "at most 6 decimals"}},
        JobsErrorCase{"a_submit_time_as_text",
                      std::string(kHeader) + "a,vgg16,soon,6144\n",
                      {"jobs.csv:2: column 'submit_s': 'soon'"}},
        JobsErrorCase{"zero_gpu_memory",
                      std::string(kHeader) + "a,neumf,0,0\n",
                      {"jobs.csv:2: column 'gpu_mib': 0 is not in 1..24576"}},
        JobsErrorCase{"more_gpu_memory_than_a_gpu_has",
                      std::string(kHeader) + "a,neumf,0,30000\n",
                      {"jobs.csv:2: column 'gpu_mib': 30000 is not in 1..24576"}},
        JobsErrorCase{"gpu_memory_as_text",
                      std::string(kHeader) + "a,neumf,0,big\n",
                      {"jobs.csv:2: column 'gpu_mib': 'big' is not an integer"}},
        JobsErrorCase{"less_memory_than_the_class_needs",
                      std::string(kHeader) + "a,neumf,0,3072\nb,vgg16,0,4096\n",
                      {"jobs.csv:3: job 'b' asks 4096 MiB but vgg16 needs 5120 MiB",
                       "default batch size 512"}},
        JobsErrorCase{"a_header_and_no_rows", kHeader, {"jobs.csv: no jobs"}},
        JobsErrorCase{"an_empty_file", "", {"jobs.csv: empty file"}}),
    test::CaseName());

TEST(DlJobs, LoadJobsNamesAMissingFile) {
  test::ScratchDir dir;
  const std::string path = (dir.path() / "absent.csv").string();
  auto jobs = LoadJobs(path, Assumed5Profile());
  ASSERT_FALSE(jobs.has_value());
  EXPECT_NE(jobs.error().message.find(path + ": cannot open"), std::string::npos)
      << jobs.error().message;
  const std::string bad = dir.Write("bad.csv", std::string(kHeader) + "a,bert,0,6144\n");
  auto b = LoadJobs(bad, Assumed5Profile());
  ASSERT_FALSE(b.has_value());
  EXPECT_NE(b.error().message.find(bad + ":2: unknown workload class"), std::string::npos)
      << b.error().message;
}

TEST(DlJobs, WriteJobsWritesTheDocumentedLayout) {
  std::ostringstream out;
  WriteJobs(out, {{"j0001", "vgg16", 0, 6144}, {"j0002", "lstm", 12500001, 4096}});
  EXPECT_EQ(out.str(),
            "job,class,submit_s,gpu_mib\n"
            "j0001,vgg16,0.000000,6144\n"
            "j0002,lstm,12.500001,4096\n");
}

JobGenOptions Gen(int count, std::uint64_t seed = 42, const char* mix = "iadeep") {
  JobGenOptions g;
  auto m = ParseMix(mix, Assumed5Profile());
  EXPECT_TRUE(m.has_value()) << mix;
  if (m) g.mix = *m;
  g.count = count;
  g.seed = seed;
  return g;
}

std::vector<JobSpec> GenOk(const JobGenOptions& g) {
  auto jobs = GenerateJobs(g, Assumed5Profile());
  if (!jobs) {
    ADD_FAILURE() << jobs.error().message;
    return {};
  }
  return *jobs;
}

void ExpectSameJobs(const std::vector<JobSpec>& a, const std::vector<JobSpec>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].id, b[i].id);
    EXPECT_EQ(a[i].cls, b[i].cls) << a[i].id;
    EXPECT_EQ(a[i].submit_us, b[i].submit_us) << a[i].id;
    EXPECT_EQ(a[i].gpu_mib, b[i].gpu_mib) << a[i].id;
  }
}

TEST(DlJobs, WriteThenReadRoundTrips) {
  const auto jobs = GenOk(Gen(50));
  std::stringstream text;
  WriteJobs(text, jobs);
  auto back = ReadJobs(text, "round-trip", Assumed5Profile());
  ASSERT_TRUE(back.has_value()) << back.error().message;
  ExpectSameJobs(jobs, *back);
}

// ---------------------------------------------------------------------------------------------
// Class mixes.

TEST(DlMix, NamedMixesHaveTheDocumentedWeights) {
  EXPECT_EQ(MixNames(), (std::vector<std::string>{"uniform", "iadeep", "conv-heavy", "light"}));
  auto weights = [](const std::vector<ClassWeight>& mix) {
    std::map<std::string, double> w;
    for (const auto& c : mix) w[c.cls] = c.weight;
    return w;
  };
  // uniform: every class of the profile alike, in the profile's order.
  auto uniform = ParseMix("uniform", DefaultProfile());
  ASSERT_TRUE(uniform.has_value());
  ASSERT_EQ(uniform->size(), DefaultProfile().classes.size());
  for (std::size_t i = 0; i < uniform->size(); ++i) {
    EXPECT_EQ((*uniform)[i].cls, DefaultProfile().classes[i].name);
    EXPECT_EQ((*uniform)[i].weight, 1.0);
  }
  // iadeep: the paper's weights over the five classes of the iadeep5-assumed profile.
  auto iadeep = ParseMix("iadeep", Assumed5Profile());
  ASSERT_TRUE(iadeep.has_value());
  auto w = weights(*iadeep);
  EXPECT_DOUBLE_EQ(w["vgg16"], 0.212);
  EXPECT_DOUBLE_EQ(w["resnet50"], 0.212);
  EXPECT_DOUBLE_EQ(w["squeezenet"], 0.212);
  EXPECT_DOUBLE_EQ(w["neumf"], 0.182);
  EXPECT_DOUBLE_EQ(w["lstm"], 0.182);
  const auto no_lstm = ParseMix("iadeep", DefaultProfile());
  ASSERT_FALSE(no_lstm.has_value());
  EXPECT_NE(no_lstm.error().message.find("iadeep5-assumed"), std::string::npos)
      << no_lstm.error().message;
  // conv-heavy and light: every class, theirs three times as likely, on either profile.
  w = weights(*ParseMix("conv-heavy", DefaultProfile()));
  EXPECT_EQ(w.size(), 8U);
  EXPECT_EQ(w["vgg16"], 3.0);
  EXPECT_EQ(w["alexnet"], 3.0);
  EXPECT_EQ(w["squeezenet"], 1.0);
  w = weights(*ParseMix("light", Assumed5Profile()));
  EXPECT_EQ(w.size(), 5U);
  EXPECT_EQ(w["lstm"], 3.0);
  EXPECT_EQ(w["vgg16"], 1.0);
}

TEST(DlMix, AnExplicitMixKeepsItsOrderAndWeights) {
  auto mix = ParseMix("vgg16=1,lstm=3", Assumed5Profile());
  ASSERT_TRUE(mix.has_value()) << mix.error().message;
  ASSERT_EQ(mix->size(), 2U);
  EXPECT_EQ((*mix)[0].cls, "vgg16");
  EXPECT_DOUBLE_EQ((*mix)[0].weight, 1.0);
  EXPECT_EQ((*mix)[1].cls, "lstm");
  EXPECT_DOUBLE_EQ((*mix)[1].weight, 3.0);
  auto one = ParseMix("neumf=0.25", Assumed5Profile());
  ASSERT_TRUE(one.has_value());
  EXPECT_EQ(one->size(), 1U);
}

struct MixErrorCase {
  const char* name;
  const char* text;
  std::string message;
};
void PrintTo(const MixErrorCase& c, std::ostream* os) { *os << c.name; }

class DlMixError : public ::testing::TestWithParam<MixErrorCase> {};

TEST_P(DlMixError, NamesTheBadItem) {
  auto mix = ParseMix(GetParam().text, Assumed5Profile());
  ASSERT_FALSE(mix.has_value());
  EXPECT_EQ(mix.error().message.rfind("mix: ", 0), 0U) << mix.error().message;
  EXPECT_NE(mix.error().message.find(GetParam().message), std::string::npos) << mix.error().message;
}

INSTANTIATE_TEST_SUITE_P(
    Table, DlMixError,
    ::testing::Values(MixErrorCase{"an_unknown_class", "vgg16=1,bert=1",
                                   "no workload class 'bert'"},
                      MixErrorCase{"an_unknown_name", "heavy", "'heavy' is not class=weight"},
                      MixErrorCase{"a_zero_weight", "vgg16=0", "'vgg16=0' is not class=weight"},
                      MixErrorCase{"a_negative_weight", "vgg16=-1", "'vgg16=-1'"},
                      MixErrorCase{"a_weight_as_text", "vgg16=lots", "'vgg16=lots'"},
                      MixErrorCase{"a_weight_with_trailing_text", "vgg16=1x", "'vgg16=1x'"},
                      MixErrorCase{"an_infinite_weight", "vgg16=inf", "'vgg16=inf'"},
                      MixErrorCase{"a_nan_weight", "vgg16=nan", "'vgg16=nan'"},
                      MixErrorCase{"an_empty_item", ",vgg16=1", "'' is not class=weight"},
                      MixErrorCase{"an_empty_mix", "", "empty"}),
    test::CaseName());

// ---------------------------------------------------------------------------------------------
// The job generator.

TEST(DlJobGen, IsDeterministicForASeedAndHonoursTheCount) {
  const auto a = GenOk(Gen(100, 5));
  const auto b = GenOk(Gen(100, 5));
  ASSERT_EQ(a.size(), 100U);
  ExpectSameJobs(a, b);
  EXPECT_EQ(a.front().id, "j0001");
  EXPECT_EQ(a.back().id, "j0100");
  EXPECT_EQ(a.front().submit_us, 0) << "the first job arrives at 0";
  for (std::size_t i = 1; i < a.size(); ++i) {
    EXPECT_GE(a[i].submit_us, a[i - 1].submit_us) << a[i].id;
  }
  const auto c = GenOk(Gen(100, 6));
  bool differs = false;
  for (std::size_t i = 0; i < a.size() && i < c.size(); ++i) {
    differs = differs || a[i].cls != c[i].cls || a[i].submit_us != c[i].submit_us;
  }
  EXPECT_TRUE(differs) << "another seed, other jobs";
  EXPECT_EQ(GenOk(Gen(1)).size(), 1U);
}

std::map<std::string, double> Frequencies(const std::vector<JobSpec>& jobs) {
  std::map<std::string, double> f;
  for (const auto& j : jobs) f[j.cls] += 1.0 / static_cast<double>(jobs.size());
  return f;
}

TEST(DlJobGen, ClassFrequenciesFollowTheMix) {
  const auto jobs = GenOk(Gen(3000, 9));
  auto f = Frequencies(jobs);
  EXPECT_NEAR(f["vgg16"], 0.212, 0.03);
  EXPECT_NEAR(f["resnet50"], 0.212, 0.03);
  EXPECT_NEAR(f["squeezenet"], 0.212, 0.03);
  EXPECT_NEAR(f["neumf"], 0.182, 0.03);
  EXPECT_NEAR(f["lstm"], 0.182, 0.03);
  auto g = Frequencies(GenOk(Gen(3000, 9, "vgg16=1,lstm=3")));
  EXPECT_EQ(g.size(), 2U);
  EXPECT_NEAR(g["lstm"], 0.75, 0.03);
  EXPECT_NEAR(g["vgg16"], 0.25, 0.03);
}

TEST(DlJobGen, LoadTwoHalvesEverySubmitTime) {
  JobGenOptions g = Gen(300, 3);
  const auto one = GenOk(g);
  g.load = 2;
  const auto two = GenOk(g);
  ASSERT_EQ(one.size(), two.size());
  for (std::size_t i = 0; i < one.size(); ++i) {
    EXPECT_EQ(one[i].cls, two[i].cls) << one[i].id;
    EXPECT_EQ(one[i].gpu_mib, two[i].gpu_mib) << one[i].id;
    EXPECT_NEAR(static_cast<double>(two[i].submit_us), static_cast<double>(one[i].submit_us) / 2,
                1.0)
        << one[i].id;
  }
  EXPECT_GT(one.back().submit_us, 0);
}

TEST(DlJobGen, MemoryIsWholeGibibytesInRangeAndCoversTheClassNeed) {
  const auto jobs = GenOk(Gen(3000, 4));
  std::map<std::string, std::set<core::MiB>> seen;
  for (const auto& j : jobs) {
    const policy::ClassProfile& c = *Assumed5Profile().Find(j.cls);
    EXPECT_GE(j.gpu_mib, 3 * 1024) << j.id;
    EXPECT_LE(j.gpu_mib, 7 * 1024) << j.id;
    EXPECT_GE(j.gpu_mib, c.MemoryMib(c.default_batch)) << j.id;
    EXPECT_EQ(j.gpu_mib % 512, 0) << j.id;
    seen[j.cls].insert(j.gpu_mib);
  }
  // neumf needs 2560 MiB, under the 3 GiB floor: every whole GiB of [3, 7] is drawn.
  EXPECT_EQ(seen["neumf"], (std::set<core::MiB>{3072, 4096, 5120, 6144, 7168}));
  // resnet50 needs 6144: raised to it or above.
  EXPECT_EQ(*seen["resnet50"].begin(), 6144);
}

TEST(DlJobGen, ATinyMemoryRangeIsRaisedToEachClassNeed) {
  JobGenOptions g = Gen(500, 4);
  g.min_gpu_mib = 1024;
  g.max_gpu_mib = 1024;
  const std::map<std::string, core::MiB> need{
      {"vgg16", 5120}, {"resnet50", 6144}, {"squeezenet", 3072}, {"neumf", 2560}, {"lstm", 3584}};
  for (const auto& j : GenOk(g)) EXPECT_EQ(j.gpu_mib, need.at(j.cls)) << j.id << " " << j.cls;
}

struct GapStats {
  double mean = 0;
  double scv = 0;  // squared coefficient of variation
};

GapStats Gaps(const std::vector<JobSpec>& jobs) {
  std::vector<double> gaps;
  for (std::size_t i = 1; i < jobs.size(); ++i) {
    gaps.push_back(static_cast<double>(jobs[i].submit_us - jobs[i - 1].submit_us) / 1e6);
  }
  GapStats s;
  for (double v : gaps) s.mean += v;
  s.mean /= static_cast<double>(gaps.size());
  double var = 0;
  for (double v : gaps) var += (v - s.mean) * (v - s.mean);
  var /= static_cast<double>(gaps.size());
  s.scv = var / (s.mean * s.mean);
  return s;
}

TEST(DlJobGen, PoissonAndBurstyGapsAverageOneOverTheRate) {
  JobGenOptions g = Gen(3000, 21);
  g.rate_per_s = 0.1;
  g.arrival = ArrivalKind::kPoisson;
  const GapStats poisson = Gaps(GenOk(g));
  EXPECT_NEAR(poisson.mean, 10.0, 1.0);
  EXPECT_NEAR(poisson.scv, 1.0, 0.3) << "exponential gaps";
  g.arrival = ArrivalKind::kBursty;
  const GapStats bursty = Gaps(GenOk(g));
  EXPECT_NEAR(bursty.mean, 10.0, 2.0);
  EXPECT_GT(bursty.scv, 2.0) << "bursts of short gaps, then long ones";
  g.load = 4;
  EXPECT_NEAR(Gaps(GenOk(g)).mean, 2.5, 0.5) << "load 4: a quarter of the gap";
}

TEST(DlJobGen, FileArrivalsUseTheGivenTimesDividedByTheLoad) {
  JobGenOptions g = Gen(3);
  g.arrival = ArrivalKind::kFile;
  g.submit_times = {0, 1000000, 2500001, 4000000};
  const auto one = GenOk(g);
  ASSERT_EQ(one.size(), 3U) << "the count, not the number of times";
  EXPECT_EQ(one[0].submit_us, 0);
  EXPECT_EQ(one[1].submit_us, 1000000);
  EXPECT_EQ(one[2].submit_us, 2500001);
  g.load = 2;
  const auto two = GenOk(g);
  ASSERT_EQ(two.size(), 3U);
  EXPECT_EQ(two[1].submit_us, 500000);
  EXPECT_EQ(two[2].submit_us, 1250001) << "rounded to the nearest microsecond (half away)";
  EXPECT_EQ(two[2].cls, one[2].cls);
}

struct GenErrorCase {
  const char* name;
  void (*edit)(JobGenOptions&);
  std::string message;
};
void PrintTo(const GenErrorCase& c, std::ostream* os) { *os << c.name; }

class DlJobGenError : public ::testing::TestWithParam<GenErrorCase> {};

TEST_P(DlJobGenError, NamesTheBadOption) {
  JobGenOptions g = Gen(10);
  GetParam().edit(g);
  auto jobs = GenerateJobs(g, Assumed5Profile());
  ASSERT_FALSE(jobs.has_value());
  EXPECT_EQ(jobs.error().message.rfind("jobgen: ", 0), 0U) << jobs.error().message;
  EXPECT_NE(jobs.error().message.find(GetParam().message), std::string::npos)
      << jobs.error().message;
}

INSTANTIATE_TEST_SUITE_P(
    Table, DlJobGenError,
    ::testing::Values(
        GenErrorCase{"a_zero_count", [](JobGenOptions& g) { g.count = 0; },
                     "the job count must be positive"},
        GenErrorCase{"a_negative_count", [](JobGenOptions& g) { g.count = -3; },
                     "the job count must be positive"},
        GenErrorCase{"a_zero_load", [](JobGenOptions& g) { g.load = 0; },
                     "the load factor must be positive"},
        GenErrorCase{"a_nan_load",
                     [](JobGenOptions& g) { g.load = std::numeric_limits<double>::quiet_NaN(); },
                     "the load factor must be positive"},
        GenErrorCase{"an_infinite_load",
                     [](JobGenOptions& g) { g.load = std::numeric_limits<double>::infinity(); },
                     "the load factor must be positive"},
        GenErrorCase{"a_zero_rate", [](JobGenOptions& g) { g.rate_per_s = 0; },
                     "the rate must be positive"},
        GenErrorCase{"too_few_file_times",
                     [](JobGenOptions& g) {
                       g.arrival = ArrivalKind::kFile;
                       g.submit_times = {0, 1};
                     },
                     "the arrival file has 2 times for 10 jobs"},
        GenErrorCase{"a_zero_memory_floor", [](JobGenOptions& g) { g.min_gpu_mib = 0; },
                     "the GPU memory range is empty"},
        GenErrorCase{"a_memory_ceiling_below_the_floor",
                     [](JobGenOptions& g) { g.max_gpu_mib = g.min_gpu_mib - 1; },
                     "the GPU memory range is empty"},
        GenErrorCase{"an_empty_mix", [](JobGenOptions& g) { g.mix.clear(); },
                     "the class mix is empty"},
        GenErrorCase{"an_unknown_class_in_the_mix",
                     [](JobGenOptions& g) {
                       g.mix.push_back({"bert", 1});
                     },
                     "unknown workload class 'bert'"},
        GenErrorCase{"more_jobs_than_the_limit", [](JobGenOptions& g) { g.count = 1'000'001; },
                     "the job count 1000001 is more than 1000000"},
        GenErrorCase{
            "an_infinite_rate",
            [](JobGenOptions& g) { g.rate_per_s = std::numeric_limits<double>::infinity(); },
            "the rate must be positive and finite (rate_per_s inf)"},
        GenErrorCase{
            "a_nan_rate",
            [](JobGenOptions& g) { g.rate_per_s = std::numeric_limits<double>::quiet_NaN(); },
            "the rate must be positive and finite (rate_per_s nan)"},
        // reliability-repros/jobgen-tiny-rate: "-9223372036854.-775808" was written, exit 0.
        GenErrorCase{"a_rate_so_small_that_times_overflow",
                     [](JobGenOptions& g) {
                       g.rate_per_s = 1e-300;
                       g.rate_name = "--rate";
                       g.load_name = "--load";
                     },
                     "past the largest submit time 999999999999.999999 s: --rate 1e-300 at --load "
                     "1 spaces jobs about 1e+300 s apart (raise --rate or --load)"},
        GenErrorCase{"a_load_so_small_that_times_overflow",
                     [](JobGenOptions& g) { g.load = 1e-300; }, "job j0002 would be submitted at"},
        GenErrorCase{"file_times_that_a_small_load_pushes_past_the_largest",
                     [](JobGenOptions& g) {
                       g.arrival = ArrivalKind::kFile;
                       g.submit_times.assign(10, 999'999'999'999'000'000);
                       g.load = 0.5;
                     },
                     "job j0001: the submit time 999999999999.000000 s at load 0.5 passes the "
                     "largest submit time"},
        GenErrorCase{
            "a_memory_range_past_a_gpu",
            [](JobGenOptions& g) { g.max_gpu_mib = std::numeric_limits<core::MiB>::max(); },
            "the GPU memory range ends past 4294967296 MiB"},
        GenErrorCase{"weights_that_add_up_to_infinity",
                     [](JobGenOptions& g) {
                       g.mix = {{"vgg16", 1e308}, {"lstm", 1e308}};
                     },
                     "the weights of the class mix add up to infinity"},
        GenErrorCase{"a_nan_weight",
                     [](JobGenOptions& g) {
                       g.mix = {{"vgg16", std::numeric_limits<double>::quiet_NaN()}};
                     },
                     "the weight of class 'vgg16' is not a finite number > 0"}),
    test::CaseName());

TEST(DlJobGen, TheLastRepresentableSubmitTimeIsAccepted) {
  JobGenOptions g = Gen(2);
  g.arrival = ArrivalKind::kFile;
  g.submit_times = {0, kMaxSubmitUs};
  const auto jobs = GenOk(g);
  ASSERT_EQ(jobs.size(), 2U);
  EXPECT_EQ(FormatSeconds(jobs[1].submit_us), "999999999999.999999");
  std::stringstream text;
  WriteJobs(text, jobs);
  EXPECT_TRUE(ReadJobs(text, "round-trip", Assumed5Profile()).has_value())
      << "what jobgen writes, simulate reads";
}

// ---------------------------------------------------------------------------------------------
// Load factors on a job list.

TEST(DlScaleSubmitTimes, DividesByTheLoadRoundingToTheMicrosecond) {
  std::vector<JobSpec> jobs{{"a", "vgg16", 0, 6144}, {"b", "vgg16", 2500001, 6144}};
  auto two = ScaleSubmitTimes(jobs, 2);
  ASSERT_TRUE(two.has_value()) << two.error().message;
  EXPECT_EQ((*two)[0].submit_us, 0);
  EXPECT_EQ((*two)[1].submit_us, 1250001) << "half away from zero";
  EXPECT_EQ((*two)[1].id, "b");
}

// reliability-repros/dl-jobs-submit-overflow: 999999999999.999999 s at load 0.001 overflowed
// int64 microseconds, then the run blamed the cluster ("never ran: no GPU can take it").
TEST(DlScaleSubmitTimes, ATimePushedPastTheLargestNamesTheJobAndItsSubmitTime) {
  std::vector<JobSpec> jobs{{"j1", "lstm", 0, 8192}, {"j2", "lstm", kMaxSubmitUs, 8192}};
  auto r = ScaleSubmitTimes(jobs, 0.001);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().message,
            "job 'j2': submit time 999999999999.999999 s at load 0.001 becomes 1e+15 s, past the "
            "largest submit time 999999999999.999999 s");
  for (double load : {0.0, -1.0, std::numeric_limits<double>::quiet_NaN(),
                      std::numeric_limits<double>::infinity()}) {
    EXPECT_FALSE(ScaleSubmitTimes(jobs, load).has_value()) << load;
  }
  EXPECT_TRUE(ScaleSubmitTimes(jobs, 1.0).has_value());
}

TEST(DlJobs, AListOfMoreJobsThanTheLimitIsRefusedAtTheFirstRowPastIt) {
  std::string text = kHeader;
  text.reserve((kMaxDlJobs + 2) * 24);
  for (std::size_t i = 0; i <= kMaxDlJobs; ++i) {
    text += test::Numbered("j", static_cast<std::int64_t>(i));
    text += ",lstm,0,8192\n";
  }
  std::istringstream in(text);
  auto jobs = ReadJobs(in, "jobs.csv", Assumed5Profile());
  ASSERT_FALSE(jobs.has_value());
  EXPECT_EQ(jobs.error().message,
            "jobs.csv:1000002: more than 1000000 jobs (the most a job list may hold)");
}

TEST(DlProfile, AFolderOrAnOversizeFileIsRefusedByName) {
  test::ScratchDir dir;
  EXPECT_EQ(LoadProfile(dir.path().string()).error().message,
            dir.path().string() + ": cannot open: is a directory (expected a file)");
  const std::string big = dir.Write("big.json", std::string(kMaxProfileBytes + 1, ' '));
  EXPECT_EQ(LoadProfile(big).error().message, big + ": cannot open: larger than 16777216 bytes");
}

// ---------------------------------------------------------------------------------------------
// Submit-time files.

TEST(DlSubmitTimes, ReadsTimesSkippingCommentsAndBlankLines) {
  test::ScratchDir dir;
  const std::string path =
      dir.Write("t.txt", "# submit times\n0\n1.5\n\n   \n1.5\r\n2.000001  # the last one\n");
  auto t = LoadSubmitTimes(path);
  ASSERT_TRUE(t.has_value()) << t.error().message;
  EXPECT_EQ(*t, (std::vector<core::Micros>{0, 1500000, 1500000, 2000001}));
}

struct TimesErrorCase {
  const char* name;
  const char* text;
  std::string message;  // after "<path>"
};
void PrintTo(const TimesErrorCase& c, std::ostream* os) { *os << c.name; }

class DlSubmitTimesError : public ::testing::TestWithParam<TimesErrorCase> {};

TEST_P(DlSubmitTimesError, NamesTheFileAndLine) {
  test::ScratchDir dir;
  const std::string path = dir.Write("t.txt", GetParam().text);
  auto t = LoadSubmitTimes(path);
  ASSERT_FALSE(t.has_value());
  EXPECT_NE(t.error().message.find(path + GetParam().message), std::string::npos)
      << t.error().message;
}

INSTANTIATE_TEST_SUITE_P(
    Table, DlSubmitTimesError,
    ::testing::Values(TimesErrorCase{"a_decreasing_time", "1\n2\n# comment\n1.5\n",
                                     ":4: submit times must not decrease"},
                      TimesErrorCase{"a_bad_number", "1\nabc\n",
                                     ":2: 'abc' is not a non-negative number"},
                      TimesErrorCase{"a_negative_time", "-1\n", ":1: '-1'"},
                      TimesErrorCase{"seven_decimals", "0\n\n1.0000001\n", ":3: '1.0000001'"},
                      TimesErrorCase{"only_comments", "# nothing\n\n", ": no times"}),
    test::CaseName());

TEST(DlSubmitTimes, ParseSubmitTimesReadsAStreamAndBoundsItsLength) {
  std::istringstream in("0\n1.5 # a comment\n\n2\n");
  auto t = ParseSubmitTimes(in, "times");
  ASSERT_TRUE(t.has_value()) << t.error().message;
  EXPECT_EQ(*t, (std::vector<core::Micros>{0, 1500000, 2000000}));
  std::string many;
  for (std::size_t i = 0; i <= kMaxDlJobs; ++i) many += "0\n";
  std::istringstream big(many);
  auto r = ParseSubmitTimes(big, "times");
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().message,
            "times:1000001: more than 1000000 times (the most jobs a list holds)");
}

TEST(DlSubmitTimes, NamesAMissingFile) {
  test::ScratchDir dir;
  const std::string path = (dir.path() / "absent.txt").string();
  auto t = LoadSubmitTimes(path);
  ASSERT_FALSE(t.has_value());
  EXPECT_NE(t.error().message.find(path + ": cannot open"), std::string::npos) << t.error().message;
}

}  // namespace
}  // namespace gpumux::sim
