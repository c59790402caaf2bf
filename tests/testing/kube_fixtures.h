// Builders of Kubernetes objects (as the API server sends them) for the k8s tests.
#pragma once

#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

namespace gpumux::kube::testing {

struct GpuOf {
  std::string model = "A100";
  std::int64_t memory_mib = 40960;
  std::string health = "Healthy";
};

// A node with `gpus` GPUs published in the gpumux.io/gpus annotation (UUIDs GPU-<node>-<i>).
inline nlohmann::json NodeJson(const std::string& name, int gpus, GpuOf gpu = {}) {
  nlohmann::json list = nlohmann::json::array();
  for (int i = 0; i < gpus; ++i) {
    list.push_back({{"index", i},
                    {"uuid", "GPU-" + name + "-" + std::to_string(i)},
                    {"model", gpu.model},
                    {"memory_mib", gpu.memory_mib},
                    {"health", gpu.health}});
  }
  return {{"apiVersion", "v1"},
          {"kind", "Node"},
          {"metadata",
           {{"name", name},
            {"labels", {{"kubernetes.io/hostname", name}}},
            {"annotations", {{"gpumux.io/gpus", list.dump()}}}}},
          {"status",
           {{"allocatable",
             {{"cpu", "64"},
              {"memory", "256Gi"},
              {"pods", "110"},
              {"gpumux.io/gpu", std::to_string(gpus)}}}}}};
}

// NodeJson whose device plugin announces the node lock (gpumux.io/handshake: node-lock/v1)
// and, when `gpu_mem_unit_mib` > 0, publishes its gpu-mem unit.
inline nlohmann::json HandshakeNodeJson(const std::string& name, int gpus, GpuOf gpu = {},
                                        std::int64_t gpu_mem_unit_mib = 0) {
  nlohmann::json node = NodeJson(name, gpus, std::move(gpu));
  node["metadata"]["annotations"]["gpumux.io/handshake"] = "node-lock/v1";
  if (gpu_mem_unit_mib > 0) {
    node["metadata"]["annotations"]["gpumux.io/gpu-mem-unit-mib"] =
        std::to_string(gpu_mem_unit_mib);
  }
  return node;
}

struct ContainerOf {
  std::string name = "main";
  std::int64_t gpu = 0, gpu_mem = 0, gpu_milli = 0;
};

// A pending pod; containers with zero amounts ask gpumux for nothing.
inline nlohmann::json PodJson(const std::string& name, std::vector<ContainerOf> containers,
                              const std::string& uid = "") {
  nlohmann::json list = nlohmann::json::array();
  for (const ContainerOf& c : containers) {
    nlohmann::json limits = {{"cpu", "100m"}};
    if (c.gpu > 0) limits["gpumux.io/gpu"] = std::to_string(c.gpu);
    if (c.gpu_mem > 0) limits["gpumux.io/gpu-mem"] = std::to_string(c.gpu_mem);
    if (c.gpu_milli > 0) limits["gpumux.io/gpu-milli"] = std::to_string(c.gpu_milli);
    list.push_back({{"name", c.name},
                    {"image", "busybox"},
                    {"resources", {{"limits", limits}, {"requests", limits}}}});
  }
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata",
           {{"name", name},
            {"namespace", "default"},
            {"uid", uid.empty() ? "uid-" + name : uid},
            {"annotations", nlohmann::json::object()}}},
          {"spec", {{"schedulerName", "gpumux-scheduler"}, {"containers", list}}},
          {"status", {{"phase", "Pending"}}}};
}

inline nlohmann::json PodWithOne(const std::string& name, std::int64_t gpu, std::int64_t mem,
                                 std::int64_t milli) {
  return PodJson(name, {ContainerOf{"main", gpu, mem, milli}});
}

// Polls `predicate` every 10 ms for up to 5 s (watches and background threads are
// asynchronous); true once it holds.
template <typename F>
bool Eventually(F predicate) {
  for (int i = 0; i < 500; ++i) {
    if (predicate()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return predicate();
}

}  // namespace gpumux::kube::testing
