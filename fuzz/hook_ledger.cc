// Fuzz target: the hook's reservation ledger (<state-dir>/reservations.json), as another
// process or an older gpumux left it. The ledger is read, then a container asks for one GPU of a
// two-GPU host (reclaiming what it may), and releases it.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/fuzz_support.h"
#include "gpumux/hook/grant.h"
#include "gpumux/hook/inventory.h"
#include "gpumux/hook/reservations.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace gpumux;
  static const hook::Inventory inventory = [] {
    hook::InventoryOptions options;
    options.gpus_file = fuzz::WriteScratch("gpus.csv",
                                           "index,uuid,model,memory_mib,device\n"
                                           "0,GPU-a,T4,15360,/dev/null\n"
                                           "1,GPU-b,T4,15360,/dev/zero\n");
    auto loaded = hook::LoadInventory(options);
    if (!loaded) __builtin_trap();
    return *loaded;
  }();
  fuzz::RemoveScratch("state");
  fuzz::WriteScratch("state/reservations.json", fuzz::AsText(data, size));
  hook::ReservationStore store(fuzz::ScratchDir() + "/state");
  (void)store.Read();
  hook::GpuAsk ask;
  ask.kind = hook::AskKind::kReserve;
  ask.count = 1;
  ask.source = "HOUDINI_GPU_REQUESTED=1";
  const hook::ProcessRef self = hook::CurrentProcess(::getpid());
  if (auto grant = hook::GrantGpus("fuzz-container", ask, inventory, store, self, "running")) {
    (void)hook::ReleaseGpus("fuzz-container", store);
  }
  return 0;
}
