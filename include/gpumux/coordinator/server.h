// The node coordinator's daemon side: the job protocol over HTTP (loopback TCP and a unix
// socket), Prometheus metrics, the clock that drives timeouts, and the background writer that
// keeps the store up to date without ever making a job wait (docs/COORDINATOR.md).
//
// Threads: the HTTP server's (net::HttpServer: one I/O thread for every connection on both
// transports, 4 workers, one side thread), one ticker (Coordinator::Tick every `tick`), one
// store writer. Every call into the Coordinator holds one mutex.
// Store writes are coalesced per key (only the newest value of a key is written) and retried
// every second while the store is unreachable, so a coordinator whose etcd is down keeps
// serving jobs and catches up when etcd is back. The node's liveness key is a leased key
// renewed every `alive_every`.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "gpumux/coordinator/coordinator.h"
#include "gpumux/core/log.h"
#include "gpumux/core/result.h"
#include "gpumux/net/http_server.h"
#include "gpumux/store/store.h"

namespace gpumux::coordinator {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 9403;             // 0: any free port
  std::string socket_path;     // "" = no unix socket; its folder must exist
  mode_t socket_mode = 0666;   // who may connect (each caller acts only for its own jobs)
  std::string proc = "/proc";  // where callers' cgroups are read (tests: a fake folder)
  std::chrono::milliseconds tick{200};
  std::chrono::milliseconds alive_every{5000};
  std::chrono::seconds alive_ttl{15};
  std::chrono::milliseconds store_retry{1000};
  // Called on the ticker before each Tick, under the coordinator's lock (e.g. pods gone).
  std::function<void(Coordinator&)> on_tick;
};

class Server {
 public:
  // Reads the node's stored state (a store that cannot be read is logged and the coordinator
  // starts empty), then serves. `store` may be null (nothing kept); it must outlive the server.
  // Error when the port or the socket cannot be served.
  static core::Result<std::unique_ptr<Server>> Start(ServerOptions options,
                                                     std::unique_ptr<Coordinator> coordinator,
                                                     store::Store* store, core::Logger log);
  ~Server();  // Stop()
  // Stops serving (requests in flight get at most 5 s), then writes what is still queued for
  // the store in one batch (one attempt: the file store's one rewrite, or etcd until its first
  // failure). SIGTERM with 512 jobs and their state queued: 4 ms (docs/COORDINATOR.md).
  void Stop();
  int port() const;
  // The /metrics page (Prometheus text format 0.0.4), e.g. for a second listener. Thread-safe.
  std::string RenderMetrics() const;
  // Writes queued for the store and not yet accepted by it.
  std::size_t store_pending() const;
  // Returns once no tuning computation is queued or in progress (tests, the benchmark): the
  // tuner runs on a thread of its own, and requests answer with the targets decided so far.
  void WaitForTuning();

  class Impl;

 private:
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The HTTP handlers' logic without sockets (for tests and the benchmark): method, path and
// body in, status and JSON body out. Holds no lock: callers serialise.
struct HttpReply {
  int status = 200;
  std::string body;
};
// `caller`: who sent it (CallerOf for a connection's peer).
HttpReply Handle(Coordinator& c, std::string_view method, std::string_view path,
                 std::string_view body, const Caller& caller = Caller::Node());

// The caller behind a connection: a unix-socket peer by its credentials and cgroup (read under
// `proc`), a TCP peer as unidentified.
Caller CallerOf(const net::Peer& peer, const std::string& proc = "/proc");

}  // namespace gpumux::coordinator
