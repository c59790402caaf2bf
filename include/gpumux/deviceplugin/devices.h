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

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gpumux/core/result.h"

namespace gpumux::deviceplugin {

// Bounds on one resource's device list. The kubelet reads ListAndWatch with gRPC's default
// 4 MiB receive limit, and a device costs its ID plus about 15 bytes there (DeviceListBytes),
// so 65,536 devices (64 GPUs x 1,000 gpu-milli devices fit) with NVIDIA's 40-character UUIDs
// take about 4 MB. A bigger list would never reach the kubelet: it is refused at start, naming
// the limit (and --gpu-mem-unit-mib, the flag that makes gpu-mem devices coarser).
inline constexpr std::int64_t kMaxDevicesPerResource = std::int64_t{1} << 16;
inline constexpr std::size_t kMaxDeviceListBytes = std::size_t{4} << 20;  // 4 MiB

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

// Thread safety: the devices and their IDs are fixed by Build; only health changes
// (SetHealth). So Find, devices().size() and the IDs may be read while another thread changes
// health; reading `healthy` then needs the caller's lock.
class DeviceTable {
 public:
  DeviceTable() = default;
  DeviceTable(const DeviceTable&) = delete;  // the ID index points into devices_
  DeviceTable& operator=(const DeviceTable&) = delete;
  DeviceTable(DeviceTable&&) = default;  // moving keeps the elements where they are
  DeviceTable& operator=(DeviceTable&&) = default;
  // Error if a UUID is empty or repeated, an ID would exceed the kubelet's 63 characters,
  // there are more than core::kMaxGpusPerNode GPUs, a GPU's memory is outside
  // 0..core::kMaxGpuMemoryMib, or the list would exceed kMaxDevicesPerResource devices or
  // kMaxDeviceListBytes (checked before anything is built).
  static core::Result<DeviceTable> Build(Resource resource, const std::vector<GpuSlot>& gpus,
                                         std::int64_t gpu_mem_unit_mib);
  Resource resource() const { return resource_; }
  const std::vector<Device>& devices() const { return devices_; }
  // The device with this ID, or nullptr.
  const Device* Find(std::string_view id) const;
  // Marks every device of GPU position `gpu` healthy or not (a position the table does not
  // have, e.g. in a default-constructed table: nothing).
  void SetHealth(int gpu, bool healthy);
  // How many devices one GPU contributes (1, memory/unit, 1000); 0 for a position it lacks.
  std::int64_t PerGpu(int gpu) const;

 private:
  Resource resource_ = Resource::kGpu;
  std::vector<Device> devices_;
  std::vector<std::size_t> first_;  // first device of each GPU; first_[n] = size
  std::unordered_map<std::string_view, std::size_t> by_id_;  // views into devices_[i].id
};

// The bytes a ListAndWatchResponse listing `devices` takes on the wire, at most: per device its
// ID, "Unhealthy" and the protobuf tags and lengths (15 bytes while an ID is under 128 bytes).
std::size_t DeviceListBytes(const std::vector<Device>& devices);

}  // namespace gpumux::deviceplugin
