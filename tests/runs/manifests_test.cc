// Manifest text: multi-document YAML, JSON objects and Lists in; YAML and Lists out.
#include "gpumux/runs/manifests.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace gpumux::runs {
namespace {

using nlohmann::json;

TEST(ParseManifests, ReadsEveryYamlDocumentAndSkipsEmptyOnes) {
  const std::string text =
      "---\n"
      "apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\n"
      "---\n"
      "---\n"
      "# a comment only\n"
      "---\n"
      "apiVersion: batch/v1\nkind: Job\nmetadata: {name: b}\n";
  auto objects = ParseManifests(text, "x.yaml");
  ASSERT_TRUE(objects) << objects.error().message;
  ASSERT_EQ(objects->size(), 2u);
  EXPECT_EQ((*objects)[0]["metadata"]["name"], "a");
  EXPECT_EQ((*objects)[1]["kind"], "Job");
}

TEST(ParseManifests, TypesPlainScalarsByTheCoreSchemaAndKeepsQuotedOnesStrings) {
  const std::string text =
      "a: 8\nb: \"8\"\nc: '8'\nd: true\ne: 'true'\nf: ~\ng: 1.5\nh: yes\ni: 0x10\nj: -3\n"
      "k: --steps\nl: gpumux.io/gpu\nm: !!str 12\n";
  auto objects = ParseManifests(text, "x.yaml");
  ASSERT_TRUE(objects) << objects.error().message;
  const json& o = objects->front();
  EXPECT_EQ(o["a"], 8);
  EXPECT_EQ(o["b"], "8");
  EXPECT_EQ(o["c"], "8");
  EXPECT_EQ(o["d"], true);
  EXPECT_EQ(o["e"], "true");
  EXPECT_TRUE(o["f"].is_null());
  EXPECT_EQ(o["g"], 1.5);
  EXPECT_EQ(o["h"], "yes");
  EXPECT_EQ(o["i"], 16);
  EXPECT_EQ(o["j"], -3);
  EXPECT_EQ(o["k"], "--steps");
  EXPECT_EQ(o["l"], "gpumux.io/gpu");
  EXPECT_EQ(o["m"], "12");
}

TEST(ParseManifests, ExpandsJsonListsAndArraysAndReadsOneJsonObject) {
  auto list = ParseManifests(
      R"({"apiVersion":"v1","kind":"List","items":[{"kind":"Pod"},{"kind":"PodList","items":[{"kind":"Pod","x":1}]}]})",
      "l.json");
  ASSERT_TRUE(list) << list.error().message;
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[1]["x"], 1);
  auto one = ParseManifests(" {\"kind\":\"Pod\"}\n", "o.json");
  ASSERT_TRUE(one);
  EXPECT_EQ(one->size(), 1u);
  auto array = ParseManifests(R"([{"kind":"Pod"},{"kind":"Job"}])", "a.json");
  ASSERT_TRUE(array);
  EXPECT_EQ(array->size(), 2u);
}

// yaml-cpp 0.7's LoadAll loops forever on a document of "," (found by fuzz/manifests).
TEST(ParseManifests, AStrayCommaDocumentEnds) {
  auto r = ParseManifests("---\n,,,\nap\n", "in.yaml");
  EXPECT_TRUE(r.has_value() || !r.error().message.empty());
  auto r2 = ParseManifests(",", "in.yaml");
  EXPECT_TRUE(r2.has_value() || !r2.error().message.empty());
}

// UTF-8 text whose quoted scalar yaml-cpp turns into bytes that are not UTF-8 (found by
// fuzz/manifests: JSON, and so the API client, would throw on them).
TEST(ParseManifests, AStringYamlCppMakesNotUtf8IsRefused) {
  std::ifstream in(std::string(GPUMUX_SOURCE_DIR) + "/fuzz/corpus/manifests/crash-escape-not-utf8",
                   std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  ASSERT_FALSE(text.str().empty());
  auto r = ParseManifests(text.str(), "in.yaml");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("in.yaml:3:6: a string that is not UTF-8"), std::string::npos)
      << r.error().message;
}

TEST(ParseManifests, AnEmptyTextHasNoObjects) {
  auto none = ParseManifests("  \n\n", "-");
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->empty());
}

struct BadManifestCase {
  std::string name;
  std::string text;
  std::string message;
};

class ParseManifestsErrors : public ::testing::TestWithParam<BadManifestCase> {};

TEST_P(ParseManifestsErrors, NameTheSourceLineAndWhat) {
  auto r = ParseManifests(GetParam().text, "in.yaml");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find(GetParam().message), std::string::npos) << r.error().message;
}

INSTANTIATE_TEST_SUITE_P(
    Manifests, ParseManifestsErrors,
    ::testing::Values(
        BadManifestCase{"BadYamlNamesTheLine", "a: 1\nb: [1, 2\nc: 3\n", "in.yaml:"},
        BadManifestCase{"ARepeatedKeyIsRefused", "kind: Pod\nmetadata:\n  name: a\n  name: b\n",
                        "in.yaml:4:3: key \"name\" repeated"},
        BadManifestCase{"AListDocumentIsNotAnObject", "kind: Pod\n---\n- a\n- b\n",
                        "document 2 is a list, not an object"},
        BadManifestCase{"AScalarDocumentIsNotAnObject", "just text\n", "is a scalar"},
        BadManifestCase{"ListItemsMustBeAnArray", "kind: List\nitems: 3\n",
                        "\"items\" is not an array"},
        BadManifestCase{"AnInfinityCannotBeJson", "a: .inf\n", "cannot be written in JSON"},
        BadManifestCase{"AJsonListItemThatIsNoObject", R"({"kind":"List","items":[1]})",
                        "item 1 is a scalar"},
        BadManifestCase{"BytesThatAreNotUtf8", "kind: Pod\nmetadata: {name: \"a\xff\"}\n",
                        "in.yaml:2: not UTF-8 text"},
        BadManifestCase{"AnOverlongUtf8Form", "a: \xc0\xaf\n", "in.yaml:1: not UTF-8 text"},
        BadManifestCase{"ASequenceCutOff", "a: b\n\xe2\x82", "in.yaml:2: not UTF-8 text"},
        BadManifestCase{"ANumberTooLargeForADouble", "a: 1e400\n", "the number 1e400 is too large"},
        // Counted without the empty document before a leading "---"; lines of the whole text.
        BadManifestCase{"LinesAndDocumentsCountAcrossSeparators",
                        "---\nkind: Pod\n---\n\n# c\nkind: Job\nspec: [1,\n",
                        "in.yaml:8:1: end of sequence flow not found"},
        BadManifestCase{"AKeyLongerThanYamlCanWrite",
                        "{\"metadata\":{\"" + std::string(1001, 'k') + "\":1}}",
                        "a key longer than 1000 bytes (metadata.\"kkkk"},
        // Its start was cut in the middle of a character, which JSON cannot write: an abort.
        BadManifestCase{"ALongKeyOfTwoByteCharacters",
                        "{\"metadata\":{\"a" +
                            [] {
                              std::string k;
                              for (int i = 0; i < 600; ++i) k += "\xc3\xa9";
                              return k;
                            }() +
                            "\":1}}",
                        "a key longer than 1000 bytes (metadata.\"a\xc3\xa9"},
        BadManifestCase{"AKeyOfControlCharactersLongerWhenEscaped",
                        "{\"" + std::string(200, '\x15') + "\":1}", "a key longer than 1000"},
        BadManifestCase{"ADocumentNumberSkipsEmptyOnes", "---\n---\nkind: Pod\n---\n- x\n",
                        "in.yaml:5:1: document 2 is a list"}),
    [](const auto& test_case) { return test_case.param.name; });

TEST(ToYaml, QuotesWhatWouldReadBackAsAnotherTypeAndRoundTrips) {
  const json object = {
      {"apiVersion", "v1"},
      {"kind", "Pod"},
      {"metadata",
       {{"name", "j0001"},
        {"annotations",
         {{"gpumux.io/submit-at-s", "12.5"},
          {"a", "yes"},
          {"b", "true"},
          {"c", "null"},
          {"d", ""},
          {"e", "with: colon"},
          {"f", "quote\"and\\back\nline"},
          {"g", "2026-11-26"},
          {"h", "-1"},
          {"i", "#x"},
          {"j", "ünïcode"}}}}},
      {"spec",
       {{"containers", json::array({{{"name", "main"},
                                     {"command", json::array({"python3", "--steps", "1562", "-x"})},
                                     {"resources", {{"limits", {{"gpumux.io/gpu-mem", "8"}}}}},
                                     {"args", json::array()},
                                     {"env", json::array({{{"name", "A"}, {"value", "1"}}})}}})},
        {"nested", json::array({json::array({1, 2}), json::object()})},
        {"count", 3},
        {"ratio", 0.25},
        {"flag", false},
        {"none", nullptr}}}};
  const std::string yaml = ToYaml(object);
  EXPECT_NE(yaml.find("gpumux.io/gpu-mem: \"8\"\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("- --steps\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("- \"1562\"\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("a: \"yes\"\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("apiVersion: v1\n"), std::string::npos) << yaml;
  auto back = ParseManifests(yaml, "round-trip");
  ASSERT_TRUE(back) << back.error().message << "\n" << yaml;
  ASSERT_EQ(back->size(), 1u);
  EXPECT_EQ(back->front(), object) << yaml;
}

TEST(WriteYaml, SeparatesDocumentsAndReadsBackInOrder) {
  const std::vector<json> objects = {{{"kind", "Pod"}, {"rank", 1}},
                                     {{"kind", "Pod"}, {"rank", 2}}};
  std::ostringstream yaml;
  WriteYaml(yaml, objects);
  EXPECT_EQ(yaml.str(), "---\nkind: Pod\nrank: 1\n---\nkind: Pod\nrank: 2\n");
  auto back = ParseManifests(yaml.str(), "y");
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, objects);
  std::ostringstream list;
  WriteJsonList(list, objects);
  auto from_list = ParseManifests(list.str(), "l");
  ASSERT_TRUE(from_list);
  EXPECT_EQ(*from_list, objects);
  EXPECT_EQ(json::parse(list.str())["kind"], "List");
}

}  // namespace
}  // namespace gpumux::runs
