#include "gpumux/core/time.h"

#include <array>
#include <ctime>

namespace gpumux::core {

std::string FormatUtc(std::int64_t unix_seconds, const char* strftime_pattern) {
  const auto t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::array<char, 256> buf{};
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"  // the pattern is the caller's, by contract
  const std::size_t n = std::strftime(buf.data(), buf.size(), strftime_pattern, &tm);
#pragma GCC diagnostic pop
  return std::string(buf.data(), n);
}

std::string FormatRfc3339(std::int64_t unix_seconds) {
  return FormatUtc(unix_seconds, "%Y-%m-%dT%H:%M:%SZ");
}

std::string FormatRfc3339Millis(std::int64_t unix_ms) {
  // Floor division, so that a time before 1970 keeps a non-negative millisecond part.
  const std::int64_t seconds = unix_ms >= 0 ? unix_ms / 1000 : (unix_ms - 999) / 1000;
  const auto millis = static_cast<int>(unix_ms - seconds * 1000);
  std::string s = FormatUtc(seconds, "%Y-%m-%dT%H:%M:%S");
  s += '.';
  s += static_cast<char>('0' + millis / 100);
  s += static_cast<char>('0' + millis / 10 % 10);
  s += static_cast<char>('0' + millis % 10);
  s += 'Z';
  return s;
}

Result<std::int64_t> ParseRfc3339(std::string_view text) {
  std::tm tm{};
  const std::string s(text);
  const char* end = strptime(s.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (end == nullptr) {
    return MakeError(ErrorCode::kInvalidArgument, "not an RFC 3339 time: \"" + s + "\"");
  }
  if (*end == '.') {
    ++end;
    while (*end >= '0' && *end <= '9') ++end;
  }
  const std::string_view zone(end);
  if (zone != "Z" && zone != "+00:00" && zone != "z") {
    return MakeError(ErrorCode::kInvalidArgument,
                     "not an RFC 3339 UTC time (needs Z): \"" + s + "\"");
  }
  return static_cast<std::int64_t>(timegm(&tm));
}

}  // namespace gpumux::core
