#include "src/cli/daemon_log.h"

#include <spdlog/logger.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/ostream_sink.h>

#include <cstdint>
#include <memory>
#include <utility>

namespace gpumux::cli {
namespace {

spdlog::level::level_enum ToSpdlog(core::LogLevel level) {
  switch (level) {
    case core::LogLevel::kDebug:
      return spdlog::level::debug;
    case core::LogLevel::kInfo:
      return spdlog::level::info;
    case core::LogLevel::kWarn:
      return spdlog::level::warn;
    case core::LogLevel::kError:
      return spdlog::level::err;
  }
  return spdlog::level::info;
}

std::string_view LevelName(spdlog::level::level_enum level) {
  switch (level) {
    case spdlog::level::trace:
    case spdlog::level::debug:
      return core::LogLevelName(core::LogLevel::kDebug);
    case spdlog::level::info:
      return core::LogLevelName(core::LogLevel::kInfo);
    case spdlog::level::warn:
      return core::LogLevelName(core::LogLevel::kWarn);
    default:
      return core::LogLevelName(core::LogLevel::kError);
  }
}

void Append(spdlog::memory_buf_t& dest, std::string_view text) {
  dest.append(text.data(), text.data() + text.size());
}

// %* in a pattern: the message, escaped for a JSON string.
class JsonMessageFlag final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    Append(dest, JsonEscape(std::string_view(msg.payload.data(), msg.payload.size())));
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<JsonMessageFlag>();
  }
};

// %& in a pattern: the level as --log-level names it (spdlog's own %l says "warning").
class LevelFlag final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    Append(dest, LevelName(msg.level));
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<LevelFlag>();
  }
};

// `text` as literal text of an spdlog pattern.
std::string PatternLiteral(std::string_view text) {
  std::string out;
  for (const char c : text) {
    out += c;
    if (c == '%') out += '%';
  }
  return out;
}

// The length of the valid UTF-8 sequence at the start of `s`, or 0.
std::size_t Utf8Length(std::string_view s) {
  const auto byte = [&s](std::size_t i) { return static_cast<std::uint8_t>(s[i]); };
  const std::uint8_t c = byte(0);
  std::size_t n = 0;
  std::uint32_t min = 0;
  std::uint32_t cp = 0;
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) {
    n = 2, min = 0x80, cp = c & 0x1Fu;
  } else if ((c & 0xF0) == 0xE0) {
    n = 3, min = 0x800, cp = c & 0x0Fu;
  } else if ((c & 0xF8) == 0xF0) {
    n = 4, min = 0x10000, cp = c & 0x07u;
  } else {
    return 0;
  }
  if (s.size() < n) return 0;
  for (std::size_t i = 1; i < n; ++i) {
    if ((byte(i) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i) & 0x3Fu);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

}  // namespace

std::string JsonEscape(std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size() + 8);
  std::size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    const auto u = static_cast<std::uint8_t>(c);
    if (u >= 0x80) {
      const std::size_t n = Utf8Length(text.substr(i));
      if (n == 0) {
        out += "\xEF\xBF\xBD";  // U+FFFD: the line stays valid JSON
        ++i;
      } else {
        out.append(text.substr(i, n));
        i += n;
      }
      continue;
    }
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (u < 0x20 || u == 0x7F) {
          out += "\\u00";
          out += kHex[u >> 4];
          out += kHex[u & 0xF];
        } else {
          out += c;
        }
    }
    ++i;
  }
  return out;
}

core::Result<LogFormat> ParseLogFormat(std::string_view text) {
  if (text == "text") return LogFormat::kText;
  if (text == "json") return LogFormat::kJson;
  return core::MakeError(core::ErrorCode::kInvalidArgument,
                         "'" + std::string(text) + "' is not a log format: text or json");
}

core::Result<core::LogLevel> ParseLogLevel(std::string_view text) {
  for (const core::LogLevel level : {core::LogLevel::kDebug, core::LogLevel::kInfo,
                                     core::LogLevel::kWarn, core::LogLevel::kError}) {
    if (text == core::LogLevelName(level)) return level;
  }
  if (text == "warning") return core::LogLevel::kWarn;
  return core::MakeError(
      core::ErrorCode::kInvalidArgument,
      "'" + std::string(text) + "' is not a log level: debug, info, warn or error");
}

void AddLogOptions(CLI::App& cmd, LogOptions& options) {
  cmd.add_option_function<std::string>(
         "--log-format",
         [&options](const std::string& value) { options.format = *ParseLogFormat(value); },
         "How each log line (on stderr) is written: text (\"TIME gpumux DAEMON: MESSAGE\") or "
         "json (one object per line: time, level, daemon, msg)")
      ->check(CLI::Validator(
          [](std::string& value) {
            auto parsed = ParseLogFormat(value);
            return parsed ? std::string() : parsed.error().message;
          },
          "text|json"))
      ->default_str("text");
  cmd.add_option_function<std::string>(
         "--log-level",
         [&options](const std::string& value) { options.level = *ParseLogLevel(value); },
         "Leave out lines below this level: debug (adds per-request lines), info, warn "
         "(problems gpumux copes with) or error (its own failures)")
      ->check(CLI::Validator(
          [](std::string& value) {
            auto parsed = ParseLogLevel(value);
            return parsed ? std::string() : parsed.error().message;
          },
          "LEVEL"))
      ->default_str("info");
}

core::Logger MakeDaemonLogger(std::ostream& err, std::string_view daemon, LogOptions options) {
  std::string pattern;
  if (options.format == LogFormat::kJson) {
    pattern = R"({"time":"%Y-%m-%dT%H:%M:%S.%eZ","level":"%&","daemon":")" +
              PatternLiteral(JsonEscape(daemon)) + R"(","msg":"%*"})";
  } else {
    pattern = "%Y-%m-%dT%H:%M:%S.%eZ gpumux " + PatternLiteral(daemon) + ": %v";
  }
  auto formatter =
      std::make_unique<spdlog::pattern_formatter>(spdlog::pattern_time_type::utc, "\n");
  formatter->add_flag<JsonMessageFlag>('*').add_flag<LevelFlag>('&').set_pattern(pattern);
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(err, /*force_flush=*/true);
  sink->set_formatter(std::move(formatter));
  auto logger = std::make_shared<spdlog::logger>(std::string(daemon), std::move(sink));
  logger->set_level(ToSpdlog(options.level));
  return core::Logger(
      [logger](core::LogLevel level, std::string_view line) {
        logger->log(ToSpdlog(level), spdlog::string_view_t(line.data(), line.size()));
      },
      options.level);
}

}  // namespace gpumux::cli
