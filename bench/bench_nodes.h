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

}  // namespace gpumux::bench
