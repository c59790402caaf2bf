#include "gpumux/k8s/extender_server.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <httplib.h>
#include <netinet/in.h>
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
#include <cstdio>
#include <cstring>
#include <exception>
#include <future>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

namespace gpumux::k8s {
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

  // A verb request the HTTP layer refused before Extender saw it (413, unreadable request).
  void CountRefused(Verb verb, int status) {
    requests_.Add({{"verb", std::string(VerbName(verb))}, {"code", std::to_string(status)}})
        .Increment();
  }

  std::string Render(const ClusterState& state) {
    const StateCounters c = state.counters();
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
    // ClusterState's counts are cumulative; a Prometheus counter only grows.
    AddDelta(expired_, c.grants_expired, last_expired_);
    AddDelta(rebuilds_, c.rebuilds, last_rebuilds_);
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
  std::mutex render_mu_;
  bool info_added_ = false;
  std::int64_t last_expired_ = 0;
  std::int64_t last_rebuilds_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Sockets.

struct BoundAddress {
  sockaddr_storage addr{};
  socklen_t len = 0;
};

std::uint16_t PortOf(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET) {
    sockaddr_in in{};
    std::memcpy(&in, &a, sizeof in);
    return ntohs(in.sin_port);
  }
  if (a.ss_family == AF_INET6) {
    sockaddr_in6 in6{};
    std::memcpy(&in6, &a, sizeof in6);
    return ntohs(in6.sin6_port);
  }
  return 0;
}

// Whether local address `a` is the same address as `bound` (the port aside), or `bound` is
// the wildcard address.
bool SameOrWildcard(const sockaddr_storage& bound, const sockaddr_storage& a) {
  if (bound.ss_family != a.ss_family) return false;
  if (a.ss_family == AF_INET) {
    sockaddr_in b{}, x{};
    std::memcpy(&b, &bound, sizeof b);
    std::memcpy(&x, &a, sizeof x);
    return b.sin_addr.s_addr == htonl(INADDR_ANY) || b.sin_addr.s_addr == x.sin_addr.s_addr;
  }
  sockaddr_in6 b{}, x{};
  std::memcpy(&b, &bound, sizeof b);
  std::memcpy(&x, &a, sizeof x);
  return IN6_IS_ADDR_UNSPECIFIED(&b.sin6_addr) ||
         std::memcmp(&b.sin6_addr, &x.sin6_addr, sizeof b.sin6_addr) == 0;
}

std::string PeerKey(const std::string& addr, int port) { return addr + "|" + std::to_string(port); }

std::string PeerKeyOf(const sockaddr_storage& a) {
  char host[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET) {
    sockaddr_in in{};
    std::memcpy(&in, &a, sizeof in);
    inet_ntop(AF_INET, &in.sin_addr, host, sizeof host);
  } else if (a.ss_family == AF_INET6) {
    sockaddr_in6 in6{};
    std::memcpy(&in6, &a, sizeof in6);
    inet_ntop(AF_INET6, &in6.sin6_addr, host, sizeof host);
  }
  return PeerKey(host, PortOf(a));
}

// cpp-httplib 0.11 gives no handle on the connections it has accepted, and a worker that waits
// on an idle keep-alive connection notices a stopped server only when the connection's
// keep-alive timeout runs out. So that Stop is prompt, this shuts down (read and write) every
// TCP connection of this process whose local end is the server's address and whose peer is
// not in `busy` (a request being answered finishes first). Each descriptor is duplicated
// before it is examined, so a descriptor closed and reused by another thread meanwhile is
// either not ours (left alone) or still the same socket. Linux (/proc/self/fd). Returns how
// many connections were shut down.
int ShutdownIdleConnections(const BoundAddress& bound, const std::set<std::string>& busy) {
  std::vector<int> fds;
  if (DIR* dir = opendir("/proc/self/fd"); dir != nullptr) {
    while (const dirent* entry = readdir(dir)) {
      int fd = -1;
      const char* name = entry->d_name;
      const char* end = name + std::strlen(name);
      if (auto [p, ec] = std::from_chars(name, end, fd); ec == std::errc{} && p == end) {
        fds.push_back(fd);
      }
    }
    closedir(dir);
  }
  const std::uint16_t port = PortOf(bound.addr);
  int count = 0;
  for (int fd : fds) {
    const int dup = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (dup < 0) continue;
    int type = 0;
    socklen_t type_len = sizeof type;
    sockaddr_storage local{}, peer{};
    socklen_t local_len = sizeof local, peer_len = sizeof peer;
    if (getsockopt(dup, SOL_SOCKET, SO_TYPE, &type, &type_len) == 0 && type == SOCK_STREAM &&
        getsockname(dup, reinterpret_cast<sockaddr*>(&local), &local_len) == 0 &&  // NOLINT
        PortOf(local) == port && SameOrWildcard(bound.addr, local) &&
        getpeername(dup, reinterpret_cast<sockaddr*>(&peer), &peer_len) == 0 &&  // NOLINT
        busy.count(PeerKeyOf(peer)) == 0) {
      if (shutdown(dup, SHUT_RDWR) == 0) ++count;
    }
    close(dup);
  }
  return count;
}

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

struct ExtenderServer::Impl {
  enum class Endpoint : std::uint8_t { kVerb, kHealthz, kReadyz, kMetrics, kInspect };
  struct Route {
    std::string path;
    Endpoint endpoint = Endpoint::kVerb;
    Verb verb = Verb::kFilter;
  };

  Extender* extender;
  ClusterState* state;
  ExtenderServerOptions options;
  std::string prefix;
  std::vector<Route> routes;
  std::string endpoints_text;  // for 404 replies
  Metrics metrics;
  httplib::Server server;
  std::thread listener;
  std::future<void> listener_done;
  BoundAddress bound;
  int last_socket = -1;  // the latest socket httplib asked us to configure: the bound one
  int port = 0;
  bool started = false;
  bool stopped = false;
  std::mutex busy_mu;
  std::multiset<std::string> busy_peers;  // connections with a request being answered

  void Log(const std::string& line) const {
    if (options.log) options.log(line);
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

  void Dispatch(const httplib::Request& req, httplib::Response& res) {
    const Route* route = Find(req.path);
    if (route == nullptr) {
      Reply(req, res, 404,
            ErrorBody("no such endpoint: " + req.method + " " + req.path +
                      " (endpoints: " + endpoints_text + ")"));
      return;
    }
    if (route->endpoint == Endpoint::kVerb) {
      if (req.method != "POST") {
        res.set_header("Allow", "POST");
        Reply(req, res, 405,
              ErrorBody(req.method + " " + req.path + ": method not allowed (use POST)"));
        return;
      }
      HandleVerb(route->verb, req, res);
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
        res.set_content(metrics.Render(*state), kMetricsType);
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

  void HandleVerb(Verb verb, const httplib::Request& req, httplib::Response& res) {
    const auto start = SteadyClock::now();
    const std::string peer = PeerKey(req.remote_addr, req.remote_port);
    {
      std::lock_guard lock(busy_mu);
      busy_peers.insert(peer);
    }
    VerbReply reply;
    const std::string content_type = req.get_header_value("Content-Type");
    if (!IsJsonContentType(content_type)) {
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
    const auto elapsed = SteadyClock::now() - start;
    metrics.Observe(verb, reply.http_status, reply.failure, reply.placements, elapsed);
    res.status = reply.http_status;
    res.body = std::move(reply.body);  // set_content would copy 100+ KB replies
    res.set_header("Content-Type", kJsonType);
    const bool ok = res.status >= 200 && res.status < 300;
    if (!ok || elapsed > options.slow_request) {
      std::string line = req.method + " " + req.path + " " + std::to_string(res.status);
      if (!reply.failure.empty()) line += " " + reply.failure;
      line += " " + FormatMillis(elapsed);
      if (ok) line += " (slow)";
      line += " from " + req.remote_addr + ":" + std::to_string(req.remote_port) + " (" +
              std::to_string(req.body.size()) + " bytes)";
      if (!ok) line += ": " + Excerpt(res.body);
      Log(line);
    }
    std::lock_guard lock(busy_mu);
    busy_peers.erase(busy_peers.find(peer));
  }

  // Replies that do not reach a verb (404, 405); logged like failed verbs.
  void Reply(const httplib::Request& req, httplib::Response& res, int status, std::string body) {
    res.status = status;
    res.set_content(std::move(body), kJsonType);
    Log(req.method + " " + req.path + " " + std::to_string(status) + " from " + req.remote_addr +
        ":" + std::to_string(req.remote_port) + ": " + Excerpt(res.body));
  }

  // Errors produced by httplib itself (413, an unreadable request) get a JSON body; our own
  // replies always have one and pass through untouched.
  httplib::Server::HandlerResponse OnError(const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    std::string message;
    if (res.status == 413) {
      message = "request body too large: the limit is " + std::to_string(options.max_body_bytes) +
                " bytes";
    } else if (res.status == 404) {
      message = "no such endpoint: " + req.method + " " + req.path +
                " (endpoints: " + endpoints_text + ")";
    } else {
      message = "bad request: " + req.method + " " + req.path + " (HTTP " +
                std::to_string(res.status) + ")";
    }
    res.set_content(ErrorBody(message), kJsonType);
    if (const Route* route = Find(req.path);
        route != nullptr && route->endpoint == Endpoint::kVerb) {
      metrics.CountRefused(route->verb, res.status);
    }
    Log(req.method + " " + req.path + " " + std::to_string(res.status) + " from " +
        req.remote_addr + ":" + std::to_string(req.remote_port) + ": " + message);
    return httplib::Server::HandlerResponse::Handled;
  }
};

ExtenderServer::ExtenderServer(Extender& extender, ClusterState& state,
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
  if (m.options.port < 0 || m.options.port > 65535) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "port " + std::to_string(m.options.port) + " is not in 0..65535");
  }
  if (m.options.threads < 1) {
    return MakeError(ErrorCode::kInvalidArgument, "the server needs at least one thread");
  }
  m.BuildRoutes();

  httplib::Server& s = m.server;
  const auto threads = static_cast<std::size_t>(m.options.threads);
  s.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  // Not httplib's default options: SO_REUSEPORT would let a second extender bind the same port
  // and silently take half of kube-scheduler's requests. SO_REUSEADDR only lets a restarted
  // extender bind while the old connections linger in TIME_WAIT.
  s.set_socket_options([&m](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    m.last_socket = sock;
  });
  s.set_tcp_nodelay(true);
  s.set_payload_max_length(m.options.max_body_bytes);
  s.set_keep_alive_max_count(100000);
  s.set_keep_alive_timeout(static_cast<time_t>(m.options.keep_alive_timeout.count()));
  s.set_read_timeout(static_cast<time_t>(m.options.read_timeout.count()), 0);
  s.set_write_timeout(static_cast<time_t>(m.options.read_timeout.count()), 0);
  const httplib::Server::Handler dispatch = [&m](const httplib::Request& req,
                                                 httplib::Response& res) { m.Dispatch(req, res); };
  // One catch-all per method; Dispatch routes by exact path (and answers 404/405 itself).
  s.Get(".*", dispatch);
  s.Post(".*", dispatch);
  s.Put(".*", dispatch);
  s.Patch(".*", dispatch);
  s.Delete(".*", dispatch);
  s.Options(".*", dispatch);
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
        m.Log(req.method + " " + req.path + " 500: " + what);
      });

  errno = 0;
  bool bound = false;
  if (m.options.port == 0) {
    const int port = s.bind_to_any_port(m.options.host);
    bound = port > 0;
    if (bound) m.port = port;
  } else {
    bound = s.bind_to_port(m.options.host, m.options.port);
  }
  if (!bound) {
    const int error = errno;
    std::string message =
        "cannot listen on " + m.options.host + ":" + std::to_string(m.options.port);
    message += error != 0 ? std::string(": ") + std::strerror(error)
                          : std::string(": not an address of this host");
    return MakeError(ErrorCode::kFailedPrecondition, message);
  }
  // httplib 0.11 listens with a backlog of 5: a burst of more simultaneous connections (probes,
  // a scrape, concurrent binds) has SYNs dropped and retried a second later. Listening again on
  // the listening socket raises the backlog (Linux).
  ::listen(m.last_socket, SOMAXCONN);
  m.bound.len = sizeof m.bound.addr;
  if (getsockname(m.last_socket, reinterpret_cast<sockaddr*>(&m.bound.addr),  // NOLINT
                  &m.bound.len) != 0) {
    m.bound = BoundAddress{};
  }

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
    return MakeError(ErrorCode::kFailedPrecondition, "the server on " + m.options.host + ":" +
                                                         std::to_string(m.port) +
                                                         " stopped as soon as it started");
  }
  m.Log("extender listening on " + m.options.host + ":" + std::to_string(m.port) +
        " (verbs under " + (m.prefix.empty() ? std::string("/") : m.prefix) + ", " +
        std::to_string(m.options.threads) + " threads)");
  return {};
}

void ExtenderServer::Stop() {
  Impl& m = *impl_;
  if (!m.started || m.stopped) return;
  m.stopped = true;
  m.server.stop();
  while (m.listener_done.wait_for(std::chrono::milliseconds(0)) != std::future_status::ready) {
    if (m.bound.len > 0) {
      std::set<std::string> busy;
      {
        std::lock_guard lock(m.busy_mu);
        busy.insert(m.busy_peers.begin(), m.busy_peers.end());
      }
      ShutdownIdleConnections(m.bound, busy);
    }
    if (m.listener_done.wait_for(std::chrono::milliseconds(20)) == std::future_status::ready) {
      break;
    }
  }
  m.listener.join();
  m.Log("extender on " + m.options.host + ":" + std::to_string(m.port) + " stopped");
}

bool ExtenderServer::running() const { return impl_->started && !impl_->stopped; }
int ExtenderServer::port() const { return impl_->port; }
const std::string& ExtenderServer::url_prefix() const { return impl_->prefix; }

std::string ExtenderServer::RenderMetrics() const { return impl_->metrics.Render(*impl_->state); }

}  // namespace gpumux::k8s
