// The one HTTP server of gpumux: every listener (the extender, the coordinator on TCP and on
// its unix socket, `gpumux gpus --serve`, the metrics listeners, the device plugin's probes)
// is an HttpServer with its routes. It is written for peers that may be hostile: a tenant on a
// node is an adversary of the other tenants, so no client can hold the server, its threads or
// its memory, and who is calling is decided from the connection (Peer), never from the message.
//
// Built on Boost.Beast and Boost.Asio (Debian's libboost-dev): one I/O thread runs every
// connection as asynchronous reads and writes, so a slow or idle client costs a socket and a
// few KiB, never a thread. Handlers run where their route says (Lane):
//   kInline   on the I/O thread, no work slot: cheap and never blocking (probes);
//   kSide     on one side thread, no work slot: too slow for the I/O thread, and must not queue
//             behind busy workers (/metrics, /inspect);
//   kCompute  on the I/O thread while holding a work slot: CPU-bound and short, never blocking
//             on I/O (the extender's filter, prioritize, preempt: they serialise on the cluster
//             state's lock anyway). No thread hop: at 5,000 nodes a hop to a worker and back
//             cost ~80 us of a 0.4 ms filter;
//   kWorker   on one of `workers` worker threads, holding a work slot: may block (bind waits
//             for the API server; the coordinator's protocol may tune).
// cpp-httplib 0.11 (which gpumux used before) gives each connection a thread for its whole life
// and bounds reads only per recv(), so 8 trickling clients stopped a server; making it safe
// meant overriding a private virtual of httplib::Server (docs/decisions.md).
//
// What the server guarantees, whatever the routes:
//  - Deadlines. A request's head and body must arrive within `request_timeout`, counted from
//    the accept for a connection's first request and from the first byte for later ones; else
//    408 (when nothing was answered yet) and the connection is closed. An idle keep-alive
//    connection is closed after `keep_alive_timeout`; a reply not taken within `write_timeout`
//    is abandoned.
//  - Limits. A head over `max_head_bytes` is 431; a body over `max_body_bytes` is 413, refused
//    before it is read when its Content-Length says so (chunked bodies are cut off at the limit);
//    both close the connection. A body over `unslotted_body_bytes` holds its size from one byte
//    budget (`body_budget_bytes`) from its first byte until its reply is written: one declared
//    by Content-Length reserves it whole before it is read (and before an "Expect:
//    100-continue" is answered), a chunked one in steps as it grows. A body that does not fit
//    waits for the budget, first come first served, within its request's deadline; else 503.
//    So the memory of bodies is bounded by the budget, plus `unslotted_body_bytes` per
//    connection. A body must arrive at `min_body_rate` bytes/s at least, counted from its head
//    once `body_rate_grace` has passed; a slower one is 408 and closed. A body holds no work slot
//    while it arrives (four bodies trickling in once held every slot of the webhook).
//  - Connections. At most `max_connections` are open; at the limit a newcomer evicts the
//    connection that has gone longest without a request being answered (an idle keep-alive one,
//    or one still sending its request), else the one whose reply has gone unread longest, past
//    250 ms (a client that pipelines and never reads); one whose request is being handled is
//    never evicted; when none can go the newcomer gets 503. A probe opens a connection of
//    its own, so it is served at once however many slow clients are connected.
//  - Work. A kCompute or kWorker route runs only while its request holds one of `workers` slots;
//    a request that gets none within `request_timeout` is answered 503 ("busy"). kInline and
//    kSide routes take no slot.
//  - Replies. Every error the server itself produces (400, 404, 405, 408, 413, 431, 500, 503)
//    has a JSON body {"<error_key>": "<message for humans>"}; a handler that throws is a 500
//    naming the exception. HEAD is answered for every GET route. Replies are never compressed.
//  - Memory. After a request of more than 4 MiB, and once the server is idle, freed memory is
//    handed back to the kernel (malloc_trim, at most once a second): after a flood of large
//    bodies the RSS falls back.
//
// Thread safety: Route and Start before serving, from one thread; Stop and the accessors from
// any thread. Handlers are called concurrently (from the I/O thread, the side thread and the
// workers) and must be thread-safe; so must `log` and the observers.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gpumux/core/log.h"
#include "gpumux/core/result.h"

namespace gpumux::net {

// The process that opened a unix-socket connection, as the kernel named it at connect: a pidfd
// of it (SO_PEERPIDFD, Linux 6.5+) where the kernel gives one, and its start time (read at
// accept). Shared by the connection's requests; closes the pidfd when the last goes.
class PeerProcess;

// Who is on the other end of a connection: what the kernel says, not what the client claims.
struct Peer {
  enum class Transport : std::uint8_t { kTcp, kUnix };
  Transport transport = Transport::kTcp;
  std::string address;  // TCP: the peer's IP address; unix: the socket's path
  int port = 0;         // TCP only
  // Unix sockets: the peer process's credentials when it connected (SO_PEERCRED); -1 for TCP.
  std::int64_t pid = -1, uid = -1, gid = -1;
  std::shared_ptr<const PeerProcess> process;  // unix sockets with pid > 0
  // Unix sockets: whether the process that connected is known to have exited since (its pid
  // may by now be another process's, so what /proc says of `pid` is no longer about this
  // peer): its pidfd says so, or the pid's start time is not the one read at accept (or could
  // not be read then). False for TCP and for a pid the server cannot see (0: another PID
  // namespace).
  bool ConnectorGone() const;
  // "127.0.0.1:41234", "[::1]:41234" or "pid 1234 (uid 0) on /run/gpumux/coordinator.sock".
  std::string Describe() const;
};

struct Request {
  std::string method;                                        // as sent, e.g. "GET"
  std::string path;                                          // the target before '?'
  std::string query;                                         // after '?', undecoded ("" when none)
  std::vector<std::pair<std::string, std::string>> headers;  // in order, names as sent
  std::string body;
  Peer peer;
  // The first header of this name (case-insensitive), or nullptr.
  const std::string* Header(std::string_view name) const;
  // The value of the first query parameter `name` ("a=1&format=text"), undecoded; "" if absent.
  std::string QueryValue(std::string_view name) const;
};

struct Response {
  int status = 200;
  std::string content_type = "application/json; charset=utf-8";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra headers (e.g. Allow)
  bool close = false;  // close the connection after this reply

  static Response Json(int status, std::string body);
  static Response Text(int status, std::string body);  // text/plain; charset=utf-8
};

using Handler = std::function<Response(const Request&)>;

// Who made a reply: the route's handler, or the server itself (404, 405, 408, 413, 431, 503).
enum class ReplyOrigin : std::uint8_t { kHandler, kServer };

// Where a route's handler runs (see the top of this file).
enum class Lane : std::uint8_t { kInline, kSide, kCompute, kWorker };

// Where to listen.
struct Endpoint {
  enum class Kind : std::uint8_t { kTcp, kUnix };
  Kind kind = Kind::kTcp;
  std::string host = "127.0.0.1";  // TCP: an address of this host, or a name that resolves to one
  int port = 0;                    // TCP: 0 = any free port (HttpServer::port)
  std::string path;                // unix: the socket file (a stale socket there is replaced)
  mode_t mode = 0600;              // unix: the socket file's permissions

  static Endpoint Tcp(std::string host, int port);
  static Endpoint Unix(std::string path, mode_t mode);
  std::string Describe() const;  // "127.0.0.1:9402" or "unix:/run/gpumux/coordinator.sock"
};

// Why the server closed a connection itself (a label of the owner's metrics).
enum class Drop : std::uint8_t {
  kRequestTimeout,  // its request did not arrive within request_timeout
  kHeadTooLarge,    // request head over max_head_bytes (431)
  kBodyTooLarge,    // body over max_body_bytes (413)
  kBadRequest,      // not HTTP (400)
  kWriteTimeout,    // the reply was not taken within write_timeout
  kEvicted,         // made room for a new connection at max_connections
  kRefused,         // at max_connections with every connection being answered (503)
};
inline constexpr std::size_t kDropKinds = 7;
std::string_view DropName(Drop drop);  // "request_timeout", "head_too_large", ...

// The most connections a server may be configured to hold open.
inline constexpr int kMaxConnectionsLimit = 65536;

// HTTPS: every TCP endpoint speaks TLS (1.2 or later) with this certificate chain and key (PEM,
// e.g. from tls.h); unix endpoints stay plain. The handshake counts as the first request's
// arrival: it must complete within request_timeout, and the connection counts against
// max_connections from its accept (a client that never finishes its handshake holds nothing
// longer than one that never sends its request).
struct TlsOptions {
  std::string cert_chain_pem;
  std::string private_key_pem;
};

struct ServerOptions {
  std::string name = "server";  // for log lines: "<name> listening on ..."
  std::vector<Endpoint> listen;
  std::optional<TlsOptions> tls;  // plain HTTP when absent
  int workers = 4;                // work slots: kWorker handlers computed at once
  int max_connections = 256;
  // SO_REUSEPORT on the TCP listeners: other processes of this user may listen on the same port
  // and the kernel spreads new connections among them (replicas on a host's network). Drain
  // then closes the listeners at once, so that new connections go to the others; connections
  // the kernel had queued for this one are reset unless net.ipv4.tcp_migrate_req is 1.
  bool reuse_port = false;
  std::size_t max_head_bytes = std::size_t{64} << 10;
  std::size_t max_body_bytes = std::size_t{1} << 20;
  std::size_t unslotted_body_bytes = std::size_t{128} << 10;
  // Bytes of bodies over unslotted_body_bytes held at once (see the top); 0: workers x
  // max_body_bytes. At least max_body_bytes when set.
  std::size_t body_budget_bytes = 0;
  std::size_t min_body_rate = std::size_t{16} << 10;  // bytes/s; 0: no minimum
  std::chrono::milliseconds body_rate_grace{2000};
  std::chrono::milliseconds request_timeout{10000};
  std::chrono::milliseconds keep_alive_timeout{10000};
  std::chrono::milliseconds write_timeout{10000};
  std::string error_key = "error";  // the JSON member of error bodies ("Error" for kube-scheduler)
  // Lines about dropped connections and failed requests (throttled per kind: at most 10 per
  // 10 s, then a count of the lines left out); may be empty.
  core::Logger log;
  // Called (on the I/O thread) for every connection the server closes itself.
  std::function<void(Drop, const Peer&)> on_drop;
  // Called (on the thread that produced it) for every reply to a request whose head was read,
  // with the handler's time (zero for the server's own replies). `request` has no body when
  // the server refused it before reading the body (413).
  std::function<void(const Request&, const Response&, ReplyOrigin, std::chrono::nanoseconds)>
      on_reply;
};

// Checks options that need no socket: error naming the option.
core::Result<void> ValidateOptions(const ServerOptions& options);

class HttpServer {
 public:
  explicit HttpServer(ServerOptions options);
  ~HttpServer();  // Stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // `path` exactly (no patterns); `methods` e.g. {"POST"} (GET routes answer HEAD too). A path
  // with no route is 404 naming `endpoints` (or the routes); a known path with another method
  // is 405 with Allow. Before Start only.
  void Route(std::string path, std::vector<std::string> methods, Lane lane, Handler handler);
  // For 404 messages: "POST /gpumux/{filter,...}; GET /healthz" (default: the routes).
  void SetEndpointsText(std::string text);

  // Raises the soft limit on open files toward the hard one where max_connections (a socket
  // each, and on a unix socket a pidfd of its peer) would not fit under it.
  // Validates the options, binds every endpoint and serves on background threads; returns once
  // connections are accepted. Error naming the endpoint and the system's reason (in use, not an
  // address of this host, ...), with nothing left listening. Call at most once.
  core::Result<void> Start();
  // Stops accepting, closes every connection without a request being answered, lets the
  // requests being answered finish (at most `grace`), then closes the rest and joins every
  // thread. Idempotent.
  void Stop(std::chrono::milliseconds grace = std::chrono::seconds(30));
  // The first step of a graceful stop behind a load balancer (a Service): from now on every
  // reply says "Connection: close" and closes its connection, and idle keep-alive connections
  // close now, so that clients open their next connection to a replica that stays; requests
  // are still served (with reuse_port, only those open: it stops listening). After Start;
  // idempotent.
  void Drain();

  bool running() const;
  // The bound TCP port of listen[index] (the chosen one when it was 0); 0 for a unix endpoint.
  int port(std::size_t index = 0) const;
  std::size_t open_connections() const;
  std::int64_t dropped(Drop drop) const;  // connections closed for this reason since Start
  const ServerOptions& options() const;
  // Serves connections accepted from now on with `tls` (a renewed certificate); those open keep
  // theirs. After Start. Error when the server is not serving TLS or OpenSSL refuses the pair
  // (nothing changes then).
  core::Result<void> SetTls(const TlsOptions& tls);

  struct Impl;  // the implementation's (public so that its connection type can name it)

 private:
  std::shared_ptr<Impl> impl_;
};

// {"<key>": message} with invalid UTF-8 replaced: the body of every error reply.
std::string ErrorJson(std::string_view key, std::string_view message);

}  // namespace gpumux::net
