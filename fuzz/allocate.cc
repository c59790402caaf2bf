// Fuzz target: the kubelet's Allocate requests to the device plugin (v1beta1.AllocateRequest,
// protobuf). Input: a byte choosing the resource, a byte shaping the grant the handshake
// returns, then the serialized request. The node has four 80 GiB GPUs; the scripted handshake
// serves every container request with a grant on GPU (byte % 6), so that grants naming GPUs
// the node lacks are tried too.
#include "gpumux/deviceplugin/allocate.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace gpumux::deviceplugin;
  if (size < 2) return 0;
  static const std::vector<NodeGpu> gpus = {
      {0, "GPU-0", 0}, {1, "GPU-1", 1}, {2, "GPU-2", 2}, {3, "GPU-3", 3}};
  static const std::vector<DeviceTable> tables = [] {
    std::vector<GpuSlot> slots;
    for (const NodeGpu& g : gpus) slots.push_back({g.index, g.uuid, 81920, g.minor, true});
    std::vector<DeviceTable> out;
    for (Resource r : kAllResources) {
      auto table = DeviceTable::Build(r, slots, 1024);
      if (!table) __builtin_trap();
      out.push_back(std::move(*table));
    }
    return out;
  }();
  const Resource resource = kAllResources[data[0] % 3];
  const int gpu = data[1] % 6;
  const bool exclusive = (data[1] & 0x80) != 0;
  v1beta1::AllocateRequest request;
  if (!request.ParseFromArray(data + 2, static_cast<int>(size - 2))) return 0;
  const AllocateClaim claim = [&](Resource, const std::vector<std::int64_t>& counts)
      -> HandshakeResult<std::vector<ServedContainer>> {
    std::vector<ServedContainer> served;
    for (std::size_t i = 0; i < counts.size(); ++i) {
      ServedContainer c{
          std::string("default"), std::string("p"), std::string("u"), std::string("fgd"), {}};
      // Appended, not assigned from literals: GCC 12 at -O3 warns falsely (-Wrestrict) there.
      c.grant.name.append("c").append(std::to_string(i));
      c.grant.gpus = {{gpu, std::string("GPU-").append(std::to_string(gpu))}};
      c.grant.exclusive = exclusive;
      c.grant.gpu_milli = exclusive ? 1000 : 250;
      c.grant.gpu_mem_mib = exclusive ? 0 : 8192;
      served.push_back(std::move(c));
    }
    return served;
  };
  InjectOptions inject;
  inject.inject_devices = true;
  inject.cdi_kind = (data[1] & 0x40) != 0 ? "nvidia.com/gpu" : "";
  v1beta1::AllocateResponse response;
  (void)AnswerAllocate(resource, request, tables, gpus, inject, "node-1", claim, &response);
  return 0;
}
