#include "gpumux/sim/packing_bound.h"

#include <glpk.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <tuple>

#include "gpumux/core/check.h"
#include "gpumux/core/ledger.h"
#include "gpumux/core/rng.h"
#include "gpumux/policy/engine.h"
#include "gpumux/policy/lp_environment.h"
#include "gpumux/policy/registry.h"
#include "src/sim/parallel.h"

namespace gpumux::sim {

namespace {

// Nodes pooled by what the LP looks at. What it keeps of a node's GPUs may only overstate what
// they can take (the bound must stay above every packing): every model on the node, the largest
// GPU memory for whether one pod fits, the sum for the capacity.
struct NodeShape {
  core::MilliCpu cpu = 0;
  core::MiB memory = 0;
  int gpus = 0;
  std::vector<std::string> models;  // sorted, distinct
  core::MiB gpu_mib_max = 0;        // of one GPU
  core::MiB gpu_mib_total = 0;      // of all of them
  auto Key() const { return std::tie(cpu, memory, gpus, models, gpu_mib_max, gpu_mib_total); }
  bool operator<(const NodeShape& o) const { return Key() < o.Key(); }
};

struct PodShape {
  core::MilliCpu cpu = 0;
  core::MiB memory = 0;
  int gpus = 0;
  core::MilliGpu milli = 0;  // per GPU
  core::MiB gpu_mib = 0;     // per GPU
  std::vector<std::string> models;
  auto Key() const { return std::tie(cpu, memory, gpus, milli, gpu_mib, models); }
  bool operator<(const PodShape& o) const { return Key() < o.Key(); }
  core::MilliGpu total_milli() const { return milli * gpus; }
  bool Fits(const NodeShape& n) const {
    if (cpu > n.cpu || memory > n.memory || gpus > n.gpus) return false;
    if (gpu_mib > n.gpu_mib_max) return false;
    return models.empty() || std::find_first_of(models.begin(), models.end(), n.models.begin(),
                                                n.models.end()) != models.end();
  }
  // Its weight in cut k: Fekete and Schepers' dual feasible function u_k of the share x =
  // milli / 1000 (x when (k+1)x is whole, else floor((k+1)x) / k), per GPU. The shares on one
  // GPU sum to at most 1, so their weights do too (a whole GPU weighs 1).
  double CutWeight(int k) const {
    const std::int64_t scaled = (k + 1) * milli;
    const double u = scaled % core::kMilliPerGpu == 0
                         ? static_cast<double>(milli) / core::kMilliPerGpu
                         : static_cast<double>(scaled / core::kMilliPerGpu) / k;
    return u * gpus;
  }
};

struct GlpkDeleter {
  void operator()(glp_prob* p) const { glp_delete_prob(p); }
};

// The pooled LP and its solution: how many pods of each shape it puts on each node shape.
struct PooledLp {
  LpBound bound;
  std::vector<NodeShape> node_shapes;
  std::map<PodShape, std::size_t> pod_shape_index;
  struct Use {
    std::size_t pod_shape = 0;
    std::size_t node_shape = 0;
    double pods = 0;
  };
  std::vector<Use> uses;  // x > 0 only
};

NodeShape ShapeOf(const core::NodeSpec& n) {
  NodeShape s{n.cpu_milli, n.memory_mib, static_cast<int>(n.gpus.size()), {}, 0, 0};
  for (const core::GpuSpec& g : n.gpus) {
    s.models.push_back(g.model);
    s.gpu_mib_max = std::max(s.gpu_mib_max, g.memory_mib);
    s.gpu_mib_total += g.memory_mib;
  }
  std::sort(s.models.begin(), s.models.end());
  s.models.erase(std::unique(s.models.begin(), s.models.end()), s.models.end());
  return s;
}

PodShape ShapeOf(const core::Request& p) {
  std::vector<std::string> models = p.gpu_models;
  std::sort(models.begin(), models.end());
  return PodShape{p.cpu_milli, p.memory_mib, p.gpu_count,
                  p.gpu_milli, p.gpu_mib,    std::move(models)};
}

using NodeShapes = std::vector<std::pair<NodeShape, std::int64_t>>;  // shape, nodes

// Pods the LP counts together: one shape and the same weight in every curve floor (the share of
// one pod's GPU milli that counts towards the floor: 1 before the floor's column, less inside
// it, 0 after). Without floors a class is a shape.
struct PodClass {
  PodShape shape;
  std::vector<double> floor_weight;
  auto Key() const { return std::tie(shape, floor_weight); }
  bool operator<(const PodClass& o) const { return Key() < o.Key(); }
};
using PodShapes = std::vector<std::pair<PodClass, std::int64_t>>;  // class, pods arrived

// Every way to fill one GPU: the multisets of the pods' per-GPU milli that sum to at most a GPU
// (Gilmore and Gomory's configurations). In any packing each GPU holds one of them, so counting
// the GPUs per configuration bounds what the GPUs' remainders can take: two 470s leave 60 milli
// that only a 50 fills, where the milli row alone lets six such remainders add up to a 320.
struct Configurations {
  std::vector<core::MilliGpu> sizes;                    // distinct, ascending, above 0
  std::vector<std::vector<std::pair<int, int>>> fills;  // per configuration: (size index, pods)
};

// More configurations than this (many small sizes) and the rows are left out: the bound is the
// pooled LP's alone. The trace's lists have about 7,000.
constexpr std::size_t kMaxConfigurations = 200000;

Configurations ConfigurationsOf(const PodShapes& shapes) {
  Configurations c;
  for (const auto& [cls, count] : shapes) {
    if (cls.shape.milli > 0) c.sizes.push_back(cls.shape.milli);
  }
  std::sort(c.sizes.begin(), c.sizes.end());
  c.sizes.erase(std::unique(c.sizes.begin(), c.sizes.end()), c.sizes.end());
  std::vector<std::pair<int, int>> fill;
  bool too_many = false;
  const std::function<void(std::size_t, core::MilliGpu)> walk = [&](std::size_t i,
                                                                    core::MilliGpu room) {
    if (too_many) return;
    if (i == c.sizes.size()) {
      if (!fill.empty()) c.fills.push_back(fill);
      too_many = c.fills.size() > kMaxConfigurations;
      return;
    }
    walk(i + 1, room);
    for (int k = 1; static_cast<core::MilliGpu>(k) * c.sizes[i] <= room; ++k) {
      fill.emplace_back(static_cast<int>(i), k);
      walk(i + 1, room - static_cast<core::MilliGpu>(k) * c.sizes[i]);
      fill.pop_back();
    }
  };
  walk(0, core::kMilliPerGpu);
  if (too_many) return {};
  return c;
}

// Rows, in this order:
// - one per pod class: at most as many as arrived;
// - per node shape: CPU, memory, GPU milli, GPU memory and cuts k = 1..kCuts (the weights of the
//   shares on a node shape's GPUs are at most its GPUs: PodShape::CutWeight);
// - one per curve floor: the GPU milli placed, weighted as FloorRows says, at least the floor's;
// - one per pod size (per-GPU milli) of the configurations: the GPUs that pods of that size take
//   are at most the places for that size in the configurations counted;
// - one: the configurations counted are at most the cluster's GPUs.
constexpr int kCuts = 4;  // more (up to 10 tried) do not lower the bound on the trace
constexpr int kPerNode = 4 + kCuts;

struct Layout {
  int node_base = 0;   // first row of the node shapes' rows, 1-based
  int floor_base = 0;  // first floor row
  int size_base = 0;   // first pod-size row
  int gpu_row = 0;     // the configurations' GPU count
  int rows = 0;
};

Layout LayoutOf(const PodShapes& shapes, const NodeShapes& nodes, std::size_t floors,
                const Configurations& configurations) {
  Layout l;
  l.node_base = static_cast<int>(shapes.size()) + 1;
  l.floor_base = l.node_base + kPerNode * static_cast<int>(nodes.size());
  l.size_base = l.floor_base + static_cast<int>(floors);
  l.gpu_row = l.size_base + static_cast<int>(configurations.sizes.size());
  l.rows = l.gpu_row - 1 + (configurations.fills.empty() ? 0 : 1);
  return l;
}

void AddRows(glp_prob* lp, const Layout& l, const PodShapes& shapes, const NodeShapes& nodes,
             std::span<const double> floor_milli, const Configurations& configurations) {
  glp_add_rows(lp, l.rows);
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    glp_set_row_bnds(lp, static_cast<int>(i) + 1, GLP_UP, 0.0,
                     static_cast<double>(shapes[i].second));
  }
  double gpus = 0;
  for (std::size_t t = 0; t < nodes.size(); ++t) {
    const NodeShape& n = nodes[t].first;
    const auto count = static_cast<double>(nodes[t].second);
    gpus += count * n.gpus;
    double caps[kPerNode] = {count * static_cast<double>(n.cpu),
                             count * static_cast<double>(n.memory),
                             count * n.gpus * static_cast<double>(core::kMilliPerGpu),
                             count * static_cast<double>(n.gpu_mib_total)};
    for (int k = 1; k <= kCuts; ++k) caps[3 + k] = count * n.gpus;
    for (int k = 0; k < kPerNode; ++k) {
      glp_set_row_bnds(lp, l.node_base + kPerNode * static_cast<int>(t) + k, GLP_UP, 0.0, caps[k]);
    }
  }
  for (std::size_t f = 0; f < floor_milli.size(); ++f) {
    glp_set_row_bnds(lp, l.floor_base + static_cast<int>(f), GLP_LO, floor_milli[f], 0.0);
  }
  if (configurations.fills.empty()) return;
  for (std::size_t s = 0; s < configurations.sizes.size(); ++s) {
    glp_set_row_bnds(lp, l.size_base + static_cast<int>(s), GLP_UP, 0.0, 0.0);
  }
  glp_set_row_bnds(lp, l.gpu_row, GLP_UP, 0.0, gpus);
}

// Columns: one per (pod class, node shape) where one such pod fits one such node, maximising
// the GPU milli placed, then one per configuration (how many GPUs hold it). Returns what each
// of the first columns is: column c -> (pod class, node shape) at c.
std::vector<std::pair<std::size_t, std::size_t>> AddColumns(glp_prob* lp, const Layout& l,
                                                            const PodShapes& shapes,
                                                            const NodeShapes& nodes,
                                                            const Configurations& configurations) {
  std::vector<std::pair<std::size_t, std::size_t>> column_use{{0, 0}};
  std::vector<int> ia{0};
  std::vector<int> ja{0};
  std::vector<double> ar{0.0};
  const auto put = [&](int row, int col, double v) {
    ia.push_back(row);
    ja.push_back(col);
    ar.push_back(v);
  };
  const bool counted = !configurations.fills.empty();
  for (std::size_t p = 0; p < shapes.size(); ++p) {
    const PodShape& s = shapes[p].first.shape;
    const std::vector<double>& weight = shapes[p].first.floor_weight;
    const auto size =
        std::lower_bound(configurations.sizes.begin(), configurations.sizes.end(), s.milli) -
        configurations.sizes.begin();
    for (std::size_t t = 0; t < nodes.size(); ++t) {
      if (!s.Fits(nodes[t].first)) continue;
      const int col = glp_add_cols(lp, 1);
      column_use.emplace_back(p, t);
      glp_set_col_bnds(lp, col, GLP_LO, 0.0, 0.0);
      glp_set_obj_coef(lp, col, static_cast<double>(s.total_milli()));
      double coef[kPerNode] = {static_cast<double>(s.cpu), static_cast<double>(s.memory),
                               static_cast<double>(s.total_milli()),
                               static_cast<double>(s.gpus) * static_cast<double>(s.gpu_mib)};
      for (int k = 1; k <= kCuts; ++k) coef[3 + k] = s.CutWeight(k);
      put(static_cast<int>(p) + 1, col, 1.0);
      const int base = l.node_base + kPerNode * static_cast<int>(t);
      for (int k = 0; k < kPerNode; ++k) {
        if (coef[k] != 0.0) put(base + k, col, coef[k]);
      }
      for (std::size_t f = 0; f < weight.size(); ++f) {
        if (weight[f] > 0) {
          put(l.floor_base + static_cast<int>(f), col,
              static_cast<double>(s.total_milli()) * weight[f]);
        }
      }
      if (counted && s.milli > 0) put(l.size_base + static_cast<int>(size), col, s.gpus);
    }
  }
  for (const auto& fill : configurations.fills) {
    const int col = glp_add_cols(lp, 1);
    glp_set_col_bnds(lp, col, GLP_LO, 0.0, 0.0);
    for (const auto& [size, pods] : fill) put(l.size_base + size, col, -pods);
    put(l.gpu_row, col, 1.0);
  }
  if (ia.size() > 1) {
    glp_load_matrix(lp, static_cast<int>(ia.size()) - 1, ia.data(), ja.data(), ar.data());
  }
  return column_use;
}

// Curve floors as LP rows: per floor the GPU milli that must be allocated, and per pod (in
// arrival order) the share of its GPU milli that counts in each (sim/packing_bound.h).
struct FloorRows {
  std::vector<double> milli;
  std::vector<std::vector<double>> weight;  // [pod][floor]
};

FloorRows FloorRowsOf(const core::Cluster& cluster, std::span<const core::Request> arrivals,
                      std::span<const CurveFloor> floors) {
  // The curve's column of each arrival, rounded as the experiment rounds it.
  std::vector<int> column(arrivals.size());
  core::MilliGpu arrived = 0;
  for (std::size_t i = 0; i < arrivals.size(); ++i) {
    arrived += arrivals[i].total_gpu_milli();
    column[i] = ArrivedColumn(arrived, cluster.total_gpus());
  }
  FloorRows rows;
  rows.weight.resize(arrivals.size());
  for (const CurveFloor& f : floors) {
    const auto in_column =
        static_cast<std::size_t>(std::count(column.begin(), column.end(), f.column));
    if (in_column == 0) continue;  // the prefix ends before it: no row (the bound stays valid)
    rows.milli.push_back(f.alloc_pct / 100.0 * static_cast<double>(cluster.total_gpu_milli()));
    // The column's value is the mean over its arrivals of the allocation after each: a pod
    // counts fully in the arrivals after the column's first, and in the column's arrivals from
    // its own on.
    std::size_t seen = 0;
    for (std::size_t i = 0; i < arrivals.size(); ++i) {
      double w = 0;
      if (column[i] < f.column) {
        w = 1;
      } else if (column[i] == f.column) {
        w = static_cast<double>(in_column - seen) / static_cast<double>(in_column);
        ++seen;
      }
      rows.weight[i].push_back(w);
    }
  }
  return rows;
}

core::Result<PooledLp> SolvePooledLp(const core::Cluster& cluster,
                                     std::span<const core::Request> pods,
                                     const FloorRows& floors = {}) {
  const auto start = std::chrono::steady_clock::now();
  std::map<NodeShape, std::int64_t> node_count;
  for (const core::NodeSpec& n : cluster.nodes()) {
    if (n.gpus.empty()) continue;  // holds no GPU milli; CPU-only pods are left out too
    ++node_count[ShapeOf(n)];
  }
  std::map<PodClass, std::int64_t> pod_count;
  for (std::size_t i = 0; i < pods.size(); ++i) {
    if (!pods[i].wants_gpu()) continue;
    ++pod_count[PodClass{ShapeOf(pods[i]),
                         floors.milli.empty() ? std::vector<double>{} : floors.weight[i]}];
  }
  const NodeShapes nodes(node_count.begin(), node_count.end());
  const PodShapes shapes(pod_count.begin(), pod_count.end());

  PooledLp solved;
  LpBound& out = solved.bound;
  out.pod_shapes = shapes.size();
  out.node_shapes = nodes.size();
  for (const auto& [shape, count] : nodes) solved.node_shapes.push_back(shape);
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    solved.pod_shape_index[shapes[i].first.shape] = i;  // one class per shape without floors
  }
  if (shapes.empty() || nodes.empty()) return solved;

  const policy::LpEnvironmentRelease environment;  // a solve on a worker thread (ComputeBounds)
  std::unique_ptr<glp_prob, GlpkDeleter> lp(glp_create_prob());
  glp_set_obj_dir(lp.get(), GLP_MAX);
  const Configurations configurations = ConfigurationsOf(shapes);
  out.configurations = configurations.fills.size();
  const Layout layout = LayoutOf(shapes, nodes, floors.milli.size(), configurations);
  AddRows(lp.get(), layout, shapes, nodes, floors.milli, configurations);
  const auto column_use = AddColumns(lp.get(), layout, shapes, nodes, configurations);
  out.variables = column_use.size() - 1;
  if (out.variables == 0) return solved;
  glp_smcp params;
  glp_init_smcp(&params);
  params.msg_lev = GLP_MSG_OFF;
  params.presolve = GLP_ON;
  glp_term_out(GLP_OFF);  // GLPK's own progress lines go to stdout
  glp_scale_prob(lp.get(), GLP_SF_AUTO);
  const int ret = glp_simplex(lp.get(), &params);
  const int status = glp_get_status(lp.get());
  if (ret == GLP_ENOPFS || status == GLP_NOFEAS) {
    return core::MakeError(core::ErrorCode::kFailedPrecondition,
                           "no packing of these pods reaches every curve floor (the LP has no "
                           "feasible solution)");
  }
  if (ret != 0 || status != GLP_OPT) {
    return core::MakeError(core::ErrorCode::kFailedPrecondition,
                           "the LP solver (GLPK) did not find the optimum: glp_simplex returned " +
                               std::to_string(ret) + ", status " + std::to_string(status));
  }
  const double capacity = static_cast<double>(cluster.total_gpu_milli());
  out.alloc_pct = std::min(100.0, glp_get_obj_val(lp.get()) / capacity * 100.0);
  for (std::size_t c = 1; c < column_use.size(); ++c) {
    const double x = glp_get_col_prim(lp.get(), static_cast<int>(c));
    if (x > 1e-9) solved.uses.push_back({column_use[c].first, column_use[c].second, x});
  }
  out.solve_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return solved;
}

}  // namespace

core::Result<LpBound> LpAllocationBound(const core::Cluster& cluster,
                                        std::span<const core::Request> pods) {
  auto solved = SolvePooledLp(cluster, pods);
  if (!solved) return tl::unexpected(solved.error());
  return solved->bound;
}

core::Result<LpBound> LpAllocationBoundAbove(const core::Cluster& cluster,
                                             std::span<const core::Request> arrivals,
                                             std::span<const CurveFloor> floors) {
  auto solved = SolvePooledLp(cluster, arrivals, FloorRowsOf(cluster, arrivals, floors));
  if (!solved) return tl::unexpected(solved.error());
  return solved->bound;
}

std::vector<Arrival> DemandPrefix(const Workload& workload, const ArrivalPlan& plan,
                                  double demand_pct) {
  std::vector<Arrival> out;
  core::MilliGpu arrived = 0;
  for (const Arrival& a : plan.arrivals) {
    arrived += workload.pods[a.pod].total_gpu_milli();
    // The experiment's own rounding of arrived %, so that the prefix is the curve's column.
    if (ArrivedColumn(arrived, workload.cluster.total_gpus()) > demand_pct) break;
    out.push_back(a);
  }
  return out;
}

core::Result<HindsightResult> HindsightPacking(const Workload& workload, const ArrivalPlan& plan,
                                               std::span<const Arrival> prefix,
                                               std::span<const std::string> policies,
                                               std::uint64_t seed) {
  ArrivalPlan in_order;
  in_order.node_rank = plan.node_rank;
  in_order.origin = plan.origin;
  in_order.arrivals.assign(prefix.begin(), prefix.end());
  ArrivalPlan sorted = in_order;
  sorted.origin = plan.origin + ", sorted with hindsight";
  std::stable_sort(sorted.arrivals.begin(), sorted.arrivals.end(),
                   [&](const Arrival& a, const Arrival& b) {
                     const core::Request& x = workload.pods[a.pod];
                     const core::Request& y = workload.pods[b.pod];
                     return std::make_tuple(x.total_gpu_milli(), x.gpu_milli) >
                            std::make_tuple(y.total_gpu_milli(), y.gpu_milli);
                   });
  HindsightResult best;
  for (const auto& [order, how] :
       {std::pair{&in_order, ", in arrival order"}, std::pair{&sorted, ", largest first"}}) {
    for (const std::string& policy : policies) {
      auto r = RunExperiment(workload, *order, policy, seed, 1.0);
      if (!r) return tl::unexpected(r.error());
      const double pct = static_cast<double>(r->used_gpu_milli) /
                         static_cast<double>(workload.cluster.total_gpu_milli()) * 100.0;
      if (best.policy.empty() || pct > best.alloc_pct) best = {pct, policy + how};
    }
  }
  return best;
}

namespace {

// The LP's whole pods per pod shape, as (node shape, pods) pairs, most pods first; and the nodes
// of each node shape.
struct Quotas {
  std::vector<std::vector<std::pair<std::size_t, std::int64_t>>> quota;
  std::vector<std::vector<core::NodeIndex>> nodes_of;
};

Quotas QuotasOf(const PooledLp& solved, const core::Cluster& cluster) {
  Quotas q;
  q.quota.resize(solved.bound.pod_shapes);
  for (const PooledLp::Use& u : solved.uses) {
    const auto whole = static_cast<std::int64_t>(std::floor(u.pods + 1e-6));
    if (whole > 0) q.quota[u.pod_shape].emplace_back(u.node_shape, whole);
  }
  for (auto& pairs : q.quota) {
    std::stable_sort(pairs.begin(), pairs.end(),
                     [](const auto& a, const auto& b) { return a.second > b.second; });
  }
  std::map<NodeShape, std::size_t> node_shape_index;
  for (std::size_t t = 0; t < solved.node_shapes.size(); ++t) {
    node_shape_index[solved.node_shapes[t]] = t;
  }
  q.nodes_of.resize(solved.node_shapes.size());
  for (core::NodeIndex n = 0; n < cluster.size(); ++n) {
    const core::NodeSpec& spec = cluster.node(n);
    if (!spec.gpus.empty()) q.nodes_of[node_shape_index.at(ShapeOf(spec))].push_back(n);
  }
  return q;
}

}  // namespace

core::Result<HindsightResult> LpGuidedPacking(const Workload& workload, const ArrivalPlan& plan,
                                              std::span<const Arrival> prefix, std::uint64_t seed) {
  std::vector<const Arrival*> gpu_pods;
  std::vector<core::Request> requests;
  for (const Arrival& a : prefix) {
    if (!workload.pods[a.pod].wants_gpu()) continue;
    gpu_pods.push_back(&a);
    requests.push_back(workload.pods[a.pod]);
  }
  auto solved = SolvePooledLp(workload.cluster, requests);
  if (!solved) return tl::unexpected(solved.error());
  Quotas quotas = QuotasOf(*solved, workload.cluster);
  auto& quota = quotas.quota;  // used up as pods are placed
  const auto& nodes_of = quotas.nodes_of;

  constexpr std::string_view kPolicy = "fgd";
  policy::PolicyContext context;
  context.typical_pods = workload.typical;
  auto made = policy::BuiltinPolicies().Make(kPolicy, context);
  if (!made) return tl::unexpected(made.error());
  core::Ledger ledger(workload.cluster);
  core::Rng rng(seed, "policy");
  policy::Engine engine(ledger, **made, plan.node_rank, rng);

  // Largest first (GPU milli, then CPU); each on the best node, by the policy's score, of a
  // node shape the LP gave its shape whole pods on; what finds none there goes anywhere after.
  std::vector<std::size_t> order(gpu_pods.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const core::Request& x = requests[a];
    const core::Request& y = requests[b];
    return std::make_tuple(x.total_gpu_milli(), x.gpu_milli, x.cpu_milli) >
           std::make_tuple(y.total_gpu_milli(), y.gpu_milli, y.cpu_milli);
  });
  const auto assign = [&](std::size_t i, const policy::Decision& d) {
    auto assigned = ledger.Assign(gpu_pods[i]->name, d.request, *d.placement);
    GPUMUX_CHECK(assigned.has_value(), "the engine chose a placement the ledger refuses");
  };
  std::vector<std::size_t> leftovers;
  for (std::size_t i : order) {
    const core::Request& pod = requests[i];
    bool placed = false;
    for (auto& [t, left] : quota[solved->pod_shape_index.at(ShapeOf(pod))]) {
      if (left == 0) continue;
      const std::vector<std::int64_t> scores = engine.ScoreNodes(pod, nodes_of[t]);
      std::size_t best = scores.size();
      for (std::size_t k = 0; k < scores.size(); ++k) {
        if (scores[k] == policy::Engine::kNoFit || scores[k] == policy::Policy::kDecline) continue;
        if (best == scores.size() || scores[k] > scores[best]) best = k;
      }
      if (best == scores.size()) continue;
      const policy::Decision d = engine.DecideOn(pod, nodes_of[t][best]);
      if (!d.placement) continue;
      assign(i, d);
      --left;
      placed = true;
      break;
    }
    if (!placed) leftovers.push_back(i);
  }
  for (std::size_t i : leftovers) {
    const policy::Decision d = engine.Decide(requests[i]);
    if (d.placement) assign(i, d);
  }
  return HindsightResult{static_cast<double>(ledger.used_gpu_milli()) /
                             static_cast<double>(workload.cluster.total_gpu_milli()) * 100.0,
                         "LP-guided " + std::string(kPolicy)};
}

core::Result<std::vector<BoundRow>> ComputeBounds(
    const Workload& workload, std::span<const std::uint64_t> seeds, std::span<const double> demands,
    const BoundOptions& options, const std::function<void(std::size_t done)>& progress) {
  const double load = *std::max_element(demands.begin(), demands.end()) / 100.0;
  std::vector<std::vector<BoundRow>> per_seed(seeds.size());
  std::vector<std::optional<core::Error>> errors(seeds.size());
  // One seed's rows; an error stops that seed.
  const auto seed_rows = [&](std::uint64_t seed) -> core::Result<std::vector<BoundRow>> {
    const ArrivalPlan plan = MakeStudyArrivals(workload.pods, workload.cluster, seed, load);
    std::optional<ExperimentResult> floor_run;
    if (!options.at_least.empty()) {
      auto r = RunExperiment(workload, plan, options.at_least, seed, load);
      if (!r) return tl::unexpected(r.error());
      floor_run = std::move(*r);
    }
    std::vector<BoundRow> rows;
    for (double demand : demands) {
      BoundRow row{seed, demand, 0, {}, {}, {}, {}};
      const std::vector<Arrival> prefix = DemandPrefix(workload, plan, demand);
      row.arrivals = prefix.size();
      std::vector<core::Request> pods;
      pods.reserve(prefix.size());
      for (const Arrival& a : prefix) pods.push_back(workload.pods[a.pod]);
      auto lp = LpAllocationBound(workload.cluster, pods);
      if (!lp) return tl::unexpected(lp.error());
      row.lp = *lp;
      auto hindsight = HindsightPacking(workload, plan, prefix, options.hindsight_policies, seed);
      if (!hindsight) return tl::unexpected(hindsight.error());
      row.hindsight = *hindsight;
      auto guided = LpGuidedPacking(workload, plan, prefix, seed);
      if (!guided) return tl::unexpected(guided.error());
      if (guided->alloc_pct > row.hindsight.alloc_pct) row.hindsight = *guided;
      if (floor_run) {
        const Curve& curve = floor_run->alloc_curve;
        row.at_least_pct = CurveColumn(curve, static_cast<int>(demand));
        std::vector<CurveFloor> floors;
        for (int x = 50; x <= static_cast<int>(demand); x += options.floor_step) {
          if (const auto v = CurveColumn(curve, x)) floors.push_back({x, *v - 0.01});
        }
        auto above = LpAllocationBoundAbove(workload.cluster, pods, floors);
        if (!above) return tl::unexpected(above.error());
        row.lp_above = *above;
      }
      rows.push_back(std::move(row));
    }
    return rows;
  };
  RunParallel(
      seeds.size(), options.threads,
      [&](std::size_t i) {
        auto rows = seed_rows(seeds[i]);
        if (rows) {
          per_seed[i] = std::move(*rows);
        } else {
          errors[i] = rows.error();
        }
      },
      [&](std::size_t, std::size_t done) {
        if (progress) progress(done);
      });
  std::vector<BoundRow> rows;
  for (std::size_t i = 0; i < seeds.size(); ++i) {
    if (errors[i]) return tl::unexpected(*errors[i]);
    for (BoundRow& r : per_seed[i]) rows.push_back(std::move(r));
  }
  return rows;
}

}  // namespace gpumux::sim
