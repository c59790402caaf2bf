#include "gpumux/core/time.h"

#include <gtest/gtest.h>

#include <chrono>

namespace gpumux::core {
namespace {

TEST(Rfc3339, RoundTripsUnixSeconds) {
  EXPECT_EQ(FormatRfc3339(0), "1970-01-01T00:00:00Z");
  auto parsed = ParseRfc3339("2026-11-21T10:00:00Z");
  ASSERT_TRUE(parsed.has_value()) << parsed.error().message;
  EXPECT_EQ(FormatRfc3339(*parsed), "2026-11-21T10:00:00Z");
}

TEST(Rfc3339, AcceptsFractionsAndTheZeroOffsetButNoOtherZone) {
  EXPECT_EQ(ParseRfc3339("2026-11-21T10:00:00.123Z").value(), 1795255200);
  EXPECT_EQ(ParseRfc3339("2026-11-21T10:00:00+00:00").value(), 1795255200);
  EXPECT_FALSE(ParseRfc3339("2026-11-21T10:00:00+01:00").has_value());
  EXPECT_FALSE(ParseRfc3339("yesterday").has_value());
}

TEST(Rfc3339, MillisecondsAreFloorDividedBefore1970) {
  EXPECT_EQ(FormatRfc3339Millis(1795255200123), "2026-11-21T10:00:00.123Z");
  EXPECT_EQ(FormatRfc3339Millis(0), "1970-01-01T00:00:00.000Z");
  EXPECT_EQ(FormatRfc3339Millis(-1), "1969-12-31T23:59:59.999Z");
}

TEST(Rfc3339, TheWallClockNowWithMillisecondsParsesBack) {
  const auto before = std::chrono::system_clock::now();
  const std::string now = FormatRfc3339Millis(UnixMillis(std::chrono::system_clock::now()));
  ASSERT_EQ(now.size(), 24u) << now;  // 2026-11-21T10:00:00.123Z
  auto parsed = ParseRfc3339(now);
  ASSERT_TRUE(parsed.has_value()) << parsed.error().message;
  const auto secs =
      std::chrono::duration_cast<std::chrono::seconds>(before.time_since_epoch()).count();
  EXPECT_GE(*parsed, secs);
  EXPECT_LE(*parsed, secs + 5);
}

TEST(FormatUtc, FollowsTheStrftimePattern) {
  EXPECT_EQ(FormatUtc(1795255200, "run-%Y%m%d-%H%M%S"), "run-20261121-100000");
}

}  // namespace
}  // namespace gpumux::core
