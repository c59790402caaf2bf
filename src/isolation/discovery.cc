#include "gpumux/isolation/discovery.h"

#include <algorithm>
#include <cstdlib>

namespace gpumux::isolation {
namespace {

// "615.71.09" -> 615; 0 when it does not start with a number.
int DriverBranch(const std::string& version) {
  int branch = 0;
  for (const char c : version) {
    if (c < '0' || c > '9') break;
    branch = branch * 10 + (c - '0');
    if (branch > 100000) return 0;
  }
  return branch;
}

// Why memory partitioning is not available on `uuid` ("" when it is).
std::string WhyNoPartitioning(const DiscoveryInput& in, const std::string& uuid) {
  if (!in.allowed.contains(kMemoryPartitioning)) return "memory-partitioning not in --enforcement";
  if (!in.cgroup.v2) return "memory partitioning needs cgroup v2: " + in.cgroup.description;
  if (in.nvml == nullptr) return "memory partitioning needs NVML: " + in.nvml_error;
  const std::string version = in.nvml->DriverVersion();
  if (!in.nvml->HasLimitCalls()) {
    return "driver " + (version.empty() ? std::string("?") : version) +
           " has no memory partitioning (NVML's nvmlDeviceSetMemoryLimits_v1, r" +
           std::to_string(kMemoryPartitioningDriver) + "+)";
  }
  if (const int branch = DriverBranch(version); branch > 0 && branch < kMemoryPartitioningDriver) {
    return "driver " + version + " is before r" + std::to_string(kMemoryPartitioningDriver) +
           " (memory partitioning)";
  }
  auto mig = in.nvml->MigEnabled(uuid);
  if (!mig) return "NVML cannot tell the GPU's MIG mode: " + mig.error().message;
  if (*mig) return "the GPU is in MIG mode, which memory partitioning does not support";
  if (!in.cdi_hook) return "memory partitioning needs the CDI hook: " + in.cdi_hook_note;
  return "";
}

}  // namespace

bool UsesMemoryPartitioning(const kube::GpuEnforcement& e) {
  return std::find(e.backends.begin(), e.backends.end(), kMemoryPartitioning) != e.backends.end();
}

std::vector<kube::GpuEnforcement> Discover(const DiscoveryInput& in) {
  using kube::ComputeEnforcement;
  using kube::MemoryEnforcement;
  const bool mps = in.mps && in.allowed.contains(kMps);
  const bool hami =
      in.allowed.contains(kHamiCore) && !in.hami_core_library.empty() && in.hami_core_present;
  std::vector<kube::GpuEnforcement> out;
  for (const std::string& uuid : in.uuids) {
    kube::GpuEnforcement e;
    std::vector<std::string> notes;
    const std::string no_partitioning = WhyNoPartitioning(in, uuid);
    if (no_partitioning.empty()) {
      e.memory = MemoryEnforcement::kHard;
      e.backends.push_back(kMemoryPartitioning);
    } else {
      notes.push_back(no_partitioning);
    }
    if (mps) {
      e.backends.push_back(kMps);
      e.compute =
          in.mps_namespaces ? ComputeEnforcement::kMpsNamespace : ComputeEnforcement::kMpsServer;
      if (e.memory == MemoryEnforcement::kNone) e.memory = MemoryEnforcement::kSoft;
    } else if (hami) {
      e.backends.push_back(kHamiCore);
      e.compute = ComputeEnforcement::kHamiCore;
      if (e.memory == MemoryEnforcement::kNone) e.memory = MemoryEnforcement::kSoft;
    } else if (in.allowed.contains(kHamiCore) && !in.hami_core_library.empty()) {
      notes.push_back("HAMi-core library " + in.hami_core_library + " not found on the node");
    }
    std::sort(e.backends.begin(), e.backends.end());
    for (const std::string& n : notes) e.note += (e.note.empty() ? "" : "; ") + n;
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace gpumux::isolation
