#include "gpumux/sched/snapshot.h"

#include "gpumux/kube/enforcement.h"

namespace gpumux::sched {
namespace {

using nlohmann::json;

json NodeJson(const NodeSnapshot& n) {
  json gpus = json::array();
  for (const GpuSnapshot& g : n.gpus) {
    json tenants = json::array();
    for (const TenantSnapshot& t : g.tenants) {
      tenants.push_back({{"pod", t.pod},
                         {"uid", t.uid},
                         {"container", t.container},
                         {"gpu_milli", t.gpu_milli},
                         {"gpu_mem_mib", t.gpu_mem_mib},
                         {"exclusive", t.exclusive},
                         {"state", t.state}});
    }
    gpus.push_back({{"index", g.index},
                    {"uuid", g.uuid},
                    {"model", g.model},
                    {"memory_mib", g.memory_mib},
                    {"health", g.healthy ? "Healthy" : "Unhealthy"},
                    {"free_milli", g.free_milli},
                    {"free_mib", g.free_mib},
                    {"tenants", std::move(tenants)},
                    {"enforcement", kube::EnforcementToJson(g.enforcement)}});
  }
  json node = {{"name", n.name}, {"gpus", std::move(gpus)}};
  if (!n.gpus_from_annotation) node["gpus_source"] = "default";
  if (!n.gpus_error.empty()) node["gpus_error"] = n.gpus_error;
  if (n.unschedulable) node["unschedulable"] = true;
  if (n.gpu_mem_unit_mib > 0) node["gpu_mem_unit_mib"] = n.gpu_mem_unit_mib;
  if (!n.gpu_mem_unit_error.empty()) node["gpu_mem_unit_error"] = n.gpu_mem_unit_error;
  return node;
}

}  // namespace

json StateJson(const StateSnapshot& s) {
  json nodes = json::array();
  for (const NodeSnapshot& n : s.nodes) nodes.push_back(NodeJson(n));
  json unusable = json::array();
  for (const Unusable& u : s.unusable_nodes)
    unusable.push_back({{"name", u.name}, {"reason", u.reason}});
  json problems = json::array();
  for (const GrantProblem& p : s.grants_not_in_ledger) {
    problems.push_back(
        {{"pod", p.pod}, {"uid", p.uid}, {"state", p.state}, {"problem", p.problem}});
  }
  const StateCounters& c = s.counters;
  json result = {{"policy", s.policy},
                 {"synced", s.synced},
                 {"gpu_mem_unit_mib", s.gpu_mem_unit_mib},
                 {"counters",
                  {{"nodes", c.nodes},
                   {"gpus", c.gpus},
                   {"unusable_nodes", c.unusable_nodes},
                   {"unreadable_nodes", c.unreadable_nodes},
                   {"grants_bound", c.grants_bound},
                   {"grants_assumed", c.grants_assumed},
                   {"grants_binding", c.grants_binding},
                   {"grants_in_conflict", c.grants_in_conflict},
                   {"grants_expired", c.grants_expired},
                   {"grant_conflicts", c.grant_conflicts},
                   {"unreadable_grants", c.unreadable_grants},
                   {"rebuilds", c.rebuilds}}},
                 {"nodes", std::move(nodes)},
                 {"unusable_nodes", std::move(unusable)},
                 {"grants_not_in_ledger", std::move(problems)}};
  if (s.profile) {
    result["profile"] = {{"name", s.profile->name},
                         {"classes", s.profile->classes},
                         {"measured_sets", s.profile->measured_sets},
                         {"observed_sets", c.observed_sets},
                         {"swaps", c.profile_swaps},
                         {"observation_read_failures", c.observation_read_failures}};
  }
  return result;
}

}  // namespace gpumux::sched
