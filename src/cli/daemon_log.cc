#include "src/cli/daemon_log.h"

#include <spdlog/logger.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/ostream_sink.h>

#include <cstdint>
#include <memory>
#include <utility>

#include "gpumux/core/json_text.h"

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

// %~ in a pattern: the level in capitals, padded to five (text lines: "INFO ", "WARN ").
class UpperLevelFlag final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    std::string name(LevelName(msg.level));
    for (char& c : name) c = static_cast<char>(c - 'a' + 'A');
    name.resize(5, ' ');
    Append(dest, name);
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<UpperLevelFlag>();
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

}  // namespace

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
         "How each log line (on stderr) is written: text (\"TIME LEVEL gpumux DAEMON: MESSAGE "
         "key=value...\") or json (one object per line: time, level, daemon, msg and the "
         "line's fields as keys)")
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
  const bool json = options.format == LogFormat::kJson;
  if (json) {
    // The payload is the message and the fields, already escaped: `msg","key":"value`.
    pattern = R"({"time":"%Y-%m-%dT%H:%M:%S.%eZ","level":"%&","daemon":")" +
              PatternLiteral(core::JsonEscape(daemon)) + R"(","msg":"%v"})";
  } else {
    pattern = "%Y-%m-%dT%H:%M:%S.%eZ %~ gpumux " + PatternLiteral(daemon) + ": %v";
  }
  auto formatter =
      std::make_unique<spdlog::pattern_formatter>(spdlog::pattern_time_type::utc, "\n");
  formatter->add_flag<LevelFlag>('&').add_flag<UpperLevelFlag>('~').set_pattern(pattern);
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(err, /*force_flush=*/true);
  sink->set_formatter(std::move(formatter));
  auto logger = std::make_shared<spdlog::logger>(std::string(daemon), std::move(sink));
  logger->set_level(ToSpdlog(options.level));
  return core::Logger(
      core::Logger::FieldSink([logger, json](core::LogLevel level, std::string_view msg,
                                             std::span<const core::LogField> fields) {
        std::string payload;
        if (json) {
          payload = core::JsonEscape(msg);
          for (const core::LogField& f : fields) {
            payload += "\",\"";
            payload += core::JsonEscape(f.key);
            payload += "\":\"";
            payload += core::JsonEscape(f.value);
          }
        } else {
          payload = std::string(msg) + core::RenderLogFields(fields);
        }
        logger->log(ToSpdlog(level), spdlog::string_view_t(payload.data(), payload.size()));
      }),
      options.level);
}

}  // namespace gpumux::cli
