// What `gpumux device-plugin` runs on every GPU node: the GPU backend (NVML or the fake file),
// health tracking from the backend's reports and XID events, the kubelet device plugin, the
// node's inventory published for the extender, and a small HTTP endpoint for probes and
// Prometheus.
//
// Node annotations written (merge patch on the node, at start and whenever health changes;
// retried every health interval until the API server accepts them):
//   gpumux.io/gpus               [{"index":0,"uuid":"GPU-..","model":"NVIDIA H100 80GB HBM3",
//                                  "memory_mib":81559,"health":"Healthy",
//                                  "enforcement":{...}}, ...]  (kube/enforcement.h)
//   gpumux.io/gpu-mem-unit-mib   "1024" (the extender refuses nodes counting in another unit)
//   gpumux.io/handshake          "node-lock/v1" (bind takes the node lock; see kube/node_lock.h)
//   gpumux.io/device-plugin      "starting", "ready" or "stopping" (node_state.h): "starting"
//                                before registering with the kubelet, "ready" once the kubelet
//                                has opened ListAndWatch on every resource, "stopping" in Stop()
//                                before the plugin stops serving
// HTTP (loopback by default): /healthz 200 while running; /readyz 200 once every resource is
// registered with the kubelet, the kubelet has opened ListAndWatch on each, and the inventory is
// published (503 with the reason before);
// /metrics: registrations, Allocate calls and latency by resource and outcome, GPUs by health,
// XID events by class, what each GPU enforces, the GPU memory limits recorded on the node and
// those reclaimed after their container was gone.
//
// The GPU set is read once at start (a GPU that disappears later turns Unhealthy; new GPUs
// need a restart, as with NVIDIA's own plugin).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "gpumux/core/result.h"
#include "gpumux/deviceplugin/enforcement.h"
#include "gpumux/deviceplugin/mps.h"
#include "gpumux/deviceplugin/node_state.h"
#include "gpumux/deviceplugin/plugin.h"
#include "gpumux/gpu/backend.h"
#include "gpumux/gpu/health.h"
#include "gpumux/kube/api_client.h"

namespace gpumux::deviceplugin {

struct NodeAgentOptions {
  PluginOptions plugin;
  std::chrono::milliseconds health_interval{5000};
  gpu::HealthPolicy health;
  std::string metrics_host = "127.0.0.1";
  int metrics_port = 9402;               // 0: any free port; -1: no HTTP endpoint
  std::function<std::int64_t()> now_ms;  // wall clock in ms; empty = the system clock
  // On Stop, after publishing "stopping": how long the plugin keeps serving while the node lock
  // names a pod (bound before the extender saw "stopping") whose devices the kubelet has yet to
  // allocate. Stopping under it would make the kubelet reject that pod. Keep it inside the
  // DaemonSet's terminationGracePeriodSeconds.
  std::chrono::milliseconds stop_drain{10000};
  std::chrono::milliseconds stop_drain_poll{100};
  // One MPS control daemon per GPU (mps.h), started before the plugin registers, checked every
  // health interval, stopped last; shared single-GPU grants get its folders. Absent: no MPS.
  std::optional<MpsOptions> mps;
  // What holds sharing tenants to their grants (enforcement.h): discovered at Create and every
  // rediscover_every, published per GPU in gpumux.io/gpus, applied in Allocate. Absent: the
  // node enforces nothing beyond MPS (and says so).
  std::optional<EnforcementOptions> enforcement;
};

class NodeAgent {
 public:
  // Lists the GPUs once. Error if the backend cannot list them or the inventory is unusable.
  // `api` may be null (nothing published; Allocate fails closed); it must outlive the agent.
  static core::Result<std::unique_ptr<NodeAgent>> Create(NodeAgentOptions options,
                                                         std::unique_ptr<gpu::Backend> backend,
                                                         kube::KubeApi* api);
  ~NodeAgent();  // Stop()

  // Starts the HTTP endpoint and the plugin's servers, runs options.plugin.before_register
  // (an error there stops everything and is returned, before anything is published), publishes
  // the inventory with gpumux.io/device-plugin=starting (a failure is logged and retried), then
  // lets the plugin register, and starts the health loop. Error if a socket or the HTTP port
  // cannot be served.
  core::Result<void> Start();
  // Publishes gpumux.io/device-plugin=stopping (one attempt), keeps serving while the node
  // lock is held (up to options.stop_drain), then stops serving.
  void Stop();

  int metrics_port() const;  // the bound port (after Start)
  bool ready(std::string* why = nullptr) const;
  DevicePlugin& plugin();
  // The GPUs found at start.
  const std::vector<gpu::Gpu>& gpus() const;

 private:
  struct Impl;
  explicit NodeAgent(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The gpumux.io/gpus annotation value for these GPUs, health verdicts and (when not empty, one
// per GPU) what each enforces.
std::string InventoryAnnotation(const std::vector<gpu::Gpu>& gpus, const std::vector<bool>& healthy,
                                const std::vector<kube::GpuEnforcement>& enforcement = {});

}  // namespace gpumux::deviceplugin
