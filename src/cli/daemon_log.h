// The daemons' log (internal to the cli module): `gpumux extender`, `device-plugin`,
// `coordinator` and the runtime hook write their lines through one spdlog logger each, as text
// or as JSON, at --log-level and above.
//
//   text  2026-11-21T10:00:00.123Z gpumux extender: serving policy fgd ...
//         (the format every daemon wrote before the levels existed: no level on the line)
//   json  {"time":"2026-11-21T10:00:00.123Z","level":"info","daemon":"extender","msg":"serving
//   ..."}
//         one object per line; time is RFC 3339 in UTC with milliseconds; level is debug, info,
//         warn or error; msg is the text line, JSON-escaped.
#pragma once

#include <CLI/CLI.hpp>
#include <ostream>
#include <string>
#include <string_view>

#include "gpumux/core/log.h"
#include "gpumux/core/result.h"

namespace gpumux::cli {

enum class LogFormat { kText, kJson };

struct LogOptions {
  LogFormat format = LogFormat::kText;
  core::LogLevel level = core::LogLevel::kInfo;
};

// "text" | "json"; "debug" | "info" | "warn" | "error" (also "warning"). Errors name the value.
core::Result<LogFormat> ParseLogFormat(std::string_view text);
core::Result<core::LogLevel> ParseLogLevel(std::string_view text);

// Adds --log-format and --log-level to a daemon's command; bad values are usage errors naming
// the flag and the value.
void AddLogOptions(CLI::App& cmd, LogOptions& options);

// A logger writing to `err` (which must outlive it and every copy) as `daemon`. Each line is
// written whole and flushed; safe from any thread. No global spdlog registry is involved.
core::Logger MakeDaemonLogger(std::ostream& err, std::string_view daemon, LogOptions options);

}  // namespace gpumux::cli
