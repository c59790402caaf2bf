#include "gpumux/deviceplugin/allocate.h"

#include <unordered_set>

#include "gpumux/core/plural.h"

namespace gpumux::deviceplugin {
namespace {

namespace pb = ::v1beta1;

grpc::Status Invalid(std::string message) {
  return {grpc::StatusCode::INVALID_ARGUMENT, std::move(message)};
}

grpc::Status ToStatus(const HandshakeError& e) {
  switch (e.code) {
    case HandshakeError::Code::kInvalidArgument:
      return {grpc::StatusCode::INVALID_ARGUMENT, e.message};
    case HandshakeError::Code::kUnavailable:
      return {grpc::StatusCode::UNAVAILABLE, e.message};
    case HandshakeError::Code::kFailedPrecondition:
      break;
  }
  return {grpc::StatusCode::FAILED_PRECONDITION, e.message};
}

// A device ID from the kubelet for a message: at most 64 bytes, control characters as '?'.
std::string Shown(const std::string& id) {
  std::string out = id.substr(0, 64);
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  if (id.size() > 64) out += "...";
  return out;
}

// Why `id` is not a device of `resource`: another gpumux resource's device, or unknown.
grpc::Status Unknown(Resource resource, const std::string& id,
                     const std::vector<DeviceTable>& tables, const std::string& node_name) {
  const std::string name(ResourceName(resource));
  for (Resource other : kAllResources) {
    const auto i = static_cast<std::size_t>(other);
    if (other == resource || i >= tables.size() || tables[i].Find(id) == nullptr) continue;
    return Invalid("device ID '" + Shown(id) + "' is a " + std::string(ResourceName(other)) +
                   " device, not a " + name + " one (node " + node_name + ")");
  }
  const auto i = static_cast<std::size_t>(resource);
  const std::size_t listed = i < tables.size() ? tables[i].devices().size() : 0;
  return Invalid("unknown device ID '" + Shown(id) + "' for " + name + " on node " + node_name +
                 " (this plugin lists " + core::Plural(listed, "device") + ", e.g. '" +
                 (listed == 0 ? std::string() : tables[i].devices().front().id) + "')");
}

}  // namespace

grpc::Status CheckAllocateRequest(Resource resource, const pb::AllocateRequest& request,
                                  const std::vector<DeviceTable>& tables,
                                  const std::string& node_name, std::vector<std::int64_t>* counts) {
  const std::string name(ResourceName(resource));
  counts->clear();
  if (request.container_requests_size() == 0) {
    return Invalid("Allocate for " + name + " names no container");
  }
  const auto r = static_cast<std::size_t>(resource);
  if (r >= tables.size())
    return Invalid("Allocate for " + name + ", which this plugin does not serve");
  const DeviceTable& table = tables[r];
  // Every ID is a device of this resource, named once in the whole request: two containers
  // cannot be given one device (and so a request names at most the table's devices).
  std::unordered_set<std::string_view> seen;
  for (int k = 0; k < request.container_requests_size(); ++k) {
    const pb::ContainerAllocateRequest& c = request.container_requests(k);
    if (c.devices_ids_size() == 0) {
      return Invalid("Allocate for " + name + " has a container (request " + std::to_string(k + 1) +
                     ") with no device IDs");
    }
    for (const std::string& id : c.devices_ids()) {
      if (table.Find(id) == nullptr) return Unknown(resource, id, tables, node_name);
      if (!seen.insert(id).second) {
        return Invalid("device ID '" + Shown(id) + "' appears twice in one Allocate request for " +
                       name);
      }
    }
    counts->push_back(c.devices_ids_size());
  }
  return grpc::Status::OK;
}

grpc::Status AnswerAllocate(Resource resource, const pb::AllocateRequest& request,
                            const std::vector<DeviceTable>& tables,
                            const std::vector<NodeGpu>& gpus, const InjectOptions& inject,
                            const std::string& node_name, const AllocateClaim& claim,
                            pb::AllocateResponse* response) {
  std::vector<std::int64_t> counts;
  if (grpc::Status s = CheckAllocateRequest(resource, request, tables, node_name, &counts);
      !s.ok()) {
    return s;
  }
  if (!claim) {
    return {grpc::StatusCode::FAILED_PRECONDITION,
            "gpumux device plugin runs without an API server, so it cannot tell which pod this "
            "Allocate is for and will not guess"};
  }
  auto served = claim(resource, counts);
  if (!served) return ToStatus(served.error());
  if (served->size() != counts.size()) {
    return {grpc::StatusCode::INTERNAL, "the handshake served " + std::to_string(served->size()) +
                                            " containers for " + std::to_string(counts.size()) +
                                            " container requests"};
  }
  pb::AllocateResponse answer;
  for (const ServedContainer& c : *served) {
    const auto refuse = [&c](const std::string& why) {
      return grpc::Status{
          grpc::StatusCode::FAILED_PRECONDITION,
          "pod " + c.pod_ns + "/" + c.pod_name + " container " + c.grant.name + ": " + why};
    };
    GrantContext context{c.pod_ns, c.pod_name, c.pod_uid, node_name, c.policy};
    auto env = BuildContainerEnv(c.grant, context, gpus, inject);
    if (!env) return refuse(env.error().message);
    if (env->envs.contains("CUDA_MPS_PIPE_DIRECTORY") && inject.mps_admit) {
      const int percent =
          c.grant.milli_requested ? static_cast<int>((c.grant.gpu_milli + 9) / 10) : 0;
      auto admitted = inject.mps_admit(env->envs.at("GPUMUX_GPU_UUIDS"), c.grant.gpu_mem_mib,
                                       percent, c.pod_uid, c.grant.name);
      if (!admitted) return refuse(admitted.error().message);
      if (*admitted) {  // the container's own MPS namespace
        for (MountSpec& m : env->mounts) {
          if (m.container_path == kMpsPipeInContainer) m.host_path = **admitted;
        }
      }
    }
    if (!c.grant.exclusive && inject.enforce) {
      auto edits = inject.enforce(context, c.grant);
      if (!edits) return refuse(edits.error().message);
      for (auto& [k, v] : edits->envs) env->envs[k] = v;
      env->mounts.insert(env->mounts.end(), edits->mounts.begin(), edits->mounts.end());
      env->cdi_devices.insert(env->cdi_devices.end(), edits->cdi_devices.begin(),
                              edits->cdi_devices.end());
    }
    pb::ContainerAllocateResponse* out = answer.add_container_responses();
    for (const auto& [k, v] : env->envs) (*out->mutable_envs())[k] = v;
    for (const MountSpec& m : env->mounts) {
      pb::Mount* mount = out->add_mounts();
      mount->set_host_path(m.host_path);
      mount->set_container_path(m.container_path);
      mount->set_read_only(m.read_only);
    }
    for (const DeviceNodeSpec& d : env->devices) {
      pb::DeviceSpec* dev = out->add_devices();
      dev->set_host_path(d.host_path);
      dev->set_container_path(d.container_path);
      dev->set_permissions(d.permissions);
    }
    for (const std::string& cdi : env->cdi_devices) out->add_cdi_devices()->set_name(cdi);
    (*out->mutable_annotations())["gpumux.io/pod"] = c.pod_ns + "/" + c.pod_name;
  }
  *response = std::move(answer);
  return grpc::Status::OK;
}

}  // namespace gpumux::deviceplugin
