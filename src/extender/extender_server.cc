#include "gpumux/extender/extender_server.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <limits>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>
#include <vector>

#include "gpumux/core/log_throttle.h"
#include "gpumux/net/http_server.h"
#include "gpumux/net/process_metrics.h"

namespace gpumux::extender {
namespace {

using core::ErrorCode;
using core::MakeError;
using nlohmann::json;
using SteadyClock = std::chrono::steady_clock;

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
  // long function: one registration per metric family: a table, read top to bottom
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
                           "body_too_large, bad_request (not HTTP), write_timeout (the reply was "
                           "not taken in time), "
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
    return std::move(out).str() + net::ProcessMetricsText("extender");
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

struct ExtenderServer::Impl {
  Extender* extender;
  sched::ClusterState* state;
  ExtenderServerOptions options;
  std::string prefix;
  Metrics metrics;
  std::array<prometheus::Counter*, net::kDropKinds> dropped{};
  std::map<std::string, Verb> verb_paths;
  std::unique_ptr<net::HttpServer> server;
  bool started = false;
  bool stopped = false;

  void Log(core::LogLevel level, const std::string& line) const { options.log.Write(level, line); }

  net::Response Readyz() const {
    if (state->synced()) return net::Response::Text(200, "ok\n");
    return net::Response::Text(503,
                               "not ready: the cluster state has not yet listed the nodes and pods "
                               "from the API server\n");
  }

  net::Response HandleVerb(Verb verb, const net::Request& req) {
    const auto start = SteadyClock::now();
    VerbReply reply;
    const std::string* type = req.Header("Content-Type");
    const std::string content_type = type != nullptr ? *type : "";
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
    const bool ok = reply.http_status >= 200 && reply.http_status < 300;
    const bool slow = elapsed > options.slow_request;
    // Every request at debug; a slow one at info; a failed one at warn or error (throttled).
    if (!ok || slow || options.log.Enabled(core::LogLevel::kDebug)) {
      std::string line = req.method + " " + req.path + " " + std::to_string(reply.http_status);
      if (!reply.failure.empty()) line += " " + reply.failure;
      line += " " + FormatMillis(elapsed);
      if (ok && slow) line += " (slow)";
      line += " from " + req.peer.Describe() + " (" + std::to_string(req.body.size()) + " bytes)";
      if (!ok) line += ": " + Excerpt(reply.body);
      if (ok) {
        Log(slow ? core::LogLevel::kInfo : core::LogLevel::kDebug, line);
      } else {
        LogThrottled(std::to_string(reply.http_status), line);
      }
    }
    return net::Response::Json(reply.http_status, std::move(reply.body));
  }

  // A failed verb's line: throttled per status (a flood of bad requests cannot flood the log).
  void LogThrottled(const std::string& kind, const std::string& line) {
    throttle.Write(options.log, kind, core::LogLevel::kWarn, line);
  }
  core::LogThrottle throttle;

  net::ServerOptions ServerOptions() {
    net::ServerOptions s;
    s.name = "extender";
    s.listen = {net::Endpoint::Tcp(options.host, options.port)};
    s.workers = options.threads;
    s.max_connections = options.max_connections;
    s.max_body_bytes = options.max_body_bytes;
    s.body_budget_bytes = std::max(options.body_budget_bytes, options.max_body_bytes);
    s.request_timeout = options.request_read_timeout;
    s.keep_alive_timeout = options.keep_alive_timeout;
    s.write_timeout = options.write_timeout;
    s.error_key = "Error";  // kube-scheduler reads the extender's errors from "Error"
    s.log = options.log;
    s.on_drop = [this](net::Drop why, const net::Peer&) {
      dropped[static_cast<std::size_t>(why)]->Increment();
    };
    // A verb the server refused before the extender saw it (413, 405, a busy 503) is counted.
    s.on_reply = [this](const net::Request& req, const net::Response& res, net::ReplyOrigin origin,
                        std::chrono::nanoseconds) {
      if (origin != net::ReplyOrigin::kServer) return;
      if (const auto it = verb_paths.find(req.path); it != verb_paths.end()) {
        metrics.CountRefused(it->second, res.status);
      }
    };
    return s;
  }

  void BuildRoutes() {
    net::HttpServer& s = *server;
    for (Verb verb : kVerbs) {
      const std::string path = prefix + "/" + std::string(VerbName(verb));
      verb_paths[path] = verb;
      // Bind waits for the API server (a worker); the others compute on the I/O thread.
      s.Route(path, {"POST"}, verb == Verb::kBind ? net::Lane::kWorker : net::Lane::kCompute,
              [this, verb](const net::Request& req) { return HandleVerb(verb, req); });
    }
    s.Route("/healthz", {"GET"}, net::Lane::kInline,
            [](const net::Request&) { return net::Response::Text(200, "ok\n"); });
    s.Route("/readyz", {"GET"}, net::Lane::kInline,
            [this](const net::Request&) { return Readyz(); });
    s.Route("/metrics", {"GET"}, net::Lane::kSide, [this](const net::Request&) {
      net::Response r =
          net::Response::Text(200, metrics.Render(*state, server->open_connections()));
      r.content_type = kMetricsType;
      return r;
    });
    s.Route("/inspect", {"GET"}, net::Lane::kSide, [this](const net::Request&) {
      return net::Response::Json(
          200,
          sched::StateJson(state->Snapshot()).dump(2, ' ', false, json::error_handler_t::replace) +
              "\n");
    });
    s.SetEndpointsText("POST " + prefix +
                       "/{filter,prioritize,bind,preempt}; GET /healthz, /readyz, /metrics, "
                       "/inspect");
  }
};

ExtenderServer::ExtenderServer(Extender& extender, sched::ClusterState& state,
                               ExtenderServerOptions options)
    : impl_(std::make_unique<Impl>()) {
  impl_->extender = &extender;
  impl_->state = &state;
  impl_->options = std::move(options);
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
  for (std::size_t i = 0; i < net::kDropKinds; ++i) {
    m.dropped[i] = &m.metrics.Dropped(std::string(net::DropName(static_cast<net::Drop>(i))));
  }
  m.server = std::make_unique<net::HttpServer>(m.ServerOptions());
  m.BuildRoutes();
  if (auto started = m.server->Start(); !started) return started;
  m.started = true;
  const ExtenderServerOptions& o = m.options;
  m.Log(core::LogLevel::kInfo, "extender listening on " + o.host + ":" +
                                   std::to_string(m.server->port()) + " (verbs under " +
                                   (m.prefix.empty() ? std::string("/") : m.prefix) + ", " +
                                   std::to_string(o.threads) + " threads for verbs, up to " +
                                   std::to_string(o.max_connections) + " connections)");
  return {};
}

void ExtenderServer::Stop() {
  Impl& m = *impl_;
  if (!m.started || m.stopped) return;
  m.stopped = true;
  m.server->Stop();
  m.Log(core::LogLevel::kInfo,
        "extender on " + m.options.host + ":" + std::to_string(m.server->port()) + " stopped");
}

bool ExtenderServer::running() const { return impl_->started && !impl_->stopped; }
int ExtenderServer::port() const {
  return impl_->server && impl_->started ? impl_->server->port() : impl_->options.port;
}
const std::string& ExtenderServer::url_prefix() const { return impl_->prefix; }

std::string ExtenderServer::RenderMetrics() const {
  return impl_->metrics.Render(*impl_->state,
                               impl_->server ? impl_->server->open_connections() : 0);
}

}  // namespace gpumux::extender
