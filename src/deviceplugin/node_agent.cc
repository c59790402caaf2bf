#include "gpumux/deviceplugin/node_agent.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <future>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "gpumux/core/plural.h"
#include "gpumux/kube/node_lock.h"
#include "gpumux/kube/objects.h"
#include "gpumux/net/http_server.h"
#include "gpumux/net/process_metrics.h"

namespace gpumux::deviceplugin {
namespace {

using json = nlohmann::json;

std::int64_t SystemNowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Prometheus metrics of one node agent.
class Metrics {
 public:
  Metrics()
      : registry_(std::make_shared<prometheus::Registry>()),
        allocations_(prometheus::BuildCounter()
                         .Name("gpumux_device_plugin_allocate_total")
                         .Help("kubelet Allocate calls by resource and outcome (ok, refused)")
                         .Register(*registry_)),
        latency_(prometheus::BuildHistogram()
                     .Name("gpumux_device_plugin_allocate_seconds")
                     .Help("Time to answer a kubelet Allocate call, by resource")
                     .Register(*registry_)),
        gpus_(prometheus::BuildGauge()
                  .Name("gpumux_device_plugin_gpus")
                  .Help("GPUs of this node by health")
                  .Register(*registry_)),
        xids_(
            prometheus::BuildCounter()
                .Name("gpumux_device_plugin_xid_events_total")
                .Help("XID events reported by the driver, by class (application, transient, fatal)")
                .Register(*registry_)),
        registrations_(prometheus::BuildCounter()
                           .Name("gpumux_device_plugin_registrations_total")
                           .Help("Successful registrations with the kubelet since start")
                           .Register(*registry_)
                           .Add({})),
        published_(prometheus::BuildGauge()
                       .Name("gpumux_device_plugin_inventory_published")
                       .Help("1 when the node's gpumux.io/gpus annotation is up to date")
                       .Register(*registry_)
                       .Add({})),
        memory_(Gauge("gpumux_device_plugin_gpu_memory_bytes", "Memory of each GPU")),
        granted_memory_(Gauge("gpumux_device_plugin_gpu_granted_memory_bytes",
                              "GPU memory granted to the containers of this node's pods (a whole "
                              "GPU granted counts all its memory)")),
        granted_compute_(Gauge("gpumux_device_plugin_gpu_granted_compute_ratio",
                               "Share of each GPU's compute granted (1 = the whole GPU)")),
        granted_containers_(Gauge("gpumux_device_plugin_gpu_containers",
                                  "Containers of this node's pods whose grant names the GPU")),
        enforcement_(Gauge("gpumux_device_plugin_gpu_enforcement",
                           "1 per GPU, labelled with what holds its sharing tenants to their "
                           "grants: memory (hard, soft, none), compute (mps-namespace, "
                           "hami-core, mps-server, none) and the backends in use")),
        limits_recorded_(Gauge("gpumux_device_plugin_memory_limits_recorded",
                               "Containers on this node with a GPU memory limit on record")
                             .Add({})),
        limits_reclaimed_(prometheus::BuildCounter()
                              .Name("gpumux_device_plugin_memory_limits_reclaimed_total")
                              .Help("GPU memory limit records removed because their container "
                                    "was gone (a killed hook, a missed poststop)")
                              .Register(*registry_)
                              .Add({})) {}

  void Allocate(Resource r, double seconds, bool ok) {
    const std::string name(ResourceName(r));
    allocations_.Add({{"resource", name}, {"outcome", ok ? "ok" : "refused"}}).Increment();
    static const prometheus::Histogram::BucketBoundaries buckets{
        0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.25, 1, 5};
    latency_.Add({{"resource", name}}, buckets).Observe(seconds);
  }
  void Gpus(int healthy, int unhealthy) {
    gpus_.Add({{"health", "Healthy"}}).Set(healthy);
    gpus_.Add({{"health", "Unhealthy"}}).Set(unhealthy);
  }
  void Xid(gpu::XidClass c) {
    xids_.Add({{"class", std::string(gpu::XidClassName(c))}}).Increment();
  }
  // The plugin's cumulative count; a Prometheus counter only grows by what is new.
  void Registrations(std::int64_t n) {
    if (n > registered_) registrations_.Increment(static_cast<double>(n - registered_));
    registered_ = std::max(registered_, n);
  }
  void Published(bool yes) { published_.Set(yes ? 1 : 0); }
  // Per GPU: its memory and what the node's pods' grants give it (dcgm-exporter's and HAMi's
  // users look for these per GPU).
  void Granted(const std::vector<gpu::Gpu>& gpus, const std::map<int, GrantedOnGpu>& granted) {
    constexpr double kMiB = 1024.0 * 1024.0;
    for (const gpu::Gpu& g : gpus) {
      const prometheus::Labels l{{"gpu", std::to_string(g.index)}, {"uuid", g.uuid}};
      const auto it = granted.find(g.index);
      const GrantedOnGpu sum = it == granted.end() ? GrantedOnGpu{} : it->second;
      const double memory = static_cast<double>(g.memory_total_mib) * kMiB;
      memory_.Add(l).Set(memory);
      granted_memory_.Add(l).Set(sum.exclusive ? memory
                                               : static_cast<double>(sum.memory_mib) * kMiB);
      granted_compute_.Add(l).Set(static_cast<double>(sum.milli) / core::kMilliPerGpu);
      granted_containers_.Add(l).Set(sum.containers);
    }
  }
  void Enforcement(const std::vector<gpu::Gpu>& gpus,
                   const std::vector<kube::GpuEnforcement>& current) {
    for (prometheus::Gauge* g : enforcement_gauges_) enforcement_.Remove(g);
    enforcement_gauges_.clear();
    for (std::size_t i = 0; i < gpus.size() && i < current.size(); ++i) {
      std::string backends;
      for (const std::string& b : current[i].backends)
        backends += (backends.empty() ? "" : ",") + b;
      prometheus::Gauge& g = enforcement_.Add(
          {{"gpu", std::to_string(gpus[i].index)},
           {"uuid", gpus[i].uuid},
           {"memory", std::string(kube::MemoryEnforcementName(current[i].memory))},
           {"compute", std::string(kube::ComputeEnforcementName(current[i].compute))},
           {"backends", backends.empty() ? "none" : backends}});
      g.Set(1);
      enforcement_gauges_.push_back(&g);
    }
  }
  void Limits(std::int64_t recorded, std::int64_t reclaimed_total) {
    limits_recorded_.Set(static_cast<double>(recorded));
    if (reclaimed_total > reclaimed_) {
      limits_reclaimed_.Increment(static_cast<double>(reclaimed_total - reclaimed_));
      reclaimed_ = reclaimed_total;
    }
  }
  std::string Text() const {
    std::ostringstream out;
    prometheus::TextSerializer().Serialize(out, registry_->Collect());
    return out.str() + net::ProcessMetricsText("device-plugin");
  }

 private:
  prometheus::Family<prometheus::Gauge>& Gauge(const char* name, const char* help) {
    return prometheus::BuildGauge().Name(name).Help(help).Register(*registry_);
  }

  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>& allocations_;
  prometheus::Family<prometheus::Histogram>& latency_;
  prometheus::Family<prometheus::Gauge>& gpus_;
  prometheus::Family<prometheus::Counter>& xids_;
  prometheus::Counter& registrations_;
  std::int64_t registered_ = 0;
  prometheus::Gauge& published_;
  prometheus::Family<prometheus::Gauge>& memory_;
  prometheus::Family<prometheus::Gauge>& granted_memory_;
  prometheus::Family<prometheus::Gauge>& granted_compute_;
  prometheus::Family<prometheus::Gauge>& granted_containers_;
  prometheus::Family<prometheus::Gauge>& enforcement_;
  std::vector<prometheus::Gauge*> enforcement_gauges_;
  prometheus::Gauge& limits_recorded_;
  prometheus::Counter& limits_reclaimed_;
  std::int64_t reclaimed_ = 0;
};

}  // namespace

std::string InventoryAnnotation(const std::vector<gpu::Gpu>& gpus, const std::vector<bool>& healthy,
                                const std::vector<kube::GpuEnforcement>& enforcement) {
  json list = json::array();
  for (std::size_t i = 0; i < gpus.size(); ++i) {
    const bool ok = i < healthy.size() ? healthy[i] : true;
    json entry = {{"index", gpus[i].index},
                  {"uuid", gpus[i].uuid},
                  {"model", gpus[i].name},
                  {"memory_mib", gpus[i].memory_total_mib},
                  {"health", ok ? "Healthy" : "Unhealthy"}};
    // What a GPU enforces is always said, "none" included: a reader takes a missing record
    // for a plugin that cannot say.
    kube::GpuEnforcement none;
    none.note = "the device plugin runs without enforcement";
    entry["enforcement"] = kube::EnforcementToJson(i < enforcement.size() ? enforcement[i] : none);
    list.push_back(std::move(entry));
  }
  return list.dump();
}

struct NodeAgent::Impl {
  NodeAgentOptions options;
  std::unique_ptr<gpu::Backend> backend;
  kube::KubeApi* api = nullptr;
  std::vector<gpu::Gpu> gpus;
  // The health loop's sleep; before `plugin`, whose callbacks wake it, so that it outlives it.
  std::mutex sleep_mu;
  std::condition_variable_any sleep_cv;
  bool wake = false;  // under sleep_mu: run a round now
  std::unique_ptr<DevicePlugin> plugin;
  std::shared_ptr<MpsDaemons> mps;     // with options.mps
  std::shared_ptr<Enforcer> enforcer;  // with options.enforcement
  gpu::HealthTracker tracker;
  Metrics metrics;

  mutable std::mutex mu;  // tracker, healthy, published, state, published_state
  std::vector<bool> healthy;
  bool published = false;  // the inventory (gpus, unit, handshake) is up to date on the node
  std::string publish_error = "not published yet";
  std::string_view state = kDevicePluginStarting;  // gpumux.io/device-plugin as it should be
  std::string published_state;                     // as last written ("" = not yet)

  std::jthread health_thread, xid_thread;

  std::unique_ptr<net::HttpServer> http;  // probes and metrics (when metrics_port >= 0)
  bool started = false;

  explicit Impl(NodeAgentOptions o) : options(std::move(o)), tracker(options.health) {}

  std::int64_t Now() const { return options.now_ms ? options.now_ms() : SystemNowMs(); }
  void Publish();
  void DrainNodeLock();
  void Poll();
  void Wake() {
    {
      std::lock_guard lock(sleep_mu);
      wake = true;
    }
    sleep_cv.notify_all();
  }
  bool Ready(std::string* why) const;
  void HealthLoop(std::stop_token stop);
  void XidLoop(std::stop_token stop);
  core::Result<void> StartHttp();
};

void NodeAgent::Impl::Publish() {
  std::vector<bool> snapshot;
  std::string state_snapshot;
  {
    std::lock_guard lock(mu);
    snapshot = healthy;
    state_snapshot = state;
  }
  if (api == nullptr) return;
  const std::vector<kube::GpuEnforcement> enforced =
      enforcer ? enforcer->Current() : std::vector<kube::GpuEnforcement>{};
  const kube::GpuEnforcement strongest = kube::StrongestOf(enforced);
  const json patch = {
      {"metadata",
       {{"labels",
         {{std::string(kube::kLabelMemoryEnforcement),
           std::string(kube::MemoryEnforcementName(strongest.memory))},
          {std::string(kube::kLabelComputeEnforcement),
           std::string(kube::ComputeEnforcementName(strongest.compute))}}},
        {"annotations",
         {{std::string(kube::kAnnotationGpus), InventoryAnnotation(gpus, snapshot, enforced)},
          {std::string(kube::kAnnotationGpuMemUnit),
           std::to_string(options.plugin.gpu_mem_unit_mib)},
          {std::string(kube::kAnnotationHandshake), std::string(kube::kHandshakeNodeLock)},
          {std::string(kAnnotationDevicePlugin), state_snapshot}}}}}};
  auto patched = api->Patch("/api/v1/nodes/" + kube::QueryEscape(options.plugin.node_name), patch,
                            kube::PatchType::kMerge);
  std::lock_guard lock(mu);
  const bool was = published;
  published = patched.has_value() && snapshot == healthy;
  publish_error = patched ? "" : patched.error().ToString();
  metrics.Published(published);
  if (!patched) {
    options.plugin.log.Warn(
        state == kDevicePluginStopping ? "publishing the GPU inventory and state failed"
                                       : "publishing the GPU inventory and state failed (retrying)",
        {{"node", options.plugin.node_name}, {"state", state_snapshot}, {"error", publish_error}});
    return;
  }
  if (!was) {
    options.plugin.log.Info(
        "published the GPU inventory in the node's annotations",
        {{"node", options.plugin.node_name}, {"gpus", std::to_string(gpus.size())}});
  }
  if (published_state != state_snapshot) {
    options.plugin.log.Info("published the device plugin's state",
                            {{"node", options.plugin.node_name},
                             {"annotation", std::string(kAnnotationDevicePlugin)},
                             {"state", state_snapshot}});
  }
  published_state = state_snapshot;
}

// One health round: the backend's snapshot into the tracker, then the verdicts to the plugin.
void NodeAgent::Impl::Poll() {
  auto listed = backend->List();
  const std::int64_t now = Now();
  std::vector<bool> next;
  bool changed = false;
  {
    std::lock_guard lock(mu);
    if (listed) {
      tracker.OnSnapshot(*listed, now);
    } else {
      options.plugin.log.Warn("listing GPUs failed", {{"error", listed.error().message}});
    }
    for (const std::string& uuid : tracker.TakeChanges(now)) {
      const gpu::GpuHealth h = tracker.Of(uuid, now);
      options.plugin.log.Write(
          h.health == gpu::Health::kHealthy ? core::LogLevel::kInfo : core::LogLevel::kWarn,
          "GPU health changed",
          {{"gpu", uuid},
           {"health", std::string(gpu::HealthName(h.health))},
           {"reason", h.reason}});
    }
    int bad = 0;
    for (const gpu::Gpu& g : gpus) {
      const bool ok = tracker.Of(g.uuid, now).health == gpu::Health::kHealthy;
      next.push_back(ok);
      bad += ok ? 0 : 1;
    }
    metrics.Gpus(static_cast<int>(gpus.size()) - bad, bad);
    changed = next != healthy;
    healthy = next;
    if (changed) published = false;
    metrics.Registrations(plugin->stats().registrations);
    metrics.Granted(gpus, plugin->Granted());
  }
  plugin->SetHealth(next);
  const bool serving = plugin->serving();
  bool need_publish = false;
  {
    std::lock_guard lock(mu);
    if (state != kDevicePluginStopping) {
      state = serving ? kDevicePluginReady : kDevicePluginStarting;
    }
    need_publish = !published || published_state != state;
  }
  if (need_publish) Publish();
}

void NodeAgent::Impl::HealthLoop(std::stop_token stop) {
  while (!stop.stop_requested()) {
    std::unique_lock lock(sleep_mu);
    sleep_cv.wait_for(lock, stop, options.health_interval, [this] { return wake; });
    wake = false;
    lock.unlock();
    if (stop.stop_requested()) return;
    Poll();
    if (mps) (void)mps->Check();
    if (mps) {
      if (const auto live = plugin->LivePodUids(); live) {
        for (const std::string& ns : mps->Maintain(*live)) {
          options.plugin.log.Info("MPS namespace of a pod that is gone deleted",
                                  {{"namespace", ns}});
        }
      }
    }
    if (enforcer && enforcer->Tick(plugin->LivePodUids(), plugin->RunningShares())) {
      {
        std::lock_guard guard(mu);
        published = false;
        metrics.Enforcement(gpus, enforcer->Current());
      }
      Wake();
    }
    if (enforcer) {
      std::lock_guard guard(mu);
      metrics.Limits(enforcer->recorded_limits(), enforcer->reclaimed_total());
    }
  }
}

void NodeAgent::Impl::XidLoop(std::stop_token stop) {
  const auto step =
      std::min<std::chrono::milliseconds>(options.health_interval, std::chrono::milliseconds(500));
  while (!stop.stop_requested()) {
    auto events = backend->WaitXid(step);
    if (!events || events->empty()) continue;
    {
      std::lock_guard lock(mu);
      const std::int64_t now = Now();
      for (const gpu::XidEvent& e : *events) {
        const gpu::XidClass c = gpu::ClassifyXid(e.xid);
        metrics.Xid(c);
        options.plugin.log.Write(
            c == gpu::XidClass::kApplication ? core::LogLevel::kInfo : core::LogLevel::kWarn,
            "XID " + std::to_string(e.xid) + " (" + std::string(gpu::XidClassName(c)) + ") on " +
                (e.uuid.empty() ? std::string("an unnamed GPU") : e.uuid));
        tracker.OnXid(e, now);
      }
    }
    Wake();  // judge health now rather than at the next interval
  }
}

core::Result<void> NodeAgent::Impl::StartHttp() {
  if (options.metrics_port < 0) return {};
  net::ServerOptions o;
  o.name = "device plugin listener";
  o.listen = {net::Endpoint::Tcp(options.metrics_host, options.metrics_port)};
  o.workers = 1;
  o.max_connections = 64;
  o.max_body_bytes = 4096;  // probes and scrapes send no body
  o.log = options.plugin.log;
  http = std::make_unique<net::HttpServer>(std::move(o));
  http->Route("/healthz", {"GET"}, net::Lane::kInline,
              [](const net::Request&) { return net::Response::Text(200, "ok\n"); });
  http->Route("/readyz", {"GET"}, net::Lane::kSide, [this](const net::Request&) {
    std::string why;
    const bool ok = Ready(&why);
    return net::Response::Text(ok ? 200 : 503, ok ? "ready\n" : why + "\n");
  });
  http->Route("/metrics", {"GET"}, net::Lane::kSide, [this](const net::Request&) {
    net::Response r = net::Response::Text(200, metrics.Text());
    r.content_type = "text/plain; version=0.0.4; charset=utf-8";
    return r;
  });
  return http->Start();
}

NodeAgent::NodeAgent(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

NodeAgent::~NodeAgent() { Stop(); }

core::Result<std::unique_ptr<NodeAgent>> NodeAgent::Create(NodeAgentOptions options,
                                                           std::unique_ptr<gpu::Backend> backend,
                                                           kube::KubeApi* api) {
  if (options.health_interval.count() <= 0) {
    return core::MakeError(core::ErrorCode::kInvalidArgument,
                           "the health interval must be positive");
  }
  auto impl = std::make_unique<Impl>(std::move(options));
  Impl* raw = impl.get();
  impl->backend = std::move(backend);
  impl->api = api;
  auto listed = impl->backend->List();
  if (!listed) return tl::unexpected(listed.error());
  impl->gpus = std::move(*listed);
  const std::int64_t now = impl->Now();
  impl->tracker.OnSnapshot(impl->gpus, now);
  (void)impl->tracker.TakeChanges(now);
  std::vector<GpuSlot> slots;
  for (const gpu::Gpu& g : impl->gpus) {
    const bool ok = impl->tracker.Of(g.uuid, now).health == gpu::Health::kHealthy;
    impl->healthy.push_back(ok);
    slots.push_back(GpuSlot{g.index, g.uuid, g.memory_total_mib, g.minor, ok});
  }
  // The plugin publishes "starting" after the caller's check and before it registers, and wakes
  // the health loop (which publishes "ready") when its state may have changed.
  PluginOptions plugin_options = impl->options.plugin;
  if (impl->options.mps) {
    std::vector<std::string> uuids;
    for (const gpu::Gpu& g : impl->gpus) uuids.push_back(g.uuid);
    MpsOptions mps = *impl->options.mps;
    if (!mps.log) mps.log = impl->options.plugin.log;
    impl->mps = std::make_shared<MpsDaemons>(std::move(mps), std::move(uuids));
    plugin_options.inject.mps = [d = impl->mps](const std::string& uuid) {
      return d->Folders(uuid);
    };
    plugin_options.inject.mps_admit = [d = impl->mps](const std::string& uuid, std::int64_t mib,
                                                      int percent, const std::string& pod_uid,
                                                      const std::string& container) {
      return d->AdmitContainer(uuid, mib, percent, pod_uid, container);
    };
  }
  if (impl->options.enforcement) {
    EnforcementOptions e = *impl->options.enforcement;
    if (!e.log) e.log = impl->options.plugin.log;
    e.mps = impl->mps != nullptr;
    e.mps_namespaces = impl->mps != nullptr && impl->mps->Detect() == MpsProtocol::kNamespaces;
    std::vector<NodeGpu> node_gpus;
    for (const gpu::Gpu& g : impl->gpus) node_gpus.push_back({g.index, g.uuid, g.minor});
    impl->enforcer = Enforcer::Create(std::move(e), std::move(node_gpus));
    plugin_options.inject.enforce = [e = impl->enforcer](const GrantContext& context,
                                                         const kube::ContainerGrant& grant) {
      return e->Edits(context, grant);
    };
    const std::vector<kube::GpuEnforcement> current = impl->enforcer->Current();
    impl->metrics.Enforcement(impl->gpus, current);
    for (std::size_t i = 0; i < impl->gpus.size() && i < current.size(); ++i) {
      impl->options.plugin.log.Info("GPU enforcement", {{"gpu", impl->gpus[i].uuid},
                                                        {"enforces", current[i].Summary()},
                                                        {"note", current[i].note}});
    }
  }
  plugin_options.before_register =
      [raw, check = impl->options.plugin.before_register]() -> core::Result<void> {
    if (check) {
      if (auto ok = check(); !ok) return ok;
    }
    raw->Publish();
    return {};
  };
  plugin_options.on_serving_change = [raw, also = impl->options.plugin.on_serving_change] {
    raw->Wake();
    if (also) also();
  };
  auto plugin = DevicePlugin::Create(std::move(plugin_options), std::move(slots), api);
  if (!plugin) return tl::unexpected(plugin.error());
  impl->plugin = std::move(*plugin);
  impl->plugin->set_allocate_observer(
      [raw](Resource r, double seconds, bool ok) { raw->metrics.Allocate(r, seconds, ok); });
  return std::unique_ptr<NodeAgent>(new NodeAgent(std::move(impl)));
}

core::Result<void> NodeAgent::Start() {
  Impl& m = *impl_;
  if (m.started) return core::MakeError(core::ErrorCode::kFailedPrecondition, "started before");
  if (m.mps) {
    if (auto daemons = m.mps->Start(); !daemons) return daemons;
  }
  if (m.enforcer) {  // reconciled at start: nothing left of containers that are gone
    for (const std::string& what : m.enforcer->Maintain(std::nullopt)) {
      m.options.plugin.log.Info("removed what a gone container left", {{"what", what}});
    }
    std::lock_guard guard(m.mu);
    m.metrics.Limits(m.enforcer->recorded_limits(), m.enforcer->reclaimed_total());
  }
  if (auto http = m.StartHttp(); !http) {
    if (m.mps) m.mps->Stop();
    return http;
  }
  if (auto started = m.plugin->Start(); !started) {
    if (m.http) m.http->Stop();
    if (m.mps) m.mps->Stop();
    return started;
  }
  m.started = true;
  m.health_thread = std::jthread([&m](std::stop_token stop) { m.HealthLoop(stop); });
  m.xid_thread = std::jthread([&m](std::stop_token stop) { m.XidLoop(stop); });
  return {};
}

// A pod bound before the extender saw "stopping" holds the node lock until its devices are
// allocated: serve it rather than leave the kubelet to reject it. Bounded by stop_drain; the
// extender takes no new lock once it reads "stopping" (node_lock.h).
void NodeAgent::Impl::DrainNodeLock() {
  if (api == nullptr || options.stop_drain.count() <= 0) return;
  const auto deadline = std::chrono::steady_clock::now() + options.stop_drain;
  const std::string path = "/api/v1/nodes/" + kube::QueryEscape(options.plugin.node_name);
  std::string holder;
  for (;;) {
    auto node = api->Get(path);
    if (!node) return;  // cannot tell: do not hold the stop up
    const kube::NodeLockView view = kube::ReadNodeLock(*node);
    if (!view.lock) {
      if (!holder.empty()) options.plugin.log.Info("served before stopping", {{"pod", holder}});
      return;
    }
    if (holder.empty()) {
      holder = view.lock->PodKey();
      options.plugin.log.Info(
          "stopping: waiting for the kubelet to allocate the devices of the node lock's holder",
          {{"pod", holder}});
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      options.plugin.log.Warn("stopping although a pod still holds the node lock",
                              {{"pod", view.lock->PodKey()}});
      return;
    }
    std::this_thread::sleep_for(options.stop_drain_poll);
  }
}

void NodeAgent::Stop() {
  Impl& m = *impl_;
  if (!m.started) return;
  m.started = false;
  m.health_thread.request_stop();
  m.xid_thread.request_stop();
  m.sleep_cv.notify_all();
  if (m.health_thread.joinable()) m.health_thread.join();
  if (m.xid_thread.joinable()) m.xid_thread.join();
  {
    std::lock_guard lock(m.mu);
    m.state = kDevicePluginStopping;
  }
  m.Publish();  // before the kubelet loses the plugin, so the extender stops binding here
  m.DrainNodeLock();
  m.plugin->Stop();
  if (m.http) m.http->Stop();
  if (m.mps) m.mps->Stop();  // after the plugin: no Allocate hands its folders out any more
}

bool NodeAgent::Impl::Ready(std::string* why) const {
  {
    std::lock_guard lock(mu);
    if (api != nullptr && !published) {
      if (why != nullptr) *why = "GPU inventory not published on the node yet: " + publish_error;
      return false;
    }
  }
  if (!plugin->serving()) {
    if (why != nullptr) {
      *why = plugin->registered() ? "the kubelet has not opened ListAndWatch on every resource yet"
                                  : "not registered with the kubelet yet";
    }
    return false;
  }
  return true;
}

bool NodeAgent::ready(std::string* why) const { return impl_->Ready(why); }
int NodeAgent::metrics_port() const { return impl_->http ? impl_->http->port() : 0; }
DevicePlugin& NodeAgent::plugin() { return *impl_->plugin; }
const std::vector<gpu::Gpu>& NodeAgent::gpus() const { return impl_->gpus; }

}  // namespace gpumux::deviceplugin
