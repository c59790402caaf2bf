#include "gpumux/deviceplugin/enforcement.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "gpumux/io/atomic_file.h"
#include "gpumux/isolation/limits.h"

namespace gpumux::deviceplugin {
namespace {

bool RegularFile(const std::string& path) {
  struct stat st {};
  return !path.empty() && ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// mkdir -p with `mode` on the last folder (chmod, so the umask does not narrow it).
core::Result<void> MakeFolder(const std::string& path, mode_t mode) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) return core::MakeError(core::ErrorCode::kIo, path + ": cannot create: " + ec.message());
  if (::chmod(path.c_str(), mode) != 0) {
    return core::MakeError(core::ErrorCode::kIo,
                           path + ": cannot set its mode: " + std::strerror(errno));
  }
  return {};
}

std::string HamiFolder(const EnforcementOptions& o) { return o.state_dir + "/hami-core"; }

}  // namespace

Enforcer::Enforcer(EnforcementOptions options, std::vector<NodeGpu> gpus)
    : options_(std::move(options)), gpus_(std::move(gpus)) {}
Enforcer::~Enforcer() = default;

std::unique_ptr<Enforcer> Enforcer::Create(EnforcementOptions options, std::vector<NodeGpu> gpus) {
  auto e = std::unique_ptr<Enforcer>(new Enforcer(std::move(options), std::move(gpus)));
  if (e->options_.allowed.contains(isolation::kMemoryPartitioning)) {
    auto nvml = gpu::OpenMemoryLimits(e->options_.nvml_library);
    if (nvml) {
      e->nvml_ = std::move(*nvml);
    } else {
      e->nvml_error_ = nvml.error().message;
    }
  }
  e->current_ = isolation::Discover(e->Input());
  return e;
}

isolation::DiscoveryInput Enforcer::Input() const {
  isolation::DiscoveryInput in;
  for (const NodeGpu& g : gpus_) in.uuids.push_back(g.uuid);
  in.allowed = options_.allowed;
  in.cgroup = isolation::DetectCgroupHierarchy(options_.cgroup_root);
  in.nvml = nvml_.get();
  in.nvml_error = nvml_error_;
  std::string missed;
  {
    std::lock_guard lock(mu_);
    missed = hook_missed_;
  }
  in.cdi_hook = options_.hook.has_value() && missed.empty();
  in.cdi_hook_note = !missed.empty() ? missed
                                     : "no --cdi-hook (the host path of the gpumux binary the "
                                       "container runtime runs as a CDI hook)";
  in.mps = options_.mps;
  in.mps_namespaces = options_.mps_namespaces;
  in.hami_core_library = options_.hami_core_library;
  in.hami_core_present = RegularFile(options_.hami_core_library);
  return in;
}

std::vector<kube::GpuEnforcement> Enforcer::Current() const {
  std::lock_guard lock(mu_);
  return current_;
}

bool Enforcer::Rediscover() {
  std::vector<kube::GpuEnforcement> next = isolation::Discover(Input());
  std::lock_guard lock(mu_);
  if (next == current_) return false;
  for (std::size_t i = 0; i < next.size() && i < gpus_.size(); ++i) {
    if (i < current_.size() && next[i] == current_[i]) continue;
    options_.log.Warn("what the node enforces on a GPU changed",
                      {{"gpu", gpus_[i].uuid},
                       {"was", i < current_.size() ? current_[i].Summary() : std::string()},
                       {"now", next[i].Summary()},
                       {"note", next[i].note}});
  }
  current_ = std::move(next);
  return true;
}

core::Result<EnforcementEdits> Enforcer::Edits(const GrantContext& context,
                                               const kube::ContainerGrant& grant) const {
  EnforcementEdits edits;
  if (grant.exclusive || grant.gpus.empty()) return edits;
  const std::vector<kube::GpuEnforcement> current = Current();
  bool partitioned = grant.gpu_mem_mib > 0, hami = !options_.hami_core_library.empty();
  std::vector<isolation::GpuLimit> limits;
  for (const kube::GrantedGpu& g : grant.gpus) {
    const auto i = static_cast<std::size_t>(g.index);
    if (g.index < 0 || i >= current.size() || i >= gpus_.size()) {
      return core::MakeError(
          core::ErrorCode::kFailedPrecondition,
          "the grant names GPU " + std::to_string(g.index) + ", which this node does not have");
    }
    const kube::GpuEnforcement& e = current[i];
    partitioned = partitioned && isolation::UsesMemoryPartitioning(e);
    hami = hami && std::find(e.backends.begin(), e.backends.end(), isolation::kHamiCore) !=
                       e.backends.end();
    limits.push_back(
        {gpus_[i].uuid, grant.gpu_mem_mib, grant.gpu_mem_mib * options_.soft_limit_percent / 100});
  }
  if (partitioned && options_.hook) {
    isolation::ContainerHookRequest request{context.pod_ns, context.pod_name, context.pod_uid,
                                            grant.name, limits};
    auto device = isolation::WriteEnforcementSpec(*options_.hook, request);
    if (!device) {
      return core::MakeError(device.error().code,
                             "its GPU memory limit cannot be prepared: " + device.error().message);
    }
    edits.cdi_devices.push_back(*device);
    edits.summary = "memory-partitioning (hard " + std::to_string(grant.gpu_mem_mib) + " MiB)";
  }
  if (hami) {
    const std::string folder = HamiFolder(options_);
    const std::string preload = folder + "/ld.so.preload";
    const std::string cache = folder + "/containers/" + context.pod_uid + "_" + grant.name;
    const std::string lock = folder + "/vgpulock";
    for (const auto& [path, mode] : {std::pair<std::string, mode_t>{cache, 0777}, {lock, 0777}}) {
      if (auto made = MakeFolder(path, mode); !made) {
        return core::MakeError(made.error().code,
                               "HAMi-core's folders cannot be prepared: " + made.error().message);
      }
    }
    if (!RegularFile(preload)) {
      if (auto written =
              io::WriteFileAtomically(preload, std::string(kHamiCoreLibraryInContainer) + "\n");
          !written) {
        return tl::unexpected(written.error());
      }
    }
    edits.mounts.push_back({options_.hami_core_library, kHamiCoreLibraryInContainer, true});
    edits.mounts.push_back({preload, "/etc/ld.so.preload", true});
    edits.mounts.push_back({cache, kHamiCoreCacheInContainer, false});
    edits.mounts.push_back({lock, kHamiCoreLockInContainer, false});
    if (grant.gpu_mem_mib > 0) {
      for (std::size_t k = 0; k < grant.gpus.size(); ++k) {
        edits.envs["CUDA_DEVICE_MEMORY_LIMIT_" + std::to_string(k)] =
            std::to_string(grant.gpu_mem_mib) + "m";
      }
    }
    if (grant.milli_requested) {
      edits.envs["CUDA_DEVICE_SM_LIMIT"] = std::to_string((grant.gpu_milli + 9) / 10);
    }
    edits.envs["CUDA_DEVICE_MEMORY_SHARED_CACHE"] =
        std::string(kHamiCoreCacheInContainer) + "/vgpu.cache";
    edits.summary += (edits.summary.empty() ? "" : ", ") + std::string("hami-core");
  }
  return edits;
}

std::vector<std::string> Enforcer::Maintain(const std::optional<std::set<std::string>>& live_pods,
                                            const std::vector<Handshake::RunningShare>& running) {
  std::vector<std::string> removed;
  isolation::LimitRecords records(options_.state_dir);
  if (options_.hook) {
    std::set<std::pair<std::string, std::string>> held;  // (pod uid, container) with a record
    for (const isolation::LimitRecord& r : records.List()) held.insert({r.pod_uid, r.container});
    std::lock_guard lock(mu_);
    for (const Handshake::RunningShare& r : running) {
      if (!hook_missed_.empty() || held.contains({r.pod_uid, r.container}) ||
          !isolation::SpecExists(options_.hook->spec_dir, r.pod_uid, r.container)) {
        continue;
      }
      hook_missed_ = "the container runtime started " + r.pod + "/" + r.container +
                     " without running its CDI hook (does it read CDI specs from " +
                     options_.hook->spec_dir + "? containerd 1.7: enable_cdi = true)";
      options_.log.Error("the GPU memory limit of a running container was not set",
                         {{"pod", r.pod}, {"container", r.container}, {"why", hook_missed_}});
      removed.push_back("memory partitioning turned off: " + hook_missed_);
    }
  }
  // A record is judged gone only by a cgroup hierarchy this process sees (the host's, mounted
  // at --cgroup-root): without it every record would look gone.
  const bool sees = isolation::DetectCgroupHierarchy(options_.cgroup_root).v2;
  const isolation::ReconcileResult r =
      isolation::ReconcileLimits(records, nvml_.get(), [&](const std::string& cgroup) {
        return !sees || cgroup.rfind(options_.cgroup_root + "/", 0) != 0 ||
               isolation::FolderExists(cgroup);
      });
  for (const std::string& name : r.reclaimed_names) {
    removed.push_back("GPU memory limit record of " + name + " (its cgroup is gone)");
  }
  if (live_pods) {
    const auto live = [&](const std::string& uid) { return live_pods->contains(uid); };
    if (options_.hook) {
      // A spec is written in Allocate, just before the kubelet starts the container: give the
      // pod watch a minute to have seen its pod.
      for (const std::string& name :
           isolation::RemoveStaleSpecs(options_.hook->spec_dir, live, 60)) {
        removed.push_back("CDI spec " + name + " (its pod is gone)");
      }
    }
    const std::string containers = HamiFolder(options_) + "/containers";
    if (DIR* dir = ::opendir(containers.c_str()); dir != nullptr) {
      std::vector<std::string> gone;
      while (const dirent* e = ::readdir(dir)) {
        const std::string name = e->d_name;
        if (name == "." || name == "..") continue;
        if (!live(name.substr(0, name.find('_')))) gone.push_back(name);
      }
      ::closedir(dir);
      for (const std::string& name : gone) {
        std::error_code ec;
        std::filesystem::remove_all(containers + "/" + name, ec);
        if (!ec) removed.push_back("HAMi-core folder " + name + " (its pod is gone)");
      }
    }
  }
  std::lock_guard lock(mu_);
  reclaimed_ += r.reclaimed;
  recorded_ = r.kept;
  return removed;
}

bool Enforcer::Tick(const std::optional<std::set<std::string>>& live_pods,
                    const std::vector<Handshake::RunningShare>& running) {
  const auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard lock(mu_);
    if (last_tick_ != std::chrono::steady_clock::time_point{} &&
        now - last_tick_ < options_.rediscover_every) {
      return false;
    }
    last_tick_ = now;
  }
  for (const std::string& what : Maintain(live_pods, running)) {
    options_.log.Info("enforcement upkeep", {{"what", what}});
  }
  return Rediscover();
}

std::int64_t Enforcer::reclaimed_total() const {
  std::lock_guard lock(mu_);
  return reclaimed_;
}

std::int64_t Enforcer::recorded_limits() const {
  std::lock_guard lock(mu_);
  return recorded_;
}

}  // namespace gpumux::deviceplugin
