// The NVML backend: libnvidia-ml loaded with dlopen, the few entry points it needs resolved with
// dlsym. Debian ships no NVML header, so the types below are declared here, after NVIDIA's
// nvml.h (return codes, nvmlMemory_t, nvmlUtilization_t, nvmlProcessInfo_v1/v2_t,
// nvmlEventData_t, nvmlEventTypeXidCriticalError, NVML_VALUE_NOT_AVAILABLE).
//
// NVML is documented as thread-safe, so List() and WaitXid() call it from their own threads;
// each keeps its own lock for its own state (the List cache, the event set).
#include <dlfcn.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>

#include "gpumux/gpu/backend.h"

namespace gpumux::gpu {
namespace {

// --- NVML's ABI (the subset used) ---
using NvmlReturn = int;  // nvmlReturn_t
struct NvmlDeviceSt;
using NvmlDevice = NvmlDeviceSt*;  // nvmlDevice_t
struct NvmlEventSetSt;
using NvmlEventSet = NvmlEventSetSt*;  // nvmlEventSet_t

struct NvmlMemory {  // nvmlMemory_t
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
struct NvmlUtilization {  // nvmlUtilization_t
  unsigned int gpu;
  unsigned int memory;
};
struct NvmlProcessInfoV1 {  // nvmlProcessInfo_v1_t: nvmlDeviceGetComputeRunningProcesses
  unsigned int pid;
  unsigned long long usedGpuMemory;
};
struct NvmlProcessInfoV2 {  // nvmlProcessInfo_v2_t / nvmlProcessInfo_t: the _v2 and _v3 calls
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};
// nvmlEventData_t. Older NVMLs write only the first three fields; the MIG ids were added later.
struct NvmlEventData {
  NvmlDevice device;
  unsigned long long eventType;
  unsigned long long eventData;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};

constexpr NvmlReturn kSuccess = 0;
constexpr NvmlReturn kInsufficientSize = 7;
constexpr NvmlReturn kTimeout = 10;
constexpr NvmlReturn kGpuIsLost = 15;
constexpr NvmlReturn kResetRequired = 16;
constexpr unsigned long long kEventTypeXidCriticalError = 0x8;
constexpr unsigned long long kValueNotAvailable = ~0ULL;
constexpr unsigned int kTextBuffer = 256;  // > NVML_DEVICE_UUID_BUFFER_SIZE (80), name (96)
constexpr std::int64_t kMiB = 1024 * 1024;

struct Api {
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*shutdown)() = nullptr;
  const char* (*error_string)(NvmlReturn) = nullptr;
  NvmlReturn (*count)(unsigned int*) = nullptr;
  NvmlReturn (*handle_by_index)(unsigned int, NvmlDevice*) = nullptr;
  NvmlReturn (*uuid)(NvmlDevice, char*, unsigned int) = nullptr;
  // Optional: a missing one leaves its field unknown.
  NvmlReturn (*name)(NvmlDevice, char*, unsigned int) = nullptr;
  NvmlReturn (*memory)(NvmlDevice, NvmlMemory*) = nullptr;
  NvmlReturn (*minor)(NvmlDevice, unsigned int*) = nullptr;
  NvmlReturn (*utilization)(NvmlDevice, NvmlUtilization*) = nullptr;
  NvmlReturn (*processes)(NvmlDevice, unsigned int*, void*) = nullptr;
  bool processes_v1 = false;  // the unversioned call, which fills NvmlProcessInfoV1
  const char* processes_symbol = "";
  NvmlReturn (*event_set_create)(NvmlEventSet*) = nullptr;
  NvmlReturn (*register_events)(NvmlDevice, unsigned long long, NvmlEventSet) = nullptr;
  NvmlReturn (*event_set_wait)(NvmlEventSet, NvmlEventData*, unsigned int) = nullptr;
  const char* event_set_wait_symbol = "";
  NvmlReturn (*event_set_free)(NvmlEventSet) = nullptr;
};

template <typename Fn>
void Resolve(void* lib, const char* symbol, Fn& fn) {
  fn = reinterpret_cast<Fn>(::dlsym(lib, symbol));
}

bool MeansLost(NvmlReturn rc) { return rc == kGpuIsLost || rc == kResetRequired; }

std::string Text(const char* buf, std::size_t size) { return std::string(buf, strnlen(buf, size)); }

// What List() remembers of a GPU, so that a GPU that stops answering keeps its identity.
struct Known {
  std::string uuid;
  std::string name;
  std::int64_t memory_total_mib = 0;
  int minor = -1;
};

class NvmlBackend final : public Backend {
 public:
  NvmlBackend(void* lib, Api api, std::string library)
      : lib_(lib), api_(api), library_(std::move(library)) {}
  NvmlBackend(const NvmlBackend&) = delete;
  NvmlBackend& operator=(const NvmlBackend&) = delete;

  ~NvmlBackend() override {
    if (events_ != nullptr && api_.event_set_free != nullptr) api_.event_set_free(events_);
    api_.shutdown();
    ::dlclose(lib_);
  }

  std::string_view Name() const override { return "nvml"; }

  // Learns every GPU once (so that one lost later keeps its identity) and registers for XID
  // events on every GPU that supports them (not an error when none does).
  void StartEvents() {
    std::lock_guard<std::mutex> list_lock(list_mu_);
    unsigned int n = 0;
    if (api_.count(&n) != kSuccess) return;
    for (unsigned int i = 0; i < n; ++i) {
      NvmlDevice d = nullptr;
      if (api_.handle_by_index(i, &d) != kSuccess) continue;
      const Gpu g = Query(i);
      if (!g.uuid.empty()) uuid_of_handle_[d] = g.uuid;
    }
    if (api_.event_set_create == nullptr || api_.register_events == nullptr ||
        api_.event_set_wait == nullptr || api_.event_set_free == nullptr) {
      return;
    }
    NvmlEventSet set = nullptr;
    if (api_.event_set_create(&set) != kSuccess) return;
    for (const auto& [device, uuid] : uuid_of_handle_) {
      // NOT_SUPPORTED (no XID events on this GPU) and the like are not fatal: that GPU's
      // health then rests on its queries alone.
      if (api_.register_events(device, kEventTypeXidCriticalError, set) == kSuccess) {
        ++registered_;
      }
    }
    if (registered_ == 0) {
      api_.event_set_free(set);
      return;
    }
    events_ = set;
  }

  core::Result<std::vector<Gpu>> List() override {
    std::lock_guard<std::mutex> lock(list_mu_);
    unsigned int n = 0;
    if (const NvmlReturn rc = api_.count(&n); rc != kSuccess) {
      return core::MakeError(core::ErrorCode::kFailedPrecondition,
                             Failed("nvmlDeviceGetCount_v2", rc));
    }
    std::vector<Gpu> gpus;
    for (unsigned int i = 0; i < n; ++i) {
      Gpu g = Query(i);
      if (!g.uuid.empty()) gpus.push_back(std::move(g));
    }
    return gpus;
  }

  core::Result<std::vector<XidEvent>> WaitXid(std::chrono::milliseconds timeout) override {
    const auto start = std::chrono::steady_clock::now();
    const auto wait_out = [&] { std::this_thread::sleep_until(start + timeout); };
    if (events_ == nullptr) {
      wait_out();
      return std::vector<XidEvent>{};
    }
    std::lock_guard<std::mutex> lock(event_mu_);
    const auto ms = std::clamp<std::int64_t>(timeout.count(), 0, INT_MAX);
    std::vector<XidEvent> out;
    NvmlEventData data{};
    NvmlReturn rc = api_.event_set_wait(events_, &data, static_cast<unsigned int>(ms));
    // Whatever else is already queued comes along without waiting.
    while (rc == kSuccess) {
      if ((data.eventType & kEventTypeXidCriticalError) != 0) {
        out.push_back(XidEvent{UuidOf(data.device), data.eventData});
      }
      if (out.size() >= 256) return out;
      data = NvmlEventData{};
      rc = api_.event_set_wait(events_, &data, 0);
    }
    if (rc == kTimeout || !out.empty()) return out;
    wait_out();
    return core::MakeError(core::ErrorCode::kFailedPrecondition,
                           Failed(api_.event_set_wait_symbol, rc));
  }

 private:
  std::string ErrorText(NvmlReturn rc) const {
    const char* s = api_.error_string(rc);
    std::string text = s != nullptr ? s : "unknown error";
    text += " (";
    text += std::to_string(rc);
    text += ')';
    return text;
  }

  // "libnvidia-ml.so.1: nvmlDeviceGetCount_v2: GPU is lost (15)"
  std::string Failed(const char* call, NvmlReturn rc) const {
    return library_ + ": " + call + ": " + ErrorText(rc);
  }

  std::string UuidOf(NvmlDevice d) const {
    const auto it = uuid_of_handle_.find(d);
    if (it != uuid_of_handle_.end()) return it->second;
    char buf[kTextBuffer] = {};
    if (d != nullptr && api_.uuid(d, buf, kTextBuffer) == kSuccess) return Text(buf, sizeof buf);
    return "";  // the event applies to every GPU
  }

  // Notes a failed query: a lost GPU is Unhealthy (the first such reason is kept); any other
  // failure (NOT_SUPPORTED, NO_PERMISSION, ...) leaves the field unknown.
  void Note(Gpu& g, const char* call, NvmlReturn rc) const {
    if (!MeansLost(rc) || g.health == Health::kUnhealthy) return;
    g.health = Health::kUnhealthy;
    g.health_reason = "NVML: ";
    g.health_reason += call;
    g.health_reason += ": ";
    g.health_reason += ErrorText(rc);
  }

  Gpu Query(unsigned int i) {
    Known& known = known_[i];
    Gpu g;
    g.index = static_cast<int>(i);
    NvmlDevice d = nullptr;
    if (const NvmlReturn rc = api_.handle_by_index(i, &d); rc != kSuccess) {
      Note(g, "nvmlDeviceGetHandleByIndex_v2", rc);
      return FromKnown(std::move(g), known, rc);
    }
    char buf[kTextBuffer] = {};
    if (const NvmlReturn rc = api_.uuid(d, buf, kTextBuffer); rc != kSuccess) {
      Note(g, "nvmlDeviceGetUUID", rc);
      return FromKnown(std::move(g), known, rc);
    }
    known.uuid = Text(buf, sizeof buf);
    g.uuid = known.uuid;
    if (api_.name != nullptr) {
      std::memset(buf, 0, sizeof buf);
      const NvmlReturn rc = api_.name(d, buf, kTextBuffer);
      if (rc == kSuccess) known.name = Text(buf, sizeof buf);
      Note(g, "nvmlDeviceGetName", rc);
    }
    g.name = known.name;
    if (api_.memory != nullptr) {
      NvmlMemory m{};
      const NvmlReturn rc = api_.memory(d, &m);
      if (rc == kSuccess) {
        known.memory_total_mib = static_cast<std::int64_t>(m.total / kMiB);
        g.memory_used_mib = static_cast<std::int64_t>(m.used / kMiB);
      }
      Note(g, "nvmlDeviceGetMemoryInfo", rc);
    }
    g.memory_total_mib = known.memory_total_mib;
    if (api_.minor != nullptr) {
      unsigned int minor = 0;
      const NvmlReturn rc = api_.minor(d, &minor);
      if (rc == kSuccess && minor <= INT_MAX) known.minor = static_cast<int>(minor);
      Note(g, "nvmlDeviceGetMinorNumber", rc);
    }
    g.minor = known.minor;
    if (api_.utilization != nullptr) {
      NvmlUtilization u{};
      const NvmlReturn rc = api_.utilization(d, &u);
      if (rc == kSuccess && u.gpu <= 100 && u.memory <= 100) {
        g.utilization_gpu = static_cast<int>(u.gpu);
        g.utilization_memory = static_cast<int>(u.memory);
      }
      Note(g, "nvmlDeviceGetUtilizationRates", rc);
    }
    if (api_.processes != nullptr) {
      const NvmlReturn rc = api_.processes_v1 ? Processes<NvmlProcessInfoV1>(d, g.processes)
                                              : Processes<NvmlProcessInfoV2>(d, g.processes);
      Note(g, api_.processes_symbol, rc);
    }
    return g;
  }

  // A GPU whose handle or UUID cannot be had: listed with what was known of it, or left out
  // (empty UUID) when its UUID was never read.
  Gpu FromKnown(Gpu g, const Known& known, NvmlReturn rc) const {
    g.uuid = known.uuid;
    g.name = known.name;
    g.memory_total_mib = known.memory_total_mib;
    g.minor = known.minor;
    if (g.health == Health::kHealthy) {
      g.health = Health::kUnhealthy;
      g.health_reason = "NVML cannot query the GPU: " + ErrorText(rc);
    }
    return g;
  }

  // Fills `out`; grows the buffer while NVML says it is too small (processes come and go).
  template <typename Info>
  NvmlReturn Processes(NvmlDevice d, std::vector<GpuProcess>& out) const {
    std::vector<Info> infos(16);
    for (int attempt = 0; attempt < 5; ++attempt) {
      auto n = static_cast<unsigned int>(infos.size());
      const NvmlReturn rc = api_.processes(d, &n, infos.data());
      if (rc == kInsufficientSize) {
        infos.assign(std::max<std::size_t>(n, infos.size() * 2) + 8, Info{});
        continue;
      }
      if (rc != kSuccess) return rc;
      out.clear();
      for (std::size_t k = 0; k < std::min<std::size_t>(n, infos.size()); ++k) {
        GpuProcess p;
        p.pid = infos[k].pid;
        if (infos[k].usedGpuMemory != kValueNotAvailable) {
          p.used_mib = static_cast<std::int64_t>(infos[k].usedGpuMemory /
                                                 static_cast<unsigned long long>(kMiB));
        }
        out.push_back(p);
      }
      return kSuccess;
    }
    return kInsufficientSize;
  }

  void* lib_;
  Api api_;
  std::string library_;
  std::mutex list_mu_;
  std::unordered_map<unsigned int, Known> known_;  // by index; guarded by list_mu_
  // Filled before the backend is handed out, read-only afterwards.
  std::unordered_map<NvmlDevice, std::string> uuid_of_handle_;
  NvmlEventSet events_ = nullptr;
  int registered_ = 0;
  std::mutex event_mu_;
};

}  // namespace

core::Result<std::unique_ptr<Backend>> OpenNvml(const std::string& library) {
  ::dlerror();
  void* lib = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = ::dlerror();
    return core::MakeError(
        core::ErrorCode::kNotFound,
        library + ": cannot open (" + (why != nullptr ? why : "unknown error") +
            "): is the NVIDIA driver installed? Use --backend fake with a GPU file on machines "
            "without NVIDIA GPUs");
  }
  Api api;
  Resolve(lib, "nvmlInit_v2", api.init);
  Resolve(lib, "nvmlShutdown", api.shutdown);
  Resolve(lib, "nvmlErrorString", api.error_string);
  Resolve(lib, "nvmlDeviceGetCount_v2", api.count);
  Resolve(lib, "nvmlDeviceGetHandleByIndex_v2", api.handle_by_index);
  Resolve(lib, "nvmlDeviceGetUUID", api.uuid);
  const std::pair<const char*, bool> required[] = {
      {"nvmlInit_v2", api.init != nullptr},
      {"nvmlShutdown", api.shutdown != nullptr},
      {"nvmlErrorString", api.error_string != nullptr},
      {"nvmlDeviceGetCount_v2", api.count != nullptr},
      {"nvmlDeviceGetHandleByIndex_v2", api.handle_by_index != nullptr},
      {"nvmlDeviceGetUUID", api.uuid != nullptr}};
  for (const auto& [symbol, found] : required) {
    if (!found) {
      ::dlclose(lib);
      return core::MakeError(
          core::ErrorCode::kFailedPrecondition,
          library + ": has no " + symbol + " (not NVML, or an NVML older than the R400 drivers)");
    }
  }
  Resolve(lib, "nvmlDeviceGetName", api.name);
  Resolve(lib, "nvmlDeviceGetMemoryInfo", api.memory);
  Resolve(lib, "nvmlDeviceGetMinorNumber", api.minor);
  Resolve(lib, "nvmlDeviceGetUtilizationRates", api.utilization);
  for (const char* symbol :
       {"nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2",
        "nvmlDeviceGetComputeRunningProcesses"}) {
    Resolve(lib, symbol, api.processes);
    if (api.processes != nullptr) {
      api.processes_symbol = symbol;
      api.processes_v1 = std::strcmp(symbol, "nvmlDeviceGetComputeRunningProcesses") == 0;
      break;
    }
  }
  Resolve(lib, "nvmlEventSetCreate", api.event_set_create);
  Resolve(lib, "nvmlDeviceRegisterEvents", api.register_events);
  Resolve(lib, "nvmlEventSetFree", api.event_set_free);
  for (const char* symbol : {"nvmlEventSetWait_v2", "nvmlEventSetWait"}) {
    Resolve(lib, symbol, api.event_set_wait);
    if (api.event_set_wait != nullptr) {
      api.event_set_wait_symbol = symbol;
      break;
    }
  }
  if (const NvmlReturn rc = api.init(); rc != kSuccess) {
    const char* s = api.error_string(rc);
    std::string message = library + ": nvmlInit_v2 failed: " + (s != nullptr ? s : "unknown error");
    message += " (";
    message += std::to_string(rc);
    message += "): is the NVIDIA kernel driver loaded?";
    ::dlclose(lib);
    return core::MakeError(core::ErrorCode::kFailedPrecondition, std::move(message));
  }
  auto backend = std::make_unique<NvmlBackend>(lib, api, library);
  backend->StartEvents();
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace gpumux::gpu
