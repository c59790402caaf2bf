// Pieces every gpumux daemon command shares (internal to the cli module): a timestamped log
// sink and the SIGINT/SIGTERM handling.
#pragma once

#include <pthread.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>

namespace gpumux::cli {

// "HOST:PORT" (also "[::1]:PORT") -> host, port in 0..65535; false when it is not that.
inline bool ParseHostPort(const std::string& text, std::string& host, int& port) {
  const std::size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  std::string h = text.substr(0, colon);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  const std::string digits = text.substr(colon + 1);
  if (h.empty() || digits.empty() || digits.size() > 5 ||
      digits.find_first_not_of("0123456789") != std::string::npos) {
    return false;
  }
  const int value = std::stoi(digits);
  if (value > 65535) return false;
  host = std::move(h);
  port = value;
  return true;
}

// One line per event on `err`, "2026-11-21T10:00:00.123Z gpumux <daemon>: <line>"; safe from
// any thread.
class LogSink {
 public:
  LogSink(std::ostream& err, std::string daemon) : err_(&err), prefix_(" gpumux " + daemon + ": ") {}
  void operator()(std::string_view line) {
    const auto now = std::chrono::system_clock::now();
    const std::time_t t = std::chrono::system_clock::to_time_t(now);
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() %
        1000;
    std::tm tm{};
    gmtime_r(&t, &tm);
    char stamp[32];
    std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);
    char millis[8];
    std::snprintf(millis, sizeof millis, ".%03dZ", static_cast<int>(ms));
    std::lock_guard lock(mu_);
    *err_ << stamp << millis << prefix_ << line << '\n' << std::flush;
  }

 private:
  std::mutex mu_;
  std::ostream* err_;
  std::string prefix_;
};

// Blocks SIGINT and SIGTERM in this thread and every thread it starts afterwards, so that
// sigwait in this thread receives them; restores the previous mask when destroyed.
class SignalBlock {
 public:
  SignalBlock() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set_, &old_);
  }
  ~SignalBlock() { Restore(); }
  SignalBlock(const SignalBlock&) = delete;
  SignalBlock& operator=(const SignalBlock&) = delete;
  int Wait() const {
    int sig = 0;
    while (sigwait(&set_, &sig) != 0) {
    }
    return sig;
  }
  // A second signal then takes its default action (ends the process) in this thread.
  void Restore() {
    if (restored_) return;
    restored_ = true;
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }

 private:
  sigset_t set_{};
  sigset_t old_{};
  bool restored_ = false;
};

}  // namespace gpumux::cli
