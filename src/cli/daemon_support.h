// Pieces every gpumux daemon command shares (internal to the cli module): HOST:PORT parsing,
// the API server client of --kubeconfig / --in-cluster, and the SIGINT/SIGTERM handling. The
// daemons' log is src/cli/daemon_log.h.
#pragma once

#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gpumux/core/result.h"
#include "gpumux/kube/api_client.h"

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

// "a,b,,c" -> {"a", "b", "", "c"}; "" -> {}.
inline std::vector<std::string> SplitCommas(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start < text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    out.push_back(text.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

// "HOST:PORT" as ParseHostPort, or "off" -> port -1 (a listener turned off).
inline bool ParseHostPortOrOff(const std::string& text, std::string& host, int& port) {
  if (text == "off") {
    port = -1;
    return true;
  }
  return ParseHostPort(text, host, port);
}

// The API server a daemon reaches through --kubeconfig (and --context) or --in-cluster. With
// --check the kubeconfig is read (its mistakes are the user's to see) but no client is made, and
// the pod's service account is not read at all.
struct DaemonApi {
  std::unique_ptr<kube::KubeApi> api;  // null with --check
  std::string server;                  // "" when not read (--in-cluster with --check)
  // For the daemon's log and --check: "API server https://..." or what was not read.
  std::string Describe() const {
    return server.empty() ? "the API server of the pod's service account (not read by --check)"
                          : "API server " + server;
  }
};
// Error: the flag and what is wrong with it (a usage error).
inline core::Result<DaemonApi> ConnectDaemonApi(const std::string& kubeconfig,
                                                const std::string& context, bool in_cluster,
                                                bool check) {
  DaemonApi out;
  if (in_cluster && check) return out;
  auto config =
      in_cluster ? kube::LoadInClusterConfig() : kube::LoadKubeconfig(kubeconfig, context);
  if (!config) {
    return core::MakeError(
        config.error().code,
        std::string(in_cluster ? "--in-cluster: " : "--kubeconfig: ") + config.error().message);
  }
  out.server = config->server;
  if (!check) out.api = kube::MakeCurlClient(std::move(*config));
  return out;
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
