// Pieces every gpumux daemon command shares (internal to the cli module): HOST:PORT parsing and
// the SIGINT/SIGTERM handling. The daemons' log is src/cli/daemon_log.h.
#pragma once

#include <pthread.h>
#include <signal.h>

#include <string>
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
