#include "gpumux/k8s/grant.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>

namespace gpumux::k8s {
namespace {

TEST(Rfc3339, RoundTripsUnixSeconds) {
  EXPECT_EQ(FormatRfc3339(0), "1970-01-01T00:00:00Z");
  auto parsed = ParseRfc3339("2026-11-21T10:00:00Z");
  ASSERT_TRUE(parsed.has_value()) << parsed.error().message;
  EXPECT_EQ(FormatRfc3339(*parsed), "2026-11-21T10:00:00Z");
}

TEST(Rfc3339, NowWithMillisecondsIsTheWallClockInUtc) {
  const auto before = std::chrono::system_clock::now();
  const std::string now = NowRfc3339Millis();
  ASSERT_EQ(now.size(), 24u) << now;  // 2026-11-21T10:00:00.123Z
  EXPECT_EQ(now[19], '.');
  EXPECT_EQ(now.back(), 'Z');
  auto parsed = ParseRfc3339(now);
  ASSERT_TRUE(parsed.has_value()) << parsed.error().message;
  const auto secs =
      std::chrono::duration_cast<std::chrono::seconds>(before.time_since_epoch()).count();
  EXPECT_GE(*parsed, secs);
  EXPECT_LE(*parsed, secs + 5);
}

}  // namespace
}  // namespace gpumux::k8s
