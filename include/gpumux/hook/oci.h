// The few pieces of the OCI runtime spec the hook and the runtime wrapper touch: the container
// state a hook reads on stdin, and the bundle's config.json (process.env, linux.devices,
// linux.resources.devices, hooks). config.json is edited as a JSON document, keeping every field
// we do not know about.
#pragma once

#include <cstddef>
#include <cstdint>
#include <istream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gpumux/core/result.h"
#include "gpumux/hook/inventory.h"
#include "gpumux/hook/reservations.h"

namespace gpumux::hook {

// Bounds on what the runtime hands us. Beyond them the input is refused, naming the limit.
// The container state on stdin is a few hundred bytes; config.json a few KB (a pod with many
// variables and mounts: tens of KB).
inline constexpr std::size_t kMaxStateBytes = std::size_t{1} << 20;        // 1 MiB
inline constexpr std::size_t kMaxConfigJsonBytes = std::size_t{16} << 20;  // 16 MiB
// Nesting depth of config.json (the spec's own fields nest 5 deep); deeper documents are
// refused rather than risking the recursion of writing them back.
inline constexpr int kMaxConfigJsonDepth = 64;
// Container ids (containerd: 64 hex digits; runc allows up to 1024 characters).
inline constexpr std::size_t kMaxContainerIdBytes = 1024;

struct ContainerState {
  std::string id;
  std::int64_t pid = 0;  // 0 when the stage has no process (e.g. poststop)
  std::string bundle;
};

// At most kMaxStateBytes of JSON; `id` a non-empty string of at most kMaxContainerIdBytes
// without control characters, `pid` (optional) an integer in 0..kMaxPid, `bundle` a non-empty
// string without NUL. Errors name the input and the field: "container state on stdin: field
// 'pid' is not an integer in 0..4194304".
core::Result<ContainerState> ParseState(std::istream& in);

// A container id gpumux records (ledger, hook.log): 1..kMaxContainerIdBytes bytes without
// control characters. Error "<where> holds a control character ('c1?x')".
core::Result<void> CheckContainerId(const std::string& id, const std::string& where);

// Reads <bundle>/config.json (io::ReadInputFile: a folder, a FIFO, a missing or over-size
// file is an error naming it) and checks it with CheckConfig, so that a config.json the hook
// or the wrapper could not edit is refused before any GPU is granted.
core::Result<nlohmann::json> LoadConfig(const std::string& bundle);
core::Result<void> SaveConfig(const std::string& bundle, const nlohmann::json& config);

// The fields gpumux reads or edits have the types the OCI runtime spec gives them (absent or
// null is always fine): process an object, process.env a list of strings, root an object with
// a string path, linux an object, linux.devices a list of objects whose path is a string,
// linux.resources an object, linux.resources.devices a list, hooks an object whose stages
// (prestart, createRuntime, createContainer, startContainer, poststart, poststop) are lists,
// annotations an object. Error "<source>: 'linux.devices' is not a list".
core::Result<void> CheckConfig(const nlohmann::json& config, const std::string& source);

// process.env as "NAME=value" strings; error if present but not a list of strings.
core::Result<std::vector<std::string>> ConfigEnv(const nlohmann::json& config,
                                                 const std::string& source);
// root.path ("rootfs" when absent), relative to the bundle unless absolute; error naming
// `source` when root or root.path has the wrong type.
core::Result<std::string> ConfigRootPath(const nlohmann::json& config, const std::string& source);
// The pod and container from config.json's annotations: containerd's CRI plugin writes
// io.kubernetes.cri.sandbox-namespace, io.kubernetes.cri.sandbox-name and
// io.kubernetes.cri.container-name; dockershim and CRI-O wrote io.kubernetes.pod.namespace,
// io.kubernetes.pod.name and io.kubernetes.container.name (read when the CRI ones are absent).
// Empty when there are none (a container not started by a kubelet).
PodContainer PodOf(const nlohmann::json& config);

// The editors below leave `config` unchanged and return an error naming the field ("'linux'
// is not an object") when a field they touch has the wrong type; CheckConfig refuses every
// such config.json first, so after LoadConfig they do not fail.
// Sets (replacing any earlier entries) NAME=value in process.env.
core::Result<void> SetEnv(nlohmann::json& config, const std::string& name,
                          const std::string& value);
// Adds character devices to linux.devices and allows them in linux.resources.devices.
core::Result<void> AddDevices(nlohmann::json& config, const std::vector<DeviceNode>& devices);
// Appends a hook {path, args, env} to hooks.<stage> unless an identical one is there.
core::Result<void> AddHook(nlohmann::json& config, const std::string& stage,
                           const std::string& path, const std::vector<std::string>& args,
                           const std::vector<std::string>& env);

}  // namespace gpumux::hook
