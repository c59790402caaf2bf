// Wall-clock times as text: the one place that formats and parses them (grants, node locks,
// requeue annotations, run records, logs and file names). Pure functions of their arguments:
// the caller reads the clock (core has no globals), e.g. with UnixMillis below at its edge.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "gpumux/core/result.h"

namespace gpumux::core {

// unix seconds -> RFC 3339 UTC, "2026-11-21T10:00:00Z".
std::string FormatRfc3339(std::int64_t unix_seconds);
// unix milliseconds -> RFC 3339 UTC with milliseconds, "2026-11-21T10:00:00.123Z" (before 1970
// too: -1 ms is "1969-12-31T23:59:59.999Z").
std::string FormatRfc3339Millis(std::int64_t unix_ms);
// unix seconds formatted in UTC by a strftime(3) pattern, e.g. "run-%Y%m%d-%H%M%S"; at most
// 255 characters of output.
std::string FormatUtc(std::int64_t unix_seconds, const char* strftime_pattern);
// RFC 3339 UTC ("...Z", "...z" or "...+00:00"; fractional seconds ignored) -> unix seconds.
// Error quotes the text.
Result<std::int64_t> ParseRfc3339(std::string_view text);

// A time point of the system clock as unix milliseconds (for the formatters above).
inline std::int64_t UnixMillis(std::chrono::system_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

}  // namespace gpumux::core
