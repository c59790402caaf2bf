// The host's GPUs as the runtime hook sees them.
//
// Without a GPU file, GPUs are found by listing the device folder (default /dev) for
// character devices named nvidia<N>; GPU N is /dev/nvidiaN, its UUID is unknown. A GPU file
// (CSV: index,uuid,model,memory_mib[,device]) describes them instead — the fake backend for
// machines without GPUs, or an explicit inventory. Control devices (nvidiactl, nvidia-uvm,
// nvidia-uvm-tools, nvidia-modeset) found in the device folder are given to every container
// that gets a GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "gpumux/core/result.h"

namespace gpumux::hook {

struct DeviceNode {
  std::string host_path;       // e.g. /dev/nvidia0 (or a test folder's copy)
  std::string container_path;  // e.g. /dev/nvidia0
  std::uint32_t major = 0;
  std::uint32_t minor = 0;
};

struct HostGpu {
  int index = 0;
  std::string uuid;   // "" when unknown
  std::string model;  // "" when unknown
  std::int64_t memory_mib = 0;
  DeviceNode device;
};

struct Inventory {
  std::vector<HostGpu> gpus;        // by index, 0..n-1
  std::vector<DeviceNode> control;  // nvidiactl, nvidia-uvm, ...
  std::string source;               // for messages
};

// A GPU file has one short line per GPU (at most core::kMaxGpusPerNode of them).
inline constexpr std::size_t kMaxGpuFileBytes = std::size_t{1} << 20;  // 1 MiB

struct InventoryOptions {
  std::string dev_dir = "/dev";
  std::string gpus_file;  // "" = list dev_dir
};

// Errors name the folder or the file (and line, for a GPU file): GPU indexes outside
// 0..core::kMaxGpusPerNode-1, repeated or with gaps; a repeated UUID; memory_mib outside
// 0..core::kMaxGpuMemoryMib; a device that is missing or not a character device; a GPU file
// that is a folder, missing or larger than kMaxGpuFileBytes (io::ReadInputFile).
core::Result<Inventory> LoadInventory(const InventoryOptions& options);

// What NVIDIA_VISIBLE_DEVICES should say for a set of GPU indices: their UUIDs when every one is
// known, else the indices. "0,2" or "GPU-a,GPU-b".
std::string VisibleDevicesValue(const Inventory& inventory, const std::vector<int>& gpus);

// {0, 2} -> "0,2".
std::string JoinIndices(const std::vector<int>& gpus);

// Resolves NVIDIA_VISIBLE_DEVICES items (indices or UUIDs) to indices; error names the item.
core::Result<std::vector<int>> ResolveListed(const Inventory& inventory,
                                             const std::vector<std::string>& listed);

}  // namespace gpumux::hook
