// Node, pod and node-lock builders shared by the device plugin's tests.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "gpumux/kube/grant.h"
#include "gpumux/kube/node_lock.h"
#include "gpumux/kube/objects.h"
#include "tests/testing/fake_apiserver.h"
#include "tests/testing/kube_fixtures.h"

namespace gpumux::deviceplugin::testing_fixtures {

// Node `name` as the device plugin publishes it: `gpus` GPUs of 40 GiB, handshake announced.
inline nlohmann::json HandshakeNode(const std::string& name = "n1", int gpus = 2) {
  nlohmann::json node = kube::testing::NodeJson(name, gpus);
  node["metadata"]["annotations"][std::string(kube::kAnnotationHandshake)] =
      std::string(kube::kHandshakeNodeLock);
  return node;
}

// A pod bound to n1 with a grant, as the extender leaves it.
inline nlohmann::json GrantedPod(const std::string& name,
                                 std::vector<kube::testing::ContainerOf> containers,
                                 std::vector<kube::ContainerGrant> grants) {
  nlohmann::json pod = kube::testing::PodJson(name, std::move(containers));
  pod["spec"]["nodeName"] = "n1";
  kube::Grant grant;
  grant.node = "n1";
  grant.policy = "fgd";
  grant.assumed_at = 1'700'000'000;
  grant.containers = std::move(grants);
  pod["metadata"]["annotations"][std::string(kube::kAnnotationGrant)] = kube::EncodeGrant(grant);
  return pod;
}

// Takes the node lock for `pod` directly (what the extender's bind does).
inline void Lock(test::FakeApiServer& server, const nlohmann::json& pod,
                 const std::string& node = "n1") {
  kube::NodeLock lock;
  lock.ns = "default";
  lock.name = pod["metadata"]["name"].get<std::string>();
  lock.uid = pod["metadata"]["uid"].get<std::string>();
  lock.since = 1'700'000'000;
  nlohmann::json n = *server.GetNode(node);
  n["metadata"]["annotations"][std::string(kube::kAnnotationAllocating)] =
      kube::EncodeNodeLock(lock);
  server.UpdateNode(n);
}

inline bool Locked(const test::FakeApiServer& server, const std::string& node = "n1") {
  const nlohmann::json n = *server.GetNode(node);
  return n["metadata"]["annotations"].contains(std::string(kube::kAnnotationAllocating));
}

}  // namespace gpumux::deviceplugin::testing_fixtures
