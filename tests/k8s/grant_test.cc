#include "gpumux/k8s/grant.h"

#include <gtest/gtest.h>

namespace gpumux::k8s {
namespace {

TEST(Rfc3339, RoundTripsUnixSeconds) {
  EXPECT_EQ(FormatRfc3339(0), "1970-01-01T00:00:00Z");
  auto parsed = ParseRfc3339("2026-11-21T10:00:00Z");
  ASSERT_TRUE(parsed.has_value()) << parsed.error().message;
  EXPECT_EQ(FormatRfc3339(*parsed), "2026-11-21T10:00:00Z");
}

}  // namespace
}  // namespace gpumux::k8s
