// A throttle for log lines that clients can cause (failed requests, dropped connections): at
// most kBurst lines of one kind per kWindow, and the first line of a later window says how many
// were left out. A flood of bad requests cannot flood the log, and the first of each kind is
// always seen. Thread-safe; kinds are few (HTTP statuses, drop reasons), kept forever.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "gpumux/core/log.h"

namespace gpumux::core {

class LogThrottle {
 public:
  static constexpr int kBurst = 10;
  static constexpr std::chrono::seconds kWindow{10};

  // Whether to write a line of `kind` now; when true, `*left_out` is how many lines of that
  // kind were not written since the last one that was.
  bool Allow(const std::string& kind, std::int64_t* left_out) {
    std::lock_guard lock(mu_);
    Window& w = windows_[kind];
    const auto now = std::chrono::steady_clock::now();
    if (w.lines == 0 || now - w.start >= kWindow) {
      w.start = now;
      w.lines = 0;
    }
    if (w.lines >= kBurst) {
      ++w.left_out;
      return false;
    }
    ++w.lines;
    *left_out = std::exchange(w.left_out, 0);
    return true;
  }

  // Writes `line` to `log` at `level` unless kind's budget is spent; a "500" is gpumux's own
  // failure and goes out at error whatever `level` says.
  void Write(const Logger& log, const std::string& kind, LogLevel level, const std::string& line) {
    if (kind == "500") level = LogLevel::kError;
    if (!log.Enabled(level)) return;
    std::int64_t left_out = 0;
    if (!Allow(kind, &left_out)) return;
    log.Write(level, left_out == 0
                         ? line
                         : line + " (" + std::to_string(left_out) + " more like it not logged)");
  }

 private:
  struct Window {
    std::chrono::steady_clock::time_point start;
    int lines = 0;
    std::int64_t left_out = 0;
  };
  std::mutex mu_;
  std::map<std::string, Window> windows_;
};

}  // namespace gpumux::core
