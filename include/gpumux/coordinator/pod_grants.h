// Membership from Kubernetes: which GPUs each container on this node holds, from the
// gpumux.io/grant annotation of the pods bound to the node (a reflector over /api/v1/pods with
// fieldSelector spec.nodeName=<node>), and which pods are gone.
//
// A job registered as "namespace/pod/container" (the SDK's id from GPUMUX_POD and
// GPUMUX_CONTAINER) gets its container's granted GPUs, whatever it says itself; a grant that
// names GPUs by index only (a node without a published inventory) is mapped to UUIDs with
// `index_to_uuid`. A pod that is deleted, or that ends (phase Succeeded or Failed), is reported
// once by TakeGone(), so that its jobs leave at once instead of after the job timeout.
// Thread safety: every method may be called from any thread.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "gpumux/core/log.h"
#include "gpumux/kube/api_client.h"

namespace gpumux::kube {
class Reflector;
}

namespace gpumux::coordinator {

class PodGrants {
 public:
  // `api` must outlive this object. Watching starts with Start().
  PodGrants(kube::KubeApi& api, std::string node, std::vector<std::string> index_to_uuid,
            core::Logger log);
  ~PodGrants();  // stops watching
  void Start();
  bool synced() const;

  // The GPUs (UUIDs) of "namespace/pod/container"; std::nullopt when the pod is not bound to
  // this node or its grant has no such container (the job's own word is used then).
  std::optional<std::vector<std::string>> GpusOf(std::string_view job) const;
  // "namespace/pod" of the live pod with this UID on this node (the caller's pod, from its
  // cgroup: caller.h); std::nullopt when none is known.
  std::optional<std::string> PodOfUid(std::string_view uid) const;
  // "namespace/pod" of every pod gone since the last call.
  std::vector<std::string> TakeGone();

 private:
  void Replace(const std::vector<nlohmann::json>& pods);
  void Update(const nlohmann::json& pod, bool deleted);

  kube::KubeApi* api_;
  std::string node_;
  std::vector<std::string> index_to_uuid_;
  core::Logger log_;
  mutable std::mutex mu_;
  // "ns/pod" -> container -> GPU UUIDs
  std::map<std::string, std::map<std::string, std::vector<std::string>>, std::less<>> grants_;
  std::set<std::string> gone_;
  std::map<std::string, std::string, std::less<>> pod_of_uid_;  // live pods: uid -> "ns/pod"
  std::unique_ptr<kube::Reflector> reflector_;
  std::jthread thread_;
};

}  // namespace gpumux::coordinator
