// Objects for the inspect tests: nodes and pods as the API server lists them, with grants.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gpumux/k8s/grant.h"
#include "tests/k8s/k8s_fixtures.h"

namespace gpumux::inspect::testing {

using k8s::testing::ContainerOf;
using k8s::testing::GpuOf;
using k8s::testing::NodeJson;
using k8s::testing::PodJson;

// `pod` bound to `node` and Running, its container "main" granted `gpus` (indices) with the
// share, granted at `at` (unix seconds).
inline nlohmann::json BoundPod(nlohmann::json pod, const std::string& node,
                               const std::vector<int>& gpus, std::int64_t milli,
                               std::int64_t mem_mib, std::int64_t at, bool exclusive = false) {
  k8s::Grant grant;
  grant.node = node;
  grant.policy = "fgd";
  grant.assumed_at = at;
  k8s::ContainerGrant c;
  c.name = "main";
  for (int g : gpus) c.gpus.push_back({g, "GPU-" + node + "-" + std::to_string(g)});
  c.gpu_milli = milli;
  c.gpu_mem_mib = mem_mib;
  c.milli_requested = milli < 1000;
  c.exclusive = exclusive;
  grant.containers.push_back(c);
  pod["metadata"]["annotations"][std::string(k8s::kAnnotationGrant)] = k8s::EncodeGrant(grant);
  pod["spec"]["nodeName"] = node;
  pod["status"]["phase"] = "Running";
  return pod;
}

inline nlohmann::json InNamespace(nlohmann::json pod, const std::string& ns) {
  pod["metadata"]["namespace"] = ns;
  return pod;
}

}  // namespace gpumux::inspect::testing
