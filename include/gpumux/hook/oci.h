// The few pieces of the OCI runtime spec the hook and the runtime wrapper touch: the container
// state a hook reads on stdin, and the bundle's config.json (process.env, linux.devices,
// linux.resources.devices, hooks). config.json is edited as a JSON document, keeping every field
// we do not know about.
#pragma once

#include <cstdint>
#include <istream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpumux/core/result.h"
#include "gpumux/hook/inventory.h"
#include "gpumux/hook/reservations.h"

namespace gpumux::hook {

struct ContainerState {
  std::string id;
  std::int64_t pid = 0;   // 0 when the stage has no process (e.g. poststop)
  std::string bundle;
};

// Errors name the input: "container state on stdin: field 'id' missing".
core::Result<ContainerState> ParseState(std::istream& in);

core::Result<nlohmann::json> LoadConfig(const std::string& bundle);
core::Result<void> SaveConfig(const std::string& bundle, const nlohmann::json& config);

// process.env as "NAME=value" strings; error if present but not a list of strings.
core::Result<std::vector<std::string>> ConfigEnv(const nlohmann::json& config,
                                                 const std::string& source);
// The pod and container from config.json's annotations: containerd's CRI plugin writes
// io.kubernetes.cri.sandbox-namespace, io.kubernetes.cri.sandbox-name and
// io.kubernetes.cri.container-name; dockershim and CRI-O wrote io.kubernetes.pod.namespace,
// io.kubernetes.pod.name and io.kubernetes.container.name (read when the CRI ones are absent).
// Empty when there are none (a container not started by a kubelet).
PodContainer PodOf(const nlohmann::json& config);
// Sets (replacing any earlier entries) NAME=value in process.env.
void SetEnv(nlohmann::json& config, const std::string& name, const std::string& value);
// Adds character devices to linux.devices and allows them in linux.resources.devices.
void AddDevices(nlohmann::json& config, const std::vector<DeviceNode>& devices);
// Appends a hook {path, args, env} to hooks.<stage> unless an identical one is there.
void AddHook(nlohmann::json& config, const std::string& stage, const std::string& path,
             const std::vector<std::string>& args, const std::vector<std::string>& env);

}  // namespace gpumux::hook
