// The server's shared state and the helpers its connections use (internal to net; included by
// http_server.cc only).
#pragma once

#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/asio/ssl/context.hpp>
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
#include "gpumux/net/http_server.h"
#include "gpumux/net/process_metrics.h"

namespace gpumux::net {
namespace detail {

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
// The read buffer of a connection is grown to its body's size (at most kMaxBufferReserve) before
// the body is read, and given back after the request; a chunked body reads kBodyReadChunk at a
// time.
constexpr std::size_t kBodyReadChunk = std::size_t{64} << 10;
constexpr std::size_t kMaxBufferReserve = std::size_t{1} << 20;
// A chunked body over unslotted_body_bytes takes the body budget this much ahead of its size.
constexpr std::size_t kBodyBudgetStep = std::size_t{1} << 20;
// While a body arrives, its rate is checked this often.
constexpr std::chrono::milliseconds kBodyRateCheck{500};
// A TLS connection waits for its next request by reading at most this much of it.
constexpr std::size_t kFirstRead = 4096;

// The most a connection's read buffer holds: a head (max_head_bytes), or the room a body is read
// into (kMaxBufferReserve), and a first read. The body itself goes into the request's string as
// it is parsed (bounded by max_body_bytes); what the buffer must hold whole beyond that is a
// chunk-size line with its extension, or a trailer, which Beast's limits do not count: past this
// bound the read fails (buffer_overflow: 431) instead of growing the buffer without end.
inline std::size_t MaxBufferBytes(const ServerOptions& o) {
  return std::max(o.max_head_bytes, kMaxBufferReserve) + kFirstRead;
}

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
  kReceiving,  // its request is arriving, or waits for the body budget or a work slot
  kAnswering,  // its request is being answered: evicted only when its reply is not being read
};

// A reply still being written after this is not being read (a loopback or LAN client takes a
// small reply at once): its connection may make room for a newcomer, as an idle one may.
constexpr std::chrono::milliseconds kUnreadReplyGrace{250};

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
  bool writing = false;                    // a reply is being written, since write_started
  Clock::time_point write_started{};
  bool served = false;  // has had a reply written (an idle one in kWaiting is kept alive)
  Peer peer;
};

}  // namespace detail

// Not every libc names it yet (Debian 12's does not): the value of asm-generic/socket.h, which
// x86-64 and arm64 use. An older kernel refuses it (ENOPROTOOPT) and the start time serves.
#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif

class PeerProcess {
 public:
  // The peer of unix socket `fd`, whose SO_PEERCRED pid is `pid` (> 0).
  PeerProcess(int fd, std::int64_t pid) : start_time_(ProcessStartTime(pid)) {
    int pidfd = -1;
    socklen_t len = sizeof pidfd;
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &len) == 0 && pidfd >= 0) {
      pidfd_ = pidfd;
    }
  }
  ~PeerProcess() {
    if (pidfd_ >= 0) ::close(pidfd_);
  }
  PeerProcess(const PeerProcess&) = delete;
  PeerProcess& operator=(const PeerProcess&) = delete;

  bool Gone(std::int64_t pid) const {
    if (pidfd_ >= 0) {
      // A pidfd is readable once its process has exited; the pid is not given to another
      // process before that.
      pollfd p{pidfd_, POLLIN, 0};
      return ::poll(&p, 1, 0) != 0;
    }
    if (!start_time_) return true;  // it had gone before it was accepted
    // Exited and its pid reused, or no longer there at all.
    return ProcessStartTime(pid) != start_time_;
  }

 private:
  int pidfd_ = -1;
  std::optional<std::uint64_t> start_time_;
};

using namespace detail;  // NOLINT(google-build-using-namespace): the net module's own helpers

struct HttpServer::Impl {
  explicit Impl(ServerOptions o)
      : options(std::move(o)),
        trim_timer(io),
        free_slots(std::max(1, options.workers)),
        body_budget(options.body_budget_bytes != 0
                        ? options.body_budget_bytes
                        : static_cast<std::size_t>(std::max(1, options.workers)) *
                              options.max_body_bytes),
        budget_left(body_budget) {}

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
  const std::size_t body_budget;  // bytes of large bodies held at once (ServerOptions)
  std::size_t budget_left;
  struct BudgetWaiter {
    std::size_t bytes;
    std::shared_ptr<bool> alive;  // false: the wait was withdrawn
    std::function<void()> granted;
  };
  std::deque<BudgetWaiter> budget_waiters;
  bool stopping = false;
  bool draining = false;  // replies close their connections (Drain)

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

  // The body budget (I/O thread), first come first served: `granted` runs at once or when
  // enough is released, unless `alive` is false by then.
  void AcquireBudget(std::size_t bytes, std::shared_ptr<bool> alive,
                     std::function<void()> granted) {
    while (!budget_waiters.empty() && !*budget_waiters.front().alive) budget_waiters.pop_front();
    if (budget_waiters.empty() && bytes <= budget_left) {
      budget_left -= bytes;
      granted();
      return;
    }
    budget_waiters.push_back({bytes, std::move(alive), std::move(granted)});
  }
  void ReleaseBudget(std::size_t bytes) {
    budget_left += bytes;
    while (!budget_waiters.empty()) {
      BudgetWaiter& w = budget_waiters.front();
      if (*w.alive) {
        if (w.bytes > budget_left) return;
        budget_left -= w.bytes;
        asio::post(io, std::move(w.granted));
      }
      budget_waiters.pop_front();
    }
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
    // The connection that has waited longest without a request being answered; else the one
    // whose reply has gone unread longest (a client that pipelines and never reads would
    // otherwise hold its connection "being answered" until the write timeout).
    const auto now = Clock::now();
    Connection* oldest = nullptr;
    Connection* unread = nullptr;
    for (auto& [id, c] : connections) {
      if (c->phase == Phase::kAnswering) {
        if (c->writing && now - c->write_started > kUnreadReplyGrace &&
            (unread == nullptr || c->write_started < unread->write_started)) {
          unread = c;
        }
        continue;
      }
      if (oldest == nullptr || c->since < oldest->since) oldest = c;
    }
    if (oldest == nullptr && unread == nullptr) {
      Dropped(Drop::kRefused, newcomer,
              "every one of the " + std::to_string(options.max_connections) +
                  " connections allowed has a request being answered");
      return false;
    }
    if (oldest != nullptr) {
      oldest->Close(Drop::kEvicted, "made room for a new connection (" +
                                        std::to_string(options.max_connections) +
                                        " open): it had had no request answered for " +
                                        Seconds(now - oldest->since));
    } else {
      unread->Close(Drop::kEvicted, "made room for a new connection (" +
                                        std::to_string(options.max_connections) +
                                        " open): its reply had gone unread for " +
                                        Seconds(now - unread->write_started));
    }
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

  // Drain: from now on every reply closes its connection; idle keep-alive ones close now (a
  // connection that has sent nothing yet is left to send its request). With reuse_port the TCP
  // listeners close: the port's other processes take the new connections.
  void BeginDrain() {
    draining = true;
    ErrorCode ignored;
    if (options.reuse_port) {
      for (tcp::acceptor& a : tcp_acceptors) a.close(ignored);
    }
    std::vector<Connection*> idle;
    for (auto& [id, c] : connections) {
      if (c->phase == Phase::kWaiting && c->served) idle.push_back(c);
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
  template <class Socket>
  void StartSession(Socket socket, Peer peer);
  core::Result<void> ListenTcp(const Endpoint& e);
  core::Result<void> ListenUnix(const Endpoint& e);
  std::vector<std::string> socket_files;  // unix sockets this server made: removed at Stop
  // With options.tls: every TCP endpoint's (I/O thread; SetTls swaps it for new connections).
  std::shared_ptr<asio::ssl::context> tls_context;
};

}  // namespace gpumux::net
