#include "gpumux/hook/gpu_request.h"

#include <algorithm>
#include <cctype>

namespace gpumux::hook {
namespace {

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::string Trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

}  // namespace

const std::string* FindEnv(const std::vector<std::string>& env, const std::string& name,
                           std::string* storage) {
  const std::string prefix = name + "=";
  bool found = false;
  for (const std::string& e : env) {
    if (e.compare(0, prefix.size(), prefix) == 0) {
      *storage = e.substr(prefix.size());
      found = true;
    }
  }
  return found ? storage : nullptr;
}

core::Result<GpuAsk> ParseGpuAsk(const std::vector<std::string>& env) {
  GpuAsk ask;
  std::string value;
  // 1. A reservation request, under any of its names (gpumux's own wins, then Houdini's).
  for (const char* name : {"GPUMUX_GPU_REQUEST", "HOUDINI_GPU_REQUESTED", "HOUDINI_GPU_REQUEST"}) {
    if (FindEnv(env, name, &value) == nullptr) continue;
    const std::string v = Trim(value);
    const std::string source = std::string(name) + "=" + value;
    if (v.empty() || v.size() > 4 || v.find_first_not_of("0123456789") != std::string::npos) {
      return core::MakeError(core::ErrorCode::kInvalidArgument,
                             source + ": expected a whole number of GPUs (0 or more)");
    }
    ask.count = std::stoi(v);
    ask.kind = ask.count > 0 ? AskKind::kReserve : AskKind::kNone;
    ask.explicit_none = ask.count == 0;
    ask.source = source;
    return ask;
  }
  // 2. Everything, shared.
  if (FindEnv(env, "HOUDINI_GPU_ENABLED", &value) != nullptr) {
    const std::string v = Lower(Trim(value));
    if (v == "true" || v == "1" || v == "yes") {
      ask.kind = AskKind::kAll;
      ask.source = "HOUDINI_GPU_ENABLED=" + value;
      return ask;
    }
    if (!(v == "false" || v == "0" || v == "no" || v.empty())) {
      return core::MakeError(core::ErrorCode::kInvalidArgument,
                             "HOUDINI_GPU_ENABLED=" + value + ": expected true or false");
    }
  }
  if (FindEnv(env, "NVIDIA_VISIBLE_DEVICES", &value) == nullptr) return ask;
  const std::string v = Trim(value);
  const std::string lower = Lower(v);
  ask.source = "NVIDIA_VISIBLE_DEVICES=" + value;
  if (lower.empty() || lower == "none" || lower == "void") return ask;
  if (lower == "all") {
    ask.kind = AskKind::kAll;
    return ask;
  }
  // 3. A list of indices or UUIDs.
  std::size_t start = 0;
  while (start <= v.size()) {
    std::size_t comma = v.find(',', start);
    if (comma == std::string::npos) comma = v.size();
    const std::string item = Trim(v.substr(start, comma - start));
    if (item.empty()) {
      return core::MakeError(core::ErrorCode::kInvalidArgument,
                             ask.source + ": empty item in the list");
    }
    if (std::find(ask.listed.begin(), ask.listed.end(), item) == ask.listed.end()) {
      ask.listed.push_back(item);
    }
    start = comma + 1;
  }
  ask.kind = AskKind::kListed;
  return ask;
}

}  // namespace gpumux::hook
