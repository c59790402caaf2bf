#include "gpumux/core/json.h"

#include <gtest/gtest.h>

#include <string>

namespace gpumux::core {
namespace {

using nlohmann::json;

std::string Nested(std::size_t depth, const std::string& inner = "1") {
  return std::string(depth, '[') + inner + std::string(depth, ']');
}

TEST(ParseJson, RefusesTextNestedDeeperThanTheLimitBeforeParsingIt) {
  EXPECT_TRUE(ParseJson(Nested(kMaxJsonDepth), "body").has_value());
  const auto deep = ParseJson(Nested(100000), "body");
  ASSERT_FALSE(deep.has_value());
  EXPECT_EQ(deep.error().message, "body: nested deeper than 128 levels (at byte 128)");
  const auto objects = ParseJson(R"({"a":{"b":{"c":1}}})", "x", {.max_depth = 2});
  ASSERT_FALSE(objects.has_value());
  EXPECT_NE(objects.error().message.find("at byte 10"), std::string::npos);
}

TEST(ParseJson, BracketsInsideStringsAreNotNesting) {
  const std::string text = R"({"a":")" + std::string(1000, '[') + R"(\"[{"})";
  const auto v = ParseJson(text, "x", {.max_depth = 1});
  ASSERT_TRUE(v.has_value()) << v.error().message;
  EXPECT_EQ((*v)["a"].get<std::string>().size(), 1003u);
  // An escaped backslash ends before the quote: the string ends there.
  EXPECT_FALSE(JsonTooDeepAt(R"(["\\"])", 1).has_value());
  EXPECT_EQ(JsonTooDeepAt(R"(["\\",[]])", 1), std::optional<std::size_t>(6));
}

TEST(ParseJson, SaysWhatIsWrongWithoutThrowing) {
  const auto bad = ParseJson("{\"a\":", "the review");
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().message.rfind("the review: not JSON (line 1, column 6: ", 0), 0u)
      << bad.error().message;
  const auto big = ParseJson("[1,2,3]", "the body", {.max_bytes = 3});
  ASSERT_FALSE(big.has_value());
  EXPECT_EQ(big.error().message, "the body: larger than 3 bytes");
  EXPECT_FALSE(ParseJson("1 2", "x").has_value());
  const auto ordered = ParseJson<nlohmann::ordered_json>(R"({"b":1,"a":2})", "x");
  ASSERT_TRUE(ordered.has_value());
  EXPECT_EQ(ordered->begin().key(), "b");
}

TEST(ParseJson, RunsTheCallerCallback) {
  int keys = 0;
  const json::parser_callback_t count = [&](int, json::parse_event_t e, json&) {
    if (e == json::parse_event_t::key) ++keys;
    return true;
  };
  ASSERT_TRUE(ParseJson(R"({"a":1,"b":{"c":2}})", "x", {}, count).has_value());
  EXPECT_EQ(keys, 3);
}

TEST(JsonSummary, IsBoundedAndNeverWalksIn) {
  EXPECT_EQ(JsonSummary(json::parse("[1,[2],3]")), "an array of 3 values");
  EXPECT_EQ(JsonSummary(json::parse(R"({"a":1})")), "an object of 1 field");
  EXPECT_EQ(JsonSummary(json(-3)), "-3");
  EXPECT_EQ(JsonSummary(json(nullptr)), "null");
  EXPECT_EQ(JsonSummary(json("ab\"c")), R"("ab\"c")");
  const std::string s = JsonSummary(json(std::string(10000, 'x')), 8);
  EXPECT_EQ(s, R"("xxxxxxxx..." (10000 bytes))");
  // Cut whole characters only: "é" is two bytes.
  EXPECT_EQ(JsonSummary(json("aé"), 2), R"("a..." (3 bytes))");
}

TEST(JsonIntIn, ComparesInTheValuesOwnType) {
  EXPECT_EQ(JsonIntIn(json(5), 0, 10), std::optional<std::int64_t>(5));
  EXPECT_EQ(JsonIntIn(json(-1), 0, 10), std::nullopt);
  EXPECT_EQ(JsonIntIn(json(std::uint64_t{1} << 63), 0, INT64_MAX), std::nullopt);
  EXPECT_EQ(JsonIntIn(json((std::uint64_t{1} << 32) + 1), 0, 63), std::nullopt);
  EXPECT_EQ(JsonIntIn(json(1.0), 0, 10), std::nullopt);
  EXPECT_EQ(JsonIntIn(json("1"), 0, 10), std::nullopt);
  EXPECT_EQ(JsonIntIn(json(-5), -10, -1), std::optional<std::int64_t>(-5));
  EXPECT_EQ(JsonIntIn(json(5), -10, -1), std::nullopt);
}

TEST(JsonFields, ReadsTypedFieldsAndNamesTheirPathInErrors) {
  const json doc = json::parse(
      R"({"n":7,"big":18446744073709551615,"s":"abc","b":true,"d":0.5,"o":{},"a":[1,2],"z":null})");
  auto f = JsonFields<>::Of(doc, "spec.containers[2]");
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->Integer("n", 0, 10).value(), 7);
  EXPECT_EQ(f->Integer("n", 0, 5).error().message,
            "spec.containers[2].n: not an integer in 0..5, got 7");
  EXPECT_EQ(f->Integer("missing", 0, 5).error().message,
            "spec.containers[2].missing: not an integer in 0..5, missing");
  EXPECT_EQ(f->OptionalInteger("z", 0, 5).value(), std::nullopt) << "null is absent";
  EXPECT_FALSE(f->Integer("big", 0, INT64_MAX).has_value());
  EXPECT_EQ(f->OptionalUnsigned("big").value(), std::optional<std::uint64_t>(UINT64_MAX));
  EXPECT_EQ(f->String("s").value(), "abc");
  EXPECT_EQ(f->String("s", 2).error().message,
            R"(spec.containers[2].s: longer than 2 bytes, got "abc")");
  EXPECT_EQ(f->String("n").error().message, "spec.containers[2].n: not a string, got 7");
  EXPECT_TRUE(f->Bool("b").value());
  EXPECT_EQ(f->OptionalBool("missing").value(), std::nullopt);
  EXPECT_EQ(f->Number("d", 0, 1).value(), 0.5);
  EXPECT_FALSE(f->Number("d", 1, 2).has_value());
  EXPECT_FALSE(f->Number("s", 0, 1).has_value());
  EXPECT_NE(f->Object("o").value(), nullptr);
  EXPECT_EQ(f->OptionalObject("missing").value(), nullptr);
  EXPECT_EQ(f->Object("a").error().message,
            "spec.containers[2].a: not an object, got an array of 2 values");
  EXPECT_NE(f->Array("a", 2).value(), nullptr);
  EXPECT_EQ(f->Array("a", 1).error().message,
            "spec.containers[2].a: more than 1 value, got an array of 2 values");
  EXPECT_EQ(JsonFields<>::Of(json::parse("[[1]]"), "items[0]").error().message,
            "items[0]: not an object, got an array of 1 value");
  EXPECT_EQ(JsonPath("", "a"), "a");
  EXPECT_EQ(JsonPath("a", "[1]"), "a[1]");
}

}  // namespace
}  // namespace gpumux::core
