// The devices gpumux advertises to the kubelet, one list per resource.
//
// The kubelet counts devices: a node's allocatable amount of a resource is the number of
// healthy devices its plugin lists, and a container asking for N gets N device IDs. So:
//   gpumux.io/gpu        one device per GPU, ID = the GPU's UUID
//   gpumux.io/gpu-mem    floor(memory / unit) devices per GPU, ID = "<uuid>-m<k>", each worth
//                        `gpu_mem_unit_mib` MiB (1024 by default: 8 x 80 GiB = 640 devices,
//                        where 1 MiB units would be 655,360, over gRPC's 4 MB message limit)
//   gpumux.io/gpu-milli  1000 devices per GPU, ID = "<uuid>-c<k>", a thousandth of its compute
// A device is Unhealthy when its GPU is. Device IDs never decide placement: the extender's
// grant does (handshake.h); the IDs only let the kubelet count, and GetPreferredAllocation
// steers them towards the granted GPUs so that the kubelet's own records agree.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gpumux/core/result.h"

namespace gpumux::deviceplugin {

enum class Resource : std::uint8_t { kGpu, kGpuMem, kGpuMilli };
inline constexpr Resource kAllResources[] = {Resource::kGpu, Resource::kGpuMem,
                                             Resource::kGpuMilli};

std::string_view ResourceName(Resource r);  // "gpumux.io/gpu", ...
std::string_view ShortName(Resource r);     // "gpu", "gpu-mem", "gpu-milli"
// "gpu", "gpu-mem", "gpu-milli" or the full names; error lists the accepted ones.
core::Result<Resource> ParseResource(std::string_view text);

// What the device list is made from: one entry per GPU, in index order.
struct GpuSlot {
  int index = 0;
  std::string uuid;
  std::int64_t memory_mib = 0;
  int minor = -1;
  bool healthy = true;
};

struct Device {
  std::string id;
  int gpu = 0;  // position in the GpuSlot list
  bool healthy = true;
};

class DeviceTable {
 public:
  DeviceTable() = default;
  DeviceTable(const DeviceTable&) = delete;  // the ID index points into devices_
  DeviceTable& operator=(const DeviceTable&) = delete;
  DeviceTable(DeviceTable&&) = default;      // moving keeps the elements where they are
  DeviceTable& operator=(DeviceTable&&) = default;
  // Error if a UUID is empty or repeated, or an ID would exceed the kubelet's 63 characters.
  static core::Result<DeviceTable> Build(Resource resource, const std::vector<GpuSlot>& gpus,
                                         std::int64_t gpu_mem_unit_mib);
  Resource resource() const { return resource_; }
  const std::vector<Device>& devices() const { return devices_; }
  // The device with this ID, or nullptr.
  const Device* Find(std::string_view id) const;
  // Marks every device of GPU position `gpu` healthy or not.
  void SetHealth(int gpu, bool healthy);
  // How many devices one GPU contributes (1, memory/unit, 1000).
  std::int64_t PerGpu(int gpu) const;

 private:
  Resource resource_ = Resource::kGpu;
  std::vector<Device> devices_;
  std::vector<std::size_t> first_;  // first device of each GPU; first_[n] = size
  std::unordered_map<std::string_view, std::size_t> by_id_;  // views into devices_[i].id
};

}  // namespace gpumux::deviceplugin
