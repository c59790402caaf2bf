#include "gpumux/deviceplugin/container_env.h"

#include <filesystem>

#include "gpumux/core/plural.h"

namespace gpumux::deviceplugin {

std::vector<DeviceNodeSpec> ControlDevices(const std::string& dev_dir) {
  std::vector<DeviceNodeSpec> out;
  std::error_code ec;
  for (const char* name : {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"}) {
    std::string host = dev_dir + "/" + name;
    if (std::filesystem::exists(host, ec)) {
      std::string inside = "/dev/";
      inside += name;
      out.push_back(DeviceNodeSpec{std::move(host), std::move(inside), "rwm"});
    }
  }
  return out;
}

namespace {

// A shared grant: its MPS limits, and its GPU's MPS daemon when there is one (a single GPU).
void AddSharing(const kube::ContainerGrant& grant, const std::string& mem_limits,
                const std::vector<const NodeGpu*>& chosen, const InjectOptions& inject,
                ContainerEnv& out) {
  auto& env = out.envs;
  if (grant.milli_requested && grant.gpu_milli > 0) {
    env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = std::to_string((grant.gpu_milli + 9) / 10);
  }
  if (grant.gpu_mem_mib > 0) env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = mem_limits;
  if (chosen.size() != 1 || !inject.mps) return;
  if (auto folders = inject.mps(chosen[0]->uuid)) {
    out.mounts.push_back(MountSpec{folders->pipe, kMpsPipeInContainer, false});
    out.mounts.push_back(MountSpec{folders->shm, "/dev/shm", false});
    env["CUDA_MPS_PIPE_DIRECTORY"] = kMpsPipeInContainer;
  }
}

}  // namespace

core::Result<ContainerEnv> BuildContainerEnv(const kube::ContainerGrant& grant,
                                             const GrantContext& context,
                                             const std::vector<NodeGpu>& gpus,
                                             const InjectOptions& inject) {
  ContainerEnv out;
  std::string uuids, indices, mem_limits;
  std::vector<const NodeGpu*> chosen;
  for (std::size_t i = 0; i < grant.gpus.size(); ++i) {
    const kube::GrantedGpu& g = grant.gpus[i];
    const NodeGpu* found = nullptr;
    for (const NodeGpu& n : gpus) {
      if (n.index == g.index) found = &n;
    }
    if (found == nullptr) {
      return core::MakeError(core::ErrorCode::kNotFound,
                             "the grant names GPU " + std::to_string(g.index) + ", but node " +
                                 context.node + " has " + core::Plural(gpus.size(), "GPU"));
    }
    if (!g.uuid.empty() && g.uuid != found->uuid) {
      return core::MakeError(core::ErrorCode::kFailedPrecondition,
                             "the grant names GPU " + std::to_string(g.index) + " as " + g.uuid +
                                 ", but that GPU is " + found->uuid + " on node " + context.node);
    }
    chosen.push_back(found);
    if (i > 0) {
      uuids += ',';
      indices += ',';
      mem_limits += ',';
    }
    uuids += found->uuid;
    indices += std::to_string(found->index);
    mem_limits += std::to_string(i) + "=" + std::to_string(grant.gpu_mem_mib) + "M";
  }
  if (chosen.empty()) {
    return core::MakeError(core::ErrorCode::kFailedPrecondition,
                           "the grant of container " + grant.name + " names no GPU");
  }
  auto& env = out.envs;
  if (inject.device_list == DeviceListStrategy::kVolumeMounts) {
    env["NVIDIA_VISIBLE_DEVICES"] = kContainerDevicesDir;
    for (const NodeGpu* g : chosen) {
      out.mounts.push_back(
          MountSpec{"/dev/null", std::string(kContainerDevicesDir) + "/" + g->uuid, true});
    }
  } else {
    env["NVIDIA_VISIBLE_DEVICES"] = uuids;
  }
  if (!grant.exclusive) AddSharing(grant, mem_limits, chosen, inject, out);
  env["GPUMUX_POD"] = context.pod_ns + "/" + context.pod_name;
  env["GPUMUX_POD_UID"] = context.pod_uid;
  env["GPUMUX_CONTAINER"] = grant.name;
  env["GPUMUX_NODE"] = context.node;
  env["GPUMUX_POLICY"] = context.policy;
  env["GPUMUX_GPU_UUIDS"] = uuids;
  env["GPUMUX_GPU_INDICES"] = indices;
  env["GPUMUX_GPU_MILLI"] = std::to_string(grant.exclusive ? 1000 : grant.gpu_milli);
  env["GPUMUX_GPU_MEM_MIB"] = std::to_string(grant.gpu_mem_mib);
  env["GPUMUX_EXCLUSIVE"] = grant.exclusive ? "true" : "false";
  if (inject.inject_devices) {
    out.devices = ControlDevices(inject.dev_dir);
    for (const NodeGpu* g : chosen) {
      const int minor = g->minor >= 0 ? g->minor : g->index;
      std::string name = "/nvidia";
      name += std::to_string(minor);
      out.devices.push_back(DeviceNodeSpec{inject.dev_dir + name, "/dev" + name, "rwm"});
    }
    out.mounts.insert(out.mounts.end(), inject.mounts.begin(), inject.mounts.end());
  }
  if (!inject.coordinator_dir.empty()) {
    out.mounts.push_back(MountSpec{inject.coordinator_dir, kCoordinatorDirInContainer, true});
    env["GPUMUX_COORDINATOR"] =
        std::string("unix://") + kCoordinatorDirInContainer + "/coordinator.sock";
  }
  if (!inject.cdi_kind.empty()) {
    for (const NodeGpu* g : chosen) out.cdi_devices.push_back(inject.cdi_kind + "=" + g->uuid);
  }
  return out;
}

}  // namespace gpumux::deviceplugin
