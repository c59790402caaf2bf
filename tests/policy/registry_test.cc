#include "gpumux/policy/registry.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/testing/policy_harness.h"

namespace gpumux::policy {
namespace {

TEST(Registry, BuiltinsAreTheSixStudyPoliciesThenLoadBasedThenTheCoLocationPolicies) {
  const std::vector<std::string> expected{
      "random",  "dotprod", "gpu-clustering", "gpu-packing",     "best-fit",  "fgd",    "exclusive",
      "binpack", "spread",  "fgd-sat",        "fgd-sat-reserve", "first-fit", "iadeep", "gpumux"};
  EXPECT_EQ(BuiltinPolicies().names(), expected);
  EXPECT_EQ(FgdStudyPolicies(), std::vector<std::string>(expected.begin(), expected.begin() + 6));
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
  r.Add("scripted", "a fake", [](const PolicyContext&) {
    return std::make_unique<test::ScriptedPolicy>(
        [](const Cycle&, const core::NodeView&) { return std::int64_t{1}; });
  });
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
