// Node objects shared by the extender benchmarks: names and the gpumux.io/gpus inventory the
// device plugin publishes (H100 80 GB GPUs).
#pragma once

#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

namespace gpumux::bench {

inline constexpr std::int64_t kGpuMib = 81920;

inline std::string NodeName(int i) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "gpu-node-%05d", i);
  return buf;
}

// The gpumux.io/gpus annotation's list for a node of `gpus` healthy GPUs.
inline nlohmann::json GpuInventory(const std::string& node, int gpus) {
  nlohmann::json inventory = nlohmann::json::array();
  for (int g = 0; g < gpus; ++g) {
    inventory.push_back({{"index", g},
                         {"uuid", "GPU-" + node + "-" + std::to_string(g)},
                         {"model", "NVIDIA H100 80GB HBM3"},
                         {"memory_mib", kGpuMib},
                         {"health", "Healthy"}});
  }
  return inventory;
}

// A node as the API server lists it, reduced to what the extender reads: name, hostname label,
// the gpumux.io/gpus inventory and allocatable CPU, memory, pods and gpumux.io/gpu.
inline nlohmann::json CompactNodeObject(int i, int gpus) {
  const std::string name = NodeName(i);
  return {{"apiVersion", "v1"},
          {"kind", "Node"},
          {"metadata",
           {{"name", name},
            {"labels", {{"kubernetes.io/hostname", name}}},
            {"annotations", {{"gpumux.io/gpus", GpuInventory(name, gpus).dump()}}}}},
          {"status",
           {{"allocatable",
             {{"cpu", "190"},
              {"memory", "2100000000Ki"},
              {"pods", "110"},
              {"gpumux.io/gpu", std::to_string(gpus)}}}}}};
}

}  // namespace gpumux::bench
