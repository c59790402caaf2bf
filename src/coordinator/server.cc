#include "gpumux/coordinator/server.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>

#include "gpumux/coordinator/node_status.h"
#include "gpumux/core/json.h"
#include "gpumux/net/http_server.h"
#include "gpumux/net/process_metrics.h"
#include "src/coordinator/json_fields.h"

namespace gpumux::coordinator {

namespace {

using Json = nlohmann::json;

constexpr std::size_t kMaxSteps = 10'000;

HttpReply Error(int status, std::string message) {
  return {status,
          Json{{"error", std::move(message)}}.dump(-1, ' ', false, Json::error_handler_t::replace)};
}

HttpReply FromError(const core::Error& e) {
  switch (e.code) {
    case core::ErrorCode::kNotFound:
      return Error(404, e.message);
    case core::ErrorCode::kPermissionDenied:
      return Error(403, e.message);
    case core::ErrorCode::kUnavailable:
      return Error(503, e.message);
    default:
      return Error(400, e.message);
  }
}

HttpReply ToReply(const Reply& r, std::string_view job) {
  Json v{{"batch_size", r.batch_size}, {"state", r.state}, {"report_every_s", r.report_every_s}};
  if (!job.empty()) v["job"] = job;
  return {200, v.dump()};
}

HttpReply HandleRegister(Coordinator& c, const Json& body, const Caller& caller) {
  Registration r;
  if (auto bad = ReadRegistration(body, &r)) return Error(400, *bad);
  auto reply = c.Register(r, caller);
  if (!reply) return FromError(reply.error());
  return ToReply(*reply, r.job);
}

HttpReply HandleReport(Coordinator& c, const Json& body, const Caller& caller) {
  std::string job;
  double noise_scale = 0;
  std::optional<std::string> bad = ReadString(body, "job", &job, kRequired);
  if (!bad) bad = ReadNumber(body, "noise_scale", &noise_scale);
  std::vector<StepSample> steps;
  if (!bad && body.contains("steps")) {
    const Json& s = body["steps"];
    if (!s.is_array() || s.size() > kMaxSteps) {
      bad = "steps: must be an array of at most 10000 [batch_size, seconds] pairs";
    } else {
      steps.reserve(s.size());
      for (const Json& p : s) {
        if (!p.is_array() || p.size() < 2 || !p[0].is_number_integer() || !p[1].is_number()) {
          bad = "steps: every step must be [batch_size, seconds]";
          break;
        }
        const auto b = p[0].get<std::int64_t>();
        if (b < 1 || b > policy::kMaxProfileBatch) {
          bad = "steps: batch_size out of range";
          break;
        }
        steps.push_back({static_cast<int>(b), p[1].get<double>()});
      }
    }
  }
  if (bad) return Error(400, *bad);
  auto reply = c.Report(job, steps, noise_scale, caller);
  if (!reply) return FromError(reply.error());
  return ToReply(*reply, "");
}

}  // namespace

Caller CallerOf(const net::Peer& peer, const std::string& proc) {
  if (peer.transport == net::Peer::Transport::kTcp) return Caller::Tcp(peer.address);
  return ReadCaller(peer.pid, peer.uid, proc);
}

HttpReply Handle(Coordinator& c, std::string_view method, std::string_view path,
                 std::string_view body, const Caller& caller) {
  if (method == "GET" && path == "/v1/state")
    return {200, kube::StateJson(c.options().node, c.options().tuner, c.State(caller)).dump()};
  const bool known = path == "/v1/register" || path == "/v1/report" || path == "/v1/leave";
  if (!known) return Error(404, "no such endpoint: " + std::string(path));
  if (method != "POST") return Error(405, std::string(path) + " takes POST");
  auto parsed = core::ParseJson(body, "the body");
  if (!parsed) return Error(400, parsed.error().message);
  const Json& v = *parsed;
  if (!v.is_object()) return Error(400, "the body must be a JSON object");
  if (path == "/v1/register") return HandleRegister(c, v, caller);
  if (path == "/v1/report") return HandleReport(c, v, caller);
  std::string job;
  if (auto bad = ReadString(v, "job", &job, kRequired)) return Error(400, *bad);
  auto left = c.Leave(job, caller);
  if (!left) return FromError(left.error());
  return {200, "{}"};
}

// ---------------------------------------------------------------------------------------------
// The store writer: newest value per key, written in the background, retried while refused.

class StoreWriter final : public StoreSink {
 public:
  StoreWriter(store::Store* store, const ServerOptions& options, std::string alive_key,
              std::string alive_value, core::Logger log)
      : store_(store),
        options_(options),
        alive_key_(std::move(alive_key)),
        alive_value_(std::move(alive_value)),
        log_(std::move(log)) {
    thread_ = std::thread([this] { Run(); });
  }
  ~StoreWriter() override { Stop(); }

  void Write(std::string key, std::optional<std::string> value) override {
    std::lock_guard lock(mu_);
    pending_[std::move(key)] = std::move(value);
    cv_.notify_one();
  }

  void Stop() {
    {
      std::lock_guard lock(mu_);
      if (stop_) return;
      stop_ = true;
      cv_.notify_one();
    }
    if (thread_.joinable()) thread_.join();
    Flush();  // one last attempt
  }

  std::size_t pending() const {
    std::lock_guard lock(mu_);
    return pending_.size();
  }
  std::int64_t errors() const { return errors_.load(); }
  std::int64_t batches() const { return batches_.load(); }
  bool up() const { return up_.load(); }

 private:
  // Writes everything queued; what fails goes back unless a newer value arrived meanwhile.
  bool Flush() {
    std::map<std::string, std::optional<std::string>> batch;
    {
      std::lock_guard lock(mu_);
      batch.swap(pending_);
    }
    if (batch.empty()) return true;  // proves nothing about the store: no "reachable again"
    std::vector<store::Change> changes;
    changes.reserve(batch.size());
    for (const auto& [key, value] : batch) changes.push_back({key, value});
    // One call for the batch: the file store rewrites and fsyncs once for all of it.
    const auto done = store_->Apply(changes);
    if (!done) {
      Failed(done.error().message);
      std::lock_guard lock(mu_);
      for (auto& entry : batch) pending_.insert(std::move(entry));  // newer values stay
      return false;
    }
    ++batches_;
    Recovered();
    return true;
  }

  void Failed(const std::string& why) {
    ++errors_;
    if (up_.exchange(false)) {
      log_.Warn("store unreachable (retrying; jobs are served meanwhile)", {{"error", why}});
    }
  }
  void Recovered() {
    if (!up_.exchange(true)) log_.Info("store reachable again", {});
  }

  void Run() {
    auto next_alive = std::chrono::steady_clock::now();
    bool alive_written = false;
    std::unique_lock lock(mu_);
    while (!stop_) {
      cv_.wait_for(lock, options_.store_retry, [&] { return stop_ || !pending_.empty(); });
      if (stop_) break;
      lock.unlock();
      const bool ok = Flush();
      if (std::chrono::steady_clock::now() >= next_alive) {
        auto done = alive_written ? store_->KeepAlive()
                                  : store_->PutLeased(alive_key_, alive_value_, options_.alive_ttl);
        if (done) {
          Recovered();
          alive_written = true;
          next_alive = std::chrono::steady_clock::now() + options_.alive_every;
        } else {
          Failed(done.error().message);
          next_alive = std::chrono::steady_clock::now() + options_.store_retry;
        }
      }
      lock.lock();
      if (!ok) cv_.wait_for(lock, options_.store_retry, [&] { return stop_; });
    }
    lock.unlock();
    if (alive_written) (void)store_->Delete(alive_key_);
  }

  store::Store* store_;
  ServerOptions options_;
  std::string alive_key_, alive_value_;
  core::Logger log_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::optional<std::string>> pending_;
  bool stop_ = false;
  std::atomic<std::int64_t> errors_{0};
  std::atomic<std::int64_t> batches_{0};
  std::atomic<bool> up_{true};
  std::thread thread_;
};

// ---------------------------------------------------------------------------------------------
// The tuning worker: the tuner's computations, one at a time, outside the coordinator's lock;
// each result is applied under that lock (the coordinator drops it if the GPU's jobs changed).

class TuningWorker {
 public:
  TuningWorker(std::mutex& coordinator_mu, std::function<void(double)> computed)
      : coordinator_mu_(coordinator_mu), computed_(std::move(computed)) {
    thread_ = std::thread([this] { Run(); });
  }
  ~TuningWorker() { Stop(); }

  // Called under the coordinator's lock (lock order: the coordinator's, then the queue's).
  void Post(Coordinator::TuningWork work) {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(work));
    cv_.notify_one();
  }

  // Drops what is queued; a computation in progress finishes and is not applied.
  void Stop() {
    {
      std::lock_guard lock(mu_);
      if (stop_) return;
      stop_ = true;
      queue_.clear();
      cv_.notify_one();
      idle_cv_.notify_all();
    }
    if (thread_.joinable()) thread_.join();
  }

  std::size_t queued() const {
    std::lock_guard lock(mu_);
    return queue_.size();
  }

  // Returns when nothing is queued or being computed and applied. Not under the coordinator's lock.
  void WaitIdle() {
    std::unique_lock lock(mu_);
    idle_cv_.wait(lock, [this] { return stop_ || (queue_.empty() && !busy_); });
  }

 private:
  void Run() {
    std::unique_lock lock(mu_);
    while (true) {
      cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      Coordinator::TuningWork work = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
      lock.unlock();
      const auto start = std::chrono::steady_clock::now();
      std::function<void()> apply = work();
      if (apply) {  // empty: stale work, skipped without computing
        computed_(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
        std::lock_guard coordinator(coordinator_mu_);
        if (!stopping()) apply();
      }
      lock.lock();
      busy_ = false;
      idle_cv_.notify_all();
    }
  }
  bool stopping() const {
    std::lock_guard lock(mu_);
    return stop_;
  }

  std::mutex& coordinator_mu_;
  std::function<void(double)> computed_;
  mutable std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  std::deque<Coordinator::TuningWork> queue_;
  bool busy_ = false;
  bool stop_ = false;
  std::thread thread_;
};

class Server::Impl {
 public:
  Impl(ServerOptions options, std::unique_ptr<Coordinator> coordinator, store::Store* store,
       core::Logger log)
      : options_(std::move(options)),
        coordinator_(std::move(coordinator)),
        store_(store),
        log_(std::move(log)),
        registry_(std::make_shared<prometheus::Registry>()),
        requests_(prometheus::BuildCounter()
                      .Name("gpumux_coordinator_requests_total")
                      .Help("Job protocol requests by endpoint and HTTP status")
                      .Register(*registry_)),
        durations_(prometheus::BuildHistogram()
                       .Name("gpumux_coordinator_request_duration_seconds")
                       .Help("Time to answer a job protocol request, the wait for the "
                             "coordinator's lock included, by endpoint")
                       .Register(*registry_)),
        tuning_(prometheus::BuildHistogram()
                    .Name("gpumux_coordinator_tuning_duration_seconds")
                    .Help("Time the tuner took to start a session or decide a step, on the "
                          "tuning thread (requests do not wait for it)")
                    .Register(*registry_)
                    .Add({}, kTuningBuckets)) {}

  // The store's writer, and the node's stored state read back (none when the store is down).
  void RestoreFromStore() {
    const std::string prefix =
        coordinator_->options().prefix + "nodes/" + KeySegment(coordinator_->options().node) + "/";
    Json alive{{"pid", static_cast<std::int64_t>(::getpid())}};
    writer_ = std::make_unique<StoreWriter>(store_, options_, prefix + "alive", alive.dump(), log_);
    coordinator_->set_sink(writer_.get());
    std::vector<std::pair<std::string, std::string>> kv;
    bool read = true;
    for (const std::string& p : {prefix, coordinator_->options().prefix + "observations/"}) {
      auto stored = store_->List(p);
      if (!stored) {
        log_.Warn(
            "cannot read the store; starting without stored state",
            {{"prefix", p}, {"store", store_->Describe()}, {"error", stored.error().message}});
        read = false;
        break;
      }
      for (auto& e : *stored) kv.emplace_back(std::move(e.key), std::move(e.value));
    }
    if (read) coordinator_->Restore(kv);
  }

  core::Result<void> Start() {
    if (store_ != nullptr) RestoreFromStore();
    // From now on the tuner computes on its own thread: no request waits behind it.
    tuning_worker_ = std::make_unique<TuningWorker>(mu_, [this](double s) { tuning_.Observe(s); });
    coordinator_->set_tuning_runner(
        [this](Coordinator::TuningWork work) { tuning_worker_->Post(std::move(work)); });
    net::ServerOptions o;
    o.name = "coordinator";
    o.listen = {net::Endpoint::Tcp(options_.host, options_.port)};
    // Pods run as any user, so the socket is open to all by default (0666): who is calling
    // is decided from the connection (caller.h), and a caller acts only for its own jobs.
    if (!options_.socket_path.empty()) {
      o.listen.push_back(net::Endpoint::Unix(options_.socket_path, options_.socket_mode));
    }
    o.workers = 4;
    o.max_connections = 1024;
    o.max_body_bytes = std::size_t{4} << 20;
    o.log = log_;
    http_ = std::make_unique<net::HttpServer>(std::move(o));
    const auto serve = [this](const net::Request& req) {
      const auto start = std::chrono::steady_clock::now();
      const Caller caller = CallerOf(req.peer, options_.proc);
      HttpReply reply;
      // After the cgroup was read: were the connector gone, what was read could be another
      // process's, one that took its pid.
      if (req.peer.ConnectorGone()) {
        reply = Error(403,
                      "the process that opened this connection has exited (its pid may now be "
                      "another process's): connect again");
      } else {
        std::lock_guard lock(mu_);
        reply = Handle(*coordinator_, req.method, req.path, req.body, caller);
      }
      requests_.Add({{"path", req.path}, {"code", std::to_string(reply.status)}}).Increment();
      durations_.Add({{"path", req.path}}, kDurationBuckets)
          .Observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      return net::Response::Json(reply.status, std::move(reply.body));
    };
    for (const char* path : {"/v1/register", "/v1/report", "/v1/leave"}) {
      http_->Route(path, {"POST"}, net::Lane::kWorker, serve);
    }
    http_->Route("/v1/state", {"GET"}, net::Lane::kWorker, serve);
    http_->Route("/healthz", {"GET"}, net::Lane::kInline,
                 [](const net::Request&) { return net::Response::Text(200, "ok\n"); });
    http_->Route("/metrics", {"GET"}, net::Lane::kSide, [this](const net::Request&) {
      net::Response r = net::Response::Text(200, MetricsText());
      r.content_type = "text/plain; version=0.0.4; charset=utf-8";
      return r;
    });
    if (auto started = http_->Start(); !started) return started;
    ticker_ = std::thread([this] {
      std::unique_lock lock(mu_);
      while (!stop_) {
        tick_cv_.wait_for(lock, options_.tick, [this] { return stop_; });
        if (stop_) break;
        if (options_.on_tick) options_.on_tick(*coordinator_);
        coordinator_->Tick();
      }
    });
    return {};
  }

  void Stop() {
    {
      std::lock_guard lock(mu_);
      if (stopped_) return;
      stopped_ = true;
      stop_ = true;
      tick_cv_.notify_all();
    }
    if (ticker_.joinable()) ticker_.join();
    if (http_) http_->Stop(std::chrono::seconds(5));  // requests are short: a bounded SIGTERM
    if (tuning_worker_) tuning_worker_->Stop();       // a session in progress is dropped
    if (writer_) writer_->Stop();
  }

  // long function: a flat list of the metric families and their values
  std::string MetricsText() {
    // Rebuilt at each scrape from the coordinator's state: series of jobs and GPUs that left
    // disappear. Counters are the coordinator's own cumulative counts.
    prometheus::Registry now;
    const auto gauge = [&now](const char* name, const char* help) -> auto& {
      return prometheus::BuildGauge().Name(name).Help(help).Register(now);
    };
    const auto counter = [&now](const char* name, const char* help) -> auto& {
      return prometheus::BuildCounter().Name(name).Help(help).Register(now);
    };
    auto& jobs = gauge("gpumux_coordinator_gpu_jobs", "Jobs registered on each GPU");
    auto& state = gauge("gpumux_coordinator_gpu_state",
                        "1 for the GPU's tuning state: solo, measuring, "
                        "tuned or untuned");
    auto& sessions = counter("gpumux_coordinator_gpu_tuning_sessions_total",
                             "Tuning sessions started on the GPU since its group formed");
    auto& step =
        gauge("gpumux_coordinator_job_step_seconds", "Mean step time over the job's recent steps");
    auto& rate = gauge("gpumux_coordinator_job_samples_per_second",
                       "Samples per second at the job's current batch size");
    auto& batch =
        gauge("gpumux_coordinator_job_batch_size", "The batch size the job reports running");
    auto& target = gauge("gpumux_coordinator_job_target_batch_size",
                         "The batch size the coordinator asks the job to use");
    auto& slowdown = gauge("gpumux_coordinator_job_slowdown",
                           "Step time over the job's solo step time at that batch size");
    auto& steps = counter("gpumux_coordinator_job_steps_total",
                          "Steps the job has reported since it registered");
    auto& started = counter("gpumux_coordinator_tuning_sessions_total",
                            "Tuning sessions started since the coordinator started");
    auto& windows = counter("gpumux_coordinator_measurement_windows_total",
                            "Measurement windows closed since the coordinator started");
    {
      std::lock_guard lock(mu_);
      for (const GpuView& g : coordinator_->State()) {
        const std::string gpu = g.uuid.empty() ? "none" : g.uuid;
        jobs.Add({{"gpu", gpu}}).Set(static_cast<double>(g.jobs.size()));
        state.Add({{"gpu", gpu}, {"state", g.state}}).Set(1);
        sessions.Add({{"gpu", gpu}}).Increment(static_cast<double>(g.sessions));
        for (const JobView& j : g.jobs) {
          // job_id, not job: Prometheus gives every target a `job` label of its own.
          const prometheus::Labels l{{"gpu", gpu}, {"job_id", j.job}, {"class", j.cls}};
          step.Add(l).Set(j.step_s);
          rate.Add(l).Set(j.samples_per_s);
          batch.Add(l).Set(j.batch_size);
          target.Add(l).Set(j.target_batch);
          slowdown.Add(l).Set(j.slowdown);
          steps.Add(l).Increment(static_cast<double>(j.steps));
        }
      }
      started.Add({}).Increment(static_cast<double>(coordinator_->sessions_started()));
      windows.Add({}).Increment(static_cast<double>(coordinator_->windows_closed()));
    }
    if (tuning_worker_) {
      gauge("gpumux_coordinator_tuning_queued", "Tuning computations waiting for the tuning thread")
          .Add({})
          .Set(static_cast<double>(tuning_worker_->queued()));
    }
    if (writer_) {
      gauge("gpumux_coordinator_store_pending_writes",
            "Keys changed and not yet written to the store")
          .Add({})
          .Set(static_cast<double>(writer_->pending()));
      counter("gpumux_coordinator_store_errors_total", "Store calls that failed since start")
          .Add({})
          .Increment(static_cast<double>(writer_->errors()));
      counter("gpumux_coordinator_store_batches_total", "Batches of changes written to the store")
          .Add({})
          .Increment(static_cast<double>(writer_->batches()));
      gauge("gpumux_coordinator_store_up", "1 if the last store call succeeded")
          .Add({})
          .Set(writer_->up() ? 1 : 0);
    }
    std::ostringstream out;
    prometheus::TextSerializer().Serialize(out, registry_->Collect());
    prometheus::TextSerializer().Serialize(out, now.Collect());
    return out.str() + net::ProcessMetricsText("coordinator");
  }

  void WaitForTuning() {
    if (tuning_worker_) tuning_worker_->WaitIdle();
  }
  int port() const { return http_ ? http_->port() : options_.port; }
  std::size_t store_pending() const { return writer_ ? writer_->pending() : 0; }

 private:
  ServerOptions options_;
  std::unique_ptr<Coordinator> coordinator_;
  store::Store* store_;
  core::Logger log_;
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Family<prometheus::Histogram>& durations_;
  inline static const prometheus::Histogram::BucketBoundaries kDurationBuckets = {
      0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 1};
  inline static const prometheus::Histogram::BucketBoundaries kTuningBuckets = {0.0001, 0.001, 0.01,
                                                                                0.1,    1,     10};
  prometheus::Histogram& tuning_;
  std::unique_ptr<StoreWriter> writer_;
  std::unique_ptr<net::HttpServer> http_;
  std::mutex mu_;
  std::condition_variable tick_cv_;
  std::thread ticker_;
  bool stop_ = false;
  bool stopped_ = false;
  std::unique_ptr<TuningWorker> tuning_worker_;  // after mu_: it applies under that lock
};

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Server::~Server() { Stop(); }
void Server::Stop() {
  if (impl_) impl_->Stop();
}
int Server::port() const { return impl_->port(); }
std::string Server::RenderMetrics() const { return impl_->MetricsText(); }
std::size_t Server::store_pending() const { return impl_->store_pending(); }
void Server::WaitForTuning() { impl_->WaitForTuning(); }

core::Result<std::unique_ptr<Server>> Server::Start(ServerOptions options,
                                                    std::unique_ptr<Coordinator> coordinator,
                                                    store::Store* store, core::Logger log) {
  if (!log) log = [](std::string_view) {};
  auto impl = std::make_unique<Impl>(std::move(options), std::move(coordinator), store, log);
  auto started = impl->Start();
  if (!started) return tl::unexpected(started.error());
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

}  // namespace gpumux::coordinator
