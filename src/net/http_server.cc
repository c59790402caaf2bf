#include "gpumux/net/http_server.h"

#include <malloc.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <limits>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "gpumux/core/log_throttle.h"

namespace gpumux::net {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using unix_socket = asio::local::stream_protocol;
using Clock = std::chrono::steady_clock;
using ErrorCode = boost::system::error_code;
using core::MakeError;

constexpr const char* kTextType = "text/plain; charset=utf-8";
// After a request of more than this, and once the server is idle, freed pages go back to the
// kernel (malloc_trim), at most once per kTrimInterval: glibc's arenas keep the pages of large
// bodies (after a flood of 64 MiB bodies the extender's RSS stayed at ~600 MiB before this).
constexpr std::size_t kTrimAfterBytes = std::size_t{4} << 20;
constexpr std::chrono::seconds kTrimInterval{1};

std::string Seconds(Clock::duration d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", std::chrono::duration<double>(d).count());
  return buf;
}

std::chrono::milliseconds Millis(Clock::duration d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
      std::max(Clock::duration::zero(), d));
}

char Lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(),
                                            [](char x, char y) { return Lower(x) == Lower(y); });
}

// See kTrimAfterBytes. Thread-safe.
class MemoryTrimmer {
 public:
  void AfterRequest(std::size_t bytes) {
    if (bytes <= kTrimAfterBytes) return;
    pending_ = true;  // other threads may still be freeing theirs: trim again once idle
    TrimNow();
  }
  void WhenIdle() {
    if (pending_ && TrimNow()) pending_ = false;
  }

 private:
  bool TrimNow() {
    const auto now = Clock::now().time_since_epoch().count();
    auto last = last_.load();
    if (now - last < std::chrono::duration_cast<Clock::duration>(kTrimInterval).count() ||
        !last_.compare_exchange_strong(last, now)) {
      return false;
    }
    ::malloc_trim(0);
    return true;
  }
  std::atomic<Clock::rep> last_{std::numeric_limits<Clock::rep>::min() / 2};
  std::atomic<bool> pending_{false};
};

enum class Phase : std::uint8_t {
  kWaiting,    // for its (next) request's first byte
  kReceiving,  // its request is arriving, or waits for a work slot
  kAnswering,  // its request is being answered: never evicted
};

struct RouteEntry {
  std::vector<std::string> methods;
  Lane lane = Lane::kInline;
  Handler handler;
};

// What the server knows of a connection for eviction and stopping (I/O thread only).
class Connection {
 public:
  virtual ~Connection() = default;
  virtual void Close(std::optional<Drop> why, const std::string& detail) = 0;
  Phase phase = Phase::kWaiting;
  Clock::time_point since = Clock::now();  // when the phase began
  Peer peer;
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// Value types.

std::string Peer::Describe() const {
  if (transport == Transport::kUnix) {
    return "pid " + std::to_string(pid) + " (uid " + std::to_string(uid) + ") on " + address;
  }
  if (address.find(':') != std::string::npos) return "[" + address + "]:" + std::to_string(port);
  return address + ":" + std::to_string(port);
}

const std::string* Request::Header(std::string_view name) const {
  for (const auto& [key, value] : headers) {
    if (EqualsIgnoreCase(key, name)) return &value;
  }
  return nullptr;
}

std::string Request::QueryValue(std::string_view name) const {
  std::string_view rest = query;
  while (!rest.empty()) {
    const std::size_t amp = rest.find('&');
    const std::string_view pair = rest.substr(0, amp);
    const std::size_t eq = pair.find('=');
    if (pair.substr(0, eq) == name) {
      return eq == std::string_view::npos ? std::string() : std::string(pair.substr(eq + 1));
    }
    rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
  }
  return {};
}

Response Response::Json(int status, std::string body) {
  Response r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

Response Response::Text(int status, std::string body) {
  Response r;
  r.status = status;
  r.content_type = kTextType;
  r.body = std::move(body);
  return r;
}

Endpoint Endpoint::Tcp(std::string host, int port) {
  Endpoint e;
  e.kind = Kind::kTcp;
  e.host = std::move(host);
  e.port = port;
  return e;
}

Endpoint Endpoint::Unix(std::string path, mode_t mode) {
  Endpoint e;
  e.kind = Kind::kUnix;
  e.path = std::move(path);
  e.mode = mode;
  return e;
}

std::string Endpoint::Describe() const {
  if (kind == Kind::kUnix) return "unix:" + path;
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
         std::to_string(port);
}

std::string_view DropName(Drop drop) {
  switch (drop) {
    case Drop::kRequestTimeout:
      return "request_timeout";
    case Drop::kHeadTooLarge:
      return "head_too_large";
    case Drop::kBodyTooLarge:
      return "body_too_large";
    case Drop::kBadRequest:
      return "bad_request";
    case Drop::kWriteTimeout:
      return "write_timeout";
    case Drop::kEvicted:
      return "evicted";
    case Drop::kRefused:
      return "refused";
  }
  return "unknown";
}

std::string ErrorJson(std::string_view key, std::string_view message) {
  return nlohmann::json{{key, message}}.dump(-1, ' ', false,
                                             nlohmann::json::error_handler_t::replace);
}

core::Result<void> ValidateOptions(const ServerOptions& o) {
  const auto bad = [](std::string message) {
    return MakeError(core::ErrorCode::kInvalidArgument, std::move(message));
  };
  if (o.listen.empty()) return bad("nothing to listen on");
  for (const Endpoint& e : o.listen) {
    if (e.kind == Endpoint::Kind::kTcp && (e.port < 0 || e.port > 65535)) {
      return bad("port " + std::to_string(e.port) + " is not in 0..65535");
    }
    if (e.kind == Endpoint::Kind::kUnix && (e.path.empty() || e.path.size() > 107)) {
      return bad("unix socket path \"" + e.path + "\" must have 1 to 107 characters");
    }
  }
  if (o.workers < 1) return bad("the server needs at least one worker");
  if (o.max_connections < 1 || o.max_connections > kMaxConnectionsLimit) {
    return bad("max_connections " + std::to_string(o.max_connections) + " is not in 1.." +
               std::to_string(kMaxConnectionsLimit));
  }
  if (o.max_head_bytes < 1024 || o.max_head_bytes > std::numeric_limits<std::uint32_t>::max()) {
    return bad("max_head_bytes must be at least 1024");
  }
  for (const auto& [name, value] :
       {std::pair<const char*, std::chrono::milliseconds>{"request_timeout", o.request_timeout},
        {"keep_alive_timeout", o.keep_alive_timeout},
        {"write_timeout", o.write_timeout}}) {
    if (value <= std::chrono::milliseconds::zero()) {
      return bad(std::string(name) + " must be positive");
    }
  }
  return {};
}

// ---------------------------------------------------------------------------------------------
// The server's shared state. Members marked "I/O thread" are used on the I/O thread only.

struct HttpServer::Impl {
  explicit Impl(ServerOptions o)
      : options(std::move(o)), trim_timer(io), free_slots(std::max(1, options.workers)) {}

  ServerOptions options;
  std::map<std::string, RouteEntry> routes;  // before Start; read-only after
  std::string endpoints_text;
  asio::io_context io{1};
  // Keeps io.run() going while a handler is out on a worker with no operation pending.
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> keep_running;
  std::vector<tcp::acceptor> tcp_acceptors;
  std::vector<std::unique_ptr<unix_socket::acceptor>> unix_acceptors;
  std::vector<int> ports;
  asio::steady_timer trim_timer;
  // Made at Start, so that threads inherit the signal mask the daemon has set by then.
  std::optional<asio::thread_pool> workers;
  std::optional<asio::thread_pool> side;
  std::thread io_thread;
  core::LogThrottle throttle;
  MemoryTrimmer trimmer;
  std::array<std::atomic<std::int64_t>, kDropKinds> drops{};
  std::atomic<std::size_t> open{0};
  std::atomic<std::size_t> answering{0};
  std::atomic<bool> start_called{false}, started{false}, stopped{false};

  // I/O thread.
  std::map<std::uint64_t, Connection*> connections;  // each removes itself when it closes
  std::uint64_t next_id = 0;
  int free_slots;
  struct SlotWaiter {
    std::shared_ptr<bool> alive;  // false: the wait was withdrawn
    std::function<void()> granted;
  };
  std::deque<SlotWaiter> slot_waiters;
  bool stopping = false;

  void LogThrottled(const std::string& kind, const std::string& line) {
    throttle.Write(options.log, kind, core::LogLevel::kWarn, line);
  }
  void Dropped(Drop why, const Peer& peer, const std::string& detail) {
    ++drops[static_cast<std::size_t>(why)];
    if (options.on_drop) options.on_drop(why, peer);
    LogThrottled(std::string(DropName(why)),
                 options.name + ": connection from " + peer.Describe() + " closed: " + detail);
  }

  // Work slots (I/O thread): `granted` runs at once or when a slot frees, unless `alive` is
  // false by then.
  void AcquireSlot(std::shared_ptr<bool> alive, std::function<void()> granted) {
    if (free_slots > 0 && slot_waiters.empty()) {
      --free_slots;
      granted();
      return;
    }
    slot_waiters.push_back({std::move(alive), std::move(granted)});
  }
  void ReleaseSlot() {
    while (!slot_waiters.empty()) {
      SlotWaiter w = std::move(slot_waiters.front());
      slot_waiters.pop_front();
      if (*w.alive) {
        asio::post(io, std::move(w.granted));  // the slot passes straight to the waiter
        return;
      }
    }
    ++free_slots;
  }

  std::string EndpointsText() const {
    if (!endpoints_text.empty()) return endpoints_text;
    std::string text;
    for (const auto& [path, route] : routes) {
      if (!text.empty()) text += ", ";
      for (std::size_t i = 0; i < route.methods.size(); ++i) {
        text += (i == 0 ? "" : "|") + route.methods[i];
      }
      text += " " + path;
    }
    return text;
  }

  void ScheduleTrim() {
    trim_timer.expires_after(kTrimInterval);
    trim_timer.async_wait([this](const ErrorCode& ec) {
      if (ec) return;
      if (answering == 0) trimmer.WhenIdle();
      ScheduleTrim();
    });
  }

  // A connection just accepted (I/O thread): admitted, possibly evicting another, or refused.
  bool Admit(const Peer& newcomer) {
    if (stopping) return false;
    if (open < static_cast<std::size_t>(options.max_connections)) return true;
    Connection* oldest = nullptr;
    for (auto& [id, c] : connections) {
      if (c->phase == Phase::kAnswering) continue;
      if (oldest == nullptr || c->since < oldest->since) oldest = c;
    }
    if (oldest == nullptr) {
      Dropped(Drop::kRefused, newcomer,
              "every one of the " + std::to_string(options.max_connections) +
                  " connections allowed has a request being answered");
      return false;
    }
    oldest->Close(Drop::kEvicted, "made room for a new connection (" +
                                      std::to_string(options.max_connections) +
                                      " open): it had had no request answered for " +
                                      Seconds(Clock::now() - oldest->since));
    return true;
  }

  void BeginStop() {
    stopping = true;
    trim_timer.cancel();
    ErrorCode ignored;
    for (tcp::acceptor& a : tcp_acceptors) a.close(ignored);
    for (auto& a : unix_acceptors) a->close(ignored);
    std::vector<Connection*> idle;
    for (auto& [id, c] : connections) {
      if (c->phase != Phase::kAnswering) idle.push_back(c);
    }
    for (Connection* c : idle) c->Close(std::nullopt, "");
  }

  void CloseAll() {
    std::vector<Connection*> all;
    for (auto& [id, c] : connections) all.push_back(c);
    for (Connection* c : all) c->Close(std::nullopt, "");
  }

  template <class Socket>
  void Accept(std::size_t index);
  core::Result<void> ListenTcp(const Endpoint& e);
  core::Result<void> ListenUnix(const Endpoint& e);
  std::vector<std::string> socket_files;  // unix sockets this server made: removed at Stop
};

namespace {

// A reply as Beast writes it; HEAD replies carry the length without the body.
using Reply = http::response<http::string_body>;

// One connection over a stream socket (TCP or unix). Every member runs on the I/O thread, but
// the handler call that Answer posts to a worker or the side thread.
template <class Socket>
class Session final : public Connection, public std::enable_shared_from_this<Session<Socket>> {
 public:
  Session(HttpServer::Impl& server, Socket socket, std::uint64_t id)
      : server_(server), socket_(std::move(socket)), timer_(server.io), id_(id) {}

  void Start() {
    server_.connections[id_] = this;
    ++server_.open;
    ArmTimer(server_.options.request_timeout);  // the first request counts from the accept
    WaitForRequest();
  }

  void Close(std::optional<Drop> why, const std::string& detail) override {
    if (closed_) return;
    closed_ = true;
    if (why) server_.Dropped(*why, peer, detail);
    if (slot_wait_) *slot_wait_ = false;
    timer_.cancel();
    ErrorCode ignored;
    socket_.shutdown(asio::socket_base::shutdown_both, ignored);
    socket_.close(ignored);
    if (phase == Phase::kAnswering) --server_.answering;
    if (holds_slot_) {
      holds_slot_ = false;
      server_.ReleaseSlot();
    }
    server_.connections.erase(id_);
    --server_.open;
  }

 private:
  std::shared_ptr<Session> Self() { return this->shared_from_this(); }

  void SetPhase(Phase p) {
    if (phase == Phase::kAnswering && p != Phase::kAnswering) --server_.answering;
    if (phase != Phase::kAnswering && p == Phase::kAnswering) ++server_.answering;
    phase = p;
    since = Clock::now();
  }

  void ArmTimer(std::chrono::milliseconds after) {
    ++timer_generation_;
    timer_.expires_after(after);
    timer_.async_wait([self = Self(), generation = timer_generation_](const ErrorCode& ec) {
      if (!ec && generation == self->timer_generation_) self->OnTimer();
    });
  }
  void DisarmTimer() {
    ++timer_generation_;
    timer_.cancel();
  }

  void OnTimer() {
    if (closed_) return;
    const ServerOptions& o = server_.options;
    switch (phase) {
      case Phase::kWaiting:
        if (first_) {
          Close(Drop::kRequestTimeout, "it sent nothing within " + Seconds(o.request_timeout));
        } else {
          Close(std::nullopt, "");  // an idle keep-alive connection: not a failure
        }
        return;
      case Phase::kReceiving:
        if (slot_wait_ && *slot_wait_) {
          *slot_wait_ = false;
          slot_wait_.reset();
          Send(Refusal(503, "busy: no worker free within " + Seconds(o.request_timeout) + " (" +
                                std::to_string(o.workers) + " at once)"));
          return;
        }
        timed_out_ = true;
        socket_.cancel();  // the read in flight ends with operation_aborted: OnReadError
        return;
      case Phase::kAnswering:
        Close(Drop::kWriteTimeout, "it did not take its reply within " + Seconds(o.write_timeout));
        return;
    }
  }

  void WaitForRequest() {
    if (buffer_.size() > 0) {  // a pipelined request is already here
      BeginRequest();
      return;
    }
    socket_.async_wait(asio::socket_base::wait_read, [self = Self()](const ErrorCode& ec) {
      if (self->closed_) return;
      if (ec) {
        self->Close(std::nullopt, "");
        return;
      }
      self->BeginRequest();
    });
  }

  void BeginRequest() {
    SetPhase(Phase::kReceiving);
    request_start_ = Clock::now();
    if (!first_) ArmTimer(server_.options.request_timeout);
    received_ = 0;
    timed_out_ = false;
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(server_.options.max_head_bytes));
    parser_->body_limit(server_.options.max_body_bytes);
    http::async_read_header(socket_, buffer_, *parser_,
                            [self = Self()](const ErrorCode& ec, std::size_t n) {
                              self->received_ += n;
                              if (self->closed_) return;
                              if (ec) {
                                self->OnReadError(ec);
                              } else {
                                self->OnHeader();
                              }
                            });
  }

  void OnReadError(const ErrorCode& ec) {
    const ServerOptions& o = server_.options;
    if (timed_out_) {
      server_.Dropped(Drop::kRequestTimeout, peer,
                      "its request did not arrive within " + Seconds(o.request_timeout) + " (" +
                          std::to_string(received_) + " bytes received)");
      Send(Refusal(408, "request not received within " + Seconds(o.request_timeout)));
      return;
    }
    if (ec == http::error::header_limit) {
      server_.Dropped(Drop::kHeadTooLarge, peer,
                      "its request head is over " + std::to_string(o.max_head_bytes) + " bytes");
      Send(Refusal(431, "request head over " + std::to_string(o.max_head_bytes) + " bytes"));
      return;
    }
    if (ec == http::error::body_limit) {
      RefuseBody();
      return;
    }
    if (ec == http::error::end_of_stream || ec == http::error::partial_message ||
        ec == asio::error::eof || ec == asio::error::connection_reset ||
        ec == asio::error::operation_aborted || ec == asio::error::broken_pipe) {
      Close(std::nullopt, "");  // the client went away
      return;
    }
    server_.Dropped(Drop::kBadRequest, peer, "its request is not HTTP/1.1: " + ec.message());
    Send(Refusal(400, "bad request: " + ec.message()));
  }

  void OnHeader() {
    const ServerOptions& o = server_.options;
    const auto length = parser_->content_length();
    if (length && *length > o.max_body_bytes) {
      RefuseBody();  // before the body is read; the connection closes after the reply
      return;
    }
    const bool has_body = parser_->chunked() || length.value_or(0) > 0;
    if (parser_->chunked() || length.value_or(0) > o.unslotted_body_bytes) {
      WaitForSlot([self = Self(), has_body] { self->ReadBody(has_body); });
    } else {
      ReadBody(has_body);
    }
  }

  void ReadBody(bool has_body) {
    if (!has_body || parser_->is_done()) {
      OnRequest();
      return;
    }
    auto read = [self = Self()] {
      http::async_read(self->socket_, self->buffer_, *self->parser_,
                       [self](const ErrorCode& ec, std::size_t n) {
                         self->received_ += n;
                         if (self->closed_) return;
                         if (ec) {
                           self->OnReadError(ec);
                         } else {
                           self->OnRequest();
                         }
                       });
    };
    const auto expect = parser_->get().find(http::field::expect);
    if (expect == parser_->get().end() ||
        !EqualsIgnoreCase(std::string_view(expect->value().data(), expect->value().size()),
                          "100-continue")) {
      read();
      return;
    }
    // The client waits for a go-ahead before it sends the body.
    static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    asio::async_write(socket_, asio::buffer(kContinue),
                      [self = Self(), read](const ErrorCode& ec, std::size_t) {
                        if (self->closed_) return;
                        if (ec) {
                          self->Close(std::nullopt, "");
                        } else {
                          read();
                        }
                      });
  }

  // 413: the body is over max_body_bytes (said by its Content-Length, or found while reading a
  // chunked one). Observed with the request's head, so that an owner can count it by path.
  void RefuseBody() {
    const ServerOptions& o = server_.options;
    server_.Dropped(Drop::kBodyTooLarge, peer,
                    "its request body is over " + std::to_string(o.max_body_bytes) + " bytes");
    Response r = Refusal(
        413, "request body too large: the limit is " + std::to_string(o.max_body_bytes) + " bytes");
    if (o.on_reply) {
      Request head = HeadOf(parser_->get());
      o.on_reply(head, r, ReplyOrigin::kServer, {});
    }
    Send(std::move(r));
  }

  // The request as read so far: everything but the body.
  Request HeadOf(const http::request<http::string_body>& message) const {
    Request request;
    request.method = std::string(message.method_string());
    const std::string_view target(message.target().data(), message.target().size());
    const std::size_t q = target.find('?');
    request.path = std::string(target.substr(0, q));
    if (q != std::string_view::npos) request.query = std::string(target.substr(q + 1));
    for (const auto& field : message) {
      request.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
    }
    request.peer = peer;
    return request;
  }

  // Runs `then` once this request holds a work slot; 503 when none frees within
  // request_timeout. The connection stays evictable meanwhile.
  void WaitForSlot(std::function<void()> then) {
    if (holds_slot_) {
      then();
      return;
    }
    slot_wait_ = std::make_shared<bool>(true);
    ArmTimer(server_.options.request_timeout);
    server_.AcquireSlot(slot_wait_, [self = Self(), then = std::move(then)] {
      if (self->closed_ || !self->slot_wait_ || !*self->slot_wait_) {
        self->server_.ReleaseSlot();
        return;
      }
      self->slot_wait_.reset();
      self->holds_slot_ = true;
      // What is left of the request's own deadline, for its body.
      self->ArmTimer(
          Millis(self->request_start_ + self->server_.options.request_timeout - Clock::now()));
      then();
    });
  }

  void OnRequest() {
    auto& message = parser_->get();
    Request request = HeadOf(message);
    request.body = std::move(message.body());
    keep_alive_ = message.keep_alive();
    head_only_ = message.method() == http::verb::head;
    version_ = message.version();

    const auto it = server_.routes.find(request.path);
    if (it == server_.routes.end()) {
      Refuse(request, 404,
             "no such endpoint: " + request.method + " " + request.path +
                 " (endpoints: " + server_.EndpointsText() + ")",
             {});
      return;
    }
    const RouteEntry& route = it->second;
    const auto has = [&](std::string_view m) {
      return std::find(route.methods.begin(), route.methods.end(), m) != route.methods.end();
    };
    if (!has(request.method) && !(request.method == "HEAD" && has("GET"))) {
      std::string allow, use;
      for (const std::string& m : route.methods) {
        allow += (allow.empty() ? "" : ", ") + m + (m == "GET" ? ", HEAD" : "");
        use += (use.empty() ? "" : " or ") + m;
      }
      Refuse(request, 405,
             request.method + " " + request.path + ": method not allowed (use " + use + ")",
             {{"Allow", allow}});
      return;
    }
    if (route.lane == Lane::kWorker && !holds_slot_) {
      WaitForSlot([self = Self(), request = std::move(request), route = &route]() mutable {
        self->Answer(std::move(request), *route);
      });
      return;
    }
    Answer(std::move(request), route);
  }

  // A reply the server makes itself to a request it read (404, 405): observed and logged.
  void Refuse(const Request& request, int status, const std::string& message,
              std::vector<std::pair<std::string, std::string>> headers) {
    Response r = Refusal(status, message);
    r.headers = std::move(headers);
    server_.LogThrottled(std::to_string(status),
                         server_.options.name + ": " + request.method + " " + request.path + " " +
                             std::to_string(status) + " from " + peer.Describe() + ": " + message);
    if (server_.options.on_reply) server_.options.on_reply(request, r, ReplyOrigin::kServer, {});
    Send(std::move(r));
  }

  // Calls the route's handler where its lane says, then replies.
  void Answer(Request request, const RouteEntry& route) {
    DisarmTimer();  // a handler's time is its own (the extender's bind waits for the API server)
    SetPhase(Phase::kAnswering);
    const Handler* handler = &route.handler;
    auto run = [this, handler, request = std::move(request)]() {
      const auto start = Clock::now();
      Response response = Call(*handler, request);
      if (server_.options.on_reply) {
        server_.options.on_reply(request, response, ReplyOrigin::kHandler, Clock::now() - start);
      }
      if (response.status >= 500) {
        server_.LogThrottled(std::to_string(response.status),
                             server_.options.name + ": " + request.method + " " + request.path +
                                 " " + std::to_string(response.status) + " from " +
                                 peer.Describe() + ": " + response.body.substr(0, 300));
      }
      return response;
    };
    if (route.lane == Lane::kInline) {
      Send(run());
      return;
    }
    asio::thread_pool& pool = route.lane == Lane::kSide ? *server_.side : *server_.workers;
    asio::post(pool, [self = Self(), run = std::move(run)]() mutable {
      auto response = std::make_shared<Response>(run());
      asio::post(self->server_.io, [self, response] {
        if (!self->closed_) self->Send(std::move(*response));
      });
    });
  }

  Response Call(const Handler& handler, const Request& request) const {
    try {
      return handler(request);
    } catch (const std::exception& e) {
      return Refusal(500, std::string("internal error: ") + e.what());
    } catch (...) {
      return Refusal(500, "internal error");
    }
  }

  Response Refusal(int status, const std::string& message) const {
    Response r = Response::Json(status, ErrorJson(server_.options.error_key, message));
    // An error before the request was read whole leaves the stream where it cannot go on.
    r.close = status == 400 || status == 408 || status == 413 || status == 431;
    return r;
  }

  // Writes `response`; then the connection waits for its next request or closes.
  void Send(Response response) {
    if (closed_) return;
    SetPhase(Phase::kAnswering);
    const bool keep_alive = keep_alive_ && !response.close && !server_.stopping && !timed_out_ &&
                            parser_ && parser_->is_done();
    auto reply = std::make_shared<Reply>();
    reply->version(version_ == 10 ? 10 : 11);
    reply->result(static_cast<unsigned>(response.status));
    reply->set(http::field::content_type, response.content_type);
    for (const auto& [name, value] : response.headers) reply->set(name, value);
    reply->keep_alive(keep_alive);
    const std::size_t length = response.body.size();
    if (!head_only_) reply->body() = std::move(response.body);
    reply->content_length(length);
    ArmTimer(server_.options.write_timeout);
    http::async_write(socket_, *reply,
                      [self = Self(), reply, keep_alive](const ErrorCode& ec, std::size_t) {
                        self->Written(ec, keep_alive);
                      });
  }

  void Written(const ErrorCode& ec, bool keep_alive) {
    if (closed_) return;
    if (holds_slot_) {
      holds_slot_ = false;
      server_.ReleaseSlot();
    }
    server_.trimmer.AfterRequest(received_);
    if (ec || !keep_alive) {
      Close(std::nullopt, "");
      return;
    }
    first_ = false;
    head_only_ = false;
    parser_.reset();
    SetPhase(Phase::kWaiting);
    ArmTimer(server_.options.keep_alive_timeout);
    WaitForRequest();
  }

  HttpServer::Impl& server_;
  Socket socket_;
  asio::steady_timer timer_;
  std::uint64_t timer_generation_ = 0;
  const std::uint64_t id_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  Clock::time_point request_start_{};
  std::size_t received_ = 0;
  std::shared_ptr<bool> slot_wait_;  // set while waiting for a work slot
  bool holds_slot_ = false;
  bool first_ = true;
  bool timed_out_ = false;
  bool keep_alive_ = true;
  bool head_only_ = false;
  unsigned version_ = 11;
  bool closed_ = false;
};

Peer PeerOf(tcp::socket& socket) {
  Peer peer;
  ErrorCode ec;
  const auto remote = socket.remote_endpoint(ec);
  if (!ec) {
    peer.address = remote.address().to_string();
    peer.port = remote.port();
  }
  return peer;
}

Peer PeerOf(unix_socket::socket& socket, const std::string& path) {
  Peer peer;
  peer.transport = Peer::Transport::kUnix;
  peer.address = path;
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(socket.native_handle(), SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
    peer.pid = cred.pid;
    peer.uid = cred.uid;
    peer.gid = cred.gid;
  }
  return peer;
}

// The bare reply of a refused connection, sent without waiting (best effort) before closing.
template <class Socket>
void RefuseConnection(Socket& socket, const ServerOptions& o) {
  const std::string body =
      ErrorJson(o.error_key, "too many connections: " + std::to_string(o.max_connections) +
                                 " are open and every one has a request being answered");
  const std::string text =
      "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json; charset=utf-8\r\n"
      "Content-Length: " +
      std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
  (void)::send(socket.native_handle(), text.data(), text.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  ErrorCode ignored;
  socket.shutdown(asio::socket_base::shutdown_both, ignored);
  socket.close(ignored);
}

}  // namespace

template <class Socket>
void HttpServer::Impl::Accept(std::size_t index) {
  auto on_accept = [this, index](const ErrorCode& ec, Socket socket) {
    if (ec == asio::error::operation_aborted || stopping) return;
    if (!ec) {
      Peer peer;
      if constexpr (std::is_same_v<Socket, tcp::socket>) {
        ErrorCode ignored;
        socket.set_option(tcp::no_delay(true), ignored);
        peer = PeerOf(socket);
      } else {
        peer = PeerOf(socket, options.listen[index].path);
      }
      if (Admit(peer)) {
        auto session = std::make_shared<Session<Socket>>(*this, std::move(socket), next_id++);
        session->peer = std::move(peer);
        session->Start();
      } else {
        RefuseConnection(socket, options);
      }
    }
    // EMFILE and the like: keep accepting (the next accept may succeed once sockets close).
    Accept<Socket>(index);
  };
  if constexpr (std::is_same_v<Socket, tcp::socket>) {
    std::size_t tcp_index = 0;
    for (std::size_t i = 0; i < index; ++i) {
      tcp_index += options.listen[i].kind == Endpoint::Kind::kTcp ? 1U : 0U;
    }
    tcp_acceptors[tcp_index].async_accept(std::move(on_accept));
  } else {
    std::size_t unix_index = 0;
    for (std::size_t i = 0; i < index; ++i) {
      unix_index += options.listen[i].kind == Endpoint::Kind::kUnix ? 1U : 0U;
    }
    unix_acceptors[unix_index]->async_accept(std::move(on_accept));
  }
}

namespace {

std::string ListenError(const Endpoint& e, const ErrorCode& ec) {
  std::string reason = ec.message();
  if (ec == boost::system::errc::address_not_available) reason = "not an address of this host";
  return "cannot listen on " + e.Describe() + ": " + reason;
}

core::Result<tcp::endpoint> Resolve(asio::io_context& io, const Endpoint& e) {
  ErrorCode ec;
  const auto address = asio::ip::make_address(e.host, ec);
  if (!ec) return tcp::endpoint(address, static_cast<unsigned short>(e.port));
  tcp::resolver resolver(io);
  const auto results = resolver.resolve(
      e.host, std::to_string(e.port), tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || results.empty()) {
    return MakeError(core::ErrorCode::kFailedPrecondition,
                     "cannot listen on " + e.Describe() + ": cannot resolve \"" + e.host + "\"" +
                         (ec ? ": " + ec.message() : std::string()));
  }
  return results.begin()->endpoint();
}

}  // namespace

// ---------------------------------------------------------------------------------------------

core::Result<void> HttpServer::Impl::ListenTcp(const Endpoint& e) {
  auto where = Resolve(io, e);
  if (!where) return tl::unexpected(where.error());
  tcp::acceptor acceptor(io);
  ErrorCode ec;
  // SO_REUSEADDR only lets a restarted daemon bind while old connections linger in TIME_WAIT;
  // SO_REUSEPORT, which would let a second daemon share the port, is not set.
  if (acceptor.open(where->protocol(), ec) ||
      acceptor.set_option(asio::socket_base::reuse_address(true), ec) ||
      acceptor.bind(*where, ec) || acceptor.listen(asio::socket_base::max_listen_connections, ec)) {
    return MakeError(core::ErrorCode::kFailedPrecondition, ListenError(e, ec));
  }
  ports.push_back(acceptor.local_endpoint().port());
  tcp_acceptors.push_back(std::move(acceptor));
  return {};
}

core::Result<void> HttpServer::Impl::ListenUnix(const Endpoint& e) {
  struct stat st {};
  if (::lstat(e.path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return MakeError(
          core::ErrorCode::kFailedPrecondition,
          "cannot listen on " + e.Describe() + ": the path exists and is not a socket");
    }
    ::unlink(e.path.c_str());  // a stale socket of an earlier run
  }
  auto acceptor = std::make_unique<unix_socket::acceptor>(io);
  ErrorCode ec;
  if (acceptor->open(unix_socket(), ec) || acceptor->bind(unix_socket::endpoint(e.path), ec)) {
    return MakeError(core::ErrorCode::kFailedPrecondition, ListenError(e, ec));
  }
  socket_files.push_back(e.path);
  // The mode is set before anyone can connect (listen), so no peer slips in under a wider one.
  if (::chmod(e.path.c_str(), e.mode) != 0) {
    const int error = errno;
    return MakeError(core::ErrorCode::kFailedPrecondition,
                     "cannot set the mode of " + e.path + ": " + std::strerror(error));
  }
  if (acceptor->listen(asio::socket_base::max_listen_connections, ec)) {
    return MakeError(core::ErrorCode::kFailedPrecondition, ListenError(e, ec));
  }
  ports.push_back(0);
  unix_acceptors.push_back(std::move(acceptor));
  return {};
}

HttpServer::HttpServer(ServerOptions options) : impl_(std::make_shared<Impl>(std::move(options))) {}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Route(std::string path, std::vector<std::string> methods, Lane lane,
                       Handler handler) {
  impl_->routes[std::move(path)] = RouteEntry{std::move(methods), lane, std::move(handler)};
}

void HttpServer::SetEndpointsText(std::string text) { impl_->endpoints_text = std::move(text); }

core::Result<void> HttpServer::Start() {
  Impl& m = *impl_;
  if (m.start_called.exchange(true)) {
    return MakeError(core::ErrorCode::kFailedPrecondition, m.options.name + " was started before");
  }
  if (auto valid = ValidateOptions(m.options); !valid) return valid;
  for (const Endpoint& e : m.options.listen) {
    auto listening = e.kind == Endpoint::Kind::kTcp ? m.ListenTcp(e) : m.ListenUnix(e);
    if (!listening) {  // nothing is left listening
      m.tcp_acceptors.clear();
      m.unix_acceptors.clear();
      for (const std::string& path : m.socket_files) ::unlink(path.c_str());
      m.socket_files.clear();
      return listening;
    }
  }
  for (std::size_t i = 0; i < m.options.listen.size(); ++i) {
    if (m.options.listen[i].kind == Endpoint::Kind::kTcp) {
      m.Accept<tcp::socket>(i);
    } else {
      m.Accept<unix_socket::socket>(i);
    }
  }
  m.ScheduleTrim();
  m.keep_running.emplace(m.io.get_executor());
  m.workers.emplace(static_cast<std::size_t>(m.options.workers));
  m.side.emplace(1);
  m.io_thread = std::thread([&m] { m.io.run(); });
  m.started = true;
  return {};
}

void HttpServer::Stop(std::chrono::milliseconds grace) {
  Impl& m = *impl_;
  if (!m.started || m.stopped.exchange(true)) return;
  asio::post(m.io, [&m] { m.BeginStop(); });
  const auto give_up = Clock::now() + grace;
  while (m.open > 0 && Clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  asio::post(m.io, [&m] {
    m.CloseAll();
    m.keep_running.reset();
    m.io.stop();
  });
  m.io_thread.join();
  m.workers->join();
  m.side->join();
  for (const std::string& path : m.socket_files) ::unlink(path.c_str());
}

bool HttpServer::running() const { return impl_->started && !impl_->stopped; }

int HttpServer::port(std::size_t index) const {
  if (index < impl_->ports.size()) return impl_->ports[index];
  return index < impl_->options.listen.size() ? impl_->options.listen[index].port : 0;
}

std::size_t HttpServer::open_connections() const { return impl_->open; }

std::int64_t HttpServer::dropped(Drop drop) const {
  return impl_->drops[static_cast<std::size_t>(drop)];
}

const ServerOptions& HttpServer::options() const { return impl_->options; }

}  // namespace gpumux::net
