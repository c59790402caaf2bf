// Randomized property test of the ledger: thousands of random assign/release steps, some valid
// and some deliberately invalid, checked against a model of the ledger kept here, written from
// the contract in ledger.h and not from the implementation.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "gpumux/core/ledger.h"
#include "gpumux/core/rng.h"
#include "tests/testing/builders.h"

namespace gpumux::core {
namespace {

using test::ClusterBuilder;

struct ModelGpu {
  MilliGpu used_milli = 0;
  MiB used_mib = 0;
  int tenants = 0;
  bool exclusive = false;
};

struct ModelNode {
  MilliCpu cpu_used = 0;
  MiB memory_used = 0;
  int pods = 0;
  std::vector<ModelGpu> gpus;
};

struct LiveTenant {
  Request request;
  Placement placement;
};

// The reference model: what the ledger should hold, tracked from the accepted steps only.
class ReferenceLedger {
 public:
  explicit ReferenceLedger(const Cluster& cluster) : cluster_(&cluster) {
    for (const NodeSpec& n : cluster.nodes()) {
      nodes_.push_back(ModelNode{0, 0, 0, std::vector<ModelGpu>(n.gpus.size())});
    }
  }

  static bool Valid(const Request& r) {
    if (r.cpu_milli < 0 || r.memory_mib < 0 || r.gpu_count < 0) return false;
    if (r.gpu_count == 0) return r.gpu_milli == 0 && r.gpu_mib == 0;
    return r.gpu_milli >= 1 && r.gpu_milli <= kMilliPerGpu && r.gpu_mib >= 0;
  }

  bool Accepts(const std::string& key, const Request& r, const Placement& p) const {
    if (!Valid(r) || live_.count(key) != 0) return false;
    if (p.node < 0 || p.node >= cluster_->size()) return false;
    const NodeSpec& spec = cluster_->node(p.node);
    const ModelNode& n = nodes_[static_cast<std::size_t>(p.node)];
    if (static_cast<int>(p.gpus.size()) != r.gpu_count) return false;
    if (n.cpu_used + r.cpu_milli > spec.cpu_milli) return false;
    if (n.memory_used + r.memory_mib > spec.memory_mib) return false;
    if (n.pods + 1 > spec.max_pods) return false;
    for (std::size_t k = 0; k < p.gpus.size(); ++k) {
      const int g = p.gpus[k];
      if (g < 0 || g >= static_cast<int>(spec.gpus.size())) return false;
      if (k > 0 && p.gpus[k - 1] >= g) return false;
      const GpuSpec& gs = spec.gpus[static_cast<std::size_t>(g)];
      const ModelGpu& mg = n.gpus[static_cast<std::size_t>(g)];
      if (gs.health != GpuHealth::kHealthy) return false;
      if (!r.gpu_models.empty() &&
          std::find(r.gpu_models.begin(), r.gpu_models.end(), gs.model) == r.gpu_models.end()) {
        return false;
      }
      if (mg.exclusive) return false;
      if (r.sharing == GpuSharing::kExclusive) {
        if (mg.tenants != 0 || r.gpu_mib > gs.memory_mib) return false;
      } else {
        if (mg.used_milli + r.gpu_milli > kMilliPerGpu) return false;
        if (mg.used_mib + r.gpu_mib > gs.memory_mib) return false;
      }
    }
    return true;
  }

  void Add(const std::string& key, const Request& r, const Placement& p) {
    ModelNode& n = nodes_[static_cast<std::size_t>(p.node)];
    n.cpu_used += r.cpu_milli;
    n.memory_used += r.memory_mib;
    ++n.pods;
    for (int g : p.gpus) {
      ModelGpu& mg = n.gpus[static_cast<std::size_t>(g)];
      mg.used_milli += r.gpu_milli;
      mg.used_mib += r.gpu_mib;
      ++mg.tenants;
      mg.exclusive = r.sharing == GpuSharing::kExclusive;
    }
    live_.emplace(key, LiveTenant{r, p});
  }

  void Remove(const std::string& key) {
    const LiveTenant t = live_.at(key);
    ModelNode& n = nodes_[static_cast<std::size_t>(t.placement.node)];
    n.cpu_used -= t.request.cpu_milli;
    n.memory_used -= t.request.memory_mib;
    --n.pods;
    for (int g : t.placement.gpus) {
      ModelGpu& mg = n.gpus[static_cast<std::size_t>(g)];
      mg.used_milli -= t.request.gpu_milli;
      mg.used_mib -= t.request.gpu_mib;
      --mg.tenants;
      mg.exclusive = false;
    }
    live_.erase(key);
  }

  const std::map<std::string, LiveTenant>& live() const { return live_; }
  const ModelNode& node(NodeIndex n) const { return nodes_[static_cast<std::size_t>(n)]; }

 private:
  const Cluster* cluster_;
  std::vector<ModelNode> nodes_;
  std::map<std::string, LiveTenant> live_;
};

// Checks the ledger against the reference, and the capacity limits from the live tenants alone.
void ExpectMatches(const Ledger& ledger, const ReferenceLedger& ref, int step) {
  const Cluster& cluster = ledger.cluster();
  // Totals: recomputed from the tenants tracked here.
  MilliGpu milli = 0;
  MilliCpu cpu = 0;
  std::vector<std::vector<MilliGpu>> per_gpu(static_cast<std::size_t>(cluster.size()));
  std::vector<MilliCpu> per_node_cpu(static_cast<std::size_t>(cluster.size()), 0);
  for (NodeIndex n = 0; n < cluster.size(); ++n) {
    per_gpu[static_cast<std::size_t>(n)].assign(cluster.node(n).gpus.size(), 0);
  }
  for (const auto& [key, t] : ref.live()) {
    milli += t.request.total_gpu_milli();
    cpu += t.request.cpu_milli;
    per_node_cpu[static_cast<std::size_t>(t.placement.node)] += t.request.cpu_milli;
    for (int g : t.placement.gpus) {
      per_gpu[static_cast<std::size_t>(t.placement.node)][static_cast<std::size_t>(g)] +=
          t.request.gpu_milli;
    }
    const Tenant* lt = ledger.FindTenant(key);
    ASSERT_NE(lt, nullptr) << "step " << step << ": live tenant " << key << " unknown to ledger";
    ASSERT_EQ(lt->placement.node, t.placement.node);
    ASSERT_EQ(lt->placement.gpus, t.placement.gpus);
  }
  ASSERT_EQ(ledger.used_gpu_milli(), milli) << "step " << step;
  ASSERT_EQ(ledger.used_cpu_milli(), cpu) << "step " << step;
  ASSERT_EQ(ledger.tenant_count(), ref.live().size()) << "step " << step;

  std::int64_t busy = 0;
  for (NodeIndex n = 0; n < cluster.size(); ++n) {
    const NodeSpec& spec = cluster.node(n);
    const ModelNode& m = ref.node(n);
    const NodeView v = ledger.Node(n);
    ASSERT_LE(per_node_cpu[static_cast<std::size_t>(n)], spec.cpu_milli) << "step " << step;
    ASSERT_EQ(v.cpu_free, spec.cpu_milli - m.cpu_used) << "step " << step << " node " << n;
    ASSERT_EQ(v.memory_free, spec.memory_mib - m.memory_used) << "step " << step;
    ASSERT_EQ(v.pods_free, spec.max_pods - m.pods) << "step " << step;
    ASSERT_GE(v.cpu_free, 0);
    ASSERT_GE(v.memory_free, 0);
    ASSERT_GE(v.pods_free, 0);
    for (std::size_t g = 0; g < spec.gpus.size(); ++g) {
      const ModelGpu& mg = m.gpus[g];
      ASSERT_LE(per_gpu[static_cast<std::size_t>(n)][g], kMilliPerGpu)
          << "step " << step << " node " << n << " GPU " << g;
      ASSERT_LE(mg.used_mib, spec.gpus[g].memory_mib);
      const bool open = spec.gpus[g].health == GpuHealth::kHealthy && !mg.exclusive;
      ASSERT_EQ(v.gpu_free_milli[g], open ? kMilliPerGpu - mg.used_milli : 0)
          << "step " << step << " node " << n << " GPU " << g;
      ASSERT_EQ(v.gpu_free_mib[g], open ? spec.gpus[g].memory_mib - mg.used_mib : 0);
      ASSERT_EQ(v.gpu_tenants[g], mg.tenants);
      if (mg.exclusive) {
        ASSERT_EQ(mg.tenants, 1);
      }
      if (mg.tenants > 0) ++busy;
    }
  }
  ASSERT_EQ(ledger.busy_gpus(), busy) << "step " << step;
}

// GPUs all have >= 16 GiB and exclusive requests ask at most 16 GiB: see
// LedgerBug.AnExclusiveTenantAskingMoreGpuMemoryThanTheGpuHasIsRefused for larger ones.
Cluster PropertyCluster() {
  return ClusterBuilder()
      .Node("n0", 16000, 32768)
      .Gpus(4, "T4", 16384)
      .MaxPods(6)
      .Node("n1", 8000, 16384)
      .Gpus(2, "A10", 24576)
      .Unhealthy(1)
      .Node("n2", 4000, 8192)
      .MaxPods(3)
      .Node("n3", 32000, 65536)
      .Gpus(8, "T4", 16384)
      .Build();
}

Request RandomRequest(Rng& rng) {
  Request r;
  r.cpu_milli = static_cast<MilliCpu>(rng.Below(9)) * 1000;
  r.memory_mib = static_cast<MiB>(rng.Below(5)) * 2048;
  const std::uint64_t kind = rng.Below(100);
  if (kind < 20) {
    // CPU-only.
  } else if (kind < 55) {
    r.gpu_count = 1;
    r.gpu_milli = 50 * static_cast<MilliGpu>(1 + rng.Below(19));  // 50..950
  } else if (kind < 70) {
    r.gpu_count = 1;
    r.gpu_milli = kMilliPerGpu;
  } else if (kind < 85) {
    r.gpu_count = 2 + static_cast<int>(rng.Below(3));
    r.gpu_milli = rng.Below(2) == 0 ? kMilliPerGpu : 100 * static_cast<MilliGpu>(1 + rng.Below(10));
  } else {
    r.gpu_count = 1 + static_cast<int>(rng.Below(2));
    r.gpu_milli = 100 * static_cast<MilliGpu>(1 + rng.Below(10));
    r.sharing = GpuSharing::kExclusive;
  }
  if (r.gpu_count > 0 && rng.Below(10) < 3) r.gpu_mib = static_cast<MiB>(rng.Below(16385));
  if (r.gpu_count > 0 && rng.Below(10) < 2) {
    static const std::vector<std::vector<std::string>> kModelLists{
        {"T4"}, {"A10"}, {"A10", "T4"}, {"H100"}};
    r.gpu_models = kModelLists[rng.Below(kModelLists.size())];
  }
  const std::uint64_t broken = rng.Below(100);
  if (broken == 0) r.gpu_milli = r.gpu_count > 0 ? 0 : 5;  // invalid either way
  if (broken == 1 && r.gpu_count > 0) r.gpu_milli = kMilliPerGpu + 1;
  if (broken == 2) r.cpu_milli = -1;
  return r;
}

Placement RandomPlacement(Rng& rng, const Cluster& cluster, const Ledger& ledger,
                          const Request& r) {
  Placement p;
  if (rng.Below(2) == 0) {
    // A placement that is valid when the node has room: admitting GPUs, a random subset.
    p.node = static_cast<NodeIndex>(rng.Below(static_cast<std::uint64_t>(cluster.size())));
    const NodeView v = ledger.Node(p.node);
    std::vector<int> admitting;
    for (int g = 0; g < v.gpu_count(); ++g) {
      if (GpuAdmits(v, g, r, cluster.MaskOf(r.gpu_models))) admitting.push_back(g);
    }
    rng.Shuffle(std::span<int>(admitting));
    const auto k = std::min(admitting.size(), static_cast<std::size_t>(std::max(0, r.gpu_count)));
    p.gpus.assign(admitting.begin(), admitting.begin() + static_cast<std::ptrdiff_t>(k));
    std::sort(p.gpus.begin(), p.gpus.end());
    return p;
  }
  // Anything: a node index that may not exist, GPU lists of the wrong size, out of range,
  // unsorted or repeated.
  p.node = static_cast<NodeIndex>(rng.Below(static_cast<std::uint64_t>(cluster.size()) + 2)) - 1;
  const int count = std::max(0, r.gpu_count + static_cast<int>(rng.Below(3)) - 1);
  for (int i = 0; i < count; ++i) p.gpus.push_back(static_cast<int>(rng.Below(10)) - 1);
  if (rng.Below(2) == 0) std::sort(p.gpus.begin(), p.gpus.end());
  return p;
}

class LedgerProperty : public ::testing::TestWithParam<std::uint64_t> {};

TEST_P(LedgerProperty, RandomAssignReleaseSequencesKeepEveryInvariant) {
  const Cluster cluster = PropertyCluster();
  Ledger ledger(cluster);
  ReferenceLedger ref(cluster);
  Rng rng(GetParam(), "ledger-property");
  int accepted = 0, refused = 0, released = 0, next_key = 0;
  constexpr int kSteps = 10000;
  for (int step = 0; step < kSteps; ++step) {
    const std::uint64_t op = rng.Below(100);
    if (op < 35 && !ref.live().empty()) {
      // Release a live tenant.
      auto it = ref.live().begin();
      std::advance(it, static_cast<std::ptrdiff_t>(rng.Below(ref.live().size())));
      const std::string key = it->first;
      auto r = ledger.Release(key);
      ASSERT_TRUE(r.has_value()) << "step " << step << ": " << r.error().message;
      ref.Remove(key);
      ++released;
    } else if (op < 40) {
      // Release a key that is not live (never used, or released already).
      const std::string key = test::Numbered(
          "k", static_cast<std::int64_t>(rng.Below(static_cast<std::uint64_t>(next_key) + 5)));
      const bool live = ref.live().count(key) != 0;
      const test::LedgerSnapshot before = test::LedgerSnapshot::Of(ledger);
      auto r = ledger.Release(key);
      ASSERT_EQ(r.has_value(), live) << "step " << step << " key " << key;
      if (live) {
        ref.Remove(key);
      } else {
        ASSERT_EQ(r.error().code, ErrorCode::kNotFound);
        ASSERT_EQ(test::LedgerSnapshot::Of(ledger), before);
      }
    } else {
      // Assign, under a fresh key or (sometimes) a live one.
      std::string key = test::Numbered("k", next_key++);
      if (op < 45 && !ref.live().empty()) key = ref.live().begin()->first;
      const Request r = RandomRequest(rng);
      const Placement p = RandomPlacement(rng, cluster, ledger, r);
      const bool expect = ref.Accepts(key, r, p);
      const test::LedgerSnapshot before = test::LedgerSnapshot::Of(ledger);
      auto got = ledger.Assign(key, r, p);
      ASSERT_EQ(got.has_value(), expect) << "step " << step << " key " << key << ": "
                                         << (got ? std::string("accepted") : got.error().message);
      if (got) {
        ref.Add(key, r, p);
        ++accepted;
      } else {
        ASSERT_EQ(test::LedgerSnapshot::Of(ledger), before) << "step " << step;
        ++refused;
      }
    }
    ledger.CheckInvariants();
    ExpectMatches(ledger, ref, step);
    if (HasFatalFailure()) return;
  }
  // The walk must exercise both outcomes substantially.
  EXPECT_GT(accepted, kSteps / 10);
  EXPECT_GT(refused, kSteps / 10);
  EXPECT_GT(released, kSteps / 10);
}

INSTANTIATE_TEST_SUITE_P(Seeds, LedgerProperty, ::testing::Values(1, 2, 3, 42, 20240601));

}  // namespace
}  // namespace gpumux::core
