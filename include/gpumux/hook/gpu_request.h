// What a container asks for, read from its environment (Houdini's contract, plus gpumux's own
// variable):
//   HOUDINI_GPU_REQUESTED=N (also HOUDINI_GPU_REQUEST, GPUMUX_GPU_REQUEST)
//                               -> N GPUs reserved exclusively (N = 0: no GPU)
//   HOUDINI_GPU_ENABLED=true, or NVIDIA_VISIBLE_DEVICES=all
//                               -> every GPU of the host, shared (not reserved)
//   NVIDIA_VISIBLE_DEVICES=0,2 or GPU-uuid,...  -> exactly those GPUs, shared (not reserved)
//   NVIDIA_VISIBLE_DEVICES=none|void|"" or nothing set -> no GPU; the container is left alone
// A reservation request wins over the other variables (its grant rewrites NVIDIA_VISIBLE_DEVICES).
#pragma once

#include <string>
#include <vector>

#include "gpumux/core/result.h"

namespace gpumux::hook {

enum class AskKind {
  kNone,     // no GPU variables: nothing to do
  kAll,      // every host GPU, shared
  kListed,   // the GPUs named in `listed`, shared
  kReserve,  // `count` GPUs reserved exclusively
};

struct GpuAsk {
  AskKind kind = AskKind::kNone;
  int count = 0;                    // kReserve
  std::vector<std::string> listed;  // kListed: indices or UUIDs as written
  std::string source;               // the variable that decided, e.g. "HOUDINI_GPU_REQUESTED=2"
  // kNone because a reservation variable asked for 0 GPUs: the wrapper then hides every GPU
  // (NVIDIA_VISIBLE_DEVICES=void) instead of leaving other variables in force.
  bool explicit_none = false;
};

// `env` holds "NAME=value" entries (OCI process.env). Error for malformed values, naming the
// variable: "HOUDINI_GPU_REQUESTED=abc: expected a whole number of GPUs (0 or more)".
core::Result<GpuAsk> ParseGpuAsk(const std::vector<std::string>& env);

// The value of NAME in "NAME=value" entries (the last one wins, as in execve), or nullptr.
const std::string* FindEnv(const std::vector<std::string>& env, const std::string& name,
                           std::string* storage);

}  // namespace gpumux::hook
