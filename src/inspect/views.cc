#include "gpumux/inspect/views.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <utility>

#include "gpumux/core/json_text.h"
#include "gpumux/core/plural.h"
#include "gpumux/core/time.h"
#include "gpumux/kube/coordinator_status.h"
#include "gpumux/kube/grant.h"

namespace gpumux::inspect {

namespace {

using Json = nlohmann::json;

Cell Text(std::string text, Style style = Style::kPlain) {
  Json value = text;
  return Cell{std::move(text), std::move(value), style};
}
Cell None() { return Cell{"-", nullptr, Style::kDim}; }
Cell Int(std::int64_t v) { return Cell{std::to_string(v), v, Style::kPlain}; }

std::string Fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

// MiB as GiB with at most one decimal: 40960 -> "40", 40536 -> "39.6".
std::string Gib(core::MiB mib) {
  const double gib = static_cast<double>(mib) / 1024.0;
  const double rounded = std::round(gib * 10) / 10;
  return rounded == std::floor(rounded) ? Fixed(rounded, 0) : Fixed(rounded, 1);
}

std::string Percent(double part, double whole) {
  return whole > 0 ? Fixed(100.0 * part / whole, 0) + " %" : "-";
}

// The namespace part of "ns/pod[/container]".
std::string_view NamespaceOf(std::string_view key) { return key.substr(0, key.find('/')); }
bool InNamespace(const ViewOptions& o, std::string_view key) {
  return o.ns.empty() || NamespaceOf(key) == o.ns;
}

const std::string* Annotation(const Json& object, std::string_view key) {
  const Json* metadata = kube::JsonChild(object, "metadata");
  const Json* annotations =
      metadata != nullptr ? kube::JsonChild(*metadata, "annotations") : nullptr;
  if (annotations == nullptr || !annotations->is_object()) return nullptr;
  auto it = annotations->find(std::string(key));
  return it != annotations->end() && it->is_string() ? it->get_ptr<const std::string*>() : nullptr;
}

std::string NodeName(const Json& node) {
  const Json* metadata = kube::JsonChild(node, "metadata");
  return metadata != nullptr ? kube::JsonString(*metadata, "name") : std::string();
}

// The unit of gpumux.io/gpu-mem: given, else the one every publishing node agrees on.
std::int64_t MemUnit(const Snapshot& snapshot, const ViewOptions& options) {
  if (options.state.gpu_mem_unit_mib > 0) return options.state.gpu_mem_unit_mib;
  std::set<std::string> published;
  for (const Json& node : snapshot.nodes) {
    if (const std::string* v = Annotation(node, kube::kAnnotationGpuMemUnit)) published.insert(*v);
  }
  if (published.size() == 1) {
    auto unit = kube::ParseQuantity(*published.begin());
    if (unit && *unit > 0 && *unit <= kube::kMaxGpuMemUnitMib) return *unit;
  }
  return kube::kDefaultGpuMemUnitMib;
}

core::Result<std::unique_ptr<sched::ClusterState>> Replay(const Snapshot& snapshot,
                                                          const ViewOptions& options) {
  sched::ClusterStateOptions state = options.state;
  state.gpu_mem_unit_mib = MemUnit(snapshot, options);
  state.log = nullptr;
  const std::int64_t now = snapshot.now;
  auto created = sched::ClusterState::Create(std::move(state), [now] { return now; });
  if (!created) return tl::unexpected(created.error());
  (*created)->SetNodes(snapshot.nodes);
  (*created)->SetPods(snapshot.pods);
  (*created)->MarkSynced();
  return created;
}

std::vector<kube::PodInfo> DecodePods(const Snapshot& snapshot, std::int64_t unit,
                                      std::vector<std::string>* notes) {
  std::vector<kube::PodInfo> pods;
  for (const Json& p : snapshot.pods) {
    auto pod = kube::DecodePod(p, unit);
    if (!pod || !pod->wants_gpu()) continue;
    if (notes != nullptr && !pod->grant_error.empty()) {
      notes->push_back("pod " + pod->Key() + ": unreadable " + std::string(kube::kAnnotationGrant) +
                       ": " + pod->grant_error);
    }
    pods.push_back(std::move(*pod));
  }
  std::sort(pods.begin(), pods.end(),
            [](const kube::PodInfo& a, const kube::PodInfo& b) { return a.Key() < b.Key(); });
  return pods;
}

std::string Indices(const std::vector<kube::GrantedGpu>& gpus) {
  std::string out;
  for (const auto& g : gpus) out += (out.empty() ? "" : ",") + std::to_string(g.index);
  return out;
}

// "memory hard", "memory soft, compute mps-server", "none": what a GPU holds its sharing
// tenants to, with the record as the JSON value.
Cell EnforcementCell(const kube::GpuEnforcement& e) {
  std::string text;
  if (e.memory != kube::MemoryEnforcement::kNone) {
    text = "memory " + std::string(kube::MemoryEnforcementName(e.memory));
  }
  if (e.compute != kube::ComputeEnforcement::kNone) {
    text += (text.empty() ? "" : ", ") + std::string("compute ") +
            std::string(kube::ComputeEnforcementName(e.compute));
  }
  const Style style = e.memory == kube::MemoryEnforcement::kHard   ? Style::kGood
                      : e.memory == kube::MemoryEnforcement::kSoft ? Style::kWarn
                                                                   : Style::kBad;
  return Cell{text.empty() ? "none" : text, kube::EnforcementToJson(e), style};
}

// Appends `line` unless it is "" or already there.
void AddOnce(std::vector<std::string>& lines, const std::string& line) {
  if (!line.empty() && std::find(lines.begin(), lines.end(), line) == lines.end()) {
    lines.push_back(line);
  }
}

// What each node's GPUs enforce, by node name and GPU index.
using EnforcementByNode = std::map<std::string, std::vector<kube::GpuEnforcement>, std::less<>>;
EnforcementByNode EnforcementOfNodes(const Snapshot& snapshot, const ViewOptions& options) {
  EnforcementByNode out;
  for (const Json& n : snapshot.nodes) {
    if (auto info = kube::DecodeNode(n, options.state.defaults); info) {
      out[info->spec.name] = std::move(info->enforcement);
    }
  }
  return out;
}

// What the GPU of a container's grant holds it to ("whole GPU" for an exclusive one).
Cell ContainerEnforcement(const EnforcementByNode& enforced, const kube::PodInfo& pod,
                          const kube::ContainerGrant* granted, bool whole) {
  if (whole) return Cell{"whole GPU", nullptr, Style::kDim};
  if (granted == nullptr || granted->gpus.empty() || !pod.grant) return None();
  const auto node = enforced.find(pod.grant->node);
  const auto i = static_cast<std::size_t>(granted->gpus.front().index);
  Cell cell = EnforcementCell(node != enforced.end() && i < node->second.size()
                                  ? node->second[i]
                                  : kube::EnforcementFromJson(nullptr));
  if (cell.text == "none") cell.text = "none (booked only)";
  return cell;
}

// "1 GPU, 250m, 8 GiB" / "2 whole GPUs" for one container's request.
std::string DescribeRequest(const kube::ContainerRequest& c) {
  const core::Request& r = c.request;
  if (r.sharing == core::GpuSharing::kExclusive) {
    return core::Plural(static_cast<std::size_t>(r.gpu_count), "whole GPU", "whole GPUs");
  }
  std::string out = core::Plural(static_cast<std::size_t>(r.gpu_count), "GPU", "GPUs");
  if (c.milli_requested) out += ", " + std::to_string(r.gpu_milli) + "m";
  if (r.gpu_mib > 0) out += ", " + Gib(r.gpu_mib) + " GiB";
  return out;
}

}  // namespace

std::string Age(std::int64_t s) {
  if (s <= 0) return "-";
  const std::int64_t m = s / 60, h = s / 3600, d = s / 86400;
  if (s < 120) return std::to_string(s) + "s";
  if (m < 10) return std::to_string(m) + "m" + (s % 60 != 0 ? std::to_string(s % 60) + "s" : "");
  if (h < 3) return std::to_string(m) + "m";
  if (h < 8) return std::to_string(h) + "h" + (m % 60 != 0 ? std::to_string(m % 60) + "m" : "");
  if (h < 48) return std::to_string(h) + "h";
  if (d < 8) return std::to_string(d) + "d" + (h % 24 != 0 ? std::to_string(h % 24) + "h" : "");
  return std::to_string(d) + "d";
}

// ---------------------------------------------------------------------------------------------

core::Result<Table> NodesView(const Snapshot& snapshot, const ViewOptions& options) {
  auto state = Replay(snapshot, options);
  if (!state) return tl::unexpected(state.error());
  const Json inspect = sched::StateJson((*state)->Snapshot());
  Table t;
  t.kind = "nodes";
  t.columns = {{"NODE", "node"},
               {"GPU", "gpu"},
               {"MODEL", "model"},
               {"MEMORY", "memory"},
               {"COMPUTE", "compute"},
               {"HEALTH", "health"},
               {"ENFORCED", "enforcement"},
               {"TENANTS", "tenants"},
               {"UUID", "uuid", Width::kWideOnly}};
  std::vector<std::string> why_not;  // why a node's GPUs enforce no more, once per node and reason
  std::int64_t mem_total = 0, mem_granted = 0, milli_total = 0, milli_granted = 0, gpus = 0;
  for (const Json& node : inspect["nodes"]) {
    const std::string name = node["name"].get<std::string>();
    if (node.contains("gpus_error")) {
      t.notes.push_back("node " + name + ": " + std::string(kube::kAnnotationGpus) +
                        " unreadable, no GPUs: " + node["gpus_error"].get<std::string>());
    }
    if (node.value("unschedulable", false)) t.notes.push_back("node " + name + ": cordoned");
    for (const Json& g : node["gpus"]) {
      ++gpus;
      const std::int64_t memory = g["memory_mib"].get<std::int64_t>();
      const std::int64_t used_mib = memory - g["free_mib"].get<std::int64_t>();
      const std::int64_t used_milli = 1000 - g["free_milli"].get<std::int64_t>();
      mem_total += memory;
      mem_granted += used_mib;
      milli_total += 1000;
      milli_granted += used_milli;
      std::string tenants;
      Json tenant_values = Json::array();
      for (const Json& tenant : g["tenants"]) {
        tenants += (tenants.empty() ? "" : ", ") + tenant["pod"].get<std::string>();
        if (tenant["exclusive"].get<bool>()) tenants += " (whole)";
        tenant_values.push_back(tenant);
      }
      const std::string health = g["health"].get<std::string>();
      const kube::GpuEnforcement enforcement = kube::EnforcementFromJson(&g["enforcement"]);
      AddOnce(why_not, enforcement.note.empty() ? "" : "node " + name + ": " + enforcement.note);
      t.rows.push_back(
          {Text(name), Int(g["index"].get<std::int64_t>()), Text(g["model"].get<std::string>()),
           memory > 0 ? Cell{Gib(used_mib) + "/" + Gib(memory) + " GiB",
                             {{"granted_mib", used_mib}, {"total_mib", memory}},
                             Style::kPlain}
                      : Cell{"-", {{"granted_mib", used_mib}, {"total_mib", 0}}, Style::kDim},
           Cell{std::to_string(used_milli) + "/1000m",
                {{"granted_milli", used_milli}, {"total_milli", 1000}},
                used_milli >= 1000 ? Style::kWarn : Style::kPlain},
           Text(health, health == "Healthy" ? Style::kGood : Style::kBad),
           EnforcementCell(enforcement),
           tenants.empty() ? Cell{"-", tenant_values, Style::kDim}
                           : Cell{tenants, tenant_values, Style::kPlain},
           g["uuid"].get<std::string>().empty() ? None() : Text(g["uuid"].get<std::string>())});
    }
  }
  t.notes.insert(t.notes.end(), why_not.begin(), why_not.end());
  for (const Json& u : inspect["unusable_nodes"]) {
    t.notes.push_back("node " + u["name"].get<std::string>() +
                      ": not usable by gpumux: " + u["reason"].get<std::string>());
  }
  for (const Json& p : inspect["grants_not_in_ledger"]) {
    t.notes.push_back("pod " + p["pod"].get<std::string>() + " (" + p["state"].get<std::string>() +
                      "): grant not counted: " + p["problem"].get<std::string>());
  }
  const std::size_t nodes = inspect["nodes"].size();
  t.notes.insert(t.notes.begin(),
                 core::Plural(nodes, "node", "nodes") + ", " +
                     core::Plural(static_cast<std::size_t>(gpus), "GPU", "GPUs") + ": memory " +
                     Gib(mem_granted) + " of " + Gib(mem_total) + " GiB granted (" +
                     Percent(static_cast<double>(mem_granted), static_cast<double>(mem_total)) +
                     "), compute " + Fixed(static_cast<double>(milli_granted) / 1000.0, 2) +
                     " of " + std::to_string(milli_total / 1000) + " GPUs (" +
                     Percent(static_cast<double>(milli_granted), static_cast<double>(milli_total)) +
                     ")");
  return t;
}

// ---------------------------------------------------------------------------------------------

Table PodsView(const Snapshot& snapshot, const ViewOptions& options) {
  Table t;
  t.kind = "pods";
  t.columns = {{"NAMESPACE", "namespace"},
               {"POD", "pod"},
               {"CONTAINER", "container"},
               {"NODE", "node"},
               {"GPUS", "gpus"},
               {"COMPUTE", "gpu_milli"},
               {"MEMORY", "gpu_mem_mib"},
               {"PHASE", "phase"},
               {"ENFORCED", "enforcement"},
               {"SINCE", "since"},
               {"UUIDS", "uuids", Width::kWideOnly},
               {"POLICY", "policy", Width::kWideOnly}};
  const EnforcementByNode enforced = EnforcementOfNodes(snapshot, options);
  for (const kube::PodInfo& pod : DecodePods(snapshot, MemUnit(snapshot, options), &t.notes)) {
    if (!InNamespace(options, pod.Key()) || pod.finished()) continue;
    if (!pod.request_error.empty()) {
      t.notes.push_back("pod " + pod.Key() + ": cannot be placed: " + pod.request_error);
    }
    for (const kube::ContainerRequest& c : pod.containers) {
      const kube::ContainerGrant* granted = nullptr;
      if (pod.grant) {
        for (const auto& cg : pod.grant->containers) {
          if (cg.name == c.container) granted = &cg;
        }
      }
      const core::Request& r = c.request;
      const bool whole = r.sharing == core::GpuSharing::kExclusive;
      Json uuids = Json::array();
      std::string uuid_text;
      if (granted != nullptr) {
        for (const auto& g : granted->gpus) {
          uuids.push_back(g.uuid);
          uuid_text += (uuid_text.empty() ? "" : ",") + (g.uuid.empty() ? "-" : g.uuid);
        }
      }
      const std::string phase =
          pod.deleting ? "Terminating" : (pod.phase.empty() ? "Pending" : pod.phase);
      Json gpu_indices = Json::array();
      if (granted != nullptr) {
        for (const auto& g : granted->gpus) gpu_indices.push_back(g.index);
      }
      t.rows.push_back(
          {Text(pod.ns), Text(pod.name), Text(c.container),
           pod.node_name.empty()
               ? (pod.grant ? Text(pod.grant->node + " (assumed)", Style::kWarn) : None())
               : Text(pod.node_name),
           granted != nullptr
               ? Cell{Indices(granted->gpus), gpu_indices, Style::kPlain}
               : Cell{"- (" + std::to_string(r.gpu_count) + " wanted)", gpu_indices, Style::kWarn},
           whole ? Cell{"whole", 1000, Style::kPlain}
                 : Cell{c.milli_requested ? std::to_string(r.gpu_milli) + "m" : "shared",
                        c.milli_requested ? Json(r.gpu_milli) : Json(nullptr), Style::kPlain},
           r.gpu_mib > 0 ? Cell{Gib(r.gpu_mib) + " GiB", r.gpu_mib, Style::kPlain}
                         : Cell{whole ? "all" : "-", nullptr, Style::kDim},
           Text(phase, phase == "Running"   ? Style::kGood
                       : phase == "Pending" ? Style::kWarn
                                            : Style::kPlain),
           ContainerEnforcement(enforced, pod, granted, whole),
           pod.grant ? Cell{Age(snapshot.now - pod.grant->assumed_at),
                            core::FormatRfc3339(pod.grant->assumed_at), Style::kPlain}
                     : None(),
           uuid_text.empty() ? None() : Cell{uuid_text, uuids, Style::kPlain},
           pod.grant ? Text(pod.grant->policy) : None()});
    }
  }
  if (!options.ns.empty()) {
    t.columns.erase(t.columns.begin());
    for (auto& row : t.rows) row.erase(row.begin());
  }
  return t;
}

// ---------------------------------------------------------------------------------------------

namespace {

// The pod `why` is asked about: "NAME" (in options.ns, else "default") or "NAMESPACE/NAME".
struct PodRef {
  std::string ns, name;
};
PodRef ParsePodArg(const ViewOptions& options, std::string_view pod_arg) {
  PodRef ref{options.ns.empty() ? "default" : options.ns, std::string(pod_arg)};
  if (const auto slash = pod_arg.find('/'); slash != std::string_view::npos) {
    ref.ns = std::string(pod_arg.substr(0, slash));
    ref.name = std::string(pod_arg.substr(slash + 1));
  }
  return ref;
}

// The pod of the snapshot named by `ref`, decoded (the last one, should the list repeat it).
// Error (kNotFound) when there is none, or the decoder's error.
core::Result<kube::PodInfo> FindPod(const Snapshot& snapshot, const PodRef& ref,
                                    std::int64_t unit) {
  std::optional<kube::PodInfo> pod;
  for (const Json& p : snapshot.pods) {
    const Json* metadata = kube::JsonChild(p, "metadata");
    if (metadata == nullptr || kube::JsonString(*metadata, "name") != ref.name ||
        kube::JsonString(*metadata, "namespace") != ref.ns) {
      continue;
    }
    auto decoded = kube::DecodePod(p, unit);
    if (!decoded) return tl::unexpected(decoded.error());
    pod = std::move(*decoded);
  }
  if (!pod) {
    return core::MakeError(core::ErrorCode::kNotFound,
                           "pod " + ref.ns + "/" + ref.name + " not found");
  }
  return std::move(*pod);
}

// "main: 1 GPU, 250m; side: 2 whole GPUs": what each container asks for.
std::string DescribeAsks(const kube::PodInfo& pod) {
  std::string asks;
  for (const auto& c : pod.containers) {
    asks += (asks.empty() ? "" : "; ") + c.container + ": " + DescribeRequest(c);
  }
  return asks;
}

// The note that says why no node is judged for the pod (gpumux cannot place it, it asks
// gpumux for nothing, it has finished or it is bound already); "" when the nodes are judged.
std::string NothingToJudge(const kube::PodInfo& pod) {
  if (!pod.request_error.empty()) {
    return "pod " + pod.Key() + " cannot be placed by gpumux on any node: " + pod.request_error;
  }
  if (!pod.wants_gpu()) {
    return "pod " + pod.Key() +
           " asks for no gpumux resources (gpumux.io/gpu, gpu-mem, gpu-milli): "
           "gpumux does not place it";
  }
  if (pod.finished()) return "pod " + pod.Key() + " has finished (" + pod.phase + ")";
  if (!pod.node_name.empty()) {
    std::string where =
        "pod " + pod.Key() + " (" + DescribeAsks(pod) + ") is bound to node " + pod.node_name;
    if (pod.grant) {
      for (const auto& c : pod.grant->containers) {
        where += "; " + c.name + " holds GPU " + Indices(c.gpus);
      }
    }
    return where + ": nothing to explain";
  }
  return "";
}

// The names of the snapshot's nodes (those that have one), sorted.
std::vector<std::string> SortedNodeNames(const Snapshot& snapshot) {
  std::vector<std::string> names;
  for (const Json& node : snapshot.nodes) {
    if (std::string n = NodeName(node); !n.empty()) names.push_back(std::move(n));
  }
  std::sort(names.begin(), names.end());
  return names;
}

struct VerdictRow {
  int order;  // fits, declined, does not fit, never fits, unknown
  std::int64_t score;
  std::string node;
  sched::NodeVerdict verdict;
};

// The verdicts (verdicts[i] is names[i]'s) in the order `why` shows them: the nodes that fit
// first, best score first, then declined, does not fit, never fits and unknown, each in name
// order.
std::vector<VerdictRow> RankVerdicts(const std::vector<std::string>& names,
                                     const std::vector<sched::NodeVerdict>& verdicts) {
  std::vector<VerdictRow> rows;
  for (std::size_t i = 0; i < names.size(); ++i) {
    const sched::NodeVerdict& v = verdicts[i];
    using K = sched::NodeVerdict::Kind;
    const int order = v.kind == K::kFits           ? 0
                      : v.kind == K::kDeclined     ? 1
                      : v.kind == K::kDoesNotFit   ? 2
                      : v.kind == K::kUnresolvable ? 3
                                                   : 4;
    rows.push_back({order, v.score, names[i], v});
  }
  std::stable_sort(rows.begin(), rows.end(), [](const VerdictRow& a, const VerdictRow& b) {
    if (a.order != b.order) return a.order < b.order;
    return a.order == 0 && a.score > b.score;
  });
  return rows;
}

// The RESULT cell of a verdict: "fits", "declined", "does not fit", "never fits" or "unknown".
Cell ResultCell(sched::NodeVerdict::Kind kind) {
  using K = sched::NodeVerdict::Kind;
  switch (kind) {
    case K::kFits:
      return Text("fits", Style::kGood);
    case K::kDeclined:
      return Text("declined", Style::kWarn);
    case K::kDoesNotFit:
      return Text("does not fit", Style::kWarn);
    case K::kUnresolvable:
      return Text("never fits", Style::kBad);
    case K::kUnknownNode:
      return Text("unknown", Style::kDim);
  }
  return Text("", Style::kPlain);
}

}  // namespace

core::Result<Table> WhyView(const Snapshot& snapshot, const ViewOptions& options,
                            std::string_view pod_arg) {
  auto pod = FindPod(snapshot, ParsePodArg(options, pod_arg), MemUnit(snapshot, options));
  if (!pod) return tl::unexpected(pod.error());
  Table t;
  t.kind = "why";
  t.columns = {{"NODE", "node"},
               {"RESULT", "result"},
               {"REASON", "reason"},
               {"SCORE", "score", Width::kWideOnly}};
  if (std::string note = NothingToJudge(*pod); !note.empty()) {
    t.notes.push_back(std::move(note));
    return t;
  }
  auto state = Replay(snapshot, options);
  if (!state) return tl::unexpected(state.error());
  const std::vector<std::string> names = SortedNodeNames(snapshot);
  const std::vector<sched::NodeVerdict> verdicts = (*state)->Evaluate(*pod, names);
  std::size_t fits = 0;
  for (const VerdictRow& r : RankVerdicts(names, verdicts)) {
    using K = sched::NodeVerdict::Kind;
    fits += r.verdict.kind == K::kFits ? 1 : 0;
    t.rows.push_back({Text(r.node), ResultCell(r.verdict.kind),
                      r.verdict.reason.empty() ? None() : Text(r.verdict.reason),
                      r.verdict.kind == K::kFits ? Int(r.verdict.score) : None()});
  }
  t.notes.push_back("pod " + pod->Key() + " (" + DescribeAsks(*pod) + "), policy " +
                    options.state.policy + ": fits on " + std::to_string(fits) + " of " +
                    core::Plural(names.size(), "node", "nodes"));
  if (pod->grant) {
    t.notes.push_back("it holds an assumed grant on node " + pod->grant->node +
                      " (the extender is binding it, or the bind failed and the grant expires)");
  }
  t.notes.push_back(
      "only gpumux's resources are judged here; kube-scheduler's own filters (CPU, memory, "
      "taints, affinity, node readiness) are not: see `kubectl describe pod " +
      pod->name + " -n " + pod->ns + "`");
  return t;
}

// ---------------------------------------------------------------------------------------------

namespace {

// Anything older than this is called stale: three heartbeats of the default publisher.
constexpr std::int64_t kStaleAfterSeconds = 180;

std::string Seconds(double s) {
  if (s <= 0) return "-";
  return s < 1 ? Fixed(s * 1000, 0) + "ms" : Fixed(s, 2) + "s";
}

// The GPU cell of a top row: its index on the node (by UUID, from the device plugin's
// inventory `index_of`), else the UUID's start; none for jobs on no single GPU.
Cell GpuCell(const std::map<std::string, int>& index_of, const std::string& uuid) {
  if (uuid.empty()) return None();
  auto it = index_of.find(uuid);
  // Cut where no character is split: a UUID is whatever a node's annotation says.
  return it != index_of.end() ? Int(it->second) : Text(std::string(core::Utf8Prefix(uuid, 12)));
}

// GPU index by UUID, from the device plugin's inventory of the node.
std::map<std::string, int> GpuIndexByUuid(const Json& node, const ViewOptions& options) {
  std::map<std::string, int> index_of;
  if (auto info = kube::DecodeNode(node, options.state.defaults)) {
    for (const auto& g : info->spec.gpus) index_of[g.uuid] = g.index;
  }
  return index_of;
}

// The coordinator's report on the node, if it publishes one; an unreadable one is a note.
std::optional<kube::NodeStatus> CoordinatorReport(const Json& node_json, const std::string& node,
                                                  std::vector<std::string>& notes) {
  const std::string* text = Annotation(node_json, kube::kAnnotationCoordinator);
  if (text == nullptr) return std::nullopt;
  auto decoded = kube::DecodeNodeStatus(*text);
  if (!decoded) {
    notes.push_back("node " + node + ": " + decoded.error().message);
    return std::nullopt;
  }
  return std::move(*decoded);
}

// The top row of job `j` on GPU `g` as the coordinator reported it (`age` seconds ago).
std::vector<Cell> ReportedRow(const std::string& node, Cell gpu, const kube::GpuView& g,
                              const kube::JobView& j, const kube::NodeStatus& status,
                              std::int64_t age) {
  const bool retuning = j.target_batch > 0 && j.target_batch != j.batch_size;
  return {
      Text(node),
      std::move(gpu),
      Text(g.state, g.state == "tuned"       ? Style::kGood
                    : g.state == "measuring" ? Style::kWarn
                                             : Style::kPlain),
      Text(j.job),
      j.cls.empty() ? None() : Text(j.cls),
      Cell{std::to_string(j.batch_size) + (retuning ? "->" + std::to_string(j.target_batch) : ""),
           j.batch_size, retuning ? Style::kWarn : Style::kPlain},
      j.step_s > 0 ? Cell{Seconds(j.step_s), j.step_s, Style::kPlain} : None(),
      j.samples_per_s > 0 ? Cell{Fixed(j.samples_per_s, 1), j.samples_per_s, Style::kPlain}
                          : None(),
      j.slowdown > 0 ? Cell{Fixed(j.slowdown, 2) + "x", j.slowdown,
                            j.slowdown >= 1.5 ? Style::kWarn : Style::kPlain}
                     : None(),
      g.uuid.empty() ? None() : Text(g.uuid),
      Int(j.target_batch),
      j.solo_step_s > 0 ? Cell{Seconds(j.solo_step_s), j.solo_step_s, Style::kPlain} : None(),
      Int(j.steps),
      status.updated > 0
          ? Cell{Age(age) + " ago", core::FormatRfc3339(status.updated), Style::kPlain}
          : None()};
}

// Adds a row per job of the coordinator's report (those in the namespace), and a note when the
// report is stale. Returns the jobs reported (ns/pod/container), in the namespace or not.
std::set<std::string> AddReportedRows(const std::string& node, const kube::NodeStatus& status,
                                      const std::map<std::string, int>& index_of,
                                      const Snapshot& snapshot, const ViewOptions& options,
                                      Table& t) {
  std::set<std::string> reported;
  const std::int64_t age = snapshot.now - status.updated;
  if (status.updated > 0 && age > kStaleAfterSeconds) {
    t.notes.push_back("node " + node + ": the coordinator's report is " + Age(age) +
                      " old (is it running?)");
  }
  for (const kube::GpuView& g : status.gpus) {
    for (const kube::JobView& j : g.jobs) {
      reported.insert(j.job);
      if (!InNamespace(options, j.job)) continue;
      t.rows.push_back(ReportedRow(node, GpuCell(index_of, g.uuid), g, j, status, age));
    }
  }
  return reported;
}

// Adds a row per GPU of the granted containers on the node that the coordinator does not
// report (no coordinator, or no SDK in the job): their grant only, in STATE `state`.
void AddUnreportedRows(const std::string& node, const std::vector<kube::PodInfo>& pods,
                       const std::set<std::string>& reported, const std::string& state,
                       const std::map<std::string, int>& index_of, const ViewOptions& options,
                       Table& t) {
  for (const kube::PodInfo& pod : pods) {
    if (pod.node_name != node || !pod.grant || pod.finished() || !InNamespace(options, pod.Key())) {
      continue;
    }
    for (const auto& c : pod.grant->containers) {
      const std::string job = pod.Key() + "/" + c.name;
      if (reported.count(job) != 0) continue;
      for (const auto& g : c.gpus) {
        t.rows.push_back({Text(node), g.uuid.empty() ? Int(g.index) : GpuCell(index_of, g.uuid),
                          Text(state, Style::kDim), Text(job), None(), None(), None(), None(),
                          None(), g.uuid.empty() ? None() : Text(g.uuid), None(), None(), None(),
                          None()});
      }
    }
  }
}

}  // namespace

Table TopView(const Snapshot& snapshot, const ViewOptions& options) {
  Table t;
  t.kind = "top";
  t.columns = {{"NODE", "node"},
               {"GPU", "gpu"},
               {"STATE", "state"},
               {"JOB", "job"},
               {"CLASS", "class"},
               {"BATCH", "batch_size"},
               {"STEP", "step_s"},
               {"SAMPLES/S", "samples_per_s"},
               {"SLOWDOWN", "slowdown"},
               {"UUID", "uuid", Width::kWideOnly},
               {"TARGET", "target_batch", Width::kWideOnly},
               {"SOLO STEP", "solo_step_s", Width::kWideOnly},
               {"STEPS", "steps", Width::kWideOnly},
               {"REPORTED", "updated", Width::kWideOnly}};
  const std::int64_t unit = MemUnit(snapshot, options);
  const std::vector<kube::PodInfo> pods = DecodePods(snapshot, unit, nullptr);
  std::vector<const Json*> nodes;
  for (const Json& n : snapshot.nodes) nodes.push_back(&n);
  std::sort(nodes.begin(), nodes.end(),
            [](const Json* a, const Json* b) { return NodeName(*a) < NodeName(*b); });
  std::size_t reporting = 0;
  for (const Json* node_json : nodes) {
    const std::string node = NodeName(*node_json);
    const std::map<std::string, int> index_of = GpuIndexByUuid(*node_json, options);
    const std::optional<kube::NodeStatus> status = CoordinatorReport(*node_json, node, t.notes);
    std::set<std::string> reported;  // ns/pod/container of the jobs the coordinator reports
    if (status) {
      ++reporting;
      reported = AddReportedRows(node, *status, index_of, snapshot, options, t);
    }
    AddUnreportedRows(node, pods, reported, status ? "unreported" : "no coordinator", index_of,
                      options, t);
  }
  t.notes.push_back(core::Plural(reporting, "node reports", "nodes report") +
                    " from a coordinator (" + std::string(kube::kAnnotationCoordinator) + ") of " +
                    core::Plural(nodes.size(), "node", "nodes") +
                    "; without a report a job shows its grant only");
  return t;
}

// ---------------------------------------------------------------------------------------------

std::string RenderText(const Table& table, Layout layout, Colour colour) {
  std::vector<std::size_t> shown;
  for (std::size_t c = 0; c < table.columns.size(); ++c) {
    if (layout == Layout::kWide || table.columns[c].width == Width::kNormal) shown.push_back(c);
  }
  std::vector<std::size_t> widths(table.columns.size(), 0);
  for (std::size_t c : shown) {
    widths[c] = table.columns[c].header.size();
    for (const auto& row : table.rows) widths[c] = std::max(widths[c], row[c].text.size());
  }
  const auto code = [](Style s) -> const char* {
    switch (s) {
      case Style::kGood:
        return "\033[32m";
      case Style::kWarn:
        return "\033[33m";
      case Style::kBad:
        return "\033[31m";
      case Style::kDim:
        return "\033[2m";
      case Style::kPlain:
        return "";
    }
    return "";
  };
  std::string out;
  const auto line = [&](const auto& text_of, const auto& style_of) {
    std::string l;
    for (std::size_t k = 0; k < shown.size(); ++k) {
      const std::size_t c = shown[k];
      const std::string& text = text_of(c);
      const Style style = style_of(c);
      const bool paint = colour == Colour::kOn && style != Style::kPlain;
      if (paint) l += code(style);
      l += text;
      if (paint) l += "\033[0m";
      if (k + 1 < shown.size()) l += std::string(widths[c] - text.size() + 3, ' ');
    }
    out += l + "\n";
  };
  if (!table.rows.empty()) {
    line([&](std::size_t c) -> const std::string& { return table.columns[c].header; },
         [](std::size_t) { return Style::kPlain; });
    for (const auto& row : table.rows) {
      line([&](std::size_t c) -> const std::string& { return row[c].text; },
           [&](std::size_t c) { return row[c].style; });
    }
  }
  for (const std::string& note : table.notes) out += note + "\n";
  return out;
}

nlohmann::json RenderJson(const Table& table) {
  Json items = Json::array();
  for (const auto& row : table.rows) {
    Json item = Json::object();
    for (std::size_t c = 0; c < table.columns.size(); ++c)
      item[table.columns[c].key] = row[c].value;
    items.push_back(std::move(item));
  }
  return {{"kind", "gpumux.io/" + table.kind}, {"items", std::move(items)}, {"notes", table.notes}};
}

}  // namespace gpumux::inspect
