#include "gpumux/core/ledger.h"

#include <algorithm>
#include <string>

#include "gpumux/core/check.h"

namespace gpumux::core {

MilliGpu NodeView::gpu_free_milli_total() const {
  MilliGpu total = 0;
  for (MilliGpu m : gpu_free_milli) total += m;
  return total;
}

bool NodeView::GpuIsIdle(int i) const {
  const auto g = static_cast<std::size_t>(i);
  return gpu_tenants[g] == 0 && gpu_free_milli[g] == kMilliPerGpu &&
         gpu_free_mib[g] == spec->gpus[g].memory_mib && spec->gpus[g].health == GpuHealth::kHealthy;
}

bool GpuAdmits(const NodeView& node, int i, const Request& request, ModelMask models) {
  const auto g = static_cast<std::size_t>(i);
  if (((models >> node.gpu_model[g]) & 1U) == 0) return false;
  if (request.sharing == GpuSharing::kExclusive) {
    return node.GpuIsIdle(i) && request.gpu_mib <= node.spec->gpus[g].memory_mib;
  }
  return node.gpu_free_milli[g] >= request.gpu_milli && node.gpu_free_mib[g] >= request.gpu_mib &&
         (node.spec->gpus[g].enforces & request.required_enforcement) ==
             request.required_enforcement;
}

bool NodeFits(const NodeView& node, const Request& request, ModelMask models) {
  if (node.cpu_free < request.cpu_milli || node.memory_free < request.memory_mib ||
      node.pods_free < 1) {
    return false;
  }
  if (!request.wants_gpu()) return true;
  int admitting = 0;
  for (int i = 0; i < node.gpu_count() && admitting < request.gpu_count; ++i) {
    if (GpuAdmits(node, i, request, models)) ++admitting;
  }
  return admitting >= request.gpu_count;
}

Ledger::Ledger(const Cluster& cluster) : cluster_(&cluster) {
  nodes_.resize(static_cast<std::size_t>(cluster.size()));
  const auto gpus = static_cast<std::size_t>(cluster.total_gpus());
  gpu_used_milli_.assign(gpus, 0);
  gpu_used_mib_.assign(gpus, 0);
  gpu_free_milli_.assign(gpus, 0);
  gpu_free_mib_.assign(gpus, 0);
  gpu_tenants_.assign(gpus, 0);
  gpu_exclusive_.assign(gpus, 0);
  for (NodeIndex n = 0; n < cluster.size(); ++n) {
    const NodeSpec& spec = cluster.node(n);
    for (std::size_t g = 0; g < spec.gpus.size(); ++g) {
      const bool healthy = spec.gpus[g].health == GpuHealth::kHealthy;
      gpu_free_milli_[Gpu(n, static_cast<int>(g))] = healthy ? kMilliPerGpu : 0;
      gpu_free_mib_[Gpu(n, static_cast<int>(g))] = healthy ? spec.gpus[g].memory_mib : 0;
    }
  }
}

NodeView Ledger::Node(NodeIndex i) const {
  const NodeSpec& spec = cluster_->node(i);
  const NodeUse& use = nodes_[static_cast<std::size_t>(i)];
  const std::size_t first = Gpu(i, 0);
  const std::size_t count = spec.gpus.size();
  NodeView v;
  v.index = i;
  v.spec = &spec;
  v.cpu_free = spec.cpu_milli - use.cpu_used;
  v.memory_free = spec.memory_mib - use.memory_used;
  v.pods_free = spec.max_pods - use.pods;
  v.gpu_free_milli = std::span<const MilliGpu>(gpu_free_milli_).subspan(first, count);
  v.gpu_free_mib = std::span<const MiB>(gpu_free_mib_).subspan(first, count);
  v.gpu_tenants = std::span<const std::uint16_t>(gpu_tenants_).subspan(first, count);
  v.gpu_model = cluster_->GpuModels(i);
  v.tenants = use.tenants;
  v.generation = use.generation;
  return v;
}

Result<void> Ledger::CheckAssignable(std::string_view key, const Request& request,
                                     const Placement& placement) const {
  if (auto valid = request.Validate(); !valid) return valid;
  if (by_key_.count(std::string(key)) != 0) {
    return MakeError(ErrorCode::kAlreadyExists,
                     "tenant " + std::string(key) + " is already placed");
  }
  if (placement.node < 0 || placement.node >= cluster_->size()) {
    return MakeError(ErrorCode::kNotFound,
                     "tenant " + std::string(key) + ": no node #" + std::to_string(placement.node));
  }
  const NodeView node = Node(placement.node);
  const std::string where = "tenant " + std::string(key) + " on " + node.spec->name + ": ";
  if (static_cast<int>(placement.gpus.size()) != request.gpu_count) {
    return MakeError(ErrorCode::kInvalidArgument,
                     where + "placement names " + std::to_string(placement.gpus.size()) +
                         " GPUs, request asks " + std::to_string(request.gpu_count));
  }
  if (node.cpu_free < request.cpu_milli) {
    return MakeError(ErrorCode::kFailedPrecondition,
                     where + "needs " + std::to_string(request.cpu_milli) + "m CPU, " +
                         std::to_string(node.cpu_free) + "m free");
  }
  if (node.memory_free < request.memory_mib) {
    return MakeError(ErrorCode::kFailedPrecondition,
                     where + "needs " + std::to_string(request.memory_mib) + " MiB memory, " +
                         std::to_string(node.memory_free) + " MiB free");
  }
  if (node.pods_free < 1) {
    return MakeError(ErrorCode::kFailedPrecondition, where + "pod limit reached");
  }
  const ModelMask models = cluster_->MaskOf(request.gpu_models);
  for (std::size_t k = 0; k < placement.gpus.size(); ++k) {
    const int g = placement.gpus[k];
    if (g < 0 || g >= node.gpu_count()) {
      return MakeError(ErrorCode::kNotFound, where + "no GPU " + std::to_string(g));
    }
    if (k > 0 && placement.gpus[k - 1] >= g) {
      return MakeError(ErrorCode::kInvalidArgument,
                       where + "GPU indices must be ascending and distinct");
    }
    if (!GpuAdmits(node, g, request, models)) {
      return MakeError(
          ErrorCode::kFailedPrecondition,
          where + "GPU " + std::to_string(g) + " cannot take it (" +
              std::to_string(node.gpu_free_milli[static_cast<std::size_t>(g)]) + " milli-GPU and " +
              std::to_string(node.gpu_free_mib[static_cast<std::size_t>(g)]) + " MiB free, " +
              std::to_string(node.gpu_tenants[static_cast<std::size_t>(g)]) + " tenants, model " +
              node.spec->gpus[static_cast<std::size_t>(g)].model + ")");
    }
  }
  return {};
}

Result<TenantIndex> Ledger::Assign(std::string_view key, const Request& request,
                                   const Placement& placement) {
  if (auto ok = CheckAssignable(key, request, placement); !ok) return tl::unexpected(ok.error());
  NodeUse& use = nodes_[static_cast<std::size_t>(placement.node)];
  const bool exclusive = request.sharing == GpuSharing::kExclusive;
  for (int g : placement.gpus) {
    const std::size_t i = Gpu(placement.node, g);
    if (gpu_tenants_[i] == 0) ++busy_gpus_;
    gpu_used_milli_[i] += request.gpu_milli;
    gpu_used_mib_[i] += request.gpu_mib;
    gpu_free_milli_[i] -= request.gpu_milli;
    gpu_free_mib_[i] -= request.gpu_mib;
    ++gpu_tenants_[i];
    if (exclusive) {
      gpu_exclusive_[i] = 1;
      gpu_free_milli_[i] = 0;
      gpu_free_mib_[i] = 0;
    }
  }
  use.cpu_used += request.cpu_milli;
  use.memory_used += request.memory_mib;
  ++use.pods;
  ++use.generation;
  TenantIndex t = 0;
  if (free_slots_.empty()) {
    GPUMUX_CHECK(tenants_.size() < static_cast<std::size_t>(INT32_MAX), "tenant index overflow");
    t = static_cast<TenantIndex>(tenants_.size());
    tenants_.push_back(Tenant{std::string(key), request, placement});
  } else {
    t = free_slots_.back();
    free_slots_.pop_back();
    Tenant& slot = tenants_[static_cast<std::size_t>(t)];
    slot.key.assign(key);
    slot.request = request;
    slot.placement = placement;
  }
  use.tenants.push_back(t);  // appended: the node's list stays in arrival order
  by_key_.emplace(std::string(key), t);
  ++live_tenants_;
  used_gpu_milli_ += request.total_gpu_milli();
  used_cpu_milli_ += request.cpu_milli;
  return t;
}

Result<void> Ledger::Release(std::string_view key) {
  auto it = by_key_.find(std::string(key));
  if (it == by_key_.end()) {
    return MakeError(ErrorCode::kNotFound, "tenant " + std::string(key) + " is not placed");
  }
  const TenantIndex t = it->second;
  Tenant& tenant = tenants_[static_cast<std::size_t>(t)];
  const Request& r = tenant.request;
  const NodeIndex n = tenant.placement.node;
  const NodeSpec& spec = cluster_->node(n);
  NodeUse& use = nodes_[static_cast<std::size_t>(n)];
  for (int g : tenant.placement.gpus) {
    const std::size_t i = Gpu(n, g);
    GPUMUX_CHECK(gpu_tenants_[i] > 0 && gpu_used_milli_[i] >= r.gpu_milli, "release underflow");
    gpu_used_milli_[i] -= r.gpu_milli;
    gpu_used_mib_[i] -= r.gpu_mib;
    --gpu_tenants_[i];
    if (gpu_tenants_[i] == 0) --busy_gpus_;
    if (r.sharing == GpuSharing::kExclusive) gpu_exclusive_[i] = 0;
    const bool healthy = spec.gpus[static_cast<std::size_t>(g)].health == GpuHealth::kHealthy;
    gpu_free_milli_[i] = healthy && gpu_exclusive_[i] == 0 ? kMilliPerGpu - gpu_used_milli_[i] : 0;
    gpu_free_mib_[i] = healthy && gpu_exclusive_[i] == 0
                           ? spec.gpus[static_cast<std::size_t>(g)].memory_mib - gpu_used_mib_[i]
                           : 0;
  }
  use.cpu_used -= r.cpu_milli;
  use.memory_used -= r.memory_mib;
  --use.pods;
  ++use.generation;
  use.tenants.erase(std::find(use.tenants.begin(), use.tenants.end(), t));
  used_gpu_milli_ -= r.total_gpu_milli();
  used_cpu_milli_ -= r.cpu_milli;
  by_key_.erase(it);
  // The slot goes back for reuse; drop what it held (its strings and GPU list) now.
  tenant = Tenant{};
  free_slots_.push_back(t);
  --live_tenants_;
  return {};
}

const Tenant* Ledger::FindTenant(std::string_view key) const {
  auto it = by_key_.find(std::string(key));
  return it == by_key_.end() ? nullptr : &tenants_[static_cast<std::size_t>(it->second)];
}

void Ledger::CheckInvariants() const {
  const auto gpus = static_cast<std::size_t>(cluster_->total_gpus());
  std::vector<MilliGpu> milli(gpus, 0);
  std::vector<MiB> mib(gpus, 0);
  std::vector<int> count(gpus, 0);
  std::vector<int> exclusive(gpus, 0);
  std::vector<MilliCpu> cpu(nodes_.size(), 0);
  std::vector<MiB> mem(nodes_.size(), 0);
  std::vector<int> pods(nodes_.size(), 0);
  std::size_t live = 0;
  MilliGpu total_milli = 0;
  for (const auto& [key, t] : by_key_) {
    const Tenant& tenant = tenants_[static_cast<std::size_t>(t)];
    GPUMUX_CHECK(tenant.key == key, "tenant key index out of sync");
    const NodeIndex n = tenant.placement.node;
    GPUMUX_CHECK(n >= 0 && n < cluster_->size(), "live tenant without a node");
    const auto& on_node = nodes_[static_cast<std::size_t>(n)].tenants;
    GPUMUX_CHECK(std::count(on_node.begin(), on_node.end(), t) == 1,
                 "tenant missing from its node's list");
    ++live;
    cpu[static_cast<std::size_t>(n)] += tenant.request.cpu_milli;
    mem[static_cast<std::size_t>(n)] += tenant.request.memory_mib;
    ++pods[static_cast<std::size_t>(n)];
    total_milli += tenant.request.total_gpu_milli();
    for (int g : tenant.placement.gpus) {
      const std::size_t i = Gpu(n, g);
      milli[i] += tenant.request.gpu_milli;
      mib[i] += tenant.request.gpu_mib;
      ++count[i];
      if (tenant.request.sharing == GpuSharing::kExclusive) ++exclusive[i];
    }
  }
  GPUMUX_CHECK(live == live_tenants_, "live tenant count out of sync");
  GPUMUX_CHECK(live + free_slots_.size() == tenants_.size(), "tenant slots out of sync");
  for (TenantIndex t : free_slots_) {
    GPUMUX_CHECK(t >= 0 && static_cast<std::size_t>(t) < tenants_.size() &&
                     tenants_[static_cast<std::size_t>(t)].placement.node == -1 &&
                     tenants_[static_cast<std::size_t>(t)].key.empty(),
                 "a free tenant slot is in use");
  }
  GPUMUX_CHECK(total_milli == used_gpu_milli_, "used GPU milli out of sync");
  std::int64_t busy = 0;
  for (NodeIndex n = 0; n < cluster_->size(); ++n) {
    const NodeSpec& spec = cluster_->node(n);
    const auto ni = static_cast<std::size_t>(n);
    GPUMUX_CHECK(cpu[ni] == nodes_[ni].cpu_used && cpu[ni] <= spec.cpu_milli, "node CPU");
    GPUMUX_CHECK(mem[ni] == nodes_[ni].memory_used && mem[ni] <= spec.memory_mib, "node memory");
    GPUMUX_CHECK(pods[ni] == nodes_[ni].pods && pods[ni] <= spec.max_pods, "node pods");
    GPUMUX_CHECK(static_cast<std::size_t>(pods[ni]) == nodes_[ni].tenants.size(), "node tenants");
    for (std::size_t g = 0; g < spec.gpus.size(); ++g) {
      const std::size_t i = Gpu(n, static_cast<int>(g));
      GPUMUX_CHECK(milli[i] == gpu_used_milli_[i] && milli[i] <= kMilliPerGpu, "GPU milli");
      GPUMUX_CHECK(mib[i] == gpu_used_mib_[i] && mib[i] <= spec.gpus[g].memory_mib, "GPU memory");
      GPUMUX_CHECK(count[i] == gpu_tenants_[i], "GPU tenant count");
      GPUMUX_CHECK(exclusive[i] == 0 || count[i] == 1, "exclusive tenant shares its GPU");
      GPUMUX_CHECK((exclusive[i] != 0) == (gpu_exclusive_[i] != 0), "exclusive flag");
      const bool open = spec.gpus[g].health == GpuHealth::kHealthy && exclusive[i] == 0;
      GPUMUX_CHECK(gpu_free_milli_[i] == (open ? kMilliPerGpu - milli[i] : 0), "free milli");
      GPUMUX_CHECK(gpu_free_mib_[i] == (open ? spec.gpus[g].memory_mib - mib[i] : 0), "free MiB");
      if (count[i] > 0) ++busy;
    }
  }
  GPUMUX_CHECK(busy == busy_gpus_, "busy GPU count");
}

}  // namespace gpumux::core
