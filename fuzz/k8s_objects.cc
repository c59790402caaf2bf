// Fuzz target: Kubernetes objects and gpumux's annotations as the API server (or anyone who may
// patch a node or pod) delivers them. Input: one byte choosing the decoder, then its text:
//   0 Node object (DecodeNode), then fed to a cluster state (UpsertNode)
//   1 Pod object (DecodePod, with the unit of gpumux.io/gpu-mem taken from the text's length),
//     then fed to a cluster state that knows one node (UpsertPod)
//   2 gpumux.io/grant annotation (DecodeGrant), re-encoded and decoded again (round trip)
//   3 gpumux.io/allocating node lock (DecodeNodeLock), round trip
//   4 a resource quantity (ParseQuantity, scales 1 and 1000)
//   5 an RFC 3339 time (ParseRfc3339)
//   6 a node object's handshake view (ReadNodeLock)
#include <cstddef>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fuzz/fuzz_support.h"
#include "gpumux/core/time.h"
#include "gpumux/kube/grant.h"
#include "gpumux/kube/node_lock.h"
#include "gpumux/kube/objects.h"
#include "gpumux/sched/cluster_state.h"

namespace {

using nlohmann::json;
using namespace gpumux;

std::unique_ptr<sched::ClusterState> NewState() {
  sched::ClusterStateOptions options;
  auto state = sched::ClusterState::Create(options, [] { return std::int64_t{1'800'000'000}; });
  if (!state) __builtin_trap();
  return std::move(*state);
}

json ParseJson(std::string_view text) { return json::parse(text, nullptr, false); }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::string_view text = fuzz::AsText(data + 1, size - 1);
  switch (data[0] % 7) {
    case 0: {
      const json node = ParseJson(text);
      kube::NodeDefaults defaults;
      defaults.gpu_memory_mib = 16384;
      if (auto info = kube::DecodeNode(node, defaults)) {
        // The promise in objects.h: a decoded node always builds a cluster.
        if (!core::Cluster::Build({info->spec})) __builtin_trap();
      }
      NewState()->UpsertNode(node);
      break;
    }
    case 1: {
      const json pod = ParseJson(text);
      (void)kube::DecodePod(pod, 1 + static_cast<std::int64_t>(size % 4096));
      auto state = NewState();
      state->UpsertNode(json::parse(
          R"({"metadata":{"name":"n1"},"status":{"allocatable":{"cpu":"8","memory":"32Gi",
              "pods":"110","gpumux.io/gpu":"4"}}})"));
      state->UpsertPod(pod);
      state->RemovePod(pod);
      break;
    }
    case 2:
      if (auto grant = kube::DecodeGrant(text)) {
        auto again = kube::DecodeGrant(kube::EncodeGrant(*grant));
        if (!again || !(*again == *grant)) __builtin_trap();
      }
      break;
    case 3:
      if (auto lock = kube::DecodeNodeLock(text)) {
        auto again = kube::DecodeNodeLock(kube::EncodeNodeLock(*lock));
        if (!again || !(*again == *lock)) __builtin_trap();
      }
      break;
    case 4:
      (void)kube::ParseQuantity(text);
      (void)kube::ParseQuantity(text, 1000);
      break;
    case 5:
      (void)core::ParseRfc3339(text);
      break;
    default:
      (void)kube::ReadNodeLock(ParseJson(text));
      break;
  }
  return 0;
}
