// Hand-written JSON strings: escaped as JSON requires, and always valid UTF-8.
#include "gpumux/core/json_text.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

namespace gpumux::core {
namespace {

TEST(JsonText, JsonEscapeEscapesWhatJsonRequires) {
  EXPECT_EQ(JsonEscape("plain"), "plain");
  EXPECT_EQ(JsonEscape("a\"b\\c"), "a\\\"b\\\\c");
  EXPECT_EQ(JsonEscape("\n\r\t\x1f\x7f"), "\\n\\r\\t\\u001f\\u007f");
  EXPECT_EQ(JsonEscape(std::string("nul\0x", 5)), "nul\\u0000x");
  EXPECT_EQ(JsonEscape("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD")
      << "a UTF-16 surrogate is not UTF-8";
  EXPECT_EQ(JsonEscape("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD") << "an overlong form";
}

TEST(JsonText, AppendJsonStringQuotesAndParsesBackToTheText) {
  for (const std::string& text : {std::string("node-1"), std::string("gpumux: \"a\" \\ b\n"),
                                  std::string("ctl\x01\x7f"), std::string("\xE2\x9C\x93 ok")}) {
    std::string out = "x";
    AppendJsonString(out, text);
    ASSERT_EQ(out[0], 'x');
    const nlohmann::json parsed = nlohmann::json::parse(out.substr(1), nullptr, false);
    ASSERT_TRUE(parsed.is_string()) << out;
    EXPECT_EQ(parsed.get<std::string>(), text);
  }
  std::string out;
  AppendJsonString(out, "bad \xFF");
  EXPECT_EQ(out, "\"bad \xEF\xBF\xBD\"") << "invalid UTF-8 becomes U+FFFD";
}

TEST(JsonText, TheLibrarysErrorsLoseTheirTagsAndKeepWhereAndWhat) {
  std::string what;
  try {
    const auto parsed = nlohmann::json::parse("{nope");
    what = parsed.dump();
  } catch (const nlohmann::json::exception& e) {
    what = e.what();
  }
  ASSERT_EQ(what.rfind("[json.exception.parse_error.101]", 0), 0u) << what;
  const std::string said = JsonErrorText(what);
  EXPECT_EQ(said.rfind("line 1, column 3: syntax error", 0), 0u) << said;
  EXPECT_EQ(JsonErrorText("[json.exception.type_error.302] type must be string, but is number"),
            "type must be string, but is number");
  EXPECT_EQ(JsonErrorText("a reason of our own"), "a reason of our own");
}

TEST(JsonText, Utf8TextHasNoBrokenSequenceAndNoControlCharacter) {
  EXPECT_TRUE(IsUtf8Text("GPU-1 NVIDIA H200 \u00e9\u4e2d"));
  EXPECT_TRUE(IsUtf8Text(""));
  EXPECT_FALSE(IsUtf8Text("Tesla\xff\xfe"));
  EXPECT_FALSE(IsUtf8Text("a\xc3"));  // half of \u00e9
  EXPECT_FALSE(IsUtf8Text("a\nb"));
  EXPECT_FALSE(IsUtf8Text("a\x7f"));
  EXPECT_FALSE(IsUtf8Text("\xed\xa0\x80"));  // a surrogate
}

TEST(JsonText, APrefixNeverCutsACharacterAndAlwaysDumps) {
  const std::string text = "GPU-a\u00e9\u00e9\u00e9\u00e9\u00e9";  // 5 + 5 x 2 bytes
  EXPECT_EQ(Utf8Prefix(text, 6), "GPU-a");
  EXPECT_EQ(Utf8Prefix(text, 7), "GPU-a\u00e9");
  EXPECT_EQ(Utf8Prefix(text, 100), text);
  EXPECT_EQ(Utf8Prefix("\u4e2d", 2), "");
  for (std::size_t n = 0; n <= text.size(); ++n) {
    EXPECT_NO_THROW((void)nlohmann::json(std::string(Utf8Prefix(text, n))).dump()) << n;
  }
}

}  // namespace
}  // namespace gpumux::core
