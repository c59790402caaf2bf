// core::Logger: levels, the threshold, plain line sinks, prefixes and empty loggers.
#include "gpumux/core/log.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace gpumux::core {
namespace {

using Lines = std::vector<std::pair<LogLevel, std::string>>;

Logger Collecting(Lines& lines, LogLevel threshold) {
  return Logger(
      [&lines](LogLevel level, std::string_view line) { lines.emplace_back(level, line); },
      threshold);
}

TEST(Logger, LinesBelowTheThresholdAreDroppedBeforeTheSink) {
  Lines lines;
  const Logger log = Collecting(lines, LogLevel::kWarn);
  log.Debug("d");
  log.Info("i");
  log.Warn("w");
  log.Error("e");
  log("plain");  // a plain call is info
  EXPECT_EQ(lines, (Lines{{LogLevel::kWarn, "w"}, {LogLevel::kError, "e"}}));
  EXPECT_FALSE(log.Enabled(LogLevel::kInfo));
  EXPECT_TRUE(log.Enabled(LogLevel::kWarn));
}

TEST(Logger, FieldsReachAPlainSinkAsKeyValuesAfterTheMessage) {
  Lines lines;
  const Logger log = Collecting(lines, LogLevel::kDebug).Prefixed("coordinator: ");
  log.Info("job left", {{"job", "ns/p/c"}, {"reason", "its pod is gone"}, {"empty", ""}});
  log.Warn("odd", {{"v", "a\"b\nc"}, {"eq", "x=y"}});
  EXPECT_EQ(lines,
            (Lines{{LogLevel::kInfo,
                    "coordinator: job left job=ns/p/c reason=\"its pod is gone\" empty=\"\""},
                   {LogLevel::kWarn, "coordinator: odd v=\"a\\\"b\\nc\" eq=\"x=y\""}}));
}

TEST(Logger, APlainCallIsInfo) {
  Lines lines;
  const Logger log = Collecting(lines, LogLevel::kDebug);
  log("started");
  log.Write(LogLevel::kDebug, "detail");
  EXPECT_EQ(lines, (Lines{{LogLevel::kInfo, "started"}, {LogLevel::kDebug, "detail"}}));
}

TEST(Logger, APlainLineSinkReceivesTheLinesOfEveryLevel) {
  std::vector<std::string> seen;
  const Logger log = [&seen](std::string_view line) { seen.emplace_back(line); };
  ASSERT_TRUE(static_cast<bool>(log));
  log.Debug("a");
  log.Error("b");
  EXPECT_EQ(seen, (std::vector<std::string>{"a", "b"}));
}

TEST(Logger, EmptyLoggersDropEverythingAndSaySo) {
  const std::function<void(std::string_view)> none;
  const Logger from_empty_function = none;
  const Logger from_null = nullptr;
  const Logger by_default;
  for (const Logger* log : {&from_empty_function, &from_null, &by_default}) {
    EXPECT_FALSE(static_cast<bool>(*log));
    EXPECT_FALSE(log->Enabled(LogLevel::kError));
    log->Error("dropped");  // no sink: nothing happens
    EXPECT_FALSE(static_cast<bool>(log->Prefixed("p: ")));
  }
}

TEST(Logger, PrefixedKeepsTheLevelAndTheThreshold) {
  Lines lines;
  const Logger log = Collecting(lines, LogLevel::kInfo).Prefixed("reflector /api/v1/pods: ");
  log.Debug("hidden");
  log.Warn("list failed");
  EXPECT_EQ(lines, (Lines{{LogLevel::kWarn, "reflector /api/v1/pods: list failed"}}));
  EXPECT_FALSE(log.Enabled(LogLevel::kDebug));
}

TEST(Logger, LevelNamesAreThoseOfTheFlag) {
  EXPECT_EQ(LogLevelName(LogLevel::kDebug), "debug");
  EXPECT_EQ(LogLevelName(LogLevel::kInfo), "info");
  EXPECT_EQ(LogLevelName(LogLevel::kWarn), "warn");
  EXPECT_EQ(LogLevelName(LogLevel::kError), "error");
}

}  // namespace
}  // namespace gpumux::core
