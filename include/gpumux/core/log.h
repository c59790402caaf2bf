// The logger the daemons' modules write to: one line of text at a level. What a line looks like
// (text or JSON), where it goes and which levels pass is the sink's business (the daemons build
// theirs with spdlog in src/cli/daemon_log.h); a module only picks the level. A Logger is passed
// in, never global; a default-constructed one drops every line.
//
// Levels, as the modules use them:
//   kError  gpumux itself failed at what it is for: cannot start, a request it answered 500,
//           a grant it cannot account for.
//   kWarn   something outside is wrong or unreachable, and gpumux copes (retries, refuses, skips):
//           a failed list or watch, a refused Allocate, a node or pod that does not decode, a
//           store that is down, an unhealthy GPU.
//   kInfo   what changed: started, synced, stopped, registered, a job tuned, a pod bound.
//   kDebug  per-request chatter and detail nobody needs in production.
//
// Structured lines (Kubernetes' structured logging): a message that names the event, and the
// values as key-value fields, Info("job registered", {{"job", id}, {"gpu", uuid}}). A JSON sink
// writes each field as a key of the line's object; a plain line sink gets them rendered after
// the message as ` key=value` (the value quoted when it holds a space, quote or '=').
//
// Thread safety: a Logger is immutable; calls from any thread are safe when its sink is.
#pragma once

#include <concepts>
#include <cstddef>
#include <functional>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace gpumux::core {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

// "debug", "info", "warn", "error": the names of --log-level and of JSON log lines.
constexpr std::string_view LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarn:
      return "warn";
    case LogLevel::kError:
      return "error";
  }
  return "info";
}

namespace detail {
template <typename T>
struct IsStdFunction : std::false_type {};
template <typename R, typename... A>
struct IsStdFunction<std::function<R(A...)>> : std::true_type {};
}  // namespace detail

struct LogField {
  std::string_view key;  // lower_snake_case; not time, level, daemon or msg
  std::string value;
};
using LogFields = std::initializer_list<LogField>;

// ` key=value ...` as a plain line shows the fields (values quoted and escaped when needed).
std::string RenderLogFields(std::span<const LogField> fields);

class Logger {
 public:
  using Sink = std::function<void(LogLevel level, std::string_view line)>;
  // A sink that keeps the fields apart (the daemons' JSON lines).
  using FieldSink =
      std::function<void(LogLevel level, std::string_view msg, std::span<const LogField> fields)>;

  Logger() = default;        // drops every line
  Logger(std::nullptr_t) {}  // NOLINT(google-explicit-constructor): drops every line
  // Lines at `threshold` and above go to `sink`; the others are dropped before they reach it.
  Logger(Sink sink, LogLevel threshold) : threshold_(threshold) {
    if (!sink) return;
    sink_ = [s = std::move(sink)](LogLevel level, std::string_view msg,
                                  std::span<const LogField> fields) {
      if (fields.empty()) {
        s(level, msg);
      } else {
        s(level, std::string(msg) + RenderLogFields(fields));
      }
    };
  }
  Logger(FieldSink sink, LogLevel threshold) : sink_(std::move(sink)), threshold_(threshold) {}
  // Any callable that takes a line alone (a test collecting lines, an older sink): it gets the
  // lines of every level. An empty std::function (or a null function pointer) makes an empty
  // Logger.
  template <typename F>
  requires(std::invocable<F&, std::string_view> &&
           !std::invocable<F&, LogLevel, std::string_view> &&
           !std::same_as<std::remove_cvref_t<F>, Logger>)
      Logger(F line_sink) {  // NOLINT(google-explicit-constructor): a plain sink is a Logger
    if constexpr (detail::IsStdFunction<std::remove_cvref_t<F>>::value ||
                  std::is_pointer_v<std::remove_cvref_t<F>>) {
      if (!line_sink) return;
    }
    sink_ = [f = std::move(line_sink)](LogLevel, std::string_view line,
                                       std::span<const LogField> fields) mutable {
      if (fields.empty()) {
        f(line);
      } else {
        f(std::string(line) + RenderLogFields(fields));
      }
    };
  }

  void Debug(std::string_view line) const { Write(LogLevel::kDebug, line); }
  void Info(std::string_view line) const { Write(LogLevel::kInfo, line); }
  void Warn(std::string_view line) const { Write(LogLevel::kWarn, line); }
  void Error(std::string_view line) const { Write(LogLevel::kError, line); }
  // A line at kInfo: what the plain line sinks received before levels existed.
  void operator()(std::string_view line) const { Info(line); }
  void Write(LogLevel level, std::string_view line) const {
    if (Enabled(level)) sink_(level, line, {});
  }
  void Debug(std::string_view msg, LogFields fields) const { Write(LogLevel::kDebug, msg, fields); }
  void Info(std::string_view msg, LogFields fields) const { Write(LogLevel::kInfo, msg, fields); }
  void Warn(std::string_view msg, LogFields fields) const { Write(LogLevel::kWarn, msg, fields); }
  void Error(std::string_view msg, LogFields fields) const { Write(LogLevel::kError, msg, fields); }
  void Write(LogLevel level, std::string_view msg, LogFields fields) const {
    if (Enabled(level)) sink_(level, msg, std::span<const LogField>(fields.begin(), fields.size()));
  }

  // Whether a line at `level` would be written: skip building an expensive debug line when not.
  bool Enabled(LogLevel level) const { return sink_ && level >= threshold_; }
  explicit operator bool() const { return static_cast<bool>(sink_); }

  // The same logger with `prefix` put before every line ("reflector /api/v1/pods: ").
  Logger Prefixed(std::string prefix) const {
    if (!sink_) return {};
    return Logger(
        FieldSink([sink = sink_, p = std::move(prefix)](LogLevel level, std::string_view line,
                                                        std::span<const LogField> fields) {
          sink(level, p + std::string(line), fields);
        }),
        threshold_);
  }

 private:
  FieldSink sink_;
  LogLevel threshold_ = LogLevel::kDebug;
};

}  // namespace gpumux::core
