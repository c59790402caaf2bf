// The kubelet's Allocate call as pure functions of its request: everything Allocate reads from
// the kubelet, checked against the resource's device list, then the answer built from what the
// handshake says the request serves. DevicePlugin's gRPC service calls AnswerAllocate; tests
// and fuzzers call it directly, with a scripted `claim` instead of the node-lock handshake.
//
// Every fault in a request is INVALID_ARGUMENT with a message naming it (a device ID is shown
// at most 64 bytes long, control characters as '?'), never a crash:
//   no container; a container with no device ID; an ID this resource does not list (or one of
//   another gpumux resource: "'GPU-a-m0' is a gpumux.io/gpu-mem device, not a gpumux.io/gpu
//   one"); an ID twice in the request, in one container or across two.
// The request's size needs no bound of its own: gRPC refuses messages over 4 MiB, and with no ID
// twice a request names at most the resource's devices (kMaxDevicesPerResource).
#pragma once

#include <grpcpp/support/status.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "deviceplugin/v1beta1/api.pb.h"
#include "gpumux/deviceplugin/container_env.h"
#include "gpumux/deviceplugin/devices.h"
#include "gpumux/deviceplugin/handshake.h"

namespace gpumux::deviceplugin {

// Checks `request` for `resource` against `tables` (indexed by Resource; only the device IDs
// are read, which never change after DeviceTable::Build, so no lock is needed while health
// changes). On success `counts` holds the number of device IDs of each container request, in
// order. Cost: O(IDs) hash lookups.
grpc::Status CheckAllocateRequest(Resource resource, const v1beta1::AllocateRequest& request,
                                  const std::vector<DeviceTable>& tables,
                                  const std::string& node_name, std::vector<std::int64_t>* counts);

// Which containers an Allocate with these device counts serves (Handshake::Claim).
using AllocateClaim = std::function<HandshakeResult<std::vector<ServedContainer>>(
    Resource, const std::vector<std::int64_t>&)>;

// The whole of Allocate: CheckAllocateRequest, then `claim` (empty: the plugin runs without an
// API server, FAILED_PRECONDITION), then one ContainerAllocateResponse per served container
// (BuildContainerEnv against `gpus`). `response` is filled only on success. A handshake error
// keeps its code (FAILED_PRECONDITION, INVALID_ARGUMENT or UNAVAILABLE); a grant that does not
// match the node's GPUs is FAILED_PRECONDITION naming the pod and container.
grpc::Status AnswerAllocate(Resource resource, const v1beta1::AllocateRequest& request,
                            const std::vector<DeviceTable>& tables,
                            const std::vector<NodeGpu>& gpus, const InjectOptions& inject,
                            const std::string& node_name, const AllocateClaim& claim,
                            v1beta1::AllocateResponse* response);

}  // namespace gpumux::deviceplugin
