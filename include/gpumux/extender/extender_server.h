// The scheduler extender's HTTP server: kube-scheduler's verbs on top of Extender, plus the
// endpoints an operator and Kubernetes probe. Built on net::HttpServer (the one hardened server:
// deadlines, limits, bounded work and connections, JSON errors; net/http_server.h) and
// prometheus-cpp (metrics rendered by this server; no second listener).
//
// Routes (P = the URL prefix, "/gpumux" by default):
//   POST P/filter, P/prioritize, P/bind, P/preempt   Extender::Handle, on one of `threads` work
//        slots. Content-Type must be application/json (parameters such as charset allowed) or
//        absent, else 415; an empty body is 400; a body over `max_body_bytes` is 413 (refused
//        before it is read when its Content-Length says so). Other methods: 405 with Allow.
//   GET  /healthz   200 "ok" while the server runs (on the I/O thread).
//   GET  /readyz    200 "ok" once ClusterState::synced(), else 503 with the reason.
//   GET  /metrics   Prometheus text format 0.0.4 (see below; on the server's side thread).
//   GET  /inspect   ClusterState::Inspect() as indented JSON (side thread).
//   anything else   404 with a JSON body naming the endpoints.
// Every error reply is JSON: {"Error":"<message for humans>"}. Replies are never compressed
// (the JSON of a 5,000-node NodeList is tens of MB; compressing it on loopback costs more than
// it saves). The probes, /metrics and /inspect take no work slot: they are answered at once
// however many verbs are computed and slow clients connected (bench/extender_flood.cc).
// `request_read_timeout`, `keep_alive_timeout`, `write_timeout` and `max_connections` are the
// server's (net::ServerOptions: request_timeout, ...), with the meaning given there.
//
// Metrics:
//   gpumux_extender_requests_total{verb,code}          every verb request, by HTTP status
//   gpumux_extender_request_duration_seconds{verb}     histogram, 50 us .. 5 s
//   gpumux_extender_placements_total                   pods bound (VerbReply::placements)
//   gpumux_extender_failures_total{verb,reason}        VerbReply::failure when not empty
//   gpumux_extender_nodes, _gpus, _grants{state}, _grant_conflicts, _synced   gauges
//   gpumux_extender_grants_expired_total, _state_rebuilds_total               counters
//   gpumux_extender_info{policy}                       always 1
//   gpumux_extender_connections                        open HTTP connections
//   gpumux_extender_connections_dropped_total{reason}  closed by the server: request_timeout,
//        head_too_large, body_too_large, bad_request, write_timeout, evicted, refused
//
// Logging: one line per request that is not 2xx (at most 10 per 10 s per status: a flood of
// bad requests cannot flood the log) or that took longer than `slow_request`, one per
// connection the server closes (throttled likewise), and one per start and stop, through the
// injected `log` (called from the server's threads, possibly concurrently: the sink must be
// thread-safe).
//
// Thread safety: Start, Stop and the accessors must be called from one owning thread; the
// handlers run on the server's worker threads and call Extender and ClusterState concurrently
// (both are thread-safe).
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "gpumux/core/log.h"
#include "gpumux/core/result.h"
#include "gpumux/extender/extender.h"
#include "gpumux/net/http_server.h"
#include "gpumux/sched/cluster_state.h"

namespace gpumux::extender {

using LogFn = core::Logger;

// The most connections a server may be configured to hold open.
inline constexpr int kMaxConnectionsLimit = net::kMaxConnectionsLimit;

struct ExtenderServerOptions {
  std::string host = "127.0.0.1";      // an address of this host; "0.0.0.0" or "::" for all
  int port = 0;                        // 0: any free port (see ExtenderServer::port())
  std::string url_prefix = "/gpumux";  // normalised by NormalizeUrlPrefix
  int threads = 8;                     // work slots: verbs computed at once (see above)
  int max_connections = 256;           // open connections (net::ServerOptions)
  std::size_t max_body_bytes = std::size_t{64} << 20;  // a 5,000-node NodeList is tens of MB
  // Bytes of bodies over 128 KiB held at once, until their replies are written
  // (net::ServerOptions::body_budget_bytes): parsing a body costs several times its size, and
  // with this the Deployment's 512 Mi holds however many verbs arrive at once.
  std::size_t body_budget_bytes = std::size_t{64} << 20;
  std::chrono::milliseconds slow_request{100};            // log requests slower than this
  std::chrono::milliseconds request_read_timeout{10000};  // a whole request must arrive within
  std::chrono::milliseconds keep_alive_timeout{10000};    // idle connections close after it
  std::chrono::milliseconds write_timeout{10000};         // a whole reply must be taken within
  LogFn log;  // may be empty: no logging; lines about bad requests are throttled per kind
};

// "gpumux" -> "/gpumux", "//a//b/" -> "/a/b", "/" or "" -> "" (verbs at /filter, ...).
// Error for characters outside [A-Za-z0-9._~-] in a segment (no '?', '#', '%', spaces).
core::Result<std::string> NormalizeUrlPrefix(std::string_view prefix);

class ExtenderServer {
 public:
  // `extender` and `state` are borrowed and must outlive the server.
  ExtenderServer(Extender& extender, sched::ClusterState& state, ExtenderServerOptions options);
  ~ExtenderServer();  // Stop()
  ExtenderServer(const ExtenderServer&) = delete;
  ExtenderServer& operator=(const ExtenderServer&) = delete;

  // Binds the port and serves on a background thread; returns once the server accepts
  // connections. Error (naming host, port and the system's reason) when the prefix is invalid,
  // the port is in use or the host is not an address of this machine. Call at most once.
  core::Result<void> Start();
  // Stops accepting, closes idle keep-alive connections, waits for the requests in flight and
  // joins every thread. Returns within milliseconds unless a verb is in flight (bind waits for
  // the API server, bounded by the client's request timeout). Idempotent.
  void Stop();

  bool running() const;
  int port() const;                       // the bound port, once started; else options.port
  const std::string& url_prefix() const;  // normalised ("" when the verbs sit at the root)

  // The /metrics page (Prometheus text format 0.0.4), e.g. for tests. Thread-safe.
  std::string RenderMetrics() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpumux::extender
