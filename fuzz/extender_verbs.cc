// Fuzz target: the scheduler extender's verb bodies (filter, prioritize, bind, preempt), as
// kube-scheduler POSTs them, in both nodeCacheCapable modes (NodeNames, or Nodes.items).
// Input: one byte choosing the verb, then the request body. Each input gets a fresh cluster
// state of three 4-GPU nodes (the names of ../shared/k8s-samples) with one pod bound, and an
// API server that accepts every call, so that bind and preempt run to the end.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fuzz/fuzz_support.h"
#include "gpumux/extender/extender.h"
#include "gpumux/kube/api_client.h"
#include "gpumux/kube/grant.h"
#include "gpumux/sched/cluster_state.h"

namespace {

using nlohmann::json;
using namespace gpumux;

json Node(const std::string& name) {
  json gpus = json::array();
  for (int i = 0; i < 4; ++i) {
    gpus.push_back({{"index", i},
                    {"uuid", "GPU-" + name + "-" + std::to_string(i)},
                    {"model", "NVIDIA A100-SXM4-80GB"},
                    {"memory_mib", 81920},
                    {"health", "Healthy"}});
  }
  return {{"metadata",
           {{"name", name},
            {"labels", {{"kubernetes.io/hostname", name}}},
            {"annotations", {{"gpumux.io/gpus", gpus.dump()}}}}},
          {"status",
           {{"allocatable",
             {{"cpu", "8"}, {"memory", "32Gi"}, {"pods", "110"}, {"gpumux.io/gpu", "4"}}}}}};
}

// Every write succeeds with an empty object; a read finds the three nodes and nothing else.
class AcceptingApi : public kube::KubeApi {
 public:
  kube::ApiResult<json> Get(const std::string& path) override {
    static constexpr std::string_view kNodes = "/api/v1/nodes/";
    if (path.starts_with(kNodes)) {
      const std::string name = path.substr(kNodes.size());
      if (name == "fake-node-1" || name == "fake-node-2" || name == "fake-node-3") {
        return Node(name);
      }
    }
    return NotFound();
  }
  kube::ApiResult<json> List(const std::string&, int) override {
    return json{{"items", json::array()}};
  }
  kube::ApiResult<json> Patch(const std::string&, const json&, kube::PatchType) override {
    return json::object();
  }
  kube::ApiResult<json> Post(const std::string&, const json&) override { return json::object(); }
  kube::ApiResult<void> Watch(const std::string&, const std::string&,
                              const std::function<bool(kube::WatchEvent&&)>&, std::stop_token,
                              int) override {
    return {};
  }

 private:
  static tl::unexpected<kube::ApiError> NotFound() {
    kube::ApiError error;
    error.http_status = 404;
    error.message = "not found";
    return tl::unexpected(error);
  }
};

json BoundPod() {
  kube::Grant grant;
  grant.node = "fake-node-1";
  grant.policy = "fgd";
  grant.assumed_at = 1'800'000'000;
  kube::ContainerGrant container;
  container.name = "c";
  container.gpus = {{0, "GPU-fake-node-1-0"}};
  container.gpu_milli = 1000;
  container.exclusive = true;
  grant.containers.push_back(container);
  json pod = json::parse(R"({"metadata":{"name":"holder","namespace":"default","uid":"holder-uid"},
    "spec":{"nodeName":"fake-node-1","priority":0,
            "containers":[{"name":"c","resources":{"limits":{"gpumux.io/gpu":"1"}}}]},
    "status":{"phase":"Running"}})");
  pod["metadata"]["annotations"][std::string(kube::kAnnotationGrant)] = kube::EncodeGrant(grant);
  return pod;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  static constexpr extender::Verb kVerbOf[] = {extender::Verb::kFilter, extender::Verb::kPrioritize,
                                               extender::Verb::kBind, extender::Verb::kPreempt};
  const extender::Verb verb = kVerbOf[data[0] % 4];
  const std::string_view body = fuzz::AsText(data + 1, size - 1);

  sched::ClusterStateOptions options;
  options.gpu_mem_unit_mib = 1024;
  auto state = sched::ClusterState::Create(options, [] { return std::int64_t{1'800'000'000}; });
  if (!state) __builtin_trap();
  const std::vector<json> nodes = {Node("fake-node-1"), Node("fake-node-2"), Node("fake-node-3")};
  (*state)->SetNodes(nodes);
  const std::vector<json> pods = {BoundPod()};
  (*state)->SetPods(pods);
  (*state)->MarkSynced();
  AcceptingApi api;
  extender::ExtenderOptions extender_options;
  extender_options.bind_wait = std::chrono::milliseconds(0);
  extender::Extender extender(**state, &api, extender_options);
  const extender::VerbReply reply = extender.Handle(verb, body);
  // Every reply is JSON (an error reply too) with an HTTP status the server can send.
  if (reply.http_status < 200 || reply.http_status > 599 || !json::accept(reply.body)) {
    std::fprintf(stderr, "bad reply: HTTP %d: %s\n", reply.http_status, reply.body.c_str());
    __builtin_trap();
  }
  return 0;
}
