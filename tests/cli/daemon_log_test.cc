// The daemons' log (src/cli/daemon_log.h): the text format every daemon wrote before levels
// existed, JSON lines that parse, levels, escaping, and whole lines from many threads.
#include "src/cli/daemon_log.h"

#include <gtest/gtest.h>

#include <chrono>
#include <ctime>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace gpumux::cli {
namespace {

using core::LogLevel;

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// Seconds since the epoch of "YYYY-MM-DDTHH:MM:SS.mmmZ" (UTC), or -1.
double ParseUtc(const std::string& text) {
  std::tm tm{};
  int ms = 0;
  if (std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d.%3dZ", &tm.tm_year, &tm.tm_mon,
                  &tm.tm_mday, &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &ms) != 7) {
    return -1;
  }
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  return static_cast<double>(timegm(&tm)) + ms / 1000.0;
}

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

TEST(DaemonLog, TextLinesCarryTheLevelAndTheFieldsAfterTheMessage) {
  std::ostringstream err;
  const core::Logger log = MakeDaemonLogger(err, "extender", {});
  log("serving policy fgd");
  log.Warn("list failed: 500");
  log.Info("job registered", {{"job", "ns/p/c"}, {"caller", "pid 4 (uid 0)"}, {"gpu", ""}});
  const auto lines = Lines(err.str());
  ASSERT_EQ(lines.size(), 3u) << err.str();
  const std::regex stamp(R"(^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z INFO  gpumux extender: )");
  EXPECT_TRUE(std::regex_search(lines[0], stamp)) << lines[0];
  EXPECT_EQ(lines[0].substr(24), " INFO  gpumux extender: serving policy fgd");
  EXPECT_EQ(lines[1].substr(24), " WARN  gpumux extender: list failed: 500");
  EXPECT_EQ(lines[2].substr(24),
            " INFO  gpumux extender: job registered job=ns/p/c caller=\"pid 4 (uid 0)\" gpu=\"\"");
  EXPECT_NEAR(ParseUtc(lines[0].substr(0, 24)), NowSeconds(), 5.0) << "UTC, not local time";
}

TEST(DaemonLog, JsonIsOneObjectPerLineWithTimeLevelDaemonAndMessage) {
  std::ostringstream err;
  const core::Logger log =
      MakeDaemonLogger(err, "device-plugin", {LogFormat::kJson, LogLevel::kDebug});
  log.Debug("Allocate gpumux.io/gpu: served pod default/a container main");
  log.Info("registered gpumux.io/gpu (4 devices)");
  log.Warn("listing GPUs failed: NVML says \"Unknown Error\"");
  log.Error("cannot start: C:\\path\n\tnext line \x01 end");
  const auto lines = Lines(err.str());
  ASSERT_EQ(lines.size(), 4u) << err.str();
  const std::vector<std::pair<std::string, std::string>> want = {
      {"debug", "Allocate gpumux.io/gpu: served pod default/a container main"},
      {"info", "registered gpumux.io/gpu (4 devices)"},
      {"warn", "listing GPUs failed: NVML says \"Unknown Error\""},
      {"error", "cannot start: C:\\path\n\tnext line \x01 end"}};
  const std::regex rfc3339(R"(^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$)");
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const nlohmann::json j = nlohmann::json::parse(lines[i], nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << "not JSON: " << lines[i];
    ASSERT_TRUE(j.is_object());
    const std::string time = j.value("time", "");
    EXPECT_TRUE(std::regex_match(time, rfc3339)) << time;
    EXPECT_NEAR(ParseUtc(time), NowSeconds(), 5.0) << time;
    EXPECT_EQ(j.value("level", ""), want[i].first);
    EXPECT_EQ(j.value("daemon", ""), "device-plugin");
    EXPECT_EQ(j.value("msg", ""), want[i].second);
  }
}

// Kubernetes' structured logging: the fields are keys of the object, not text in msg; a
// prefixed logger (a module's) keeps them.
TEST(DaemonLog, JsonLinesCarryTheFieldsAsKeys) {
  std::ostringstream err;
  const core::Logger log =
      MakeDaemonLogger(err, "coordinator", {LogFormat::kJson, LogLevel::kInfo}).Prefixed("");
  log.Info("window measured",
           {{"gpu", "GPU-0"}, {"set", "lstm+resnet"}, {"slowdown", "1.2 \"x\""}});
  const auto lines = Lines(err.str());
  ASSERT_EQ(lines.size(), 1u);
  const nlohmann::json j = nlohmann::json::parse(lines[0], nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << lines[0];
  EXPECT_EQ(j.value("msg", ""), "window measured");
  EXPECT_EQ(j.value("gpu", ""), "GPU-0");
  EXPECT_EQ(j.value("set", ""), "lstm+resnet");
  EXPECT_EQ(j.value("slowdown", ""), "1.2 \"x\"");
  EXPECT_EQ(j.value("level", ""), "info");
}

TEST(DaemonLog, TheLevelLeavesOutTheLinesBelowIt) {
  const std::vector<std::pair<LogLevel, std::vector<std::string>>> cases = {
      {LogLevel::kDebug, {"d", "i", "w", "e"}},
      {LogLevel::kInfo, {"i", "w", "e"}},
      {LogLevel::kWarn, {"w", "e"}},
      {LogLevel::kError, {"e"}},
  };
  for (const auto& [level, expected] : cases) {
    std::ostringstream err;
    const core::Logger log = MakeDaemonLogger(err, "coordinator", {LogFormat::kJson, level});
    log.Debug("d");
    log.Info("i");
    log.Warn("w");
    log.Error("e");
    std::vector<std::string> got;
    for (const std::string& line : Lines(err.str())) {
      got.push_back(nlohmann::json::parse(line).value("msg", ""));
    }
    EXPECT_EQ(got, expected) << core::LogLevelName(level);
    EXPECT_EQ(log.Enabled(LogLevel::kDebug), level == LogLevel::kDebug);
  }
}

TEST(DaemonLog, InvalidUtf8BecomesTheReplacementCharacterAndValidUtf8Stays) {
  std::ostringstream err;
  const core::Logger log = MakeDaemonLogger(err, "extender", {LogFormat::kJson, LogLevel::kInfo});
  log("GPU \"Tesla T4\" \xE2\x9C\x93 bad: \xFF\xC3 end \xF0\x9F\x98\x80");
  const nlohmann::json j = nlohmann::json::parse(Lines(err.str()).at(0), nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << err.str();
  EXPECT_EQ(j.value("msg", ""),
            "GPU \"Tesla T4\" \xE2\x9C\x93 bad: \xEF\xBF\xBD\xEF\xBF\xBD end \xF0\x9F\x98\x80");
}

TEST(DaemonLog, LinesFromManyThreadsStayWhole) {
  std::ostringstream err;
  const core::Logger log = MakeDaemonLogger(err, "extender", {LogFormat::kJson, LogLevel::kInfo});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&log, t] {
      for (int i = 0; i < 200; ++i)
        log("thread " + std::to_string(t) + " line " + std::to_string(i));
    });
  }
  for (auto& th : threads) th.join();
  const auto lines = Lines(err.str());
  ASSERT_EQ(lines.size(), 800u);
  for (const std::string& line : lines) {
    ASSERT_FALSE(nlohmann::json::parse(line, nullptr, false).is_discarded()) << line;
  }
}

TEST(DaemonLog, FlagValuesAreParsedOrRefusedByName) {
  EXPECT_EQ(ParseLogFormat("text"), LogFormat::kText);
  EXPECT_EQ(ParseLogFormat("json"), LogFormat::kJson);
  ASSERT_FALSE(ParseLogFormat("JSON"));
  EXPECT_EQ(ParseLogFormat("yaml").error().message, "'yaml' is not a log format: text or json");
  EXPECT_EQ(ParseLogLevel("debug"), LogLevel::kDebug);
  EXPECT_EQ(ParseLogLevel("warn"), LogLevel::kWarn);
  EXPECT_EQ(ParseLogLevel("warning"), LogLevel::kWarn);
  EXPECT_EQ(ParseLogLevel("error"), LogLevel::kError);
  EXPECT_EQ(ParseLogLevel("trace").error().message,
            "'trace' is not a log level: debug, info, warn or error");
}

}  // namespace
}  // namespace gpumux::cli
