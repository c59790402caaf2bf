// The grant: which GPUs the extender gave each container of a pod. Written to the pod as the
// annotation gpumux.io/grant by the Binding itself (merged in the write that sets
// spec.nodeName), read back after a restart (the ledger is rebuilt from it) and by the device
// plugin in Allocate.
//
//   {"version":1,"node":"gpu-node-1","policy":"fgd","assumed_at":"2026-11-21T10:00:00Z",
//    "containers":[{"name":"train","gpus":[{"index":0,"uuid":"GPU-8f0c..."}],
//                   "gpu_milli":500,"gpu_mem_mib":8192,"exclusive":false}]}
//
// `uuid` is empty when the node publishes no GPU inventory (the device plugin then maps the
// index). `gpu_milli`/`gpu_mem_mib` are per GPU; gpu_mem_mib 0 = no memory limit.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gpumux/core/quantity.h"
#include "gpumux/core/result.h"

namespace gpumux::kube {

inline constexpr std::string_view kAnnotationGrant = "gpumux.io/grant";

struct GrantedGpu {
  int index = 0;
  std::string uuid;
  bool operator==(const GrantedGpu&) const = default;
};

struct ContainerGrant {
  std::string name;
  std::vector<GrantedGpu> gpus;
  core::MilliGpu gpu_milli = 0;
  core::MiB gpu_mem_mib = 0;
  bool milli_requested = false;
  bool exclusive = false;
  bool operator==(const ContainerGrant&) const = default;
};

struct Grant {
  int version = 1;
  std::string node;
  std::string policy;
  std::int64_t assumed_at = 0;  // unix seconds; RFC 3339 on the wire
  std::vector<ContainerGrant> containers;
  bool operator==(const Grant&) const = default;
};

// The most containers a grant may list (an annotation anyone who may edit pods can write).
inline constexpr std::size_t kMaxGrantContainers = 4096;

std::string EncodeGrant(const Grant& grant);
// Read through core::ParseJson and core::JsonFields: error names the field's path and what was
// wrong ("annotation gpumux.io/grant: containers[0].gpus[0].index: not an integer in 0..63,
// got 64").
core::Result<Grant> DecodeGrant(std::string_view text);

}  // namespace gpumux::kube
