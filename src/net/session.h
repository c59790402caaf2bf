// One connection of the server, over TCP or a unix socket (internal to net; included by
// http_server.cc only): its request read under deadlines and limits, its handler called where
// the route's lane says, its reply written.
#pragma once

#include <boost/asio/ssl/error.hpp>

#include "src/net/server_state.h"

namespace gpumux::net::detail {

// A socket whose readability a session can wait for without reading (plain TCP and unix
// sockets, not TlsSocket: Session::WaitForRequest).
template <class Socket>
concept WaitsForReadability = requires(Socket& s) {
  s.async_wait(asio::socket_base::wait_read, [](const ErrorCode&) {});
};
static_assert(WaitsForReadability<tcp::socket>);
static_assert(WaitsForReadability<unix_socket::socket>);

// A reply as Beast writes it; HEAD replies carry the length without the body.
using Reply = http::response<http::string_body>;

// One connection over a stream socket (TCP or unix). Every member runs on the I/O thread, but
// the handler call that Answer posts to a worker or the side thread.
template <class Socket>
class Session final : public Connection, public std::enable_shared_from_this<Session<Socket>> {
 public:
  Session(HttpServer::Impl& server, Socket socket, std::uint64_t id)
      : server_(server),
        socket_(std::move(socket)),
        timer_(server.io),
        id_(id),
        buffer_(MaxBufferBytes(server.options)) {}

  void Start() {
    server_.connections[id_] = this;
    ++server_.open;
    deadline_ = Clock::now() + server_.options.request_timeout;
    ArmTimer(server_.options.request_timeout);  // the first request counts from the accept
    if constexpr (requires(Socket & s) { s.async_handshake([](const ErrorCode&) {}); }) {
      socket_.async_handshake([self = Self()](const ErrorCode& ec) {
        if (self->closed_) return;
        if (ec) {
          self->Close(Drop::kBadRequest, "TLS handshake failed: " + ec.message());
          return;
        }
        self->WaitForRequest();
      });
    } else {
      WaitForRequest();
    }
  }

  void Close(std::optional<Drop> why, const std::string& detail) override {
    if (closed_) return;
    closed_ = true;
    if (why) server_.Dropped(*why, peer, detail);
    if (slot_wait_) *slot_wait_ = false;
    if (budget_wait_) *budget_wait_ = false;
    timer_.cancel();
    ErrorCode ignored;
    socket_.shutdown(asio::socket_base::shutdown_both, ignored);
    socket_.close(ignored);
    if (phase == Phase::kAnswering) --server_.answering;
    ReleaseSlotAndBudget();
    server_.connections.erase(id_);
    --server_.open;
  }

 private:
  std::shared_ptr<Session> Self() { return this->shared_from_this(); }

  void ReleaseSlotAndBudget() {
    if (holds_slot_) {
      holds_slot_ = false;
      server_.ReleaseSlot();
    }
    if (budget_held_ > 0) {
      server_.ReleaseBudget(budget_held_);
      budget_held_ = 0;
    }
  }

  // The client closed or reset the connection (or the server cancelled the read). A TLS client
  // that closes without a close_notify (most do, between requests) is stream_truncated.
  static bool ClientWentAway(const ErrorCode& ec) {
    return ec == asio::error::eof || ec == asio::error::connection_reset ||
           ec == asio::error::operation_aborted || ec == asio::error::broken_pipe ||
           ec == asio::ssl::error::stream_truncated;
  }

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
      case Phase::kReceiving: {
        if (slot_wait_ && *slot_wait_) {
          *slot_wait_ = false;
          slot_wait_.reset();
          Send(Refusal(503, "busy: no worker free within " + Seconds(o.request_timeout) + " (" +
                                std::to_string(o.workers) + " at once)"));
          return;
        }
        const auto now = Clock::now();
        const bool before_deadline = deadline_ - now > std::chrono::milliseconds(1);
        if (budget_wait_ && *budget_wait_) {
          if (before_deadline) {  // a rate check while a chunked body waits: it is not owed
            ArmTimer(Millis(deadline_ - now));
            return;
          }
          *budget_wait_ = false;
          budget_wait_.reset();
          Send(Refusal(503, "busy: " + std::to_string(server_.body_budget) +
                                " bytes of request bodies may be held at once, and not enough "
                                "of them freed within " +
                                Seconds(o.request_timeout)));
          return;
        }
        if (reading_body_ && before_deadline) {
          if (BodyTooSlow(now)) {
            too_slow_ = true;
            timed_out_ = true;
            socket_.cancel();
            return;
          }
          ArmTimer(Millis(std::min<Clock::duration>(deadline_ - now, kBodyRateCheck)));
          return;
        }
        timed_out_ = true;
        socket_.cancel();  // the read in flight ends with operation_aborted: OnReadError
        return;
      }
      case Phase::kAnswering:
        Close(Drop::kWriteTimeout, "it did not take its reply within " + Seconds(o.write_timeout));
        return;
    }
  }

  // Until the next request's first bytes: a plain socket is waited on for readability (an idle
  // connection holds no buffer); a TLS stream is read, a little, because what OpenSSL has
  // already taken from the socket would never wake a wait on it (tls_socket.h). Either way the
  // phase stays kWaiting, under the keep-alive (or the first request's) deadline.
  void WaitForRequest() {
    if (buffer_.size() > 0) {  // a pipelined request is already here
      BeginRequest();
      return;
    }
    if constexpr (WaitsForReadability<Socket>) {
      socket_.async_wait(asio::socket_base::wait_read, [self = Self()](const ErrorCode& ec) {
        if (self->closed_) return;
        if (ec) {
          self->Close(std::nullopt, "");
          return;
        }
        self->BeginRequest();
      });
    } else {
      socket_.async_read_some(
          buffer_.prepare(kFirstRead), [self = Self()](const ErrorCode& ec, std::size_t n) {
            if (self->closed_) return;
            if (ec) {
              // Gone, or closed idle; a broken record or an alert is a bad request, as when
              // it comes in the middle of one (nothing can be answered through it).
              self->Close(ClientWentAway(ec) ? std::nullopt : std::optional(Drop::kBadRequest),
                          "TLS: " + ec.message());
              return;
            }
            self->buffer_.commit(n);
            self->BeginRequest(n);
          });
    }
  }

  // `received`: bytes of it already read (a TLS connection's wait reads the first ones).
  void BeginRequest(std::size_t received = 0) {
    SetPhase(Phase::kReceiving);
    if (!first_) {
      deadline_ = Clock::now() + server_.options.request_timeout;
      ArmTimer(server_.options.request_timeout);
    }
    received_ = received;
    timed_out_ = false;
    too_slow_ = false;
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
    if (too_slow_) {
      server_.Dropped(Drop::kRequestTimeout, peer,
                      "its request body arrived at " + std::to_string(BodyRate(Clock::now())) +
                          " bytes/s, below the minimum of " + std::to_string(o.min_body_rate) +
                          " bytes/s (" + std::to_string(received_) + " bytes received)");
      Send(Refusal(
          408, "request body arrived slower than " + std::to_string(o.min_body_rate) + " bytes/s"));
      return;
    }
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
    if (ec == http::error::buffer_overflow) {
      // What no limit of Beast's counts: a chunk-size line (its extension) or a trailer that
      // outgrew the read buffer's bound.
      server_.Dropped(Drop::kHeadTooLarge, peer,
                      "a chunk line or trailer of its request is over " +
                          std::to_string(buffer_.max_size()) + " bytes");
      Send(Refusal(
          431, "a chunk line or trailer over " + std::to_string(buffer_.max_size()) + " bytes"));
      return;
    }
    if (ec == http::error::end_of_stream || ec == http::error::partial_message ||
        ClientWentAway(ec)) {
      Close(std::nullopt, "");
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
    // A body holds no work slot while it arrives (the handler takes one); a large one holds its
    // size from the body budget, reserved whole when it is declared.
    if (length && *length > o.unslotted_body_bytes) {
      WaitForBudget(*length, [self = Self()] { self->ReadBody(true); });
    } else {
      ReadBody(has_body);
    }
  }

  // The body's rate counts from now; its first check after body_rate_grace.
  void StartBodyRate() {
    const ServerOptions& o = server_.options;
    body_start_ = Clock::now();
    body_base_ = received_;
    if (o.min_body_rate > 0) {
      ArmTimer(Millis(
          std::min<Clock::duration>(deadline_ - body_start_, o.body_rate_grace + kBodyRateCheck)));
    }
  }

  // The rate of the body so far, from its head (bytes/s).
  std::size_t BodyRate(Clock::time_point now) const {
    const double seconds = std::chrono::duration<double>(now - body_start_).count();
    const std::size_t bytes = received_ - body_base_;
    return seconds <= 0 ? bytes : static_cast<std::size_t>(static_cast<double>(bytes) / seconds);
  }
  bool BodyTooSlow(Clock::time_point now) const {
    const ServerOptions& o = server_.options;
    const auto counted = now - body_start_ - o.body_rate_grace;
    if (o.min_body_rate == 0 || counted <= Clock::duration::zero()) return false;
    const double owed =
        static_cast<double>(o.min_body_rate) * std::chrono::duration<double>(counted).count();
    return static_cast<double>(received_ - body_base_) < owed;
  }

  // Runs `then` once this request holds `bytes` more of the body budget; 503 when they do not
  // free before the request's deadline (OnTimer). The connection stays evictable meanwhile.
  void WaitForBudget(std::size_t bytes, std::function<void()> then) {
    budget_wait_ = std::make_shared<bool>(true);
    server_.AcquireBudget(bytes, budget_wait_, [self = Self(), bytes, then = std::move(then)] {
      if (self->closed_ || !self->budget_wait_ || !*self->budget_wait_) {
        self->server_.ReleaseBudget(bytes);
        return;
      }
      self->budget_wait_.reset();
      self->budget_held_ += bytes;
      then();
    });
  }

  void ReadBody(bool has_body) {
    if (!has_body || parser_->is_done()) {
      OnRequest();
      return;
    }
    // Room for the body in few reads: Beast reads at most the buffer's free capacity at a time
    // (512 bytes when it is empty), and a 60 KB body read 512 bytes at a time cost ~120 reads
    // and as many waits (the extender's filter at 5,000 nodes took 0.63 ms instead of 0.41).
    const std::size_t expected = parser_->content_length().value_or(kBodyReadChunk);
    buffer_.reserve(std::min({expected + 1024, kMaxBufferReserve, buffer_.max_size()}));
    auto read = [self = Self()] {
      self->reading_body_ = true;
      self->StartBodyRate();
      self->ReadBodyPiece();
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

  // Reads what has arrived of the body; then the rest, once a chunked body that has grown past
  // what it holds of the budget has taken more.
  void ReadBodyPiece() {
    http::async_read_some(
        socket_, buffer_, *parser_, [self = Self()](const ErrorCode& ec, std::size_t n) {
          self->received_ += n;
          if (self->closed_) return;
          if (ec) {
            self->reading_body_ = false;
            self->OnReadError(ec);
            return;
          }
          if (self->parser_->is_done()) {
            self->reading_body_ = false;
            self->OnRequest();
            return;
          }
          const ServerOptions& o = self->server_.options;
          const std::size_t size = self->parser_->get().body().size();
          if (self->parser_->chunked() && size > o.unslotted_body_bytes &&
              size + kBodyReadChunk > self->budget_held_ && self->budget_held_ < o.max_body_bytes) {
            const std::size_t want = std::min(o.max_body_bytes, size + kBodyBudgetStep);
            self->WaitForBudget(want - self->budget_held_, [self] {
              self->StartBodyRate();  // the wait is not the client's
              self->ReadBodyPiece();
            });
            return;
          }
          self->ReadBodyPiece();
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
    ArmTimer(server_.options.request_timeout);  // the request is whole: a wait of its own
    server_.AcquireSlot(slot_wait_, [self = Self(), then = std::move(then)] {
      if (self->closed_ || !self->slot_wait_ || !*self->slot_wait_) {
        self->server_.ReleaseSlot();
        return;
      }
      self->slot_wait_.reset();
      self->holds_slot_ = true;
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
    if ((route.lane == Lane::kWorker || route.lane == Lane::kCompute) && !holds_slot_) {
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
    if (route.lane == Lane::kInline || route.lane == Lane::kCompute) {
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
    const bool keep_alive = keep_alive_ && !response.close && !server_.stopping &&
                            !server_.draining && !timed_out_ && parser_ && parser_->is_done();
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
    writing = true;
    write_started = Clock::now();
    http::async_write(socket_, *reply,
                      [self = Self(), reply, keep_alive](const ErrorCode& ec, std::size_t) {
                        self->writing = false;
                        self->Written(ec, keep_alive);
                      });
  }

  void Written(const ErrorCode& ec, bool keep_alive) {
    if (closed_) return;
    ReleaseSlotAndBudget();
    server_.trimmer.AfterRequest(received_);
    // A stop that began while the reply was being written closes the connection too (the reply
    // said keep-alive, but an idle connection may always be closed).
    if (ec || !keep_alive || server_.stopping) {
      Close(std::nullopt, "");
      return;
    }
    first_ = false;
    served = true;
    head_only_ = false;
    parser_.reset();
    // An idle keep-alive connection does not keep the room of a large body.
    if (buffer_.size() == 0 && buffer_.capacity() > kBodyReadChunk) buffer_.shrink_to_fit();
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
  Clock::time_point deadline_{};  // the request's (request_timeout from its first byte)
  std::size_t received_ = 0;
  std::shared_ptr<bool> slot_wait_;  // set while waiting for a work slot
  bool holds_slot_ = false;
  std::shared_ptr<bool> budget_wait_;  // set while waiting for the body budget
  std::size_t budget_held_ = 0;
  bool reading_body_ = false;  // since body_start_, when received_ was body_base_
  Clock::time_point body_start_{};
  std::size_t body_base_ = 0;
  bool too_slow_ = false;
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
  if (peer.pid > 0) peer.process = std::make_shared<PeerProcess>(socket.native_handle(), peer.pid);
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

}  // namespace gpumux::net::detail
