// NVML's per-cgroup memory limits (memory_limits.h). The declarations below follow NVIDIA's
// NVML API reference (nvmlSetMemoryLimits_v1_t, nvmlGetMemoryLimits_v1_t: no version member;
// nvmlDeviceGetMigMode; nvmlSystemGetDriverVersion; nvmlDeviceGetHandleByUUID).
#include "gpumux/gpu/memory_limits.h"

#include <dlfcn.h>

#include <cstring>

namespace gpumux::gpu {
namespace {

using NvmlReturn = int;
struct NvmlDeviceSt;
using NvmlDevice = NvmlDeviceSt*;

struct NvmlSetMemoryLimits {  // nvmlSetMemoryLimits_v1_t
  const char* nameSpace;
  unsigned long long softLimit;
  unsigned long long hardLimit;
};
struct NvmlGetMemoryLimits {  // nvmlGetMemoryLimits_v1_t
  const char* nameSpace;
  unsigned long long softLimit;
  unsigned long long hardLimit;
  unsigned long long currentUsed;
};

constexpr NvmlReturn kSuccess = 0;
constexpr NvmlReturn kInvalidArgument = 2;
constexpr NvmlReturn kNotSupported = 3;
constexpr NvmlReturn kNoPermission = 4;
constexpr NvmlReturn kNotFound = 6;
constexpr NvmlReturn kOperatingSystem = 17;
constexpr unsigned int kMigEnabled = 1;  // NVML_DEVICE_MIG_ENABLE

struct Api {
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*shutdown)() = nullptr;
  const char* (*error_string)(NvmlReturn) = nullptr;
  NvmlReturn (*handle_by_uuid)(const char*, NvmlDevice*) = nullptr;
  NvmlReturn (*driver_version)(char*, unsigned int) = nullptr;
  NvmlReturn (*mig_mode)(NvmlDevice, unsigned int*, unsigned int*) = nullptr;
  NvmlReturn (*set_limits)(NvmlDevice, NvmlSetMemoryLimits*) = nullptr;
  NvmlReturn (*get_limits)(NvmlDevice, NvmlGetMemoryLimits*) = nullptr;
};

template <typename Fn>
void Resolve(void* lib, const char* symbol, Fn& fn) {
  fn = reinterpret_cast<Fn>(::dlsym(lib, symbol));
}

core::ErrorCode CodeOf(NvmlReturn rc) {
  switch (rc) {
    case kInvalidArgument:
      return core::ErrorCode::kInvalidArgument;
    case kNoPermission:
      return core::ErrorCode::kPermissionDenied;
    case kNotFound:
      return core::ErrorCode::kNotFound;
    case kOperatingSystem:
      return core::ErrorCode::kIo;
    default:
      return core::ErrorCode::kFailedPrecondition;
  }
}

class NvmlMemoryLimits final : public MemoryLimits {
 public:
  NvmlMemoryLimits(void* lib, Api api, std::string library)
      : lib_(lib), api_(api), library_(std::move(library)) {}
  NvmlMemoryLimits(const NvmlMemoryLimits&) = delete;
  NvmlMemoryLimits& operator=(const NvmlMemoryLimits&) = delete;
  ~NvmlMemoryLimits() override {
    api_.shutdown();
    ::dlclose(lib_);
  }

  std::string DriverVersion() const override {
    if (api_.driver_version == nullptr) return "";
    char buf[96] = {};
    if (api_.driver_version(buf, sizeof buf) != kSuccess) return "";
    return std::string(buf, strnlen(buf, sizeof buf));
  }

  bool HasLimitCalls() const override {
    return api_.set_limits != nullptr && api_.get_limits != nullptr;
  }

  core::Result<bool> MigEnabled(const std::string& uuid) const override {
    auto device = Device(uuid);
    if (!device) return tl::unexpected(device.error());
    if (api_.mig_mode == nullptr) return false;  // an NVML from before MIG
    unsigned int current = 0, pending = 0;
    const NvmlReturn rc = api_.mig_mode(*device, &current, &pending);
    if (rc == kNotSupported) return false;  // a GPU without MIG
    if (rc != kSuccess) return Failed<bool>("nvmlDeviceGetMigMode", uuid, "", rc);
    return current == kMigEnabled;
  }

  core::Result<void> Set(const std::string& uuid, const std::string& cgroup,
                         std::uint64_t soft_bytes, std::uint64_t hard_bytes) const override {
    if (api_.set_limits == nullptr) return Missing<void>("nvmlDeviceSetMemoryLimits_v1");
    auto device = Device(uuid);
    if (!device) return tl::unexpected(device.error());
    NvmlSetMemoryLimits limits{cgroup.c_str(), soft_bytes, hard_bytes};
    const NvmlReturn rc = api_.set_limits(*device, &limits);
    if (rc != kSuccess) return Failed<void>("nvmlDeviceSetMemoryLimits_v1", uuid, cgroup, rc);
    return {};
  }

  core::Result<CgroupMemoryLimits> Get(const std::string& uuid,
                                       const std::string& cgroup) const override {
    if (api_.get_limits == nullptr) {
      return Missing<CgroupMemoryLimits>("nvmlDeviceGetMemoryLimits_v1");
    }
    auto device = Device(uuid);
    if (!device) return tl::unexpected(device.error());
    NvmlGetMemoryLimits limits{cgroup.c_str(), 0, 0, 0};
    const NvmlReturn rc = api_.get_limits(*device, &limits);
    if (rc != kSuccess) {
      return Failed<CgroupMemoryLimits>("nvmlDeviceGetMemoryLimits_v1", uuid, cgroup, rc);
    }
    return CgroupMemoryLimits{limits.softLimit, limits.hardLimit, limits.currentUsed};
  }

 private:
  core::Result<NvmlDevice> Device(const std::string& uuid) const {
    NvmlDevice d = nullptr;
    const NvmlReturn rc = api_.handle_by_uuid(uuid.c_str(), &d);
    if (rc != kSuccess) return Failed<NvmlDevice>("nvmlDeviceGetHandleByUUID", uuid, "", rc);
    return d;
  }

  // "libnvidia-ml.so.1: nvmlDeviceSetMemoryLimits_v1 (GPU GPU-.., cgroup /sys/fs/cgroup/x):
  // Not Supported (3)"
  template <typename T>
  core::Result<T> Failed(const char* call, const std::string& uuid, const std::string& cgroup,
                         NvmlReturn rc) const {
    const char* text = api_.error_string(rc);
    std::string message = library_ + ": " + call + " (GPU " + uuid;
    if (!cgroup.empty()) message += ", cgroup " + cgroup;
    message += "): ";
    message += text != nullptr ? text : "unknown error";
    message += " (" + std::to_string(rc) + ")";
    return core::MakeError(CodeOf(rc), std::move(message));
  }

  template <typename T>
  core::Result<T> Missing(const char* call) const {
    return core::MakeError(
        core::ErrorCode::kFailedPrecondition,
        library_ + " has no " + call + " (NVIDIA drivers before r615 have no memory partitioning)");
  }

  void* lib_;
  Api api_;
  std::string library_;
};

}  // namespace

core::Result<std::unique_ptr<MemoryLimits>> OpenMemoryLimits(const std::string& library) {
  ::dlerror();
  void* lib = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = ::dlerror();
    return core::MakeError(core::ErrorCode::kNotFound,
                           library + ": cannot open (" + (why != nullptr ? why : "unknown error") +
                               "): is the NVIDIA driver installed?");
  }
  Api api;
  Resolve(lib, "nvmlInit_v2", api.init);
  Resolve(lib, "nvmlShutdown", api.shutdown);
  Resolve(lib, "nvmlErrorString", api.error_string);
  Resolve(lib, "nvmlDeviceGetHandleByUUID", api.handle_by_uuid);
  for (const auto& [symbol, found] :
       {std::pair<const char*, bool>{"nvmlInit_v2", api.init != nullptr},
        {"nvmlShutdown", api.shutdown != nullptr},
        {"nvmlErrorString", api.error_string != nullptr},
        {"nvmlDeviceGetHandleByUUID", api.handle_by_uuid != nullptr}}) {
    if (!found) {
      ::dlclose(lib);
      return core::MakeError(core::ErrorCode::kFailedPrecondition,
                             library + ": has no " + symbol + " (not NVML?)");
    }
  }
  Resolve(lib, "nvmlSystemGetDriverVersion", api.driver_version);
  Resolve(lib, "nvmlDeviceGetMigMode", api.mig_mode);
  Resolve(lib, "nvmlDeviceSetMemoryLimits_v1", api.set_limits);
  Resolve(lib, "nvmlDeviceGetMemoryLimits_v1", api.get_limits);
  if (const NvmlReturn rc = api.init(); rc != kSuccess) {
    const char* s = api.error_string(rc);
    std::string message = library + ": nvmlInit_v2 failed: " + (s != nullptr ? s : "unknown error");
    message += " (" + std::to_string(rc) + ")";
    ::dlclose(lib);
    return core::MakeError(core::ErrorCode::kFailedPrecondition, std::move(message));
  }
  return std::unique_ptr<MemoryLimits>(std::make_unique<NvmlMemoryLimits>(lib, api, library));
}

}  // namespace gpumux::gpu
