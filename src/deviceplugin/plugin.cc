#include "gpumux/deviceplugin/plugin.h"

#include <grpcpp/grpcpp.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <thread>
#include <unordered_set>

#include "deviceplugin/v1beta1/api.grpc.pb.h"
#include "gpumux/core/plural.h"
#include "gpumux/deviceplugin/allocate.h"

namespace gpumux::deviceplugin {
namespace {

namespace pb = ::v1beta1;
using Clock = std::chrono::steady_clock;
// Stop: how long an Allocate answer is given to reach the kubelet before the ListAndWatch
// streams end, and how long Stop waits for Allocate calls in flight at most.
constexpr auto kStopAllocateSettle = std::chrono::milliseconds(250);
constexpr auto kStopAllocateWait = std::chrono::seconds(2);

constexpr std::string_view kVersion = "v1beta1";

// The inode of a path, 0 when it does not exist (sockets are replaced, not rewritten).
ino_t InodeOf(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? st.st_ino : 0;
}

}  // namespace

struct DevicePlugin::Impl {
  class Service;
  // One resource's server. Heap-allocated: services point at it.
  struct Server {
    Resource resource = Resource::kGpu;
    std::string socket;
    std::unique_ptr<Service> service;
    std::unique_ptr<grpc::Server> server;
    std::atomic<bool> stopping{false};
    ino_t inode = 0;
    bool registered = false;  // with the kubelet whose socket has inode kubelet_inode
    int streams = 0;          // ListAndWatch streams that have sent their first list
  };

  PluginOptions options;
  kube::KubeApi* api = nullptr;
  std::unique_ptr<Handshake> handshake;
  std::vector<NodeGpu> node_gpus;

  mutable std::mutex mu;  // the tables' health, generation, stats, registration flags
  std::condition_variable cv;
  std::vector<DeviceTable> tables;  // indexed by Resource
  std::vector<bool> healthy;
  std::uint64_t generation = 1;
  bool stopping = false;
  int allocating = 0;                   // Allocate calls being answered
  Clock::time_point last_allocate_end;  // when the latest one was answered
  PluginStats stats;
  AllocateObserver observer;
  ino_t kubelet_inode = 0;

  std::vector<std::unique_ptr<Server>> servers;
  std::jthread watcher;
  std::mutex watcher_mu;  // the watcher's sleep
  std::condition_variable_any watcher_cv;

  // Callers hold no lock.
  void ServingMayHaveChanged() const {
    if (options.on_serving_change) options.on_serving_change();
  }
  std::string KubeletSocket() const { return options.kubelet_dir + "/kubelet.sock"; }
  const DeviceTable& Table(Resource r) const { return tables[static_cast<std::size_t>(r)]; }

  core::Result<void> StartServer(Server& s);
  void StopServer(Server& s);
  bool Register(Server& s);
  void WatchKubelet(std::stop_token stop);

  grpc::Status ListAndWatch(Server& s, grpc::ServerContext* ctx,
                            grpc::ServerWriter<pb::ListAndWatchResponse>* writer);
  grpc::Status Allocate(Resource r, const pb::AllocateRequest& req, pb::AllocateResponse* resp);
  grpc::Status Preferred(Resource r, const pb::PreferredAllocationRequest& req,
                         pb::PreferredAllocationResponse* resp);
};

class DevicePlugin::Impl::Service final : public pb::DevicePlugin::Service {
 public:
  Service(Impl& impl, Server& server) : impl_(&impl), server_(&server) {}

  grpc::Status GetDevicePluginOptions(grpc::ServerContext*, const pb::Empty*,
                                      pb::DevicePluginOptions* out) override {
    out->set_pre_start_required(false);
    out->set_get_preferred_allocation_available(true);
    return grpc::Status::OK;
  }
  grpc::Status ListAndWatch(grpc::ServerContext* ctx, const pb::Empty*,
                            grpc::ServerWriter<pb::ListAndWatchResponse>* writer) override {
    return impl_->ListAndWatch(*server_, ctx, writer);
  }
  grpc::Status GetPreferredAllocation(grpc::ServerContext*,
                                      const pb::PreferredAllocationRequest* req,
                                      pb::PreferredAllocationResponse* resp) override {
    return impl_->Preferred(server_->resource, *req, resp);
  }
  grpc::Status Allocate(grpc::ServerContext*, const pb::AllocateRequest* req,
                        pb::AllocateResponse* resp) override {
    const auto start = Clock::now();
    {
      std::lock_guard lock(impl_->mu);
      ++impl_->allocating;
    }
    grpc::Status status = impl_->Allocate(server_->resource, *req, resp);
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    AllocateObserver observer;
    {
      std::lock_guard lock(impl_->mu);
      if (status.ok()) {
        impl_->stats.allocations += req->container_requests_size();
      } else {
        ++impl_->stats.allocate_failures;
      }
      observer = impl_->observer;
    }
    if (!status.ok()) {
      impl_->options.log.Warn("Allocate refused",
                              {{"resource", std::string(ResourceName(server_->resource))},
                               {"why", status.error_message()}});
    }
    if (observer) observer(server_->resource, seconds, status.ok());
    {
      std::lock_guard lock(impl_->mu);
      --impl_->allocating;
      impl_->last_allocate_end = Clock::now();
    }
    impl_->cv.notify_all();
    return status;
  }
  grpc::Status PreStartContainer(grpc::ServerContext*, const pb::PreStartContainerRequest*,
                                 pb::PreStartContainerResponse*) override {
    return grpc::Status::OK;
  }

 private:
  Impl* impl_;
  Server* server_;
};

grpc::Status DevicePlugin::Impl::ListAndWatch(
    Server& s, grpc::ServerContext* ctx, grpc::ServerWriter<pb::ListAndWatchResponse>* writer) {
  // Counted in s.streams from the first list the kubelet received until the stream ends.
  bool counted = false;
  struct Uncount {
    Impl* impl;
    Server* s;
    bool* counted;
    ~Uncount() {
      if (!*counted) return;
      {
        std::lock_guard lock(impl->mu);
        --s->streams;
      }
      impl->ServingMayHaveChanged();
    }
  } uncount{this, &s, &counted};
  std::uint64_t sent = 0;
  while (true) {
    pb::ListAndWatchResponse response;
    {
      std::unique_lock lock(mu);
      // Wake now and then to notice a client that went away.
      cv.wait_for(lock, std::chrono::milliseconds(200),
                  [&] { return stopping || s.stopping.load() || generation != sent; });
      if (stopping || s.stopping.load()) return grpc::Status::OK;
      if (ctx->IsCancelled()) return grpc::Status::CANCELLED;
      if (generation == sent) continue;
      sent = generation;
      const DeviceTable& table = Table(s.resource);
      response.mutable_devices()->Reserve(static_cast<int>(table.devices().size()));
      for (const Device& d : table.devices()) {
        pb::Device* out = response.add_devices();
        out->set_id(d.id);
        out->set_health(d.healthy ? "Healthy" : "Unhealthy");
      }
    }
    if (!writer->Write(response)) return grpc::Status::OK;  // the kubelet went away
    bool first = false;
    {
      std::lock_guard lock(mu);
      ++stats.list_and_watch_updates;
      if (!counted) {
        counted = first = true;
        ++s.streams;
      }
    }
    if (first) ServingMayHaveChanged();
  }
}

grpc::Status DevicePlugin::Impl::Allocate(Resource r, const pb::AllocateRequest& req,
                                          pb::AllocateResponse* resp) {
  // No lock: AnswerAllocate reads only the tables' device IDs, fixed since Create.
  AllocateClaim claim;
  if (handshake != nullptr) {
    claim = [this](Resource resource, const std::vector<std::int64_t>& counts) {
      return handshake->Claim(resource, counts);
    };
  }
  grpc::Status status =
      AnswerAllocate(r, req, tables, node_gpus, options.inject, options.node_name, claim, resp);
  if (status.ok()) {
    const auto& envs = resp->container_responses(0).envs();
    const auto pod = envs.find("GPUMUX_POD");
    const auto container = envs.find("GPUMUX_CONTAINER");
    options.log.Info(
        "Allocate served",
        {{"resource", std::string(ResourceName(r))},
         {"pod", pod == envs.end() ? std::string("?") : pod->second},
         {"container", container == envs.end() ? std::string("?") : container->second}});
  }
  return status;
}

grpc::Status DevicePlugin::Impl::Preferred(Resource r, const pb::PreferredAllocationRequest& req,
                                           pb::PreferredAllocationResponse* resp) {
  for (const pb::ContainerPreferredAllocationRequest& c : req.container_requests()) {
    const auto size = static_cast<std::size_t>(std::max(0, c.allocation_size()));
    std::vector<int> granted;
    if (handshake != nullptr) granted = handshake->Peek(r, c.allocation_size());
    std::vector<std::string> chosen;
    std::unordered_set<std::string> taken;
    for (const std::string& id : c.must_include_deviceids()) {
      if (taken.insert(id).second) chosen.push_back(id);
    }
    {
      std::lock_guard lock(mu);
      const DeviceTable& table = Table(r);
      auto pick = [&](bool granted_only) {
        for (const std::string& id : c.available_deviceids()) {
          if (chosen.size() >= size) return;
          const Device* d = table.Find(id);
          if (d == nullptr || taken.contains(id)) continue;
          const int index = node_gpus[static_cast<std::size_t>(d->gpu)].index;
          const bool is_granted = std::find(granted.begin(), granted.end(), index) != granted.end();
          if (granted_only && !is_granted) continue;
          taken.insert(id);
          chosen.push_back(id);
        }
      };
      pick(true);
      pick(false);
    }
    pb::ContainerPreferredAllocationResponse* out = resp->add_container_responses();
    for (const std::string& id : chosen) out->add_deviceids(id);
  }
  return grpc::Status::OK;
}

core::Result<void> DevicePlugin::Impl::StartServer(Server& s) {
  std::error_code ec;
  std::filesystem::remove(s.socket, ec);  // a stale socket from an earlier run
  s.stopping = false;
  s.service = std::make_unique<Service>(*this, s);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("unix:" + s.socket, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(s.service.get());
  s.server = builder.BuildAndStart();
  if (s.server == nullptr) {
    return core::MakeError(core::ErrorCode::kIo,
                           s.socket + ": cannot serve the device plugin for " +
                               std::string(ResourceName(s.resource)) +
                               " (does the folder exist and is it writable?)");
  }
  s.inode = InodeOf(s.socket);
  return {};
}

void DevicePlugin::Impl::StopServer(Server& s) {
  if (s.server == nullptr) return;
  s.stopping = true;
  cv.notify_all();
  s.server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  s.server->Wait();
  s.server.reset();
  s.service.reset();
}

bool DevicePlugin::Impl::Register(Server& s) {
  auto channel = grpc::CreateChannel("unix:" + KubeletSocket(), grpc::InsecureChannelCredentials());
  auto stub = pb::Registration::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + options.register_timeout);
  pb::RegisterRequest request;
  request.set_version(std::string(kVersion));
  request.set_endpoint(std::filesystem::path(s.socket).filename().string());
  request.set_resource_name(std::string(ResourceName(s.resource)));
  request.mutable_options()->set_pre_start_required(false);
  request.mutable_options()->set_get_preferred_allocation_available(true);
  pb::Empty empty;
  const grpc::Status status = stub->Register(&ctx, request, &empty);
  {
    std::lock_guard lock(mu);
    if (!status.ok()) {
      ++stats.register_failures;
      options.log.Warn("registering with the kubelet failed",
                       {{"resource", std::string(ResourceName(s.resource))},
                        {"kubelet_socket", KubeletSocket()},
                        {"error", status.error_message()}});
      return false;
    }
    ++stats.registrations;
    s.registered = true;
    options.log.Info("registered with the kubelet",
                     {{"resource", std::string(ResourceName(s.resource))},
                      {"devices", std::to_string(Table(s.resource).devices().size())},
                      {"kubelet_socket", KubeletSocket()}});
  }
  ServingMayHaveChanged();
  return true;
}

void DevicePlugin::Impl::WatchKubelet(std::stop_token stop) {
  // Whether the log says that the plugin waits for the kubelet's socket: said once when it is
  // absent (at start, or gone), and answered once when it appears.
  bool said_waiting = false;
  while (!stop.stop_requested()) {
    const ino_t kubelet = InodeOf(KubeletSocket());
    bool kubelet_changed = false;
    bool restarted = false;
    {
      std::lock_guard lock(mu);
      if (kubelet != kubelet_inode) {
        kubelet_changed = kubelet_inode != 0 || kubelet == 0;
        restarted = kubelet_inode != 0 && kubelet != 0;
        kubelet_inode = kubelet;
        for (auto& s : servers) s->registered = false;
      }
    }
    if (kubelet == 0 && !said_waiting) {
      options.log.Info(kubelet_changed ? "the kubelet's socket is gone; registering once it appears"
                                       : "waiting for the kubelet; registering once its socket "
                                         "appears",
                       {{"kubelet_socket", KubeletSocket()},
                        {"poll_ms", std::to_string(options.kubelet_poll.count())}});
      said_waiting = true;
    } else if (kubelet != 0 && said_waiting) {
      options.log.Info("the kubelet's socket appeared: registering",
                       {{"kubelet_socket", KubeletSocket()}});
      said_waiting = false;
    } else if (restarted) {
      options.log.Info("the kubelet restarted", {{"kubelet_socket", KubeletSocket()}});
    }
    if (kubelet_changed) ServingMayHaveChanged();
    for (auto& s : servers) {
      if (stop.stop_requested()) return;
      if (InodeOf(s->socket) != s->inode) {
        // The kubelet removes the folder's sockets when it starts: serve again.
        options.log.Info(
            "the plugin's socket was removed: restarting its server",
            {{"socket", s->socket}, {"resource", std::string(ResourceName(s->resource))}});
        StopServer(*s);
        auto started = StartServer(*s);
        {
          std::lock_guard lock(mu);
          s->registered = false;
          ++stats.server_restarts;
          if (!started) {
            options.log.Error("cannot restart the plugin's server",
                              {{"resource", std::string(ResourceName(s->resource))},
                               {"error", started.error().message}});
          }
        }
        ServingMayHaveChanged();
      }
      bool needs = false;
      {
        std::lock_guard lock(mu);
        needs = !s->registered && kubelet_inode != 0 && s->server != nullptr;
      }
      if (needs) Register(*s);
    }
    std::unique_lock lock(watcher_mu);
    watcher_cv.wait_for(lock, stop, options.kubelet_poll, [] { return false; });
  }
}

DevicePlugin::DevicePlugin(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

DevicePlugin::~DevicePlugin() { Stop(); }

core::Result<std::unique_ptr<DevicePlugin>> DevicePlugin::Create(PluginOptions options,
                                                                 std::vector<GpuSlot> gpus,
                                                                 kube::KubeApi* api) {
  if (options.node_name.empty()) {
    return core::MakeError(core::ErrorCode::kInvalidArgument, "the node name is empty");
  }
  if (options.resources.empty()) {
    return core::MakeError(core::ErrorCode::kInvalidArgument, "no resource to serve");
  }
  auto impl = std::make_unique<Impl>();
  // Tables of the served resources only: a limit of one (gpu-mem's device count) must not
  // stop a plugin that does not serve it. The others stay empty.
  for (Resource r : kAllResources) {
    if (std::find(options.resources.begin(), options.resources.end(), r) ==
        options.resources.end()) {
      impl->tables.emplace_back();
      continue;
    }
    auto table = DeviceTable::Build(r, gpus, options.gpu_mem_unit_mib);
    if (!table) return tl::unexpected(table.error());
    impl->tables.push_back(std::move(*table));
  }
  for (const GpuSlot& g : gpus) {
    impl->node_gpus.push_back(NodeGpu{g.index, g.uuid, g.minor});
    impl->healthy.push_back(g.healthy);
  }
  impl->api = api;
  if (api != nullptr)
    impl->handshake = std::make_unique<Handshake>(*api, options.node_name, options.handshake);
  std::unordered_set<int> seen;
  for (Resource r : options.resources) {
    if (!seen.insert(static_cast<int>(r)).second) continue;
    auto s = std::make_unique<Impl::Server>();
    s->resource = r;
    s->socket = options.kubelet_dir + "/" + options.socket_prefix + "-" +
                std::string(ShortName(r)) + ".sock";
    if (s->socket.size() >= 108) {
      return core::MakeError(core::ErrorCode::kInvalidArgument,
                             s->socket + ": a unix socket path must be shorter than 108 bytes");
    }
    impl->servers.push_back(std::move(s));
  }
  impl->options = std::move(options);
  return std::unique_ptr<DevicePlugin>(new DevicePlugin(std::move(impl)));
}

core::Result<void> DevicePlugin::Start() {
  std::error_code ec;
  if (!std::filesystem::is_directory(impl_->options.kubelet_dir, ec)) {
    return core::MakeError(
        core::ErrorCode::kNotFound,
        impl_->options.kubelet_dir + ": the kubelet's device-plugin folder does not exist");
  }
  for (auto& s : impl_->servers) {
    auto started = impl_->StartServer(*s);
    if (!started) {
      Stop();
      return started;
    }
  }
  if (impl_->options.before_register) {
    if (auto ok = impl_->options.before_register(); !ok) {
      Stop();
      return ok;
    }
  }
  if (impl_->handshake != nullptr) impl_->handshake->Watch(impl_->options.log);
  impl_->watcher = std::jthread([this](std::stop_token stop) { impl_->WatchKubelet(stop); });
  return {};
}

void DevicePlugin::Stop() {
  if (impl_->watcher.joinable()) {
    impl_->watcher.request_stop();
    impl_->watcher_cv.notify_all();
    impl_->watcher.join();
  }
  if (impl_->handshake != nullptr) impl_->handshake->StopWatching();
  {
    // The kubelet closes its connection to a plugin as soon as the plugin's ListAndWatch
    // streams end, cancelling an Allocate answer still on its way (and rejecting that pod
    // with UnexpectedAdmissionError): let Allocate calls in flight be answered, and their
    // answers arrive, before the streams end. Bounded by kStopAllocateWait.
    std::unique_lock lock(impl_->mu);
    const auto deadline = Clock::now() + kStopAllocateWait;
    for (;;) {
      const auto settled = impl_->last_allocate_end + kStopAllocateSettle;
      const auto now = Clock::now();
      if (now >= deadline || (impl_->allocating == 0 && now >= settled)) break;
      impl_->cv.wait_until(lock, impl_->allocating == 0 ? std::min(settled, deadline) : deadline);
    }
    impl_->stopping = true;
  }
  impl_->cv.notify_all();
  for (auto& s : impl_->servers) {
    impl_->StopServer(*s);
    std::error_code ec;
    std::filesystem::remove(s->socket, ec);
  }
  std::lock_guard lock(impl_->mu);
  impl_->stopping = false;  // Start may be called again
}

bool DevicePlugin::SetHealth(const std::vector<bool>& healthy) {
  std::lock_guard lock(impl_->mu);
  bool changed = false;
  for (std::size_t g = 0; g < healthy.size() && g < impl_->healthy.size(); ++g) {
    if (impl_->healthy[g] == healthy[g]) continue;
    impl_->healthy[g] = healthy[g];
    for (DeviceTable& t : impl_->tables) t.SetHealth(static_cast<int>(g), healthy[g]);
    changed = true;
  }
  if (changed) {
    ++impl_->generation;
    impl_->cv.notify_all();
  }
  return changed;
}

bool DevicePlugin::registered() const {
  std::lock_guard lock(impl_->mu);
  return std::all_of(impl_->servers.begin(), impl_->servers.end(),
                     [](const auto& s) { return s->registered; });
}

bool DevicePlugin::serving() const {
  std::lock_guard lock(impl_->mu);
  return std::all_of(impl_->servers.begin(), impl_->servers.end(),
                     [](const auto& s) { return s->registered && s->streams > 0; });
}

std::optional<std::set<std::string>> DevicePlugin::LivePodUids() const {
  if (impl_->handshake == nullptr) return std::nullopt;
  return impl_->handshake->LivePodUids();
}

std::vector<Handshake::RunningShare> DevicePlugin::RunningShares() const {
  if (impl_->handshake == nullptr) return {};
  return impl_->handshake->RunningShares();
}

std::map<int, GrantedOnGpu> DevicePlugin::Granted() const {
  return impl_->handshake != nullptr ? impl_->handshake->Granted() : std::map<int, GrantedOnGpu>{};
}

PluginStats DevicePlugin::stats() const {
  std::lock_guard lock(impl_->mu);
  return impl_->stats;
}

void DevicePlugin::set_allocate_observer(AllocateObserver observer) {
  std::lock_guard lock(impl_->mu);
  impl_->observer = std::move(observer);
}

std::string DevicePlugin::SocketPath(Resource resource) const {
  for (const auto& s : impl_->servers) {
    if (s->resource == resource) return s->socket;
  }
  return {};
}

}  // namespace gpumux::deviceplugin
