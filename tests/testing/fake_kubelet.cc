#include "tests/testing/fake_kubelet.h"

#include <unistd.h>

#include <cstdlib>
#include <stdexcept>

namespace gpumux::test {

namespace pb = ::v1beta1;

class FakeKubelet::RegistrationService final : public pb::Registration::Service {
 public:
  explicit RegistrationService(FakeKubelet& kubelet) : kubelet_(&kubelet) {}
  grpc::Status Register(grpc::ServerContext*, const pb::RegisterRequest* request,
                        pb::Empty*) override {
    if (request->version() != "v1beta1") {
      return {grpc::StatusCode::INVALID_ARGUMENT, "unsupported version " + request->version()};
    }
    kubelet_->OnRegister(*request);
    return grpc::Status::OK;
  }

 private:
  FakeKubelet* kubelet_;
};

// One ListAndWatch stream opened after a registration.
struct FakeKubelet::Stream {
  grpc::ClientContext context;
  std::thread reader;
  bool cancelled = false;  // under mu_: Stop() wants the reader to end
};

FakeKubelet::FakeKubelet() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "gpumux-kubelet-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  dir_ = tmpl;
  Start();
}

FakeKubelet::~FakeKubelet() {
  Stop();
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

void FakeKubelet::Start() {
  service_ = std::make_unique<RegistrationService>(*this);
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + (dir_ / "kubelet.sock").string(),
                           grpc::InsecureServerCredentials());
  builder.RegisterService(service_.get());
  server_ = builder.BuildAndStart();
  if (server_ == nullptr) throw std::runtime_error("cannot serve kubelet.sock");
}

void FakeKubelet::Stop() {
  std::vector<std::unique_ptr<Stream>> streams;
  {
    std::lock_guard lock(mu_);
    for (auto& s : streams_) s->cancelled = true;
    streams.swap(streams_);
    stubs_.clear();
  }
  cv_.notify_all();
  for (auto& s : streams) {
    s->context.TryCancel();
    if (s->reader.joinable()) s->reader.join();
  }
  if (server_ != nullptr) {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    server_->Wait();
    server_.reset();
  }
  service_.reset();
  std::error_code ec;
  std::filesystem::remove(dir_ / "kubelet.sock", ec);
}

void FakeKubelet::Restart() {
  Stop();
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir_, ec)) {
    if (entry.is_socket(ec)) std::filesystem::remove(entry.path(), ec);
  }
  Start();
}

void FakeKubelet::OnRegister(const pb::RegisterRequest& request) {
  const std::string resource = request.resource_name();
  const std::string socket = (dir_ / request.endpoint()).string();
  auto stream = std::make_unique<Stream>();
  Stream* raw = stream.get();
  Observe("register", resource);
  {
    std::lock_guard lock(mu_);
    registrations_.push_back(request);
    endpoints_[resource] = socket;
    streams_.push_back(std::move(stream));
  }
  cv_.notify_all();
  raw->reader = std::thread([this, raw, resource, socket] {
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return !hold_list_and_watch_ || raw->cancelled; });
      if (raw->cancelled) return;
    }
    auto channel = grpc::CreateChannel("unix:" + socket, grpc::InsecureChannelCredentials());
    auto stub = pb::DevicePlugin::NewStub(channel);
    {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
      pb::DevicePluginOptions options;
      pb::Empty empty;
      (void)stub->GetDevicePluginOptions(&ctx, empty, &options);
    }
    pb::Empty empty;
    auto reader = stub->ListAndWatch(&raw->context, empty);
    pb::ListAndWatchResponse response;
    bool first = true;
    while (reader->Read(&response)) {
      std::vector<FakeDevice> list;
      for (const pb::Device& d : response.devices()) list.push_back(FakeDevice{d.id(), d.health()});
      {
        std::lock_guard lock(mu_);
        devices_[resource] = std::move(list);
        ++updates_[resource];
      }
      cv_.notify_all();
      if (first) Observe("list", resource);
      first = false;
    }
    (void)reader->Finish();
    Observe("end", resource);
  });
}

void FakeKubelet::SetObserver(Observer observer) {
  std::lock_guard lock(mu_);
  observer_ = std::move(observer);
}

void FakeKubelet::Observe(std::string_view event, const std::string& resource) {
  Observer observer;
  {
    std::lock_guard lock(mu_);
    observer = observer_;
  }
  if (observer) observer(event, resource);
}

void FakeKubelet::HoldListAndWatch() {
  std::lock_guard lock(mu_);
  hold_list_and_watch_ = true;
}

void FakeKubelet::ReleaseListAndWatch() {
  {
    std::lock_guard lock(mu_);
    hold_list_and_watch_ = false;
  }
  cv_.notify_all();
}

std::vector<pb::RegisterRequest> FakeKubelet::registrations() const {
  std::lock_guard lock(mu_);
  return registrations_;
}

bool FakeKubelet::WaitRegistrations(std::size_t n, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return registrations_.size() >= n; });
}

std::vector<FakeDevice> FakeKubelet::Devices(const std::string& resource) const {
  std::lock_guard lock(mu_);
  auto it = devices_.find(resource);
  return it == devices_.end() ? std::vector<FakeDevice>{} : it->second;
}

int FakeKubelet::Updates(const std::string& resource) const {
  std::lock_guard lock(mu_);
  auto it = updates_.find(resource);
  return it == updates_.end() ? 0 : it->second;
}

bool FakeKubelet::WaitUpdatesAbove(const std::string& resource, int seen,
                                   std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, timeout, [&] {
    auto it = updates_.find(resource);
    return it != updates_.end() && it->second > seen;
  });
}

bool FakeKubelet::WaitDevices(const std::string& resource,
                              const std::function<bool(const std::vector<FakeDevice>&)>& pred,
                              std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, timeout, [&] {
    auto it = devices_.find(resource);
    return it != devices_.end() && pred(it->second);
  });
}

std::vector<std::string> FakeKubelet::HealthyIds(const std::string& resource) const {
  std::vector<std::string> out;
  for (const FakeDevice& d : Devices(resource)) {
    if (d.health == "Healthy") out.push_back(d.id);
  }
  return out;
}

std::shared_ptr<pb::DevicePlugin::Stub> FakeKubelet::StubFor(const std::string& resource) {
  std::lock_guard lock(mu_);
  auto it = endpoints_.find(resource);
  if (it == endpoints_.end()) return nullptr;
  auto& stub = stubs_[it->second];
  if (stub == nullptr) {
    stub = pb::DevicePlugin::NewStub(
        grpc::CreateChannel("unix:" + it->second, grpc::InsecureChannelCredentials()));
  }
  return stub;
}

grpc::Status FakeKubelet::Allocate(const std::string& resource,
                                   const std::vector<std::vector<std::string>>& containers,
                                   pb::AllocateResponse* response) {
  auto stub = StubFor(resource);
  if (stub == nullptr) return {grpc::StatusCode::NOT_FOUND, resource + " is not registered"};
  pb::AllocateRequest request;
  for (const auto& ids : containers) {
    pb::ContainerAllocateRequest* c = request.add_container_requests();
    for (const std::string& id : ids) c->add_devices_ids(id);
  }
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  return stub->Allocate(&ctx, request, response);
}

grpc::Status FakeKubelet::Preferred(const std::string& resource,
                                    const std::vector<std::string>& available, int size,
                                    std::vector<std::string>* chosen) {
  auto stub = StubFor(resource);
  if (stub == nullptr) return {grpc::StatusCode::NOT_FOUND, resource + " is not registered"};
  pb::PreferredAllocationRequest request;
  pb::ContainerPreferredAllocationRequest* c = request.add_container_requests();
  for (const std::string& id : available) c->add_available_deviceids(id);
  c->set_allocation_size(size);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  pb::PreferredAllocationResponse response;
  grpc::Status status = stub->GetPreferredAllocation(&ctx, request, &response);
  chosen->clear();
  if (status.ok() && response.container_responses_size() > 0) {
    for (const std::string& id : response.container_responses(0).deviceids()) chosen->push_back(id);
  }
  return status;
}

grpc::Status FakeKubelet::Options(const std::string& resource, pb::DevicePluginOptions* options) {
  auto stub = StubFor(resource);
  if (stub == nullptr) return {grpc::StatusCode::NOT_FOUND, resource + " is not registered"};
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  return stub->GetDevicePluginOptions(&ctx, pb::Empty(), options);
}

}  // namespace gpumux::test
