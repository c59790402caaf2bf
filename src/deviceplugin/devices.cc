#include "gpumux/deviceplugin/devices.h"

#include <unordered_set>

namespace gpumux::deviceplugin {

std::string_view ResourceName(Resource r) {
  switch (r) {
    case Resource::kGpu: return "gpumux.io/gpu";
    case Resource::kGpuMem: return "gpumux.io/gpu-mem";
    case Resource::kGpuMilli: return "gpumux.io/gpu-milli";
  }
  return "?";
}

std::string_view ShortName(Resource r) { return ResourceName(r).substr(10); }

core::Result<Resource> ParseResource(std::string_view text) {
  for (Resource r : kAllResources) {
    if (text == ShortName(r) || text == ResourceName(r)) return r;
  }
  return core::MakeError(core::ErrorCode::kInvalidArgument,
                         "unknown resource '" + std::string(text) +
                             "' (accepted: gpu, gpu-mem, gpu-milli)");
}

core::Result<DeviceTable> DeviceTable::Build(Resource resource, const std::vector<GpuSlot>& gpus,
                                             std::int64_t gpu_mem_unit_mib) {
  if (resource == Resource::kGpuMem && gpu_mem_unit_mib <= 0) {
    return core::MakeError(core::ErrorCode::kInvalidArgument,
                           "the gpu-mem unit must be at least 1 MiB");
  }
  DeviceTable t;
  t.resource_ = resource;
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
    std::int64_t count = 1;
    std::string stem = slot.uuid;
    if (resource == Resource::kGpuMem) {
      count = slot.memory_mib / gpu_mem_unit_mib;
      stem += "-m";
    } else if (resource == Resource::kGpuMilli) {
      count = 1000;
      stem += "-c";
    }
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
  for (std::size_t i = first_[g]; i < first_[g + 1]; ++i) devices_[i].healthy = healthy;
}

std::int64_t DeviceTable::PerGpu(int gpu) const {
  const auto g = static_cast<std::size_t>(gpu);
  return static_cast<std::int64_t>(first_[g + 1] - first_[g]);
}

}  // namespace gpumux::deviceplugin
