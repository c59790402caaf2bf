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

using Fields = core::JsonFields<json>;

// One container of the grant.
core::Result<ContainerGrant> DecodeContainer(const json& value, const std::string& path) {
  auto c = Fields::Of(value, path);
  if (!c) return tl::unexpected(c.error());
  ContainerGrant cg;
  auto name = c->String("name");
  if (!name) return tl::unexpected(name.error());
  cg.name = std::move(*name);
  auto gpus = c->Array("gpus", static_cast<std::size_t>(core::kMaxGpusPerNode));
  if (!gpus) return tl::unexpected(gpus.error());
  for (std::size_t k = 0; k < (*gpus)->size(); ++k) {
    auto gpu = Fields::Of((**gpus)[k], c->PathOf("gpus[" + std::to_string(k) + "]"));
    if (!gpu) return tl::unexpected(gpu.error());
    // In the JSON's own type: get<int> would wrap 2^32 + 1 to GPU 1.
    auto index = gpu->Integer("index", 0, core::kMaxGpusPerNode - 1);
    if (!index) return tl::unexpected(index.error());
    auto uuid = gpu->OptionalString("uuid");
    if (!uuid) return tl::unexpected(uuid.error());
    cg.gpus.push_back({static_cast<int>(*index), uuid->value_or("")});
  }
  if (cg.gpus.empty()) return tl::unexpected(c->Wrong("gpus", "no GPUs"));
  auto milli = c->Integer("gpu_milli", 1, core::kMilliPerGpu);
  if (!milli) return tl::unexpected(milli.error());
  cg.gpu_milli = static_cast<core::MilliGpu>(*milli);
  auto mem = c->Integer("gpu_mem_mib", 0, core::kMaxGpuMemoryMib);
  if (!mem) return tl::unexpected(mem.error());
  cg.gpu_mem_mib = static_cast<core::MiB>(*mem);
  auto requested = c->OptionalBool("milli_requested");
  if (!requested) return tl::unexpected(requested.error());
  cg.milli_requested = requested->value_or(false);
  auto exclusive = c->OptionalBool("exclusive");
  if (!exclusive) return tl::unexpected(exclusive.error());
  cg.exclusive = exclusive->value_or(false);
  return cg;
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
  const auto in = [&](core::Error e) {
    return MakeError(ErrorCode::kInvalidArgument, where + ": " + e.message);
  };
  auto doc = Fields::Of(*parsed, "");
  if (!doc) return tl::unexpected(in(doc.error()));
  Grant g;
  auto version = doc->Integer("version", 1, 1);
  if (!version)
    return tl::unexpected(in(doc->Wrong("version", "unsupported (this build reads 1)")));
  auto node = doc->String("node");
  if (!node) return tl::unexpected(in(node.error()));
  if (node->empty()) return tl::unexpected(in(doc->Wrong("node", "empty")));
  g.node = std::move(*node);
  auto policy = doc->OptionalString("policy");
  if (!policy) return tl::unexpected(in(policy.error()));
  g.policy = policy->value_or("");
  auto at = doc->String("assumed_at");
  if (!at) return tl::unexpected(in(at.error()));
  auto when = core::ParseRfc3339(*at);
  if (!when) return tl::unexpected(in(doc->Wrong("assumed_at", when.error().message)));
  g.assumed_at = *when;
  auto containers = doc->Array("containers", kMaxGrantContainers);
  if (!containers) return tl::unexpected(in(containers.error()));
  for (std::size_t i = 0; i < (*containers)->size(); ++i) {
    auto c = DecodeContainer((**containers)[i], "containers[" + std::to_string(i) + "]");
    if (!c) return tl::unexpected(in(c.error()));
    g.containers.push_back(std::move(*c));
  }
  if (g.containers.empty()) return tl::unexpected(in(doc->Wrong("containers", "no containers")));
  return g;
}

}  // namespace gpumux::kube
