// Objects for the inspect tests: nodes and pods as the API server lists them, with grants.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gpumux/kube/grant.h"
#include "tests/testing/kube_fixtures.h"

namespace gpumux::inspect::testing {

using kube::testing::ContainerOf;
using kube::testing::GpuOf;
using kube::testing::NodeJson;
using kube::testing::PodJson;

// `pod` bound to `node` and Running, its container "main" granted `gpus` (indices) with the
// share, granted at `at` (unix seconds).
inline nlohmann::json BoundPod(nlohmann::json pod, const std::string& node,
                               const std::vector<int>& gpus, std::int64_t milli,
                               std::int64_t mem_mib, std::int64_t at, bool exclusive = false) {
  kube::Grant grant;
  grant.node = node;
  grant.policy = "fgd";
  grant.assumed_at = at;
  kube::ContainerGrant c;
  c.name = "main";
  for (int g : gpus) c.gpus.push_back({g, "GPU-" + node + "-" + std::to_string(g)});
  c.gpu_milli = milli;
  c.gpu_mem_mib = mem_mib;
  c.milli_requested = milli < 1000;
  c.exclusive = exclusive;
  grant.containers.push_back(c);
  pod["metadata"]["annotations"][std::string(kube::kAnnotationGrant)] = kube::EncodeGrant(grant);
  pod["spec"]["nodeName"] = node;
  pod["status"]["phase"] = "Running";
  return pod;
}

inline nlohmann::json InNamespace(nlohmann::json pod, const std::string& ns) {
  pod["metadata"]["namespace"] = ns;
  return pod;
}

}  // namespace gpumux::inspect::testing
