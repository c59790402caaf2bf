#include "gpumux/kube/grant.h"

#include <nlohmann/json.hpp>

#include "gpumux/core/cluster.h"
#include "gpumux/core/json.h"
#include "gpumux/core/time.h"

namespace gpumux::kube {
namespace {

using core::ErrorCode;
using core::MakeError;
using nlohmann::json;

core::Result<const json*> Field(const json& object, const char* name, json::value_t type,
                                const std::string& where) {
  const auto it = object.find(name);
  if (it == object.end()) {
    return MakeError(ErrorCode::kInvalidArgument, where + ": missing field \"" + name + "\"");
  }
  const bool ok = type == json::value_t::number_integer
                      ? it->is_number_integer()
                      : (type == json::value_t::boolean ? it->is_boolean() : it->type() == type);
  if (!ok) {
    return MakeError(
        ErrorCode::kInvalidArgument,
        where + ": field \"" + name + "\" has the wrong type (" + it->type_name() + ")");
  }
  return &*it;
}

}  // namespace

std::string EncodeGrant(const Grant& grant) {
  json containers = json::array();
  for (const ContainerGrant& c : grant.containers) {
    json gpus = json::array();
    for (const GrantedGpu& g : c.gpus) gpus.push_back({{"index", g.index}, {"uuid", g.uuid}});
    containers.push_back({{"name", c.name},
                          {"gpus", std::move(gpus)},
                          {"gpu_milli", c.gpu_milli},
                          {"gpu_mem_mib", c.gpu_mem_mib},
                          {"milli_requested", c.milli_requested},
                          {"exclusive", c.exclusive}});
  }
  const json out = {{"version", grant.version},
                    {"node", grant.node},
                    {"policy", grant.policy},
                    {"assumed_at", core::FormatRfc3339(grant.assumed_at)},
                    {"containers", std::move(containers)}};
  return out.dump();
}

core::Result<Grant> DecodeGrant(std::string_view text) {
  const std::string where = "annotation gpumux.io/grant";
  const auto parsed = core::ParseJson(text, where);
  if (!parsed) return tl::unexpected(parsed.error());
  const json& doc = *parsed;
  if (!doc.is_object()) {
    return MakeError(ErrorCode::kInvalidArgument, where + ": not a JSON object");
  }
  Grant g;
  auto version = Field(doc, "version", json::value_t::number_integer, where);
  if (!version) return tl::unexpected(version.error());
  if (**version != 1) {  // compared as JSON: 2^32 + 1 is not 1 (get<int> would wrap it)
    return MakeError(
        ErrorCode::kInvalidArgument,
        where + ": unsupported version " + core::JsonSummary(**version) + " (this build reads 1)");
  }
  auto node = Field(doc, "node", json::value_t::string, where);
  if (!node) return tl::unexpected(node.error());
  g.node = (*node)->get<std::string>();
  if (g.node.empty()) return MakeError(ErrorCode::kInvalidArgument, where + ": empty \"node\"");
  if (auto it = doc.find("policy"); it != doc.end() && it->is_string()) g.policy = *it;
  auto at = Field(doc, "assumed_at", json::value_t::string, where);
  if (!at) return tl::unexpected(at.error());
  auto when = core::ParseRfc3339((*at)->get<std::string>());
  if (!when)
    return MakeError(ErrorCode::kInvalidArgument, where + ": assumed_at: " + when.error().message);
  g.assumed_at = *when;
  auto containers = Field(doc, "containers", json::value_t::array, where);
  if (!containers) return tl::unexpected(containers.error());
  for (std::size_t i = 0; i < (*containers)->size(); ++i) {
    const json& c = (**containers)[i];
    const std::string cw = where + ": containers[" + std::to_string(i) + "]";
    if (!c.is_object()) return MakeError(ErrorCode::kInvalidArgument, cw + ": not an object");
    ContainerGrant cg;
    auto name = Field(c, "name", json::value_t::string, cw);
    if (!name) return tl::unexpected(name.error());
    cg.name = (*name)->get<std::string>();
    auto gpus = Field(c, "gpus", json::value_t::array, cw);
    if (!gpus) return tl::unexpected(gpus.error());
    for (std::size_t k = 0; k < (*gpus)->size(); ++k) {
      const json& gj = (**gpus)[k];
      const std::string gw = cw + ".gpus[" + std::to_string(k) + "]";
      if (!gj.is_object()) return MakeError(ErrorCode::kInvalidArgument, gw + ": not an object");
      auto index = Field(gj, "index", json::value_t::number_integer, gw);
      if (!index) return tl::unexpected(index.error());
      GrantedGpu gg;
      // Range first: get<int> would wrap 2^32 + 1 to GPU 1. JSON's non-negative integers are
      // unsigned, its negative ones signed.
      const json& v = **index;
      if (!v.is_number_unsigned() ||
          v.get<std::uint64_t>() >= static_cast<std::uint64_t>(core::kMaxGpusPerNode)) {
        return MakeError(ErrorCode::kInvalidArgument,
                         gw + ": index " + core::JsonSummary(v) + " is not a GPU index 0.." +
                             std::to_string(core::kMaxGpusPerNode - 1));
      }
      gg.index = static_cast<int>(v.get<std::uint64_t>());
      if (auto u = gj.find("uuid"); u != gj.end() && u->is_string()) gg.uuid = *u;
      cg.gpus.push_back(std::move(gg));
    }
    if (cg.gpus.empty()) return MakeError(ErrorCode::kInvalidArgument, cw + ": no GPUs");
    auto milli = Field(c, "gpu_milli", json::value_t::number_integer, cw);
    if (!milli) return tl::unexpected(milli.error());
    cg.gpu_milli = (*milli)->get<core::MilliGpu>();
    if (cg.gpu_milli < 1 || cg.gpu_milli > core::kMilliPerGpu) {
      return MakeError(ErrorCode::kInvalidArgument, cw + ": gpu_milli out of 1..1000");
    }
    auto mem = Field(c, "gpu_mem_mib", json::value_t::number_integer, cw);
    if (!mem) return tl::unexpected(mem.error());
    cg.gpu_mem_mib = (*mem)->get<core::MiB>();
    if (cg.gpu_mem_mib < 0 || cg.gpu_mem_mib > core::kMaxGpuMemoryMib) {
      return MakeError(ErrorCode::kInvalidArgument,
                       cw + ": gpu_mem_mib out of 0.." + std::to_string(core::kMaxGpuMemoryMib));
    }
    if (auto it = c.find("milli_requested"); it != c.end() && it->is_boolean())
      cg.milli_requested = *it;
    if (auto it = c.find("exclusive"); it != c.end() && it->is_boolean()) cg.exclusive = *it;
    g.containers.push_back(std::move(cg));
  }
  if (g.containers.empty())
    return MakeError(ErrorCode::kInvalidArgument, where + ": no containers");
  return g;
}

}  // namespace gpumux::kube
