// The pieces of gpumux_scale (bench/scale/README.md) that do not talk to processes: the Node
// objects of API-only GPU nodes, the pods of one run, a KubeApi that counts its own requests,
// the device-plugin stand-in's claims and the capacity check over every node after a run.
//
// API-only nodes (as Kubernetes' scheduler_perf makes them): Node objects with status, no
// kubelet. Each announces what a node running gpumux's device plugin announces: the
// gpumux.io/gpus inventory, the node-lock handshake (gpumux.io/handshake: node-lock/v1), the
// plugin's state "ready", its gpu-mem unit, and allocatable gpumux.io/gpu, gpu-mem and gpu-milli
// as the plugin registers them; plus nvidia.com/gpu for the default scheduler's baseline.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "gpumux/core/cluster.h"
#include "gpumux/core/request.h"
#include "gpumux/core/result.h"
#include "gpumux/deviceplugin/handshake.h"
#include "gpumux/kube/api_client.h"

namespace gpumux::scale {

// "scale-node-00042".
std::string ScaleNodeName(int i);

// Node i of a cluster made of `shapes` replicated in order (node i has shapes[i % size]'s CPU,
// memory and GPUs), as the API server should store it.
// `handshake` false: the node announces no handshake (an ablation: the extender then binds
// without the node lock, and no device plugin stands in).
nlohmann::json NodeObject(const core::NodeSpec& shape, const std::string& name,
                          std::int64_t gpu_mem_unit_mib, bool handshake = true);

// Which scheduler places the pods: gpumux's (schedulerName gpumux-scheduler, gpumux.io
// resources) or the default scheduler with whole GPUs (nvidia.com/gpu: a share asks for one
// whole GPU, GPU models are not asked for).
enum class Mode : std::uint8_t { kGpumux, kDefault };
core::Result<Mode> ParseMode(const std::string& text);

// The pod of one trace request in `ns` named `name` for `mode`.
core::Result<nlohmann::json> PodObject(const core::Request& request, const std::string& ns,
                                       const std::string& name, Mode mode,
                                       std::int64_t gpu_mem_unit_mib);

// The GPU pods of `requests` from `offset`, in order, until `count` are taken or their GPUs
// (a share counted as one whole GPU) would pass `max_gpus`. `next` (when given) is set to the
// index after the last one taken: the next run's offset.
std::vector<core::Request> TakeGpuPods(const std::vector<core::Request>& requests,
                                       std::size_t offset, std::size_t count, std::int64_t max_gpus,
                                       std::size_t* next = nullptr);

// A KubeApi that forwards to another and counts each call by "VERB resource" with the API
// server's verbs (apiserver_request_total), e.g. "POST pods", "PATCH nodes", "GET pods",
// "LIST pods" (one per List call, whatever its pages), "WATCH pods".
class CountingApi : public kube::KubeApi {
 public:
  explicit CountingApi(std::unique_ptr<kube::KubeApi> inner) : inner_(std::move(inner)) {}
  kube::ApiResult<nlohmann::json> Get(const std::string& path) override;
  kube::ApiResult<nlohmann::json> List(const std::string& path, int page_size) override;
  kube::ApiResult<nlohmann::json> Patch(const std::string& path, const nlohmann::json& body,
                                        kube::PatchType type) override;
  kube::ApiResult<nlohmann::json> Post(const std::string& path,
                                       const nlohmann::json& body) override;
  kube::ApiResult<void> Watch(const std::string& path, const std::string& resource_version,
                              const std::function<bool(kube::WatchEvent&&)>& on_event,
                              std::stop_token stop, int timeout_seconds) override;
  std::map<std::string, std::int64_t> Counts() const;

 private:
  void Count(const char* verb, const std::string& path);
  std::unique_ptr<kube::KubeApi> inner_;
  mutable std::mutex mu_;
  std::map<std::string, std::int64_t> counts_;
};

// "pods", "nodes", "pods/binding", ... of an API path (query left out).
std::string ResourceOfPath(const std::string& path);

// The device plugins of every node, played by one process: for a pod bound to a node, the
// Allocate calls its kubelet would make (each container in spec order, each resource it asks
// for), each served through the node lock exactly as the real plugin's Handshake serves it.
// As the real plugins do, it answers from watch caches: Watch() runs one watch of the nodes and
// one of `ns`'s pods (standing for each node's two) and feeds every node's Handshake; a cache
// that lags still costs the GETs the real plugin would make. Its requests go through its own
// client (`api`), so that the bench counts them as the plugins' (bench/scale/README.md).
class PluginStandIn {
 public:
  explicit PluginStandIn(kube::KubeApi& api) : api_(&api) {}
  ~PluginStandIn();
  // Starts the two watches; returns once both have listed.
  void Watch(const std::string& ns);
  // Serves every container of `pod` (bound to `node`); "" when all were served, else why not.
  std::string Serve(const nlohmann::json& pod, const std::string& node);
  std::int64_t claims() const { return claims_.load(); }

 private:
  deviceplugin::Handshake& HandshakeOf(const std::string& node);
  kube::KubeApi* api_;
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<deviceplugin::Handshake>> handshakes_;
  std::vector<std::jthread> watchers_;
  std::atomic<std::int64_t> claims_{0};
};

// Over-commitments found after a run, one line each (empty: none). gpumux mode: every bound
// pod's gpumux.io/grant summed per GPU (memory, compute, an exclusive grant alone, the grant's
// node is the pod's, the GPU exists). Default mode: nvidia.com/gpu summed per node.
std::vector<std::string> CapacityViolations(const std::vector<nlohmann::json>& pods,
                                            const std::map<std::string, core::NodeSpec>& nodes,
                                            Mode mode);

// --- Placement quality against the simulator (bench/scale/README.md) ---

// What a bound pod was granted (its gpumux.io/grant): the node, the GPU indices (every
// container's, in order) and the milli-GPU held: 1000 per GPU for an exclusive container, its
// gpu_milli per GPU for a share (a whole GPU asked as gpu-milli 1000 holds 1000).
struct Granted {
  std::string node;
  std::vector<int> gpus;
  core::MilliGpu milli = 0;
};
// The grant of `pod`; nothing when it is not bound or carries no readable grant.
std::optional<Granted> GrantOf(const nlohmann::json& pod);
// Milli-GPU granted to the bound pods of `pods` (the numerator of the allocation ratio; the
// denominator is the cluster's GPUs x 1000).
core::MilliGpu GrantedMilli(const std::vector<nlohmann::json>& pods);

// One created pod as the simulator's replay (gpumux simulate --replay) sees it.
struct ReplayArrival {
  std::string pod;         // the arrival's name, "<namespace>/<pod name>"
  std::string source_pod;  // the trace pod it was made from (its name in the pod list)
  std::string node;        // where the real path bound it; "" = not bound
  std::vector<int> gpus;   // its grant's GPU indices (empty when not bound)
};

// The trace's node list CSV (sn,cpu_milli,memory_mib,gpu,model) of `nodes`, in order: what
// `gpumux simulate --nodes` reads back into the same shapes (a node's GPUs share one model;
// their memory follows from it, as when the tool read the shapes).
std::string NodeListCsv(const std::vector<std::pair<std::string, core::NodeSpec>>& nodes);
// A replay's nodes.csv (node_prefixed,node,prefix): each node under its own name, ranked by
// its position in `names` (the simulator breaks score ties by the smaller rank).
std::string ReplayNodesCsv(const std::vector<std::string>& names);
// A replay's arrival.csv (seq,pod,source_pod,node,gpu_index): the arrivals in order, with the
// real path's placement as the one the simulator compares its own with, pod by pod.
std::string ArrivalCsv(const std::vector<ReplayArrival>& arrivals);

}  // namespace gpumux::scale
