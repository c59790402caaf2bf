// The kubelet device plugin: one gRPC server per gpumux resource on a unix socket in the
// kubelet's device-plugin folder, registered with the kubelet's Registration service.
//
//   <kubelet_dir>/kubelet.sock            the kubelet's (we call Register on it)
//   <kubelet_dir>/gpumux-gpu.sock         gpumux.io/gpu
//   <kubelet_dir>/gpumux-gpu-mem.sock     gpumux.io/gpu-mem
//   <kubelet_dir>/gpumux-gpu-milli.sock   gpumux.io/gpu-milli
//
// ListAndWatch sends the device list (devices.h) at once and again whenever a GPU's health
// changes. Allocate identifies the pod through the node lock (handshake.h) and answers with
// what its container was granted (container_env.h); unknown device IDs are INVALID_ARGUMENT,
// a pod that cannot be identified exactly is FAILED_PRECONDITION, an unreachable API server
// UNAVAILABLE — the kubelet then fails the pod instead of starting it on the wrong GPU.
// GetPreferredAllocation steers the kubelet's device IDs towards the granted GPUs. With an API
// server, Start() also starts the handshake's watch cache of the node and its pods.
//
// Start() serves every socket, calls `before_register`, then registers. When the kubelet
// restarts it deletes the folder's sockets: a watcher notices (every
// `kubelet_poll`) that a socket is gone or that kubelet.sock was replaced, restarts the
// servers whose sockets are gone and registers again.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "gpumux/core/log.h"
#include "gpumux/core/result.h"
#include "gpumux/deviceplugin/container_env.h"
#include "gpumux/deviceplugin/devices.h"
#include "gpumux/deviceplugin/handshake.h"
#include "gpumux/kube/api_client.h"

namespace gpumux::deviceplugin {

struct PluginOptions {
  std::string node_name;
  std::string kubelet_dir = "/var/lib/kubelet/device-plugins";
  std::string socket_prefix = "gpumux";
  std::vector<Resource> resources{Resource::kGpu, Resource::kGpuMem, Resource::kGpuMilli};
  std::int64_t gpu_mem_unit_mib = 1024;
  InjectOptions inject;
  std::chrono::milliseconds kubelet_poll{1000};
  std::chrono::milliseconds register_timeout{5000};
  HandshakeOptions handshake;
  core::Logger log;  // one line per notable event; may be empty
  // Called by Start() once every socket is served and before the first registration; an
  // error stops the servers and Start() returns it. May be empty. (Serving first is what lets
  // the OCI runtime path's ledger check order itself with the hook: hook/coexistence.h.)
  std::function<core::Result<void>()> before_register;
  // Called when serving() may have changed, from the plugin's threads, with no lock held;
  // must not block. May be empty.
  std::function<void()> on_serving_change;
};

struct PluginStats {
  std::int64_t registrations = 0;  // successful Register calls, all resources
  std::int64_t register_failures = 0;
  std::int64_t server_restarts = 0;         // servers restarted because their socket vanished
  std::int64_t allocations = 0;             // containers served
  std::int64_t allocate_failures = 0;       // Allocate calls refused
  std::int64_t list_and_watch_updates = 0;  // device lists sent, all streams
};

// Observes every Allocate call: resource, seconds it took, whether it succeeded.
using AllocateObserver = std::function<void(Resource, double, bool)>;

class DevicePlugin {
 public:
  // `gpus` in index order. `api` may be null: Allocate then fails closed. `api` must outlive
  // the plugin. Error on a bad option or inventory (e.g. a device ID over 63 characters).
  static core::Result<std::unique_ptr<DevicePlugin>> Create(PluginOptions options,
                                                            std::vector<GpuSlot> gpus,
                                                            kube::KubeApi* api);
  ~DevicePlugin();  // Stop()

  // Starts every resource's server and the kubelet watcher, which registers as soon as the
  // kubelet's socket exists (at once if it does). Error if a socket cannot be served.
  core::Result<void> Start();
  void Stop();

  // New health per GPU (index order, same size as the inventory). Streams get the new
  // device lists when anything changed. Returns whether anything changed.
  bool SetHealth(const std::vector<bool>& healthy);

  // Whether every resource is registered with the kubelet that is running now.
  bool registered() const;
  // registered(), and the kubelet has opened ListAndWatch on every resource and received its
  // device list: the kubelet can admit pods asking for them.
  bool serving() const;
  PluginStats stats() const;
  // Per GPU index, what the grants of this node's pods give it (Handshake::Granted); empty
  // without an API client.
  std::map<int, GrantedOnGpu> Granted() const;
  // Handshake::LivePodUids; nullopt without an API client.
  std::optional<std::set<std::string>> LivePodUids() const;
  // Handshake::RunningShares; empty without an API client.
  std::vector<Handshake::RunningShare> RunningShares() const;
  void set_allocate_observer(AllocateObserver observer);
  // The socket path of a resource's server.
  std::string SocketPath(Resource resource) const;

 private:
  struct Impl;
  explicit DevicePlugin(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpumux::deviceplugin
