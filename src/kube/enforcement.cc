#include "gpumux/kube/enforcement.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "gpumux/core/shown.h"

namespace gpumux::kube {
namespace {

using json = nlohmann::json;

// A record is a few hundred bytes; anything larger is not ours.
constexpr std::size_t kMaxBackends = 8;
constexpr std::size_t kMaxNoteBytes = 512;

constexpr std::pair<MemoryEnforcement, std::string_view> kMemoryNames[] = {
    {MemoryEnforcement::kHard, "hard"},
    {MemoryEnforcement::kSoft, "soft"},
    {MemoryEnforcement::kNone, "none"}};
constexpr std::pair<ComputeEnforcement, std::string_view> kComputeNames[] = {
    {ComputeEnforcement::kMpsNamespace, "mps-namespace"},
    {ComputeEnforcement::kHamiCore, "hami-core"},
    {ComputeEnforcement::kMpsServer, "mps-server"},
    {ComputeEnforcement::kNone, "none"}};

template <typename E, std::size_t N>
bool FromName(const std::pair<E, std::string_view> (&names)[N], std::string_view text, E& out) {
  for (const auto& [value, name] : names) {
    if (name == text) {
      out = value;
      return true;
    }
  }
  return false;
}

GpuEnforcement Unreadable(const std::string& why) {
  GpuEnforcement e;
  e.note = why;
  return e;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

}  // namespace

std::string_view MemoryEnforcementName(MemoryEnforcement m) {
  for (const auto& [value, name] : kMemoryNames) {
    if (value == m) return name;
  }
  return "none";
}

std::string_view ComputeEnforcementName(ComputeEnforcement c) {
  for (const auto& [value, name] : kComputeNames) {
    if (value == c) return name;
  }
  return "none";
}

core::Enforcement GpuEnforcement::Bits() const {
  core::Enforcement bits = core::kEnforcesNothing;
  if (memory == MemoryEnforcement::kHard) bits |= core::kEnforcesMemory;
  if (compute == ComputeEnforcement::kMpsNamespace || compute == ComputeEnforcement::kHamiCore) {
    bits |= core::kEnforcesCompute;
  }
  return bits;
}

std::string GpuEnforcement::Summary() const {
  return "memory " + std::string(MemoryEnforcementName(memory)) + ", compute " +
         std::string(ComputeEnforcementName(compute));
}

GpuEnforcement StrongestOf(const std::vector<GpuEnforcement>& gpus) {
  GpuEnforcement best;
  for (const GpuEnforcement& g : gpus) {
    best.memory = std::max(best.memory, g.memory);
    best.compute = std::max(best.compute, g.compute);
  }
  return best;
}

json EnforcementToJson(const GpuEnforcement& e) {
  json out = {{"version", kEnforcementVersion},
              {"memory", MemoryEnforcementName(e.memory)},
              {"compute", ComputeEnforcementName(e.compute)},
              {"backends", e.backends}};
  if (!e.note.empty()) out["note"] = e.note;
  return out;
}

GpuEnforcement EnforcementFromJson(const json* record) {
  if (record == nullptr || record->is_null()) {
    return Unreadable(
        "not reported by the node's device plugin (one from before enforcement "
        "was published, or none)");
  }
  if (!record->is_object()) return Unreadable("unreadable enforcement record (not an object)");
  const auto version = record->find("version");
  if (version == record->end() || !version->is_number_integer()) {
    return Unreadable("unreadable enforcement record (no integer version)");
  }
  if (version->get<std::int64_t>() != kEnforcementVersion) {
    return Unreadable("enforcement record version " + std::to_string(version->get<std::int64_t>()) +
                      ", which this reader (version " + std::to_string(kEnforcementVersion) +
                      ") does not know: read as none");
  }
  GpuEnforcement e;
  const auto memory = record->find("memory");
  const auto compute = record->find("compute");
  if (memory == record->end() || !memory->is_string() ||
      !FromName(kMemoryNames, memory->get_ref<const std::string&>(), e.memory)) {
    return Unreadable("unreadable enforcement record (memory is not hard, soft or none)");
  }
  if (compute == record->end() || !compute->is_string() ||
      !FromName(kComputeNames, compute->get_ref<const std::string&>(), e.compute)) {
    return Unreadable(
        "unreadable enforcement record (compute is not mps-namespace, hami-core, mps-server or "
        "none)");
  }
  if (const auto backends = record->find("backends");
      backends != record->end() && backends->is_array()) {
    for (const json& b : *backends) {
      if (e.backends.size() >= kMaxBackends) break;
      if (b.is_string()) e.backends.push_back(core::Shown(b.get_ref<const std::string&>(), 32));
    }
    std::sort(e.backends.begin(), e.backends.end());
  }
  if (const auto note = record->find("note"); note != record->end() && note->is_string()) {
    e.note = core::Shown(note->get_ref<const std::string&>(), kMaxNoteBytes);
  }
  return e;
}

core::Result<core::Enforcement> ParseRequiredEnforcement(std::string_view text,
                                                         const std::string& where) {
  core::Enforcement bits = core::kEnforcesNothing;
  const std::string_view all = Trim(text);
  if (all.empty() || all == "none") return bits;
  std::string_view rest = all;
  while (true) {
    const auto comma = rest.find(',');
    const std::string_view item = Trim(rest.substr(0, comma));
    if (item == "memory") {
      bits |= core::kEnforcesMemory;
    } else if (item == "compute") {
      bits |= core::kEnforcesCompute;
    } else {
      return core::MakeError(core::ErrorCode::kInvalidArgument,
                             where + ": '" + core::Shown(text, 64) +
                                 "' is not none, memory, compute or memory,compute");
    }
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return bits;
}

std::string RequiredEnforcementName(core::Enforcement bits) {
  const bool memory = (bits & core::kEnforcesMemory) != 0;
  const bool compute = (bits & core::kEnforcesCompute) != 0;
  if (memory && compute) return "memory,compute";
  if (memory) return "memory";
  if (compute) return "compute";
  return "none";
}

}  // namespace gpumux::kube
