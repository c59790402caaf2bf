// kube-scheduler's HTTP extender protocol (filter, prioritize, bind, preempt) on top of
// ClusterState, independent of the HTTP server: a body in, a status and body out.
//
// Wire facts (PROTOCOLS.md): JSON keys are Go field names; with nodeCacheCapable the request
// has NodeNames and "Nodes":null, otherwise a full v1.NodeList in Nodes (and the reply returns
// Nodes). Scores are 0..10. A bad body is HTTP 400 with a message.
// bind: books the GPUs (ClusterState::Assume), merge-patches the grant annotation onto the pod
// (with its uid as precondition) and creates the Binding; on failure the booking is released
// and the reply carries the API server's error. Nothing blocks on anything slow besides these
// two API calls, each bounded by the client's request timeout.
// Thread safety: all methods may be called concurrently.
#pragma once

#include <deque>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "gpumux/k8s/api_client.h"
#include "gpumux/k8s/cluster_state.h"

namespace gpumux::k8s {

enum class Verb : std::uint8_t { kFilter, kPrioritize, kBind, kPreempt };
std::string_view VerbName(Verb verb);

struct VerbReply {
  int http_status = 200;
  std::string body;           // JSON
  // For metrics: "" on success, else a short label ("bad_request", "no_fit", "conflict",
  // "api_error", "unknown_node", ...).
  std::string failure;
  int placements = 0;         // bind: 1 when a pod was bound
};

class Extender {
 public:
  // `api` may be null (no API server: bind answers an error); both must outlive the extender.
  Extender(ClusterState& state, KubeApi* api);
  VerbReply Handle(Verb verb, std::string_view body);

 private:
  VerbReply Filter(std::string_view body);
  VerbReply Prioritize(std::string_view body);
  VerbReply Bind(std::string_view body);
  VerbReply Preempt(std::string_view body);
  // The pods seen in the latest filter calls (bind carries only the pod's name and uid).
  void Remember(const PodInfo& pod);
  std::optional<PodInfo> Recall(const std::string& uid);
  ClusterState* state_;
  KubeApi* api_;
  std::mutex recent_mu_;
  std::unordered_map<std::string, PodInfo> recent_;
  std::deque<std::string> recent_order_;
};

}  // namespace gpumux::k8s
