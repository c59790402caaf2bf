// The allocation ledger: the single source of truth of what is placed where.
//
// Per GPU it holds the milli-GPU and MiB in use and the tenants; per node the CPU, memory and
// pod slots in use. Assign is all or nothing; Release returns exactly what Assign took.
// Invariants (checked by CheckInvariants, and by Assign/Release before they change anything):
//   * no GPU, node CPU, node memory or pod count is ever over capacity;
//   * a tenant holding a GPU exclusively is its only tenant;
//   * a tenant is assigned once and released once; a GPU appears once in a tenant's set;
//   * unhealthy GPUs receive no new tenants.
// Memory: O(nodes + GPUs + the most tenants ever live at once). A released tenant's slot (its
// TenantIndex) is given to a later Assign, so assign/release churn (the extender places a pod's
// containers on every candidate node as a trial and releases them) does not grow the ledger.
// Thread safety: none; callers serialise access (the simulator is single-threaded, daemons
// guard the ledger with their own lock).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gpumux/core/cluster.h"
#include "gpumux/core/quantity.h"
#include "gpumux/core/request.h"
#include "gpumux/core/result.h"

namespace gpumux::core {

// A live tenant's slot in the ledger. Stable while the tenant is placed; after its Release the
// same index may be given to a later tenant, so an index says nothing about arrival order and
// must not be kept past the tenant's release (key by Tenant::key for that).
using TenantIndex = std::int32_t;

// A concrete choice: a node and the indices (on that node) of the GPUs granted.
struct Placement {
  NodeIndex node = -1;
  std::vector<int> gpus;  // ascending, size == request.gpu_count
};

struct Tenant {
  std::string key;  // unique, e.g. pod UID or trace pod name
  Request request;
  Placement placement;
};

// Read-only view of one node's free resources, cheap to make. Spans stay valid until the next
// Assign/Release on the ledger.
struct NodeView {
  NodeIndex index = -1;
  const NodeSpec* spec = nullptr;
  MilliCpu cpu_free = 0;
  MiB memory_free = 0;
  int pods_free = 0;
  // Per GPU, what a new tenant could still get: 0 on GPUs held exclusively or unhealthy.
  std::span<const MilliGpu> gpu_free_milli;
  std::span<const MiB> gpu_free_mib;
  std::span<const std::uint16_t> gpu_tenants;  // number of tenants per GPU
  std::span<const ModelId> gpu_model;
  std::span<const TenantIndex> tenants;  // tenants on this node, in arrival order
                                         // (the order of Assign calls, not of indices)
  std::uint64_t generation = 0;          // changes on every Assign/Release touching this node

  int gpu_count() const { return static_cast<int>(gpu_free_milli.size()); }
  MilliGpu gpu_free_milli_total() const;
  // True when GPU i is whole: no tenant, healthy, all compute and memory free.
  bool GpuIsIdle(int i) const;
};

// Whether GPU `i` of `node` can take one GPU's share of `request`, given the request's
// acceptable-model mask. O(1).
bool GpuAdmits(const NodeView& node, int i, const Request& request, ModelMask models);
// Whether `request` fits on `node` at all (CPU, memory, pods, and enough admitting GPUs).
// O(number of GPUs on the node).
bool NodeFits(const NodeView& node, const Request& request, ModelMask models);

class Ledger {
 public:
  // The cluster must outlive the ledger.
  explicit Ledger(const Cluster& cluster);

  const Cluster& cluster() const { return *cluster_; }
  NodeView Node(NodeIndex i) const;
  // The node's generation alone (NodeView::generation), O(1): lets callers skip building a
  // view for a node that has not changed.
  std::uint64_t Generation(NodeIndex i) const {
    return nodes_[static_cast<std::size_t>(i)].generation;
  }

  // Places `request` under `key` exactly as `placement` says, or changes nothing and returns
  // an error naming the first reason (unknown node, duplicate key, wrong GPU count, a GPU
  // that does not admit it, CPU/memory/pods exhausted). O(GPUs in placement + log tenants).
  Result<TenantIndex> Assign(std::string_view key, const Request& request,
                             const Placement& placement);
  // Returns the tenant's resources. Error if the key is unknown (already released).
  Result<void> Release(std::string_view key);

  const Tenant* FindTenant(std::string_view key) const;
  // `t` must be live (returned by Assign, not yet released). O(1).
  const Tenant& tenant(TenantIndex t) const { return tenants_[static_cast<std::size_t>(t)]; }
  std::size_t tenant_count() const { return live_tenants_; }

  // Totals over the cluster.
  MilliGpu used_gpu_milli() const { return used_gpu_milli_; }
  MilliCpu used_cpu_milli() const { return used_cpu_milli_; }
  // GPUs with at least one tenant.
  std::int64_t busy_gpus() const { return busy_gpus_; }

  // Aborts with a message if any invariant is broken. O(everything); for tests and debugging.
  void CheckInvariants() const;

 private:
  struct NodeUse {
    MilliCpu cpu_used = 0;
    MiB memory_used = 0;
    int pods = 0;
    std::uint64_t generation = 0;
    std::vector<TenantIndex> tenants;
  };
  std::size_t Gpu(NodeIndex n, int i) const {
    return static_cast<std::size_t>(cluster_->gpu_offset(n) + i);
  }
  Result<void> CheckAssignable(std::string_view key, const Request& request,
                               const Placement& placement) const;

  const Cluster* cluster_;
  std::vector<NodeUse> nodes_;
  // Flat per-GPU arrays (cluster-wide index).
  std::vector<MilliGpu> gpu_used_milli_;
  std::vector<MiB> gpu_used_mib_;
  std::vector<MilliGpu> gpu_free_milli_;  // what NodeView shows
  std::vector<MiB> gpu_free_mib_;
  std::vector<std::uint16_t> gpu_tenants_;
  std::vector<std::uint8_t> gpu_exclusive_;
  std::vector<Tenant> tenants_;  // live tenants and free slots (placement.node = -1, no key)
  std::vector<TenantIndex> free_slots_;  // released slots, reused last-released first
  std::unordered_map<std::string, TenantIndex> by_key_;
  std::size_t live_tenants_ = 0;
  MilliGpu used_gpu_milli_ = 0;
  MilliCpu used_cpu_milli_ = 0;
  std::int64_t busy_gpus_ = 0;
};

}  // namespace gpumux::core
