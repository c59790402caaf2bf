#include "gpumux/deviceplugin/devices.h"

#include <unordered_set>

#include "gpumux/core/cluster.h"

namespace gpumux::deviceplugin {

std::string_view ResourceName(Resource r) {
  switch (r) {
    case Resource::kGpu:
      return "gpumux.io/gpu";
    case Resource::kGpuMem:
      return "gpumux.io/gpu-mem";
    case Resource::kGpuMilli:
      return "gpumux.io/gpu-milli";
  }
  return "?";
}

std::string_view ShortName(Resource r) { return ResourceName(r).substr(10); }

core::Result<Resource> ParseResource(std::string_view text) {
  for (Resource r : kAllResources) {
    if (text == ShortName(r) || text == ResourceName(r)) return r;
  }
  return core::MakeError(
      core::ErrorCode::kInvalidArgument,
      "unknown resource '" + std::string(text) + "' (accepted: gpu, gpu-mem, gpu-milli)");
}

namespace {

// Devices GPU `slot` contributes to `resource`; checked by Build before the division.
std::int64_t DevicesOf(Resource resource, const GpuSlot& slot, std::int64_t gpu_mem_unit_mib) {
  switch (resource) {
    case Resource::kGpu:
      return 1;
    case Resource::kGpuMem:
      return slot.memory_mib / gpu_mem_unit_mib;
    case Resource::kGpuMilli:
      return 1000;
  }
  return 0;
}

core::Error Invalid(std::string message) {
  return core::Error{core::ErrorCode::kInvalidArgument, std::move(message)};
}

// The devices `gpus` contribute to `resource` in all. Error when a GPU's memory is out of
// range, or when the total would pass kMaxDevicesPerResource (naming the GPU that passes it).
core::Result<std::int64_t> CountDevices(Resource resource, const std::vector<GpuSlot>& gpus,
                                        std::int64_t gpu_mem_unit_mib) {
  const std::string name(ResourceName(resource));
  std::int64_t total = 0;
  for (const GpuSlot& slot : gpus) {
    if (slot.memory_mib < 0 || slot.memory_mib > core::kMaxGpuMemoryMib) {
      return tl::unexpected(
          Invalid("GPU " + std::to_string(slot.index) + " reports " +
                  std::to_string(slot.memory_mib) + " MiB of memory, outside 0.." +
                  std::to_string(core::kMaxGpuMemoryMib) + " (core::kMaxGpuMemoryMib)"));
    }
    const std::int64_t count = DevicesOf(resource, slot, gpu_mem_unit_mib);
    total += count;  // <= 64 * 2^32: no overflow
    if (total > kMaxDevicesPerResource) {
      std::string message = name + " would list more than " +
                            std::to_string(kMaxDevicesPerResource) +
                            " devices, the most one resource may list "
                            "(deviceplugin::kMaxDevicesPerResource): GPU " +
                            std::to_string(slot.index) + " alone has " + std::to_string(count);
      if (resource == Resource::kGpuMem) {
        message += " (" + std::to_string(slot.memory_mib) + " MiB of memory in units of " +
                   std::to_string(gpu_mem_unit_mib) +
                   " MiB); raise the unit with --gpu-mem-unit-mib";
      }
      return tl::unexpected(Invalid(std::move(message)));
    }
  }
  return total;
}

}  // namespace

core::Result<DeviceTable> DeviceTable::Build(Resource resource, const std::vector<GpuSlot>& gpus,
                                             std::int64_t gpu_mem_unit_mib) {
  const std::string name(ResourceName(resource));
  if (resource == Resource::kGpuMem && gpu_mem_unit_mib <= 0) {
    return core::MakeError(core::ErrorCode::kInvalidArgument,
                           "the gpu-mem unit must be at least 1 MiB");
  }
  if (gpus.size() > static_cast<std::size_t>(core::kMaxGpusPerNode)) {
    return tl::unexpected(Invalid(std::to_string(gpus.size()) + " GPUs, more than the " +
                                  std::to_string(core::kMaxGpusPerNode) +
                                  " a node may have (core::kMaxGpusPerNode)"));
  }
  // Count first: a list too long for the kubelet is refused before it is built.
  auto total = CountDevices(resource, gpus, gpu_mem_unit_mib);
  if (!total) return tl::unexpected(total.error());
  DeviceTable t;
  t.resource_ = resource;
  t.devices_.reserve(static_cast<std::size_t>(*total));
  std::unordered_set<std::string> seen;
  for (std::size_t g = 0; g < gpus.size(); ++g) {
    const GpuSlot& slot = gpus[g];
    if (slot.uuid.empty()) {
      return core::MakeError(core::ErrorCode::kInvalidArgument,
                             "GPU " + std::to_string(slot.index) + " has no UUID");
    }
    if (!seen.insert(slot.uuid).second) {
      return core::MakeError(core::ErrorCode::kInvalidArgument,
                             "GPU UUID " + slot.uuid + " appears twice");
    }
    const std::int64_t count = DevicesOf(resource, slot, gpu_mem_unit_mib);
    std::string stem = slot.uuid;
    if (resource == Resource::kGpuMem) stem += "-m";
    if (resource == Resource::kGpuMilli) stem += "-c";
    t.first_.push_back(t.devices_.size());
    for (std::int64_t k = 0; k < count; ++k) {
      Device d;
      d.id = stem;
      if (resource != Resource::kGpu) d.id += std::to_string(k);
      d.gpu = static_cast<int>(g);
      d.healthy = slot.healthy;
      if (d.id.size() > 63) {
        return core::MakeError(core::ErrorCode::kInvalidArgument,
                               "device ID " + d.id + " is longer than the kubelet's 63 characters");
      }
      t.devices_.push_back(std::move(d));
    }
  }
  t.first_.push_back(t.devices_.size());
  if (const std::size_t bytes = DeviceListBytes(t.devices_); bytes > kMaxDeviceListBytes) {
    std::string message = "the device list of " + name + " would take " + std::to_string(bytes) +
                          " bytes, more than the kubelet's " + std::to_string(kMaxDeviceListBytes) +
                          "-byte gRPC message limit (deviceplugin::kMaxDeviceListBytes)";
    if (resource == Resource::kGpuMem) message += "; raise the unit with --gpu-mem-unit-mib";
    return tl::unexpected(Invalid(std::move(message)));
  }
  t.by_id_.reserve(t.devices_.size());
  for (std::size_t i = 0; i < t.devices_.size(); ++i) t.by_id_.emplace(t.devices_[i].id, i);
  return t;
}

const Device* DeviceTable::Find(std::string_view id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &devices_[it->second];
}

void DeviceTable::SetHealth(int gpu, bool healthy) {
  const auto g = static_cast<std::size_t>(gpu);
  if (gpu < 0 || g + 1 >= first_.size()) return;
  for (std::size_t i = first_[g]; i < first_[g + 1]; ++i) devices_[i].healthy = healthy;
}

std::int64_t DeviceTable::PerGpu(int gpu) const {
  const auto g = static_cast<std::size_t>(gpu);
  if (gpu < 0 || g + 1 >= first_.size()) return 0;
  return static_cast<std::int64_t>(first_[g + 1] - first_[g]);
}

std::size_t DeviceListBytes(const std::vector<Device>& devices) {
  // Device {1: ID, 2: health} inside ListAndWatchResponse {1: repeated Device}: a tag byte and
  // a length per string and per Device, "Unhealthy" the longer health word. Lengths under 128
  // take one byte; longer IDs are counted with two (they are refused at 63 characters anyway).
  std::size_t bytes = 0;
  for (const Device& d : devices) {
    const std::size_t id_length_bytes = d.id.size() < 128 ? 1 : 2;
    bytes += 1 + id_length_bytes + d.id.size() + 1 + 1 + 9 + 1 + 1;
  }
  return bytes;
}

}  // namespace gpumux::deviceplugin
