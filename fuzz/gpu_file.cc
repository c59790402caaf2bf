// Fuzz target: a GPU file (CSV index,uuid,model,memory_mib[,device][,...]), read by the fake GPU
// backend of the device plugin and by the runtime hook's inventory. GPUs the backend lists
// become the device plugin's device tables for every resource.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz/fuzz_support.h"
#include "gpumux/deviceplugin/devices.h"
#include "gpumux/gpu/backend.h"
#include "gpumux/hook/inventory.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace gpumux;
  const std::string path = fuzz::WriteScratch("gpus.csv", fuzz::AsText(data, size));
  hook::InventoryOptions options;
  options.dev_dir = fuzz::ScratchDir() + "/no-dev";
  options.gpus_file = path;
  (void)hook::LoadInventory(options);
  auto backend = gpu::OpenFake(path);
  if (!backend) return 0;
  auto gpus = (*backend)->List();
  if (!gpus) return 0;
  std::vector<deviceplugin::GpuSlot> slots;
  for (const gpu::Gpu& g : *gpus) {
    slots.push_back(
        {g.index, g.uuid, g.memory_total_mib, g.minor, g.health == gpu::Health::kHealthy});
  }
  for (deviceplugin::Resource r : deviceplugin::kAllResources) {
    (void)deviceplugin::DeviceTable::Build(r, slots, 1024);
  }
  return 0;
}
