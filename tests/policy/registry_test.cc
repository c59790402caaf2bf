#include "gpumux/policy/registry.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "tests/testing/policy_harness.h"

namespace gpumux::policy {
namespace {

TEST(Registry, TheStudysSixComeFirstInItsOrderThenEachFamilyTogether) {
  // The FGD study's policies, as FGD-PROTOCOL.md numbers them (01-Random ... 06-FGD).
  EXPECT_EQ(FgdStudyPolicies(), (std::vector<std::string>{"random", "dotprod", "gpu-clustering",
                                                          "gpu-packing", "best-fit", "fgd"}));
  const std::vector<std::string> names = BuiltinPolicies().names();
  EXPECT_EQ(std::vector<std::string>(names.begin(), names.begin() + 6), FgdStudyPolicies());
  // A report groups a family's lines: each family is one run of entries.
  std::vector<Family> seen;
  for (const PolicyEntry& e : BuiltinPolicies().entries()) {
    if (seen.empty() || seen.back() != e.family) {
      EXPECT_EQ(std::count(seen.begin(), seen.end(), e.family), 0)
          << e.name << " splits its family";
      seen.push_back(e.family);
    }
  }
}

TEST(Registry, EveryEntryDescribesItsPolicyWholly) {
  for (const PolicyEntry& e : BuiltinPolicies().entries()) {
    SCOPED_TRACE(e.name);
    EXPECT_FALSE(e.explanation.empty());
    EXPECT_LE(e.explanation.size(), 400U) << "a legend, not an essay";
    EXPECT_EQ(e.colour.size(), 7U);
    EXPECT_EQ(e.colour[0], '#');
    EXPECT_EQ(e.needs_profile, e.family == Family::kColocation) << "co-location needs a profile";
    EXPECT_EQ(e.For(Workload::kTrainingJobs),
              e.family == Family::kColocation || e.name == "exclusive");
    for (const Knob& k : e.knobs) {
      SCOPED_TRACE(k.name);
      EXPECT_FALSE(k.config_key.empty());
      EXPECT_FALSE(k.help.empty());
      EXPECT_LT(k.min, k.max);
      EXPECT_FALSE(k.Check(k.default_value).has_value()) << "the default is in range";
      EXPECT_TRUE(k.Check(k.max + 1).has_value());
      EXPECT_TRUE(k.Check(k.min_exclusive ? k.min : k.min - 1).has_value());
    }
  }
}

TEST(Registry, MakeGivesAPolicyItsKnobDefaultsAndTheValuesGiven) {
  const Knob* fraction =
      BuiltinPolicies().Find("fgd-sat-reserve")->FindKnob("reserve-idle-fraction");
  ASSERT_NE(fraction, nullptr);
  auto by_default = BuiltinPolicies().Make("fgd-sat-reserve", {});
  ASSERT_TRUE(by_default.has_value());
  EXPECT_EQ((*by_default)->HoldLimitSeconds(), 600);
  PolicyContext context;
  context.knobs["reserve-max-wait-seconds"] = 30;
  auto given = BuiltinPolicies().Make("fgd-sat-reserve", context);
  ASSERT_TRUE(given.has_value());
  EXPECT_EQ((*given)->HoldLimitSeconds(), 30);
  EXPECT_EQ(BuiltinPolicies().PoliciesWithKnob("reserve-idle-fraction"), "fgd-sat-reserve");
  EXPECT_EQ(*fraction->Check(0), "--reserve-idle-fraction must be in (0, 1]");
}

TEST(Registry, EveryBuiltinMakesAPolicyOfItsOwnNameWithASummary) {
  for (const PolicyEntry& e : BuiltinPolicies().entries()) {
    SCOPED_TRACE(e.name);
    EXPECT_FALSE(e.summary.empty());
    EXPECT_EQ(e.summary.find('\n'), std::string::npos) << "one line";
    auto made = BuiltinPolicies().Make(e.name, {});
    ASSERT_TRUE(made.has_value()) << made.error().message;
    ASSERT_NE(*made, nullptr);
    EXPECT_EQ((*made)->name(), e.name);
    EXPECT_EQ(BuiltinPolicies().Find(e.name), &e);
  }
}

TEST(Registry, ARenamedPolicyIsFoundByItsOldName) {
  EXPECT_EQ(Registry::Canonical("gpumux"), "least-delay");
  EXPECT_EQ(Registry::Canonical("fgd"), "fgd");
  EXPECT_EQ(BuiltinPolicies().Find("gpumux"), BuiltinPolicies().Find("least-delay"));
  auto made = BuiltinPolicies().Make("gpumux", {});
  ASSERT_TRUE(made.has_value()) << made.error().message;
  EXPECT_EQ((*made)->name(), "least-delay");
  for (const auto& name : BuiltinPolicies().names()) EXPECT_NE(name, "gpumux");
}

TEST(Registry, MakingAnUnknownPolicyNamesEveryKnownOne) {
  auto made = BuiltinPolicies().Make("nosuch", {});
  ASSERT_FALSE(made.has_value());
  EXPECT_EQ(made.error().code, core::ErrorCode::kNotFound);
  const std::string& m = made.error().message;
  EXPECT_NE(m.find("unknown policy 'nosuch'"), std::string::npos) << m;
  for (const auto& name : BuiltinPolicies().names()) {
    EXPECT_NE(m.find(name), std::string::npos) << name << " missing from: " << m;
  }
  EXPECT_EQ(BuiltinPolicies().Find("nosuch"), nullptr);
  EXPECT_EQ(BuiltinPolicies().Find(""), nullptr);
}

TEST(Registry, AddingAPolicyIsOneCall) {
  Registry r;
  r.Add({"scripted",
         "a fake",
         "a fake for the test",
         Workload::kPods,
         Family::kPacking,
         "#123456",
         false,
         false,
         {},
         [](const PolicyContext&) {
           return std::make_unique<test::ScriptedPolicy>(
               [](const Cycle&, const core::NodeView&) { return std::int64_t{1}; });
         }});
  EXPECT_EQ(r.names(), std::vector<std::string>{"scripted"});
  auto made = r.Make("scripted", {});
  ASSERT_TRUE(made.has_value());
  EXPECT_EQ((*made)->name(), "scripted");
  auto unknown = r.Make("fgd", {});
  ASSERT_FALSE(unknown.has_value());
  EXPECT_NE(unknown.error().message.find("(known: scripted)"), std::string::npos);
}

}  // namespace
}  // namespace gpumux::policy
