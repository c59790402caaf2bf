#include "gpumux/extender/extender_server.h"

#include <httplib.h>
#include <malloc.h>
#include <netdb.h>
#include <poll.h>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <future>
#include <limits>
#include <list>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

namespace gpumux::extender {
namespace {

using core::ErrorCode;
using core::MakeError;
using nlohmann::json;
using SteadyClock = std::chrono::steady_clock;

// The charset parameter matters: cpp-httplib gzips a reply whose Content-Type is exactly
// "application/json" when the client accepts gzip (kube-scheduler's Go client always does), and
// compressing tens of MB of NodeList for a loopback peer costs far more than it saves.
constexpr const char* kJsonType = "application/json; charset=utf-8";
constexpr const char* kTextType = "text/plain; charset=utf-8";
constexpr const char* kMetricsType = "text/plain; version=0.0.4; charset=utf-8";

constexpr std::array<Verb, 4> kVerbs{Verb::kFilter, Verb::kPrioritize, Verb::kBind, Verb::kPreempt};

std::size_t VerbIndex(Verb verb) { return static_cast<std::size_t>(verb); }

std::string ErrorBody(std::string_view message) {
  return json{{"Error", message}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

bool IsSegmentChar(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '~' || c == '-';
}

// "application/json", "Application/JSON; charset=UTF-8" and "" (absent) are JSON.
bool IsJsonContentType(std::string_view value) {
  const std::size_t semi = value.find(';');
  std::string_view type = value.substr(0, semi);
  while (!type.empty() && (type.front() == ' ' || type.front() == '\t')) type.remove_prefix(1);
  while (!type.empty() && (type.back() == ' ' || type.back() == '\t')) type.remove_suffix(1);
  if (type.empty()) return semi == std::string_view::npos;
  constexpr std::string_view kJson = "application/json";
  return type.size() == kJson.size() &&
         std::equal(type.begin(), type.end(), kJson.begin(), [](char a, char b) {
           return (a >= 'A' && a <= 'Z' ? static_cast<char>(a - 'A' + 'a') : a) == b;
         });
}

std::string FormatMillis(SteadyClock::duration d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f ms", std::chrono::duration<double, std::milli>(d).count());
  return buf;
}

// The first line of a reply body, cut short, for a log line.
std::string Excerpt(std::string_view body) {
  constexpr std::size_t kMax = 300;
  std::string_view line = body.substr(0, body.find('\n'));
  std::string out(line.substr(0, kMax));
  if (line.size() > kMax || line.size() < body.size()) out += " ...";
  return out;
}

// ---------------------------------------------------------------------------------------------
// Metrics.

class Metrics {
 public:
  Metrics()
      : registry_(std::make_shared<prometheus::Registry>()),
        requests_(prometheus::BuildCounter()
                      .Name("gpumux_extender_requests_total")
                      .Help("Scheduler extender requests, by verb and HTTP status code")
                      .Register(*registry_)),
        durations_(prometheus::BuildHistogram()
                       .Name("gpumux_extender_request_duration_seconds")
                       .Help("Time to answer a scheduler extender request, body parsing "
                             "included, by verb")
                       .Register(*registry_)),
        placements_(prometheus::BuildCounter()
                        .Name("gpumux_extender_placements_total")
                        .Help("Pods bound by the extender (GPUs granted and Binding created)")
                        .Register(*registry_)
                        .Add({})),
        failures_(prometheus::BuildCounter()
                      .Name("gpumux_extender_failures_total")
                      .Help("Extender requests that did not succeed, by verb and reason")
                      .Register(*registry_)),
        nodes_(Gauge("gpumux_extender_nodes", "Nodes in the extender's cluster state")),
        gpus_(Gauge("gpumux_extender_gpus", "GPUs on the nodes in the cluster state")),
        grants_(prometheus::BuildGauge()
                    .Name("gpumux_extender_grants")
                    .Help("GPU grants by state: bound (the pod is bound to the node), assumed "
                          "(bind picked the GPUs), binding (the Binding was sent or its outcome "
                          "is unknown), conflict (bound, but not in the ledger)")
                    .Register(*registry_)),
        grants_bound_(grants_.Add({{"state", "bound"}})),
        grants_assumed_(grants_.Add({{"state", "assumed"}})),
        grants_binding_(grants_.Add({{"state", "binding"}})),
        grants_conflict_(grants_.Add({{"state", "conflict"}})),
        unusable_nodes_(Gauge("gpumux_extender_unusable_nodes",
                              "Nodes gpumux cannot use (their object does not decode: see "
                              "/inspect for why)")),
        conflicts_(Gauge("gpumux_extender_grant_conflicts",
                         "Grants recorded on pods that do not fit the ledger (kept out of it)")),
        unreadable_(Gauge("gpumux_extender_unreadable_grants",
                          "gpumux.io/grant annotations seen that did not decode (ignored)")),
        synced_(Gauge("gpumux_extender_synced",
                      "1 once the cluster state has listed nodes and pods from the API server")),
        expired_(prometheus::BuildCounter()
                     .Name("gpumux_extender_grants_expired_total")
                     .Help("Assumed grants released because their pod was not bound in time")
                     .Register(*registry_)
                     .Add({})),
        rebuilds_(prometheus::BuildCounter()
                      .Name("gpumux_extender_state_rebuilds_total")
                      .Help("Rebuilds of the ledger after a change of the node set")
                      .Register(*registry_)
                      .Add({})),
        info_(prometheus::BuildGauge()
                  .Name("gpumux_extender_info")
                  .Help("Always 1; the label names the placement policy")
                  .Register(*registry_)),
        connections_(Gauge("gpumux_extender_connections", "Open HTTP connections")),
        observed_sets_(Gauge("gpumux_extender_observed_sets",
                             "Learned interference sets (observations from the node "
                             "coordinators, --observations-from) in the co-location profile in "
                             "use")),
        profile_swaps_(prometheus::BuildCounter()
                           .Name("gpumux_extender_profile_swaps_total")
                           .Help("Co-location profiles swapped in because the observations "
                                 "changed")
                           .Register(*registry_)
                           .Add({})),
        observation_failures_(prometheus::BuildCounter()
                                  .Name("gpumux_extender_observation_read_failures_total")
                                  .Help("Reads of the observations that failed (the profile in "
                                        "use was kept)")
                                  .Register(*registry_)
                                  .Add({})),
        dropped_(prometheus::BuildCounter()
                     .Name("gpumux_extender_connections_dropped_total")
                     .Help("HTTP connections the server closed, by reason: request_timeout "
                           "(the request did not arrive in time), head_too_large, "
                           "body_too_large, write_timeout (the reply was not taken in time), "
                           "evicted (closed to admit a new connection at the connection "
                           "limit), refused (503 at the limit)")
                     .Register(*registry_)) {
    // 50 us .. 5 s: a filter over thousands of cached nodes takes well under a millisecond,
    // a full NodeList tens of ms, a bind two API round trips.
    const prometheus::Histogram::BucketBoundaries buckets{
        50e-6, 100e-6, 250e-6, 500e-6, 1e-3,   2.5e-3, 5e-3, 10e-3,
        25e-3, 50e-3,  100e-3, 250e-3, 500e-3, 1.0,    2.5,  5.0};
    for (Verb verb : kVerbs) {
      durations_by_verb_[VerbIndex(verb)] =
          &durations_.Add({{"verb", std::string(VerbName(verb))}}, buckets);
    }
  }

  void Observe(Verb verb, int status, std::string_view failure, int placements,
               SteadyClock::duration elapsed) {
    const std::string verb_name(VerbName(verb));
    requests_.Add({{"verb", verb_name}, {"code", std::to_string(status)}}).Increment();
    durations_by_verb_[VerbIndex(verb)]->Observe(std::chrono::duration<double>(elapsed).count());
    if (!failure.empty()) {
      failures_.Add({{"verb", verb_name}, {"reason", std::string(failure)}}).Increment();
    }
    if (placements > 0) placements_.Increment(static_cast<double>(placements));
  }

  // The counter of connections closed for `reason` (gpumux_extender_connections_dropped_total).
  prometheus::Counter& Dropped(const std::string& reason) {
    return dropped_.Add({{"reason", reason}});
  }

  // A verb request the HTTP layer refused before Extender saw it (413, unreadable request).
  void CountRefused(Verb verb, int status) {
    requests_.Add({{"verb", std::string(VerbName(verb))}, {"code", std::to_string(status)}})
        .Increment();
  }

  std::string Render(const sched::ClusterState& state, std::size_t open_connections) {
    const sched::StateCounters c = state.counters();
    const bool synced = state.synced();
    std::lock_guard lock(render_mu_);
    if (!info_added_) {
      info_.Add({{"policy", state.policy_name()}}).Set(1);
      info_added_ = true;
    }
    nodes_.Set(static_cast<double>(c.nodes));
    gpus_.Set(static_cast<double>(c.gpus));
    grants_bound_.Set(static_cast<double>(c.grants_bound));
    grants_assumed_.Set(static_cast<double>(c.grants_assumed));
    grants_binding_.Set(static_cast<double>(c.grants_binding));
    grants_conflict_.Set(static_cast<double>(c.grants_in_conflict));
    unusable_nodes_.Set(static_cast<double>(c.unusable_nodes));
    conflicts_.Set(static_cast<double>(c.grant_conflicts));
    unreadable_.Set(static_cast<double>(c.unreadable_grants));
    synced_.Set(synced ? 1 : 0);
    connections_.Set(static_cast<double>(open_connections));
    // ClusterState's counts are cumulative; a Prometheus counter only grows.
    AddDelta(expired_, c.grants_expired, last_expired_);
    AddDelta(rebuilds_, c.rebuilds, last_rebuilds_);
    observed_sets_.Set(static_cast<double>(c.observed_sets));
    AddDelta(profile_swaps_, c.profile_swaps, last_profile_swaps_);
    AddDelta(observation_failures_, c.observation_read_failures, last_observation_failures_);
    std::ostringstream out;
    prometheus::TextSerializer().Serialize(out, registry_->Collect());
    return std::move(out).str();
  }

 private:
  prometheus::Gauge& Gauge(const std::string& name, const std::string& help) {
    return prometheus::BuildGauge().Name(name).Help(help).Register(*registry_).Add({});
  }
  static void AddDelta(prometheus::Counter& counter, std::int64_t now, std::int64_t& last) {
    if (now > last) counter.Increment(static_cast<double>(now - last));
    last = std::max(last, now);
  }

  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Family<prometheus::Histogram>& durations_;
  std::array<prometheus::Histogram*, kVerbs.size()> durations_by_verb_{};
  prometheus::Counter& placements_;
  prometheus::Family<prometheus::Counter>& failures_;
  prometheus::Gauge& nodes_;
  prometheus::Gauge& gpus_;
  prometheus::Family<prometheus::Gauge>& grants_;
  prometheus::Gauge& grants_bound_;
  prometheus::Gauge& grants_assumed_;
  prometheus::Gauge& grants_binding_;
  prometheus::Gauge& grants_conflict_;
  prometheus::Gauge& unusable_nodes_;
  prometheus::Gauge& conflicts_;
  prometheus::Gauge& unreadable_;
  prometheus::Gauge& synced_;
  prometheus::Counter& expired_;
  prometheus::Counter& rebuilds_;
  prometheus::Family<prometheus::Gauge>& info_;
  prometheus::Gauge& connections_;
  prometheus::Gauge& observed_sets_;
  prometheus::Counter& profile_swaps_;
  prometheus::Counter& observation_failures_;
  prometheus::Family<prometheus::Counter>& dropped_;
  std::mutex render_mu_;
  bool info_added_ = false;
  std::int64_t last_expired_ = 0;
  std::int64_t last_rebuilds_ = 0;
  std::int64_t last_profile_swaps_ = 0;
  std::int64_t last_observation_failures_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Connections.
//
// cpp-httplib 0.11 serves each connection on one thread of its task queue for the connection's
// whole life, and bounds a read only per recv(): a client that trickles a request a byte at a
// time holds its thread for as long as it likes, and `threads` such clients stopped the server,
// /healthz included (the slowloris reproducer). It also reads a chunked body, or one without a
// Content-Length, past the payload limit, and a header line of any length. So the server
// replaces the pieces that decide this, keeping httplib's request parsing and routing:
//  - ConnectionStream: the socket stream httplib reads a request from and writes its reply to.
//    One deadline for a whole request, head and body (`request_read_timeout`, from its first
//    byte, or from the accept for a connection's first request), one for a whole reply
//    (`write_timeout`); at most kMaxRequestHeadBytes of head and `max_body_bytes` of body.
//  - Server::process_and_close_socket (a private virtual of httplib::Server, overridden): the
//    keep-alive loop around httplib's process_request; an idle connection waits at most
//    `keep_alive_timeout` for its next request.
//  - ConnectionTable: every open connection and its phase, and the task queue httplib hands
//    accepted connections to, which runs each on a thread of its own (threads are reused, and
//    retire after kThreadLinger idle) up to `max_connections`. At the limit a newcomer evicts
//    the connection that has gone longest without a request being answered (an idle keep-alive
//    one, or one still sending its request: a slow client); one whose request is being answered
//    is never evicted; if all are, the newcomer gets 503. So a probe, which opens a connection
//    of its own, is served at once however many slow clients are connected.
//  - Work slots (`threads` of them): a verb is computed, and a body is read past
//    kUnslottedBodyBytes, only while its connection holds one, so CPU and the memory of large
//    bodies stay bounded by `threads` however many connections are open. Probes, /metrics and
//    /inspect take none.

// A request head (request line and headers) larger than this is refused (431). kube-scheduler
// sends about 200 bytes; Go's own servers allow 1 MB.
constexpr std::size_t kMaxRequestHeadBytes = std::size_t{64} << 10;
// A body may be read this far without a work slot: a node-cache filter body for 5,000 nodes is
// ~60 KB.
constexpr std::size_t kUnslottedBodyBytes = std::size_t{128} << 10;
// Idle connection threads beyond `threads` end after this long without a connection.
constexpr std::chrono::seconds kThreadLinger{30};
// How often a wait for a work slot looks whether its connection was dropped meanwhile.
constexpr std::chrono::milliseconds kSlotPoll{20};
// Large bodies are freed into glibc's arenas, which keep the pages (the daemon also limits
// their number: extender_command.cc): after a flood of 64 MiB bodies the RSS stayed at
// ~600 MiB (bench/extender_flood.cc). After a request of more than kTrimAfterBytes, and once
// the server is idle, the free pages are given back to the kernel (malloc_trim), at most once
// per kTrimInterval: a trim of a large heap takes milliseconds, and allocations wait for it.
constexpr std::size_t kTrimAfterBytes = std::size_t{4} << 20;
constexpr std::chrono::seconds kTrimInterval{1};

using SocketClock = SteadyClock;

// poll() for `events` until `deadline`: >0 ready, 0 deadline passed, <0 error.
int PollUntil(int fd, short events, SocketClock::time_point deadline) {
  for (;;) {
    const auto left = deadline - SocketClock::now();
    if (left <= SocketClock::duration::zero()) return 0;
    // Rounded up: a deadline 0.3 ms away must not spin.
    const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, static_cast<int>(std::min<std::int64_t>(ms, 60'000)));
    if (r > 0) return r;
    if (r < 0 && errno != EINTR) return -1;
  }
}

std::string AddressOf(const sockaddr_storage& addr, socklen_t len, int* port) {
  char host[NI_MAXHOST] = {};
  char serv[NI_MAXSERV] = {};
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, host, sizeof host,  // NOLINT
                  serv, sizeof serv, NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return {};
  }
  *port = std::atoi(serv);
  return host;
}

enum class Phase : std::uint8_t {
  kWaiting,    // for its (next) request's first byte
  kReceiving,  // its request is arriving
  kAnswering,  // its request is being answered: never evicted
};

// Why a connection was closed by the server rather than by its client or the keep-alive
// timeout (a label of gpumux_extender_connections_dropped_total).
enum class Drop : std::uint8_t {
  kNone,
  kRequestTimeout,  // its request did not arrive within request_read_timeout
  kHeadTooLarge,    // request head over kMaxRequestHeadBytes
  kBodyTooLarge,    // body over max_body_bytes (413), the rest not read
  kWriteTimeout,    // the reply was not taken within write_timeout
  kEvicted,         // made room for a new connection at max_connections
  kRefused,         // at max_connections with every connection answering: 503
};
constexpr std::array<Drop, 6> kDrops{Drop::kRequestTimeout, Drop::kHeadTooLarge,
                                     Drop::kBodyTooLarge,   Drop::kWriteTimeout,
                                     Drop::kEvicted,        Drop::kRefused};

const char* DropName(Drop d) {
  switch (d) {
    case Drop::kNone:
      return "none";
    case Drop::kRequestTimeout:
      return "request_timeout";
    case Drop::kHeadTooLarge:
      return "head_too_large";
    case Drop::kBodyTooLarge:
      return "body_too_large";
    case Drop::kWriteTimeout:
      return "write_timeout";
    case Drop::kEvicted:
      return "evicted";
    case Drop::kRefused:
      return "refused";
  }
  return "unknown";
}

// The socket stream of one connection (see above). Used by its connection's thread only.
class ConnectionStream final : public httplib::Stream {
 public:
  struct Limits {
    SocketClock::duration write_timeout;
    std::size_t max_body_bytes = 0;
  };
  // `acquire_slot(deadline)`: takes a work slot for this connection (true at once when it
  // holds one), waiting at most until `deadline`.
  ConnectionStream(int fd, Limits limits, std::function<bool(SocketClock::time_point)> acquire_slot)
      : fd_(fd), limits_(limits), acquire_slot_(std::move(acquire_slot)) {}

  // Waits until the next request's first byte (or the peer's close) is here; false when
  // `until` passes first.
  bool WaitForRequest(SocketClock::time_point until) {
    return off_ < len_ || PollUntil(fd_, POLLIN, until) != 0;
  }
  // A new request: all of it must be read by `read_deadline`.
  void BeginRequest(SocketClock::time_point read_deadline) {
    read_deadline_ = read_deadline;
    in_head_ = true;
    tail_ = 0;
    head_bytes_ = body_bytes_ = written_ = 0;
    write_started_ = false;
    failure_ = Drop::kNone;
  }
  Drop failure() const { return failure_; }
  std::size_t received() const { return head_bytes_ + body_bytes_; }
  std::size_t written() const { return written_; }

  // The reply's clock starts again (a "100 Continue" may have started it before the body).
  void BeginReply() { write_started_ = false; }

  bool is_readable() const override {
    pollfd p{fd_, POLLIN, 0};
    return off_ < len_ || ::poll(&p, 1, 0) > 0;
  }
  bool is_writable() const override {
    pollfd p{fd_, POLLOUT, 0};
    return ::poll(&p, 1, 0) > 0;
  }

  ssize_t read(char* ptr, std::size_t size) override {
    if (failure_ != Drop::kNone) return -1;
    if (off_ == len_) {
      if (size >= buffer_.size()) {  // a large read (a body) goes straight to the caller
        const ssize_t n = Receive(ptr, size);
        return n > 0 && !Account(ptr, static_cast<std::size_t>(n)) ? -1 : n;
      }
      const ssize_t n = Receive(buffer_.data(), buffer_.size());
      if (n <= 0) return n;
      off_ = 0;
      len_ = static_cast<std::size_t>(n);
    }
    const std::size_t n = std::min(size, len_ - off_);
    std::memcpy(ptr, buffer_.data() + off_, n);
    off_ += n;
    return Account(ptr, n) ? static_cast<ssize_t>(n) : -1;
  }

  ssize_t write(const char* ptr, std::size_t size) override {
    if (failure_ == Drop::kWriteTimeout) return -1;
    if (!write_started_) {  // the reply's clock starts at its first byte
      write_started_ = true;
      write_deadline_ = SocketClock::now() + limits_.write_timeout;
    }
    for (;;) {
      const int ready = PollUntil(fd_, POLLOUT, write_deadline_);
      if (ready == 0) failure_ = Drop::kWriteTimeout;
      if (ready <= 0) return -1;
      // MSG_DONTWAIT: a blocking send of a large reply would wait past the deadline.
      const ssize_t n = ::send(fd_, ptr, size, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
      if (n > 0) written_ += static_cast<std::size_t>(n);
      return n;
    }
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    if (getpeername(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {  // NOLINT
      ip = AddressOf(addr, len, &port);
    }
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    if (getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {  // NOLINT
      ip = AddressOf(addr, len, &port);
    }
  }
  socket_t socket() const override { return fd_; }

 private:
  ssize_t Receive(char* into, std::size_t size) {
    for (;;) {
      const int ready = PollUntil(fd_, POLLIN, read_deadline_);
      if (ready == 0) failure_ = Drop::kRequestTimeout;
      if (ready <= 0) return -1;
      const ssize_t n = ::recv(fd_, into, size, MSG_DONTWAIT);
      if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
      return n;
    }
  }

  // Counts `n` bytes just handed to httplib against the head and body limits, taking a work
  // slot once the body is large. The head ends at its blank line: httplib takes only CRLF as
  // its end (a line ending in a bare LF is skipped), so the head ends at the bytes "\n\r\n".
  bool Account(const char* p, std::size_t n) {
    std::size_t i = 0;
    for (; in_head_ && i < n; ++i) {
      tail_ = ((tail_ << 8) | static_cast<unsigned char>(p[i])) & 0xFFFFFFu;
      ++head_bytes_;
      if (tail_ == 0x0A0D0Au) in_head_ = false;  // "\n\r\n"
    }
    if (in_head_ && head_bytes_ > kMaxRequestHeadBytes) {
      failure_ = Drop::kHeadTooLarge;
      return false;
    }
    body_bytes_ += n - i;
    if (body_bytes_ > limits_.max_body_bytes) {
      failure_ = Drop::kBodyTooLarge;
      return false;
    }
    if (body_bytes_ > kUnslottedBodyBytes && !acquire_slot_(read_deadline_)) {
      failure_ = Drop::kRequestTimeout;
      return false;
    }
    return true;
  }

  int fd_;
  Limits limits_;
  std::function<bool(SocketClock::time_point)> acquire_slot_;
  std::array<char, 4096> buffer_{};
  std::size_t off_ = 0, len_ = 0;  // unread bytes in buffer_: [off_, len_)
  SocketClock::time_point read_deadline_{};
  SocketClock::time_point write_deadline_{};
  bool write_started_ = false;
  bool in_head_ = true;
  std::uint32_t tail_ = 0;  // the last three bytes of the head
  std::size_t head_bytes_ = 0, body_bytes_ = 0, written_ = 0;
  Drop failure_ = Drop::kNone;
};

// See kTrimAfterBytes. Thread-safe.
class MemoryTrimmer {
 public:
  // A connection thread, after a request of `bytes`.
  void AfterRequest(std::size_t bytes) {
    if (bytes <= kTrimAfterBytes) return;
    pending_ = true;  // other threads may still be freeing theirs: trim again once idle
    TrimNow();
  }
  // The listener, when no connection came for a while: a trim put off by the interval is
  // done now, so that the RSS falls back once a flood of large bodies is over.
  void WhenIdle() {
    if (pending_ && TrimNow()) pending_ = false;
  }

 private:
  bool TrimNow() {
    const auto now = SocketClock::now().time_since_epoch().count();
    auto last = last_.load();
    if (now - last < std::chrono::duration_cast<SocketClock::duration>(kTrimInterval).count() ||
        !last_.compare_exchange_strong(last, now)) {
      return false;
    }
    ::malloc_trim(0);
    return true;
  }

  std::atomic<SocketClock::rep> last_{std::numeric_limits<SocketClock::rep>::min() / 2};
  std::atomic<bool> pending_{false};
};

// The open connections, the threads that serve them, and the work slots (see above).
// Thread-safe.
class ConnectionTable {
 public:
  struct Entry {
    int fd = -1;
    Phase phase = Phase::kWaiting;
    SocketClock::time_point since;     // when the phase began
    std::atomic<bool> dropped{false};  // shut down by the table: its thread ends it
  };
  using EntryRef = std::list<Entry>::iterator;

  ConnectionTable(std::size_t max_connections, std::size_t slots)
      : max_connections_(max_connections), keep_threads_(slots), free_slots_(slots) {}
  ~ConnectionTable() { JoinThreads(); }
  ConnectionTable(const ConnectionTable&) = delete;
  ConnectionTable& operator=(const ConnectionTable&) = delete;

  // What Admit did to make room: the evicted connection's peer and how long it had waited.
  struct Eviction {
    bool happened = false;
    std::string peer;
    SocketClock::duration waited{};
  };
  // The listener, for a connection just accepted: true when it may be served (maybe after
  // evicting another, described in `eviction`), false when it must be refused.
  bool Admit(Eviction* eviction) {
    std::lock_guard lock(mu_);
    if (live_ >= max_connections_) {
      Entry* oldest = nullptr;
      for (Entry& e : entries_) {
        if (e.dropped || e.phase == Phase::kAnswering) continue;
        if (oldest == nullptr || e.since < oldest->since) oldest = &e;
      }
      if (oldest == nullptr) return false;
      eviction->happened = true;
      eviction->waited = SocketClock::now() - oldest->since;
      sockaddr_storage addr{};
      socklen_t len = sizeof addr;
      int port = 0;
      if (getpeername(oldest->fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {  // NOLINT
        eviction->peer = AddressOf(addr, len, &port) + ":" + std::to_string(port);
      }
      DropLocked(*oldest);
    }
    ++live_;
    return true;
  }

  // httplib's TaskQueue::enqueue: runs `task` on an idle connection thread, or a new one.
  void Enqueue(std::function<void()> task) {
    std::lock_guard lock(mu_);
    ReapLocked();
    queue_.push_back(std::move(task));
    if (queue_.size() > idle_threads_ && threads_.size() < max_connections_) {
      const std::uint64_t id = next_thread_++;
      threads_.emplace(id, std::thread([this, id] { Work(id); }));
    } else {
      work_cv_.notify_one();
    }
  }

  // httplib's TaskQueue::shutdown: runs what is queued, then ends and joins every thread.
  void JoinThreads() {
    std::map<std::uint64_t, std::thread> threads;
    {
      std::lock_guard lock(mu_);
      shutting_down_ = true;
      work_cv_.notify_all();
      threads.swap(threads_);
    }
    for (auto& [id, t] : threads) t.join();
    std::lock_guard lock(mu_);
    ReapLocked();
  }

  // A connection thread, for the connection it starts serving; nullopt when stopping.
  std::optional<EntryRef> Register(int fd) {
    std::lock_guard lock(mu_);
    if (stopping_) {
      --live_;
      return std::nullopt;
    }
    Entry& e = entries_.emplace_back();
    e.fd = fd;
    e.since = SocketClock::now();
    return std::prev(entries_.end());
  }
  // Before the connection's socket is closed (so that no shutdown can reach a reused fd).
  void Unregister(EntryRef e) {
    std::lock_guard lock(mu_);
    if (!e->dropped) --live_;
    entries_.erase(e);
  }
  // False when the connection was dropped, or when it would wait for a next request while
  // the server stops: its thread then ends it.
  bool SetPhase(EntryRef e, Phase phase) {
    std::lock_guard lock(mu_);
    if (e->dropped || (stopping_ && phase == Phase::kWaiting)) return false;
    e->phase = phase;
    e->since = SocketClock::now();
    return true;
  }

  // Takes a work slot, waiting until one is free, `deadline` passes or `e` is dropped.
  bool AcquireSlot(const Entry& e, SocketClock::time_point deadline) {
    std::unique_lock lock(slots_mu_);
    for (;;) {
      if (e.dropped) return false;
      if (free_slots_ > 0) {
        --free_slots_;
        return true;
      }
      const auto now = SocketClock::now();
      if (now >= deadline) return false;
      slots_cv_.wait_until(lock, std::min(deadline, now + kSlotPoll));
    }
  }
  void ReleaseSlot() {
    {
      std::lock_guard lock(slots_mu_);
      ++free_slots_;
    }
    slots_cv_.notify_all();
  }

  // Stop: no new connection is served, and every connection without a request being
  // answered is shut down now (the others after their reply).
  void BeginStop() {
    std::lock_guard lock(mu_);
    stopping_ = true;
    for (Entry& e : entries_) {
      if (!e.dropped && e.phase != Phase::kAnswering) DropLocked(e);
    }
  }

  std::size_t open() const {
    std::lock_guard lock(mu_);
    return entries_.size();
  }
  bool stopping() const {
    std::lock_guard lock(mu_);
    return stopping_;
  }

 private:
  void DropLocked(Entry& e) {
    ::shutdown(e.fd, SHUT_RDWR);  // its thread's poll or recv returns at once
    e.dropped = true;
    --live_;
  }

  void Work(std::uint64_t id) {
    std::unique_lock lock(mu_);
    for (;;) {
      if (queue_.empty()) {
        if (shutting_down_) return;
        ++idle_threads_;
        const bool woken = work_cv_.wait_for(lock, kThreadLinger,
                                             [this] { return !queue_.empty() || shutting_down_; });
        --idle_threads_;
        if (!woken && threads_.size() > keep_threads_) {
          // Retire: the next Enqueue or JoinThreads joins this thread.
          auto self = threads_.find(id);
          if (self != threads_.end()) {
            retired_.push_back(std::move(self->second));
            threads_.erase(self);
            return;
          }
        }
        continue;
      }
      std::function<void()> task = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      task();
      task = nullptr;  // its captures are released before the next wait
      lock.lock();
    }
  }

  void ReapLocked() {
    for (std::thread& t : retired_) t.join();  // each has returned or is returning
    retired_.clear();
  }

  const std::size_t max_connections_;
  const std::size_t keep_threads_;
  mutable std::mutex mu_;  // everything below but the slots
  std::list<Entry> entries_;
  std::size_t live_ = 0;  // admitted and not dropped or gone
  bool stopping_ = false;
  std::condition_variable work_cv_;
  std::deque<std::function<void()>> queue_;
  std::map<std::uint64_t, std::thread> threads_;
  std::vector<std::thread> retired_;
  std::uint64_t next_thread_ = 0;
  std::size_t idle_threads_ = 0;
  bool shutting_down_ = false;
  std::mutex slots_mu_;
  std::condition_variable slots_cv_;
  std::size_t free_slots_;
};

// The connection a thread is serving, for the request handlers (which httplib calls on that
// thread, from process_request).
struct ServedConnection {
  ConnectionTable* table = nullptr;
  ConnectionTable::EntryRef entry;
  ConnectionStream* stream = nullptr;
  bool holds_slot = false;
  bool close_after_reply = false;  // the request's body was not read (413): close after it

  bool AcquireSlot(SocketClock::time_point deadline) {
    if (!holds_slot) holds_slot = table->AcquireSlot(*entry, deadline);
    return holds_slot;
  }
  void ReleaseSlot() {
    if (holds_slot) table->ReleaseSlot();
    holds_slot = false;
  }
};
thread_local ServedConnection* tls_connection = nullptr;
thread_local bool tls_refusing = false;  // the listener runs a refused connection's task

// What the connection threads need beyond the table: limits and where events are reported.
struct ConnectionSettings {
  SocketClock::duration request_read_timeout;
  SocketClock::duration keep_alive_timeout;
  SocketClock::duration write_timeout;
  std::size_t max_body_bytes = 0;
  std::size_t max_connections = 0;
  // A connection the server closed (not kNone), with its peer and what happened.
  std::function<void(Drop, const std::string& peer, const std::string& detail)> dropped;
};

std::string Seconds(SocketClock::duration d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", std::chrono::duration<double>(d).count());
  return buf;
}

// A bare reply for a connection httplib never answered: a request that timed out or whose head
// was too large while its request line was being read, and a refused connection.
std::string BareReply(int status, const char* reason, std::string_view message) {
  const std::string body = ErrorBody(message);
  return "HTTP/1.1 " + std::to_string(status) + " " + reason + "\r\nContent-Type: " + kJsonType +
         "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" +
         body;
}

class HttpServer final : public httplib::Server {
 public:
  HttpServer(ConnectionTable& table, MemoryTrimmer& trimmer, ConnectionSettings settings)
      : table_(table), trimmer_(trimmer), settings_(std::move(settings)) {}

 private:
  bool process_and_close_socket(socket_t sock) override {
    if (tls_refusing) {
      Refuse(sock);
      return false;
    }
    const auto entry = table_.Register(sock);
    if (!entry) {
      Close(sock);
      return false;
    }
    ServedConnection conn;
    conn.table = &table_;
    conn.entry = *entry;
    ConnectionStream stream(
        sock, {settings_.write_timeout, settings_.max_body_bytes},
        [&conn](SocketClock::time_point deadline) { return conn.AcquireSlot(deadline); });
    conn.stream = &stream;
    tls_connection = &conn;
    // The first request counts from the accept: a client that connects and waits gets no
    // more time than one that trickles. A later one from its first byte.
    SocketClock::time_point wait_until = SocketClock::now() + settings_.request_read_timeout;
    bool first = true;
    bool ok = false;
    for (;;) {
      if (!stream.WaitForRequest(wait_until)) {
        if (first) {
          Dropped(stream, Drop::kRequestTimeout,
                  "it sent nothing within " + Seconds(settings_.request_read_timeout));
        }
        break;
      }
      if (!table_.SetPhase(conn.entry, Phase::kReceiving)) break;
      stream.BeginRequest(first ? wait_until : SocketClock::now() + settings_.request_read_timeout);
      bool closed_by_client = false;
      ok = process_request(stream, /*close_connection=*/table_.stopping(), closed_by_client,
                           nullptr);
      conn.ReleaseSlot();
      trimmer_.AfterRequest(stream.received());
      const Drop failure = stream.failure();
      // An evicted connection's failure is the eviction's doing, reported by the listener.
      if (failure != Drop::kNone && !conn.entry->dropped) Report(stream, failure, sock);
      if (!ok || closed_by_client || conn.close_after_reply || failure != Drop::kNone) break;
      if (!table_.SetPhase(conn.entry, Phase::kWaiting)) break;
      conn.close_after_reply = false;
      first = false;
      wait_until = SocketClock::now() + settings_.keep_alive_timeout;
    }
    tls_connection = nullptr;
    table_.Unregister(conn.entry);
    Close(sock);
    return ok;
  }

  // A request that failed in the stream: a bare reply when httplib wrote none (the request
  // line never completed), and the event reported.
  void Report(const ConnectionStream& stream, Drop failure, int sock) {
    std::string detail;
    switch (failure) {
      case Drop::kRequestTimeout:
        detail = "its request did not arrive within " + Seconds(settings_.request_read_timeout) +
                 " (" + std::to_string(stream.received()) + " bytes received)";
        if (stream.written() == 0) {
          Send(sock,
               BareReply(408, "Request Timeout",
                         "request not received within " + Seconds(settings_.request_read_timeout)));
        }
        break;
      case Drop::kHeadTooLarge:
        detail = "its request head is over " + std::to_string(kMaxRequestHeadBytes) + " bytes";
        if (stream.written() == 0) {
          Send(sock,
               BareReply(431, "Request Header Fields Too Large",
                         "request head over " + std::to_string(kMaxRequestHeadBytes) + " bytes"));
        }
        break;
      case Drop::kBodyTooLarge:
        detail = "its request body is over " + std::to_string(settings_.max_body_bytes) + " bytes";
        break;
      case Drop::kWriteTimeout:
        detail = "it did not take its reply within " + Seconds(settings_.write_timeout);
        break;
      default:
        return;
    }
    Dropped(stream, failure, detail);
  }

  void Dropped(const ConnectionStream& stream, Drop why, const std::string& detail) {
    if (!settings_.dropped) return;
    std::string ip;
    int port = 0;
    stream.get_remote_ip_and_port(ip, port);
    settings_.dropped(why, ip + ":" + std::to_string(port), detail);
  }

  void Refuse(int sock) {
    Send(sock, BareReply(503, "Service Unavailable",
                         "too many connections: " + std::to_string(settings_.max_connections) +
                             " are open and every one has a request being answered"));
    if (settings_.dropped) {
      sockaddr_storage addr{};
      socklen_t len = sizeof addr;
      int port = 0;
      std::string ip;
      if (getpeername(sock, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {  // NOLINT
        ip = AddressOf(addr, len, &port);
      }
      settings_.dropped(Drop::kRefused, ip + ":" + std::to_string(port),
                        "every one of the " + std::to_string(settings_.max_connections) +
                            " connections allowed has a request being answered");
    }
    Close(sock);
  }

  // Best effort, never blocking: the reply of a connection that is being closed.
  static void Send(int sock, const std::string& text) {
    (void)::send(sock, text.data(), text.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  }
  static void Close(int sock) {
    ::shutdown(sock, SHUT_RDWR);
    ::close(sock);
  }

  ConnectionTable& table_;
  MemoryTrimmer& trimmer_;
  ConnectionSettings settings_;
};

// The task queue httplib asks for at listen: admission and threads are the table's; httplib
// calls on_idle when no connection came for its idle interval.
class TableTaskQueue final : public httplib::TaskQueue {
 public:
  using EvictedFn = std::function<void(const ConnectionTable::Eviction&)>;
  TableTaskQueue(ConnectionTable& table, MemoryTrimmer& trimmer, EvictedFn evicted)
      : table_(table), trimmer_(trimmer), evicted_(std::move(evicted)) {}
  void enqueue(std::function<void()> task) override {
    ConnectionTable::Eviction eviction;
    const bool admitted = table_.Admit(&eviction);
    if (eviction.happened && evicted_) evicted_(eviction);
    if (admitted) {
      table_.Enqueue(std::move(task));
      return;
    }
    tls_refusing = true;  // the task answers 503 and closes, at once, on this thread
    task();
    tls_refusing = false;
  }
  void shutdown() override { table_.JoinThreads(); }
  void on_idle() override { trimmer_.WhenIdle(); }

 private:
  ConnectionTable& table_;
  MemoryTrimmer& trimmer_;
  EvictedFn evicted_;
};

}  // namespace

core::Result<std::string> NormalizeUrlPrefix(std::string_view prefix) {
  std::string out;
  std::size_t i = 0;
  while (i < prefix.size()) {
    if (prefix[i] == '/') {
      ++i;
      continue;
    }
    const std::size_t end = std::min(prefix.find('/', i), prefix.size());
    const std::string_view segment = prefix.substr(i, end - i);
    for (char c : segment) {
      if (!IsSegmentChar(c)) {
        return MakeError(ErrorCode::kInvalidArgument,
                         "URL prefix \"" + std::string(prefix) + "\": character '" +
                             std::string(1, c) +
                             "' is not allowed (letters, digits, '.', '_', '~', '-' and '/')");
      }
    }
    if (segment == "." || segment == "..") {
      return MakeError(ErrorCode::kInvalidArgument, "URL prefix \"" + std::string(prefix) +
                                                        "\": '.' and '..' segments are "
                                                        "not allowed");
    }
    out += '/';
    out += segment;
    i = end;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------

namespace {

// At most kLogBurst lines of one kind (an HTTP status, a reason for closing a connection) per
// kLogWindow; the first line of a later window says how many were left out. A flood of bad
// requests cannot flood the log, and the first of each kind is always seen. Thread-safe.
class LogThrottle {
 public:
  static constexpr int kLogBurst = 10;
  static constexpr std::chrono::seconds kLogWindow{10};

  // Whether to write a line of `kind` now; when true, `*left_out` is how many lines of that
  // kind were not written since the last one that was.
  bool Allow(const std::string& kind, std::int64_t* left_out) {
    std::lock_guard lock(mu_);
    Window& w = windows_[kind];
    const auto now = SteadyClock::now();
    if (w.lines == 0 || now - w.start >= kLogWindow) {
      w.start = now;
      w.lines = 0;
    }
    if (w.lines >= kLogBurst) {
      ++w.left_out;
      return false;
    }
    ++w.lines;
    *left_out = std::exchange(w.left_out, 0);
    return true;
  }

 private:
  struct Window {
    SteadyClock::time_point start;
    int lines = 0;
    std::int64_t left_out = 0;
  };
  std::mutex mu_;
  std::map<std::string, Window> windows_;  // a few kinds: the statuses this server sends
};

}  // namespace

struct ExtenderServer::Impl {
  enum class Endpoint : std::uint8_t { kVerb, kHealthz, kReadyz, kMetrics, kInspect };
  struct Route {
    std::string path;
    Endpoint endpoint = Endpoint::kVerb;
    Verb verb = Verb::kFilter;
  };

  Extender* extender;
  sched::ClusterState* state;
  ExtenderServerOptions options;
  std::string prefix;
  std::vector<Route> routes;
  std::string endpoints_text;  // for 404 replies
  Metrics metrics;
  LogThrottle throttle;
  std::array<prometheus::Counter*, kDrops.size()> dropped{};  // by kDrops' order
  std::unique_ptr<ConnectionTable> table;                     // before `server`, which uses it
  MemoryTrimmer trimmer;
  std::unique_ptr<HttpServer> server;
  std::thread listener;
  std::future<void> listener_done;
  int last_socket = -1;  // the latest socket httplib asked us to configure: the bound one
  int port = 0;
  bool started = false;
  bool stopped = false;

  void Log(core::LogLevel level, const std::string& line) const { options.log.Write(level, line); }
  // A line about a failed request or a dropped connection: throttled per kind (an HTTP status
  // or a drop reason). A 500 is gpumux's own failure (error); the rest are the client's or the
  // load's (warn).
  void LogThrottled(const std::string& kind, const std::string& line) {
    const core::LogLevel level = kind == "500" ? core::LogLevel::kError : core::LogLevel::kWarn;
    if (!options.log.Enabled(level)) return;
    std::int64_t left_out = 0;
    if (!throttle.Allow(kind, &left_out)) return;
    options.log.Write(level, left_out == 0 ? line
                                           : line + " (" + std::to_string(left_out) +
                                                 " more like it not logged)");
  }

  void OnDropped(Drop why, const std::string& peer, const std::string& detail) {
    for (std::size_t i = 0; i < kDrops.size(); ++i) {
      if (kDrops[i] == why && dropped[i] != nullptr) dropped[i]->Increment();
    }
    LogThrottled(DropName(why), "connection from " + peer + " closed: " + detail);
  }

  const Route* Find(const std::string& path) const {
    for (const Route& r : routes) {
      if (r.path == path) return &r;
    }
    return nullptr;
  }

  void BuildRoutes() {
    for (Verb verb : kVerbs) {
      routes.push_back({prefix + "/" + std::string(VerbName(verb)), Endpoint::kVerb, verb});
    }
    routes.push_back({"/healthz", Endpoint::kHealthz, Verb::kFilter});
    routes.push_back({"/readyz", Endpoint::kReadyz, Verb::kFilter});
    routes.push_back({"/metrics", Endpoint::kMetrics, Verb::kFilter});
    routes.push_back({"/inspect", Endpoint::kInspect, Verb::kFilter});
    endpoints_text = "POST " + prefix +
                     "/{filter,prioritize,bind,preempt}; GET /healthz, "
                     "/readyz, /metrics, /inspect";
  }

  // The request is read and about to be answered: its connection may no longer be evicted.
  // False when it was dropped meanwhile (evicted, or the server stops): its reply cannot be
  // delivered, so nothing should be done for it.
  static bool BeginAnswering() {
    ServedConnection* conn = tls_connection;
    if (conn == nullptr) return true;
    conn->stream->BeginReply();
    return conn->table->SetPhase(conn->entry, Phase::kAnswering);
  }

  void Dispatch(const httplib::Request& req, httplib::Response& res) {
    const Route* route = Find(req.path);
    if (route != nullptr && route->endpoint == Endpoint::kVerb && req.method == "POST") {
      HandleVerb(route->verb, req, res);
      return;
    }
    BeginAnswering();  // answered at once, whether or not the reply can still be delivered
    if (route == nullptr) {
      Reply(req, res, 404,
            ErrorBody("no such endpoint: " + req.method + " " + req.path +
                      " (endpoints: " + endpoints_text + ")"));
      return;
    }
    if (route->endpoint == Endpoint::kVerb) {
      res.set_header("Allow", "POST");
      Reply(req, res, 405,
            ErrorBody(req.method + " " + req.path + ": method not allowed (use POST)"));
      return;
    }
    if (req.method != "GET" && req.method != "HEAD") {
      res.set_header("Allow", "GET, HEAD");
      Reply(req, res, 405,
            ErrorBody(req.method + " " + req.path + ": method not allowed (use GET)"));
      return;
    }
    switch (route->endpoint) {
      case Endpoint::kHealthz:
        res.status = 200;
        res.set_content("ok\n", kTextType);
        return;
      case Endpoint::kReadyz:
        if (state->synced()) {
          res.status = 200;
          res.set_content("ok\n", kTextType);
        } else {
          res.status = 503;
          res.set_content(
              "not ready: the cluster state has not yet listed the nodes and pods from the "
              "API server\n",
              kTextType);
        }
        return;
      case Endpoint::kMetrics:
        res.status = 200;
        res.set_content(metrics.Render(*state, table->open()), kMetricsType);
        return;
      case Endpoint::kInspect:
        res.status = 200;
        res.set_content(state->Inspect().dump(2, ' ', false, json::error_handler_t::replace) + "\n",
                        kJsonType);
        return;
      case Endpoint::kVerb:
        break;
    }
  }

  // A work slot for the verb (see Connections); a reply when none can be had.
  std::optional<VerbReply> TakeWorkSlot() {
    ServedConnection* conn = tls_connection;
    if (conn == nullptr) return std::nullopt;
    if (!conn->AcquireSlot(SteadyClock::now() + options.request_read_timeout)) {
      if (conn->entry->dropped)
        return VerbReply{503, ErrorBody("the connection was closed"), "closed", 0};
      return VerbReply{
          503,
          ErrorBody("busy: no worker free within " + Seconds(options.request_read_timeout) + " (" +
                    std::to_string(options.threads) + " verbs at once)"),
          "busy", 0};
    }
    if (!BeginAnswering())
      return VerbReply{503, ErrorBody("the connection was closed"), "closed", 0};
    return std::nullopt;
  }

  void HandleVerb(Verb verb, const httplib::Request& req, httplib::Response& res) {
    const auto start = SteadyClock::now();
    VerbReply reply;
    const std::string content_type = req.get_header_value("Content-Type");
    if (auto refused = TakeWorkSlot()) {
      reply = std::move(*refused);
    } else if (!IsJsonContentType(content_type)) {
      reply = {415,
               ErrorBody("Content-Type must be application/json, not \"" + content_type + "\""),
               "bad_request", 0};
    } else if (req.body.empty()) {
      reply = {400, ErrorBody("empty request body: expected the extender's JSON arguments"),
               "bad_request", 0};
    } else {
      try {
        reply = extender->Handle(verb, req.body);
      } catch (const std::exception& e) {
        reply = {500, ErrorBody(std::string("internal error: ") + e.what()), "internal", 0};
      } catch (...) {
        reply = {500, ErrorBody("internal error"), "internal", 0};
      }
    }
    // The slot stays taken until the reply is written (the keep-alive loop releases it): a
    // reply can be as large as its request, and must count against the same bound.
    const auto elapsed = SteadyClock::now() - start;
    metrics.Observe(verb, reply.http_status, reply.failure, reply.placements, elapsed);
    res.status = reply.http_status;
    res.body = std::move(reply.body);  // set_content would copy 100+ KB replies
    res.set_header("Content-Type", kJsonType);
    const bool ok = res.status >= 200 && res.status < 300;
    const bool slow = elapsed > options.slow_request;
    // Every request at debug; a slow one at info; a failed one at warn or error (throttled).
    if (!ok || slow || options.log.Enabled(core::LogLevel::kDebug)) {
      std::string line = req.method + " " + req.path + " " + std::to_string(res.status);
      if (!reply.failure.empty()) line += " " + reply.failure;
      line += " " + FormatMillis(elapsed);
      if (ok && slow) line += " (slow)";
      line += " from " + req.remote_addr + ":" + std::to_string(req.remote_port) + " (" +
              std::to_string(req.body.size()) + " bytes)";
      if (!ok) line += ": " + Excerpt(res.body);
      if (ok) {
        Log(slow ? core::LogLevel::kInfo : core::LogLevel::kDebug, line);
      } else {
        LogThrottled(std::to_string(res.status), line);
      }
    }
  }

  // Replies that do not reach a verb (404, 405); logged like failed verbs.
  void Reply(const httplib::Request& req, httplib::Response& res, int status, std::string body) {
    res.status = status;
    res.set_content(std::move(body), kJsonType);
    LogThrottled(std::to_string(status), req.method + " " + req.path + " " +
                                             std::to_string(status) + " from " + req.remote_addr +
                                             ":" + std::to_string(req.remote_port) + ": " +
                                             Excerpt(res.body));
  }

  // Before the body is read: a Content-Length over the limit is refused at once (httplib would
  // read and discard all of it first), and the connection closed after the reply.
  httplib::Server::HandlerResponse PreRoute(const httplib::Request& req, httplib::Response& res) {
    const std::string length = req.get_header_value("Content-Length");
    std::uint64_t bytes = 0;
    const auto [end, ec] = std::from_chars(length.data(), length.data() + length.size(), bytes);
    const bool too_large =
        !length.empty() && ((ec == std::errc{} && end == length.data() + length.size() &&
                             bytes > options.max_body_bytes) ||
                            ec == std::errc::result_out_of_range);
    if (!too_large) return httplib::Server::HandlerResponse::Unhandled;
    BeginAnswering();
    if (ServedConnection* conn = tls_connection) conn->close_after_reply = true;
    res.status = 413;
    res.set_content(ErrorBody(BodyTooLarge()), kJsonType);
    if (const Route* route = Find(req.path);
        route != nullptr && route->endpoint == Endpoint::kVerb) {
      metrics.CountRefused(route->verb, 413);
    }
    LogThrottled("413", req.method + " " + req.path + " 413 from " + req.remote_addr + ":" +
                            std::to_string(req.remote_port) + ": Content-Length " + length +
                            " is over the limit of " + std::to_string(options.max_body_bytes) +
                            " bytes");
    return httplib::Server::HandlerResponse::Handled;
  }

  std::string BodyTooLarge() const {
    return "request body too large: the limit is " + std::to_string(options.max_body_bytes) +
           " bytes";
  }

  // Errors produced by httplib itself (413, an unreadable request) get a JSON body, and the
  // status says what our stream saw (408: too slow, 431: head too large, 413: body too large);
  // our own replies always have a body and pass through untouched.
  httplib::Server::HandlerResponse OnError(const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    const ServedConnection* conn = tls_connection;
    const Drop failure = conn != nullptr ? conn->stream->failure() : Drop::kNone;
    if (failure == Drop::kRequestTimeout) res.status = 408;
    if (failure == Drop::kHeadTooLarge) res.status = 431;
    if (failure == Drop::kBodyTooLarge) res.status = 413;
    std::string message;
    if (res.status == 408) {
      message = "request not received within " + Seconds(options.request_read_timeout);
    } else if (res.status == 431) {
      message = "request head over " + std::to_string(kMaxRequestHeadBytes) + " bytes";
    } else if (res.status == 413) {
      message = BodyTooLarge();
    } else if (res.status == 404) {
      message = "no such endpoint: " + req.method + " " + req.path +
                " (endpoints: " + endpoints_text + ")";
    } else {
      message = "bad request: " + req.method + " " + req.path + " (HTTP " +
                std::to_string(res.status) + ")";
    }
    res.set_content(ErrorBody(message), kJsonType);
    if (failure != Drop::kNone) res.set_header("Connection", "close");
    if (const Route* route = Find(req.path);
        route != nullptr && route->endpoint == Endpoint::kVerb) {
      metrics.CountRefused(route->verb, res.status);
    }
    LogThrottled(std::to_string(res.status),
                 req.method + " " + req.path + " " + std::to_string(res.status) + " from " +
                     req.remote_addr + ":" + std::to_string(req.remote_port) + ": " + message);
    return httplib::Server::HandlerResponse::Handled;
  }
};

ExtenderServer::ExtenderServer(Extender& extender, sched::ClusterState& state,
                               ExtenderServerOptions options)
    : impl_(std::make_unique<Impl>()) {
  impl_->extender = &extender;
  impl_->state = &state;
  impl_->options = std::move(options);
  impl_->port = impl_->options.port;
}

ExtenderServer::~ExtenderServer() { Stop(); }

core::Result<void> ExtenderServer::Start() {
  Impl& m = *impl_;
  if (m.started) {
    return MakeError(ErrorCode::kFailedPrecondition, "the extender server was started before");
  }
  auto prefix = NormalizeUrlPrefix(m.options.url_prefix);
  if (!prefix) return tl::unexpected(prefix.error());
  m.prefix = std::move(*prefix);
  const ExtenderServerOptions& o = m.options;
  if (o.port < 0 || o.port > 65535) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "port " + std::to_string(o.port) + " is not in 0..65535");
  }
  if (o.threads < 1) {
    return MakeError(ErrorCode::kInvalidArgument, "the server needs at least one thread");
  }
  if (o.max_connections < 1 || o.max_connections > kMaxConnectionsLimit) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "max_connections " + std::to_string(o.max_connections) + " is not in 1.." +
                         std::to_string(kMaxConnectionsLimit));
  }
  for (const auto& [name, value] : {std::pair<const char*, std::chrono::milliseconds>{
                                        "request_read_timeout", o.request_read_timeout},
                                    {"keep_alive_timeout", o.keep_alive_timeout},
                                    {"write_timeout", o.write_timeout}}) {
    if (value <= std::chrono::milliseconds::zero()) {
      return MakeError(ErrorCode::kInvalidArgument, std::string(name) + " must be positive");
    }
  }
  m.BuildRoutes();

  m.table = std::make_unique<ConnectionTable>(static_cast<std::size_t>(o.max_connections),
                                              static_cast<std::size_t>(o.threads));
  ConnectionSettings settings;
  settings.request_read_timeout = o.request_read_timeout;
  settings.keep_alive_timeout = o.keep_alive_timeout;
  settings.write_timeout = o.write_timeout;
  settings.max_body_bytes = o.max_body_bytes;
  settings.max_connections = static_cast<std::size_t>(o.max_connections);
  settings.dropped = [&m](Drop why, const std::string& peer, const std::string& detail) {
    m.OnDropped(why, peer, detail);
  };
  for (std::size_t i = 0; i < kDrops.size(); ++i) {
    m.dropped[i] = &m.metrics.Dropped(DropName(kDrops[i]));
  }
  m.server = std::make_unique<HttpServer>(*m.table, m.trimmer, std::move(settings));
  httplib::Server& s = *m.server;
  s.new_task_queue = [&m] {
    return new TableTaskQueue(*m.table, m.trimmer, [&m](const ConnectionTable::Eviction& e) {
      m.OnDropped(Drop::kEvicted, e.peer,
                  "made room for a new connection (" + std::to_string(m.options.max_connections) +
                      " open): it had had no request answered for " + Seconds(e.waited));
    });
  };
  // Not httplib's default options: SO_REUSEPORT would let a second extender bind the same port
  // and silently take half of kube-scheduler's requests. SO_REUSEADDR only lets a restarted
  // extender bind while the old connections linger in TIME_WAIT.
  s.set_socket_options([&m](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    m.last_socket = sock;
  });
  s.set_tcp_nodelay(true);
  s.set_idle_interval(std::chrono::seconds(1));  // TableTaskQueue::on_idle
  s.set_payload_max_length(o.max_body_bytes);
  // httplib sets these as SO_RCVTIMEO/SO_SNDTIMEO on each connection; our stream polls with
  // its own deadlines first, so they are only a backstop.
  s.set_read_timeout(std::chrono::duration_cast<std::chrono::seconds>(o.request_read_timeout) +
                     std::chrono::seconds(1));
  s.set_write_timeout(std::chrono::duration_cast<std::chrono::seconds>(o.write_timeout) +
                      std::chrono::seconds(1));
  const httplib::Server::Handler dispatch = [&m](const httplib::Request& req,
                                                 httplib::Response& res) { m.Dispatch(req, res); };
  // One catch-all per method; Dispatch routes by exact path (and answers 404/405 itself).
  s.Get(".*", dispatch);
  s.Post(".*", dispatch);
  s.Put(".*", dispatch);
  s.Patch(".*", dispatch);
  s.Delete(".*", dispatch);
  s.Options(".*", dispatch);
  s.set_pre_routing_handler(
      [&m](const httplib::Request& req, httplib::Response& res) { return m.PreRoute(req, res); });
  s.set_error_handler(httplib::Server::HandlerWithResponse(
      [&m](const httplib::Request& req, httplib::Response& res) { return m.OnError(req, res); }));
  s.set_exception_handler(
      [&m](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown exception";
        try {
          if (ep) std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        res.status = 500;
        res.set_content(ErrorBody("internal error: " + what), kJsonType);
        m.Log(core::LogLevel::kError, req.method + " " + req.path + " 500: " + what);
      });

  errno = 0;
  bool bound = false;
  if (o.port == 0) {
    const int port = s.bind_to_any_port(o.host);
    bound = port > 0;
    if (bound) m.port = port;
  } else {
    bound = s.bind_to_port(o.host, o.port);
  }
  if (!bound) {
    const int error = errno;
    std::string message = "cannot listen on " + o.host + ":" + std::to_string(o.port);
    message += error != 0 ? std::string(": ") + std::strerror(error)
                          : std::string(": not an address of this host");
    return MakeError(ErrorCode::kFailedPrecondition, message);
  }
  // httplib 0.11 listens with a backlog of 5: a burst of more simultaneous connections (probes,
  // a scrape, concurrent binds) has SYNs dropped and retried a second later. Listening again on
  // the listening socket raises the backlog (Linux).
  ::listen(m.last_socket, SOMAXCONN);

  std::promise<void> done;
  m.listener_done = done.get_future();
  m.listener = std::thread([&s, done = std::move(done)]() mutable {
    s.listen_after_bind();
    done.set_value();
  });
  m.started = true;
  // httplib's stop() does nothing until the listening loop has started: wait for it.
  while (!s.is_running() &&
         m.listener_done.wait_for(std::chrono::milliseconds(1)) != std::future_status::ready) {
  }
  if (!s.is_running()) {
    Stop();
    return MakeError(ErrorCode::kFailedPrecondition, "the server on " + o.host + ":" +
                                                         std::to_string(m.port) +
                                                         " stopped as soon as it started");
  }
  m.Log(core::LogLevel::kInfo,
        "extender listening on " + o.host + ":" + std::to_string(m.port) + " (verbs under " +
            (m.prefix.empty() ? std::string("/") : m.prefix) + ", " + std::to_string(o.threads) +
            " threads for verbs, up to " + std::to_string(o.max_connections) + " connections)");
  return {};
}

void ExtenderServer::Stop() {
  Impl& m = *impl_;
  if (!m.started || m.stopped) return;
  m.stopped = true;
  // Connections without a request being answered are shut down now; the others end after
  // their reply (the keep-alive loop sees the table stopping).
  m.table->BeginStop();
  m.server->stop();
  m.listener.join();  // after httplib's task queue shutdown: every connection thread joined
  m.Log(core::LogLevel::kInfo,
        "extender on " + m.options.host + ":" + std::to_string(m.port) + " stopped");
}

bool ExtenderServer::running() const { return impl_->started && !impl_->stopped; }
int ExtenderServer::port() const { return impl_->port; }
const std::string& ExtenderServer::url_prefix() const { return impl_->prefix; }

std::string ExtenderServer::RenderMetrics() const {
  return impl_->metrics.Render(*impl_->state, impl_->table ? impl_->table->open() : 0);
}

}  // namespace gpumux::extender
