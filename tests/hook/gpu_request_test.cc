// hook::ParseGpuAsk and hook::FindEnv: what a container's environment asks for.
#include "gpumux/hook/gpu_request.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/testing/builders.h"

namespace gpumux::hook {
namespace {

struct AskCase {
  const char* name;
  std::vector<std::string> env;
  AskKind kind;
  int count;
  std::vector<std::string> listed;
  std::string source;
};

class ParseGpuAskTable : public ::testing::TestWithParam<AskCase> {};

TEST_P(ParseGpuAskTable, DecidesTheKindCountListAndSource) {
  const AskCase& c = GetParam();
  const auto ask = ParseGpuAsk(c.env);
  ASSERT_TRUE(ask.has_value()) << ask.error().message;
  EXPECT_EQ(ask->kind, c.kind);
  EXPECT_EQ(ask->count, c.count);
  EXPECT_EQ(ask->listed, c.listed);
  EXPECT_EQ(ask->source, c.source);
}

INSTANTIATE_TEST_SUITE_P(
    Table, ParseGpuAskTable,
    ::testing::Values(AskCase{"no_gpu_variable_asks_for_nothing",
                              {"PATH=/bin", "TERM=xterm"},
                              AskKind::kNone,
                              0,
                              {},
                              ""},
                      AskCase{
                          "an_empty_environment_asks_for_nothing", {}, AskKind::kNone, 0, {}, ""},
                      AskCase{"houdini_gpu_requested_reserves_n",
                              {"PATH=/bin", "HOUDINI_GPU_REQUESTED=2"},
                              AskKind::kReserve,
                              2,
                              {},
                              "HOUDINI_GPU_REQUESTED=2"},
                      AskCase{"houdini_gpu_request_is_an_alias",
                              {"HOUDINI_GPU_REQUEST=3"},
                              AskKind::kReserve,
                              3,
                              {},
                              "HOUDINI_GPU_REQUEST=3"},
                      AskCase{"gpumux_gpu_request_reserves_n",
                              {"GPUMUX_GPU_REQUEST=1"},
                              AskKind::kReserve,
                              1,
                              {},
                              "GPUMUX_GPU_REQUEST=1"},
                      AskCase{"spaces_around_the_count_are_ignored",
                              {"HOUDINI_GPU_REQUESTED= 2 "},
                              AskKind::kReserve,
                              2,
                              {},
                              "HOUDINI_GPU_REQUESTED= 2 "},
                      AskCase{"a_request_of_zero_asks_for_nothing",
                              {"HOUDINI_GPU_REQUESTED=0"},
                              AskKind::kNone,
                              0,
                              {},
                              "HOUDINI_GPU_REQUESTED=0"},
                      AskCase{"gpumux_request_wins_over_houdini_requested",
                              {"HOUDINI_GPU_REQUESTED=3", "GPUMUX_GPU_REQUEST=1"},
                              AskKind::kReserve,
                              1,
                              {},
                              "GPUMUX_GPU_REQUEST=1"},
                      AskCase{"houdini_requested_wins_over_houdini_request",
                              {"HOUDINI_GPU_REQUEST=3", "HOUDINI_GPU_REQUESTED=2"},
                              AskKind::kReserve,
                              2,
                              {},
                              "HOUDINI_GPU_REQUESTED=2"},
                      AskCase{"a_reservation_wins_over_visible_devices_all",
                              {"NVIDIA_VISIBLE_DEVICES=all", "HOUDINI_GPU_REQUESTED=1"},
                              AskKind::kReserve,
                              1,
                              {},
                              "HOUDINI_GPU_REQUESTED=1"},
                      AskCase{"a_reservation_wins_over_gpu_enabled",
                              {"HOUDINI_GPU_ENABLED=true", "HOUDINI_GPU_REQUESTED=2"},
                              AskKind::kReserve,
                              2,
                              {},
                              "HOUDINI_GPU_REQUESTED=2"},
                      AskCase{"a_zero_request_wins_over_visible_devices_all",
                              {"NVIDIA_VISIBLE_DEVICES=all", "HOUDINI_GPU_REQUESTED=0"},
                              AskKind::kNone,
                              0,
                              {},
                              "HOUDINI_GPU_REQUESTED=0"},
                      AskCase{"the_last_entry_of_a_variable_wins_as_in_execve",
                              {"HOUDINI_GPU_REQUESTED=4", "HOUDINI_GPU_REQUESTED=1"},
                              AskKind::kReserve,
                              1,
                              {},
                              "HOUDINI_GPU_REQUESTED=1"},
                      AskCase{"gpu_enabled_true_shares_every_gpu",
                              {"HOUDINI_GPU_ENABLED=true"},
                              AskKind::kAll,
                              0,
                              {},
                              "HOUDINI_GPU_ENABLED=true"},
                      AskCase{"gpu_enabled_is_case_insensitive",
                              {"HOUDINI_GPU_ENABLED=TRUE"},
                              AskKind::kAll,
                              0,
                              {},
                              "HOUDINI_GPU_ENABLED=TRUE"},
                      AskCase{"gpu_enabled_1_shares_every_gpu",
                              {"HOUDINI_GPU_ENABLED=1"},
                              AskKind::kAll,
                              0,
                              {},
                              "HOUDINI_GPU_ENABLED=1"},
                      AskCase{"gpu_enabled_false_asks_for_nothing",
                              {"HOUDINI_GPU_ENABLED=false"},
                              AskKind::kNone,
                              0,
                              {},
                              ""},
                      AskCase{"gpu_enabled_false_leaves_visible_devices_in_charge",
                              {"HOUDINI_GPU_ENABLED=false", "NVIDIA_VISIBLE_DEVICES=1"},
                              AskKind::kListed,
                              0,
                              {"1"},
                              "NVIDIA_VISIBLE_DEVICES=1"},
                      AskCase{"gpu_enabled_wins_over_a_visible_devices_list",
                              {"NVIDIA_VISIBLE_DEVICES=0", "HOUDINI_GPU_ENABLED=yes"},
                              AskKind::kAll,
                              0,
                              {},
                              "HOUDINI_GPU_ENABLED=yes"},
                      AskCase{"visible_devices_all_shares_every_gpu",
                              {"NVIDIA_VISIBLE_DEVICES=all"},
                              AskKind::kAll,
                              0,
                              {},
                              "NVIDIA_VISIBLE_DEVICES=all"},
                      AskCase{"visible_devices_none_asks_for_nothing",
                              {"NVIDIA_VISIBLE_DEVICES=none"},
                              AskKind::kNone,
                              0,
                              {},
                              "NVIDIA_VISIBLE_DEVICES=none"},
                      AskCase{"visible_devices_void_asks_for_nothing",
                              {"NVIDIA_VISIBLE_DEVICES=void"},
                              AskKind::kNone,
                              0,
                              {},
                              "NVIDIA_VISIBLE_DEVICES=void"},
                      AskCase{"visible_devices_empty_asks_for_nothing",
                              {"NVIDIA_VISIBLE_DEVICES="},
                              AskKind::kNone,
                              0,
                              {},
                              "NVIDIA_VISIBLE_DEVICES="},
                      AskCase{"visible_devices_indices_are_listed",
                              {"NVIDIA_VISIBLE_DEVICES=0,2"},
                              AskKind::kListed,
                              0,
                              {"0", "2"},
                              "NVIDIA_VISIBLE_DEVICES=0,2"},
                      AskCase{"visible_devices_uuids_are_listed",
                              {"NVIDIA_VISIBLE_DEVICES=GPU-aaaa,GPU-cccc"},
                              AskKind::kListed,
                              0,
                              {"GPU-aaaa", "GPU-cccc"},
                              "NVIDIA_VISIBLE_DEVICES=GPU-aaaa,GPU-cccc"},
                      AskCase{"visible_devices_items_are_trimmed_and_deduplicated",
                              {"NVIDIA_VISIBLE_DEVICES= 2 , 0,2"},
                              AskKind::kListed,
                              0,
                              {"2", "0"},
                              "NVIDIA_VISIBLE_DEVICES= 2 , 0,2"},
                      AskCase{"a_similar_variable_name_is_not_a_request",
                              {"HOUDINI_GPU_REQUESTED_X=2", "XHOUDINI_GPU_REQUESTED=2"},
                              AskKind::kNone,
                              0,
                              {},
                              ""}),
    test::CaseName());

struct BadCase {
  const char* name;
  std::vector<std::string> env;
  std::string message;  // the whole message
};

class ParseGpuAskErrors : public ::testing::TestWithParam<BadCase> {};

TEST_P(ParseGpuAskErrors, NamesTheVariableAndWhatWasExpected) {
  const BadCase& c = GetParam();
  const auto ask = ParseGpuAsk(c.env);
  ASSERT_FALSE(ask.has_value()) << "accepted " << ::testing::PrintToString(c.env);
  EXPECT_EQ(ask.error().code, core::ErrorCode::kInvalidArgument);
  EXPECT_EQ(ask.error().message, c.message);
}

INSTANTIATE_TEST_SUITE_P(
    Table, ParseGpuAskErrors,
    ::testing::Values(
        BadCase{"a_negative_count",
                {"HOUDINI_GPU_REQUESTED=-1"},
                "HOUDINI_GPU_REQUESTED=-1: expected a whole number of GPUs (0 or more)"},
        BadCase{"a_word_as_count",
                {"HOUDINI_GPU_REQUESTED=abc"},
                "HOUDINI_GPU_REQUESTED=abc: expected a whole number of GPUs (0 or more)"},
        BadCase{"an_empty_count",
                {"HOUDINI_GPU_REQUEST="},
                "HOUDINI_GPU_REQUEST=: expected a whole number of GPUs (0 or more)"},
        BadCase{"a_fractional_count",
                {"GPUMUX_GPU_REQUEST=1.5"},
                "GPUMUX_GPU_REQUEST=1.5: expected a whole number of GPUs (0 or more)"},
        BadCase{"a_count_too_long_to_be_a_gpu_count",
                {"HOUDINI_GPU_REQUESTED=99999999999999999999"},
                "HOUDINI_GPU_REQUESTED=99999999999999999999: expected a whole number of GPUs (0 "
                "or more)"},
        BadCase{"a_bad_count_under_a_winning_name_is_not_hidden_by_a_good_one",
                {"GPUMUX_GPU_REQUEST=x", "HOUDINI_GPU_REQUESTED=1"},
                "GPUMUX_GPU_REQUEST=x: expected a whole number of GPUs (0 or more)"},
        BadCase{"gpu_enabled_neither_true_nor_false",
                {"HOUDINI_GPU_ENABLED=maybe"},
                "HOUDINI_GPU_ENABLED=maybe: expected true or false"},
        BadCase{"an_empty_item_in_the_visible_list",
                {"NVIDIA_VISIBLE_DEVICES=0,,2"},
                "NVIDIA_VISIBLE_DEVICES=0,,2: empty item in the list"},
        BadCase{"a_trailing_comma_in_the_visible_list",
                {"NVIDIA_VISIBLE_DEVICES=0,"},
                "NVIDIA_VISIBLE_DEVICES=0,: empty item in the list"}),
    test::CaseName());

TEST(FindEnv, ReturnsTheLastValueOfTheNameOrNull) {
  std::string storage;
  const std::vector<std::string> env{"A=1", "AB=2", "A=3", "B="};
  const std::string* a = FindEnv(env, "A", &storage);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(*a, "3");
  const std::string* b = FindEnv(env, "B", &storage);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(*b, "");
  EXPECT_EQ(FindEnv(env, "C", &storage), nullptr);
  EXPECT_EQ(FindEnv({"ABC"}, "ABC", &storage), nullptr) << "an entry without '=' is no value";
}

TEST(FindEnv, AValueMayContainEqualsSigns) {
  std::string storage;
  const std::string* v = FindEnv({"OPTS=a=b=c"}, "OPTS", &storage);
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(*v, "a=b=c");
}

}  // namespace
}  // namespace gpumux::hook
