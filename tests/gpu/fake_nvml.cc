// A stand-in for libnvidia-ml.so.1 so that the NVML backend's real dlopen path runs without a
// GPU. It exports the entry points gpumux uses, with NVML's C ABI, and answers from a state file
// named by $GPUMUX_FAKE_NVML, read again on every call (so a test changes the GPUs by rewriting
// it):
//
//   # comment
//   init_error=9                  nvmlInit_v2 fails with this code (default: succeeds)
//   count_error=15                nvmlDeviceGetCount_v2 fails with this code
//   gpu=UUID|name|total_mib|used_mib|minor|util_gpu|util_mem|pid:mib,pid:mib|flag,flag
//   xid=<gpu index>|<xid>         XIDs that happened, in order (cumulative)
//   driver=615.71.09              nvmlSystemGetDriverVersion (default 615.71.09; legacy 535.54.03)
//   limits=PATH                   where memory limits are kept (default: the state file +
//   ".limits")
//
// `gpu` lines number the GPUs 0, 1, ... A process's mib of -1 is NVML_VALUE_NOT_AVAILABLE.
// Flags: lost (every query of that GPU says GPU_IS_LOST), no-events (event registration says
// NOT_SUPPORTED), no-util (utilisation says NOT_SUPPORTED), mig (the GPU runs in MIG mode: its
// memory-limit calls say NOT_SUPPORTED, as NVIDIA documents for MIG handles), no-limits (its
// memory-limit calls say NOT_SUPPORTED), hang-after-set (a set is recorded, then the call sleeps
// a minute: a setter killed mid-way). An event set delivers the XIDs appended after it was
// created, each once, for the GPUs registered with it.
// Without $GPUMUX_FAKE_NVML the state file is fake-nvml.state beside this library (how the e2e
// rig's runtime hook, which gets no test environment, finds it).
//
// Memory limits (nvmlDeviceSetMemoryLimits_v1 / nvmlDeviceGetMemoryLimits_v1, as NVIDIA's API
// reference gives them) are recorded, one line per successful set, in the limits file:
//   set|<uuid>|<cgroup path>|<soft bytes>|<hard bytes>|<caller pid>
// and read back from it (the last set of a GPU and cgroup wins). As NVIDIA documents: setting
// needs root (else NO_PERMISSION), the cgroup must be an existing folder (else
// OPERATING_SYSTEM), soft <= hard <= the GPU's memory unless hard is "max" (UINT64_MAX; else
// INVALID_ARGUMENT); soft 0 with hard max clears; a cgroup's limits are gone once its folder is
// (a get then says NOT_FOUND, as it does for a cgroup without limits).
//
// Built twice: gpumux_fake_nvml (what current drivers export) and, with
// FAKE_NVML_LEGACY, gpumux_fake_nvml_legacy: only the unversioned
// nvmlDeviceGetComputeRunningProcesses (v1 process records) and nvmlEventSetWait (the
// three-field event record), and no memory-limit calls, as old drivers have.
#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using Ret = int;
constexpr Ret kSuccess = 0;
constexpr Ret kUninitialized = 1;
constexpr Ret kInvalidArgument = 2;
constexpr Ret kNotSupported = 3;
constexpr Ret kNoPermission = 4;
constexpr Ret kNotFound = 6;
constexpr Ret kOperatingSystem = 17;
constexpr Ret kInsufficientSize = 7;
constexpr Ret kTimeout = 10;
constexpr Ret kGpuIsLost = 15;
constexpr unsigned long long kXidEvent = 0x8;

struct FakeProcess {
  unsigned int pid = 0;
  long long mib = 0;
};

struct FakeGpu {
  std::string uuid, name;
  unsigned long long total_mib = 0, used_mib = 0;
  unsigned int minor = 0, util_gpu = 0, util_mem = 0;
  std::vector<FakeProcess> processes;
  bool lost = false, no_events = false, no_util = false, mig = false, no_limits = false;
  bool hang_after_set = false;
};

struct State {
  Ret init_error = kSuccess;
  Ret count_error = kSuccess;
  std::vector<FakeGpu> gpus;
  std::vector<std::pair<unsigned int, unsigned long long>> xids;  // (gpu, xid)
#ifdef FAKE_NVML_LEGACY
  std::string driver = "535.54.03";
#else
  std::string driver = "615.71.09";
#endif
  std::string limits;  // the limits file
};

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string item;
  std::istringstream in(s);
  while (std::getline(in, item, sep)) out.push_back(item);
  if (!s.empty() && s.back() == sep) out.emplace_back();
  return out;
}

// $GPUMUX_FAKE_NVML, else fake-nvml.state in this library's folder.
std::string StatePath() {
  if (const char* path = std::getenv("GPUMUX_FAKE_NVML"); path != nullptr) return path;
  Dl_info info{};
  static int anchor = 0;
  if (::dladdr(&anchor, &info) == 0 || info.dli_fname == nullptr) return "";
  std::string self = info.dli_fname;
  const auto slash = self.rfind('/');
  return (slash == std::string::npos ? std::string(".") : self.substr(0, slash)) +
         "/fake-nvml.state";
}

State Read() {
  State st;
  const std::string path = StatePath();
  if (path.empty()) return st;
  st.limits = path + ".limits";
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    const auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    const std::string key = line.substr(0, eq);
    const std::vector<std::string> f = Split(line.substr(eq + 1), '|');
    if (key == "init_error" && !f.empty()) {
      st.init_error = std::atoi(f[0].c_str());
    } else if (key == "count_error" && !f.empty()) {
      st.count_error = std::atoi(f[0].c_str());
    } else if (key == "gpu" && f.size() >= 7) {
      FakeGpu g;
      g.uuid = f[0];
      g.name = f[1];
      g.total_mib = std::strtoull(f[2].c_str(), nullptr, 10);
      g.used_mib = std::strtoull(f[3].c_str(), nullptr, 10);
      g.minor = static_cast<unsigned int>(std::strtoul(f[4].c_str(), nullptr, 10));
      g.util_gpu = static_cast<unsigned int>(std::strtoul(f[5].c_str(), nullptr, 10));
      g.util_mem = static_cast<unsigned int>(std::strtoul(f[6].c_str(), nullptr, 10));
      if (f.size() > 7 && !f[7].empty()) {
        for (const std::string& p : Split(f[7], ',')) {
          const auto colon = p.find(':');
          FakeProcess proc;
          proc.pid =
              static_cast<unsigned int>(std::strtoul(p.substr(0, colon).c_str(), nullptr, 10));
          proc.mib = colon == std::string::npos ? 0 : std::atoll(p.substr(colon + 1).c_str());
          g.processes.push_back(proc);
        }
      }
      if (f.size() > 8) {
        for (const std::string& flag : Split(f[8], ',')) {
          g.lost = g.lost || flag == "lost";
          g.no_events = g.no_events || flag == "no-events";
          g.no_util = g.no_util || flag == "no-util";
          g.mig = g.mig || flag == "mig";
          g.no_limits = g.no_limits || flag == "no-limits";
          g.hang_after_set = g.hang_after_set || flag == "hang-after-set";
        }
      }
      st.gpus.push_back(g);
    } else if (key == "driver" && !f.empty()) {
      st.driver = f[0];
    } else if (key == "limits" && !f.empty()) {
      st.limits = f[0];
    } else if (key == "xid" && f.size() == 2) {
      st.xids.emplace_back(static_cast<unsigned int>(std::strtoul(f[0].c_str(), nullptr, 10)),
                           std::strtoull(f[1].c_str(), nullptr, 10));
    }
  }
  return st;
}

std::mutex g_mu;
int g_inits = 0;  // nvmlInit_v2 minus nvmlShutdown

struct DeviceSlot {
  unsigned int index;
};
constexpr unsigned int kMaxGpus = 64;
DeviceSlot g_slots[kMaxGpus] = {};

struct EventSetImpl {
  std::vector<bool> registered = std::vector<bool>(kMaxGpus, false);
  std::size_t delivered = 0;
};

// The GPU behind a handle, in a fresh read of the state; nullptr (and `rc`) when there is none.
const FakeGpu* Lookup(const State& st, const void* handle, Ret& rc) {
  if (g_inits <= 0) {
    rc = kUninitialized;
    return nullptr;
  }
  const auto* slot = static_cast<const DeviceSlot*>(handle);
  if (slot == nullptr || slot < g_slots || slot >= g_slots + kMaxGpus ||
      slot->index >= st.gpus.size()) {
    rc = kInvalidArgument;
    return nullptr;
  }
  const FakeGpu& g = st.gpus[slot->index];
  if (g.lost) {
    rc = kGpuIsLost;
    return nullptr;
  }
  rc = kSuccess;
  return &g;
}

Ret CopyText(const std::string& text, char* buf, unsigned int size) {
  if (buf == nullptr || size < text.size() + 1) return kInsufficientSize;
  std::memcpy(buf, text.c_str(), text.size() + 1);
  return kSuccess;
}

// Runs `f` on the GPU behind `device` in a fresh read of the state, under the lock; the
// lookup's error when there is no such GPU (or it is lost).
template <typename F>
Ret WithGpu(const void* device, F f) {
  std::lock_guard<std::mutex> lock(g_mu);
  const State st = Read();
  Ret rc = kSuccess;
  const FakeGpu* g = Lookup(st, device, rc);
  return g == nullptr ? rc : f(*g);
}

template <typename Info>
Ret Processes(void* device, unsigned int* count, Info* infos) {
  return WithGpu(device, [&](const FakeGpu& g) {
    if (count == nullptr) return kInvalidArgument;
    const auto n = static_cast<unsigned int>(g.processes.size());
    if (*count < n || (n > 0 && infos == nullptr)) {
      *count = n;
      return kInsufficientSize;
    }
    *count = n;
    for (unsigned int i = 0; i < n; ++i) {
      Info info{};
      info.pid = g.processes[i].pid;
      info.usedGpuMemory = g.processes[i].mib < 0
                               ? ~0ULL
                               : static_cast<unsigned long long>(g.processes[i].mib) << 20;
      infos[i] = info;
    }
    return kSuccess;
  });
}

struct ProcessInfoV1 {
  unsigned int pid;
  unsigned long long usedGpuMemory;
};
struct ProcessInfoV2 {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};
struct EventDataV1 {  // what old drivers write
  void* device;
  unsigned long long eventType;
  unsigned long long eventData;
};
struct EventDataV2 {
  void* device;
  unsigned long long eventType;
  unsigned long long eventData;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};

template <typename Data>
Ret Wait(void* set, Data* data, unsigned int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (true) {
    {
      std::lock_guard<std::mutex> lock(g_mu);
      auto* s = static_cast<EventSetImpl*>(set);
      if (s == nullptr || data == nullptr) return kInvalidArgument;
      const State st = Read();
      while (s->delivered < st.xids.size()) {
        const auto [gpu, xid] = st.xids[s->delivered++];
        if (gpu < kMaxGpus && s->registered[gpu]) {
          Data d{};
          d.device = &g_slots[gpu];
          d.eventType = kXidEvent;
          d.eventData = xid;
          *data = d;
          return kSuccess;
        }
      }
    }
    if (std::chrono::steady_clock::now() >= deadline) return kTimeout;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

}  // namespace

#define FAKE_NVML_EXPORT extern "C" __attribute__((visibility("default")))

FAKE_NVML_EXPORT Ret nvmlInit_v2() {
  std::lock_guard<std::mutex> lock(g_mu);
  const State st = Read();
  if (st.init_error != kSuccess) return st.init_error;
  ++g_inits;
  for (unsigned int i = 0; i < kMaxGpus; ++i) g_slots[i].index = i;
  return kSuccess;
}

FAKE_NVML_EXPORT Ret nvmlShutdown() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_inits <= 0) return kUninitialized;
  --g_inits;
  return kSuccess;
}

// For tests: how many nvmlInit_v2 calls are not yet matched by nvmlShutdown.
FAKE_NVML_EXPORT int gpumux_fake_nvml_live_inits() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_inits;
}

FAKE_NVML_EXPORT const char* nvmlErrorString(Ret rc) {
  switch (rc) {
    case kSuccess:
      return "Success";
    case kUninitialized:
      return "Uninitialized";
    case kInvalidArgument:
      return "Invalid Argument";
    case kNotSupported:
      return "Not Supported";
    case kInsufficientSize:
      return "Insufficient Size";
    case 9:
      return "Driver Not Loaded";
    case kTimeout:
      return "Timeout";
    case kGpuIsLost:
      return "GPU is lost";
    case kNoPermission:
      return "Insufficient Permissions";
    case kNotFound:
      return "Not Found";
    case kOperatingSystem:
      return "Operating System Error";
    default:
      return "Unknown Error";
  }
}

FAKE_NVML_EXPORT Ret nvmlDeviceGetCount_v2(unsigned int* count) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_inits <= 0) return kUninitialized;
  if (count == nullptr) return kInvalidArgument;
  const State st = Read();
  if (st.count_error != kSuccess) return st.count_error;
  *count = static_cast<unsigned int>(st.gpus.size());
  return kSuccess;
}

FAKE_NVML_EXPORT Ret nvmlDeviceGetHandleByIndex_v2(unsigned int index, void** device) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_inits <= 0) return kUninitialized;
  if (device == nullptr || index >= Read().gpus.size() || index >= kMaxGpus) {
    return kInvalidArgument;
  }
  *device = &g_slots[index];
  return kSuccess;
}

FAKE_NVML_EXPORT Ret nvmlDeviceGetUUID(void* device, char* buf, unsigned int size) {
  return WithGpu(device, [&](const FakeGpu& g) { return CopyText(g.uuid, buf, size); });
}

FAKE_NVML_EXPORT Ret nvmlDeviceGetName(void* device, char* buf, unsigned int size) {
  return WithGpu(device, [&](const FakeGpu& g) { return CopyText(g.name, buf, size); });
}

struct Memory {
  unsigned long long total, free, used;
};

FAKE_NVML_EXPORT Ret nvmlDeviceGetMemoryInfo(void* device, Memory* memory) {
  return WithGpu(device, [&](const FakeGpu& g) {
    memory->total = g.total_mib << 20;
    memory->used = g.used_mib << 20;
    memory->free = memory->total - memory->used;
    return kSuccess;
  });
}

FAKE_NVML_EXPORT Ret nvmlDeviceGetMinorNumber(void* device, unsigned int* minor) {
  return WithGpu(device, [&](const FakeGpu& g) {
    *minor = g.minor;
    return kSuccess;
  });
}

struct Utilization {
  unsigned int gpu, memory;
};

FAKE_NVML_EXPORT Ret nvmlDeviceGetUtilizationRates(void* device, Utilization* u) {
  return WithGpu(device, [&](const FakeGpu& g) {
    if (g.no_util) return kNotSupported;
    u->gpu = g.util_gpu;
    u->memory = g.util_mem;
    return kSuccess;
  });
}

FAKE_NVML_EXPORT Ret nvmlDeviceGetComputeRunningProcesses(void* device, unsigned int* count,
                                                          ProcessInfoV1* infos) {
  return Processes(device, count, infos);
}

#ifndef FAKE_NVML_LEGACY
FAKE_NVML_EXPORT Ret nvmlDeviceGetComputeRunningProcesses_v3(void* device, unsigned int* count,
                                                             ProcessInfoV2* infos) {
  return Processes(device, count, infos);
}
FAKE_NVML_EXPORT Ret nvmlDeviceGetComputeRunningProcesses_v2(void* device, unsigned int* count,
                                                             ProcessInfoV2* infos) {
  return Processes(device, count, infos);
}
#endif

FAKE_NVML_EXPORT Ret nvmlEventSetCreate(void** set) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_inits <= 0) return kUninitialized;
  auto* s = new EventSetImpl;
  s->delivered = Read().xids.size();  // events from before the set are not delivered
  *set = s;
  return kSuccess;
}

FAKE_NVML_EXPORT Ret nvmlDeviceRegisterEvents(void* device, unsigned long long types, void* set) {
  return WithGpu(device, [&](const FakeGpu& g) {
    if (g.no_events || (types & kXidEvent) == 0) return kNotSupported;
    static_cast<EventSetImpl*>(set)->registered[static_cast<DeviceSlot*>(device)->index] = true;
    return kSuccess;
  });
}

#ifndef FAKE_NVML_LEGACY
FAKE_NVML_EXPORT Ret nvmlEventSetWait_v2(void* set, EventDataV2* data, unsigned int timeout_ms) {
  return Wait(set, data, timeout_ms);
}
#else
FAKE_NVML_EXPORT Ret nvmlEventSetWait(void* set, EventDataV1* data, unsigned int timeout_ms) {
  return Wait(set, data, timeout_ms);
}
#endif

FAKE_NVML_EXPORT Ret nvmlEventSetFree(void* set) {
  std::lock_guard<std::mutex> lock(g_mu);
  delete static_cast<EventSetImpl*>(set);
  return kSuccess;
}

FAKE_NVML_EXPORT Ret nvmlSystemGetDriverVersion(char* buf, unsigned int size) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_inits <= 0) return kUninitialized;
  return CopyText(Read().driver, buf, size);
}

FAKE_NVML_EXPORT Ret nvmlDeviceGetHandleByUUID(const char* uuid, void** device) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_inits <= 0) return kUninitialized;
  if (uuid == nullptr || device == nullptr) return kInvalidArgument;
  const State st = Read();
  for (unsigned int i = 0; i < st.gpus.size() && i < kMaxGpus; ++i) {
    if (st.gpus[i].uuid == uuid) {
      *device = &g_slots[i];
      return kSuccess;
    }
  }
  return kNotFound;
}

FAKE_NVML_EXPORT Ret nvmlDeviceGetMigMode(void* device, unsigned int* current,
                                          unsigned int* pending) {
  return WithGpu(device, [&](const FakeGpu& g) {
    if (current == nullptr || pending == nullptr) return kInvalidArgument;
    *current = *pending = g.mig ? 1 : 0;
    return kSuccess;
  });
}

#ifndef FAKE_NVML_LEGACY
namespace {

struct SetLimits {  // nvmlSetMemoryLimits_v1_t
  const char* nameSpace;
  unsigned long long softLimit;
  unsigned long long hardLimit;
};
struct GetLimits {  // nvmlGetMemoryLimits_v1_t
  const char* nameSpace;
  unsigned long long softLimit;
  unsigned long long hardLimit;
  unsigned long long currentUsed;
};
constexpr unsigned long long kLimitMax = ~0ULL;

bool IsFolder(const char* path) {
  struct stat st {};
  return path != nullptr && ::stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

// The last limits set for (uuid, cgroup) in the limits file; false when none (or cleared).
bool LastLimits(const State& st, const std::string& uuid, const std::string& cgroup,
                unsigned long long& soft, unsigned long long& hard) {
  std::ifstream in(st.limits);
  bool found = false;
  for (std::string line; std::getline(in, line);) {
    const std::vector<std::string> f = Split(line, '|');
    if (f.size() < 5 || f[0] != "set" || f[1] != uuid || f[2] != cgroup) continue;
    soft = std::strtoull(f[3].c_str(), nullptr, 10);
    hard = std::strtoull(f[4].c_str(), nullptr, 10);
    found = !(soft == 0 && hard == kLimitMax);
  }
  return found;
}

// The GPU behind `device` when it takes memory-limit calls; `rc` otherwise.
const FakeGpu* LimitsGpu(const State& st, const void* device, Ret& rc) {
  const FakeGpu* g = Lookup(st, device, rc);
  if (g != nullptr && (g->mig || g->no_limits)) {
    rc = kNotSupported;
    return nullptr;
  }
  return g;
}

}  // namespace

FAKE_NVML_EXPORT Ret nvmlDeviceSetMemoryLimits_v1(void* device, SetLimits* limits) {
  std::lock_guard<std::mutex> lock(g_mu);
  const State st = Read();
  Ret rc = kSuccess;
  const FakeGpu* g = LimitsGpu(st, device, rc);
  if (g == nullptr) return rc;
  if (limits == nullptr || limits->nameSpace == nullptr) return kInvalidArgument;
  if (::geteuid() != 0) return kNoPermission;
  if (!IsFolder(limits->nameSpace)) return kOperatingSystem;
  const unsigned long long total = g->total_mib << 20;
  if (limits->softLimit > limits->hardLimit ||
      (limits->hardLimit != kLimitMax && limits->hardLimit > total) || limits->softLimit > total) {
    return kInvalidArgument;
  }
  std::ofstream out(st.limits, std::ios::app);
  out << "set|" << g->uuid << "|" << limits->nameSpace << "|" << limits->softLimit << "|"
      << limits->hardLimit << "|" << ::getpid() << "\n";
  out.close();
  if (g->hang_after_set) std::this_thread::sleep_for(std::chrono::seconds(60));
  return out ? kSuccess : kOperatingSystem;
}

FAKE_NVML_EXPORT Ret nvmlDeviceGetMemoryLimits_v1(void* device, GetLimits* limits) {
  std::lock_guard<std::mutex> lock(g_mu);
  const State st = Read();
  Ret rc = kSuccess;
  const FakeGpu* g = LimitsGpu(st, device, rc);
  if (g == nullptr) return rc;
  if (limits == nullptr || limits->nameSpace == nullptr) return kInvalidArgument;
  unsigned long long soft = 0, hard = kLimitMax;
  if (!IsFolder(limits->nameSpace) || !LastLimits(st, g->uuid, limits->nameSpace, soft, hard)) {
    return kNotFound;
  }
  limits->softLimit = soft;
  limits->hardLimit = hard;
  limits->currentUsed = 0;
  return kSuccess;
}
#endif
