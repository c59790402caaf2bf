// FakeKubelet: the kubelet's side of the device-plugin API for tests, over real gRPC on unix
// sockets in a temporary folder.
//
// It serves Registration on <dir>/kubelet.sock. On Register it does what the kubelet does:
// dials the plugin's socket (<dir>/<endpoint>), asks GetDevicePluginOptions and opens
// ListAndWatch, keeping the latest device list per resource. Tests then call Allocate /
// GetPreferredAllocation through it like the kubelet would. Restart() behaves like a kubelet
// restart: the Registration server stops, every socket in the folder is deleted, and a new
// kubelet.sock is served. HoldListAndWatch() plays a slow kubelet (registrations answered,
// ListAndWatch not opened yet), and an observer sees each step as it happens.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "deviceplugin/v1beta1/api.grpc.pb.h"

namespace gpumux::test {

struct FakeDevice {
  std::string id, health;
};

class FakeKubelet {
 public:
  // Makes a fresh temporary folder and serves kubelet.sock in it.
  FakeKubelet();
  ~FakeKubelet();
  FakeKubelet(const FakeKubelet&) = delete;
  FakeKubelet& operator=(const FakeKubelet&) = delete;

  const std::filesystem::path& dir() const { return dir_; }

  // Registration requests received so far, in order.
  std::vector<v1beta1::RegisterRequest> registrations() const;
  // Waits until `n` registrations have been received in total; false on timeout.
  bool WaitRegistrations(std::size_t n, std::chrono::milliseconds timeout);
  // The latest ListAndWatch list of `resource` (empty when none received).
  std::vector<FakeDevice> Devices(const std::string& resource) const;
  // How many lists ListAndWatch has sent for `resource`.
  int Updates(const std::string& resource) const;
  // Waits until more than `seen` lists were received for `resource`; false on timeout.
  bool WaitUpdatesAbove(const std::string& resource, int seen, std::chrono::milliseconds timeout);
  // Waits until `pred(devices)` holds for the latest list of `resource`; false on timeout.
  // `pred` runs under the kubelet's lock: it must not call back into the kubelet.
  bool WaitDevices(const std::string& resource,
                   const std::function<bool(const std::vector<FakeDevice>&)>& pred,
                   std::chrono::milliseconds timeout);
  // Device IDs of `resource` that are Healthy, in list order.
  std::vector<std::string> HealthyIds(const std::string& resource) const;

  // Calls on the plugin that registered `resource` (its latest endpoint).
  grpc::Status Allocate(const std::string& resource,
                        const std::vector<std::vector<std::string>>& containers,
                        v1beta1::AllocateResponse* response);
  grpc::Status Preferred(const std::string& resource, const std::vector<std::string>& available,
                         int size, std::vector<std::string>* chosen);
  grpc::Status Options(const std::string& resource, v1beta1::DevicePluginOptions* options);

  // What the kubelet does, as it does it: "register" (inside the Register call, before it is
  // answered), "list" (a ListAndWatch stream received its first list), "end" (a stream
  // ended), with the resource name. Called on the kubelet's threads without its lock held.
  // Set it before any plugin registers.
  using Observer = std::function<void(std::string_view event, const std::string& resource)>;
  void SetObserver(Observer observer);
  // Until ReleaseListAndWatch(), registrations are answered but ListAndWatch is not opened.
  void HoldListAndWatch();
  void ReleaseListAndWatch();

  // Like a kubelet restart: stop, delete every socket in the folder, serve kubelet.sock again.
  void Restart();
  // Stop serving (kubelet down); Start() serves again.
  void Stop();
  void Start();

 private:
  class RegistrationService;
  struct Stream;
  void OnRegister(const v1beta1::RegisterRequest& request);
  void Observe(std::string_view event, const std::string& resource);
  // The kubelet keeps one connection per plugin: so do we (one channel per endpoint).
  std::shared_ptr<v1beta1::DevicePlugin::Stub> StubFor(const std::string& resource);

  std::filesystem::path dir_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<v1beta1::RegisterRequest> registrations_;
  std::map<std::string, std::vector<FakeDevice>> devices_;
  std::map<std::string, int> updates_;
  std::map<std::string, std::string> endpoints_;  // resource -> socket path
  std::map<std::string, std::shared_ptr<v1beta1::DevicePlugin::Stub>> stubs_;  // by socket path
  std::vector<std::unique_ptr<Stream>> streams_;
  Observer observer_;
  bool hold_list_and_watch_ = false;
  std::unique_ptr<RegistrationService> service_;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace gpumux::test
