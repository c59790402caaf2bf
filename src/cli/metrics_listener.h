// A second HTTP listener of a daemon that serves only GET /metrics and GET /healthz (internal
// to the cli module): for Prometheus on the pod IP while the daemon's own listener, which also
// takes the scheduler's verbs or the job protocol, stays on loopback. Anything else is 404.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "gpumux/core/result.h"

namespace gpumux::cli {

class MetricsListener {
 public:
  // Binds host:port (0: any free port) and serves `render()` (Prometheus text format 0.0.4) on
  // the one hardened server (net/http_server.h); returns once it accepts connections. `render` is
  // called from the listener's threads and must be thread-safe. Error naming the address when it
  // cannot bind.
  // `reuse_port`: share the port with other processes of this user (ServerOptions::reuse_port).
  static core::Result<std::unique_ptr<MetricsListener>> Start(const std::string& host, int port,
                                                              std::function<std::string()> render,
                                                              bool reuse_port = false);
  ~MetricsListener();  // Stop()
  MetricsListener(const MetricsListener&) = delete;
  MetricsListener& operator=(const MetricsListener&) = delete;

  void Stop();  // idempotent
  int port() const;

  struct Impl;

 private:
  explicit MetricsListener(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpumux::cli
