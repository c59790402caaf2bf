// The contract every registered policy passes, run through the placement engine on a random
// mixed workload (arrivals and departures) on a small heterogeneous cluster:
//   * every decision is accepted by Ledger::Assign, and the ledger's invariants hold after it;
//   * a placement names exactly gpu_count distinct ascending GPUs that admit the request;
//   * model constraints are respected; exclusive tenants are alone on their GPUs;
//   * a request that fits somewhere (brute-force core::NodeFits scan) is never turned away, and
//     one that fits nowhere gets no placement;
//   * the same workload and seed give the same placements.
// A new policy is covered by adding it to the registry: the suite iterates its names.
// The co-location policies (first-fit, iadeep, gpumux) run the contract a second time with
// job state: a workload profile and interference model in the PolicyContext, requests that
// name workload classes of the profile (and some that name unknown classes), and a JobView
// reporting every placed job; they may make a job wait (Decision::declined) but never put more
// than max_jobs_per_gpu tenants on a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "gpumux/core/ledger.h"
#include "gpumux/core/rng.h"
#include "gpumux/policy/colocation.h"
#include "gpumux/policy/engine.h"
#include "gpumux/policy/fragmentation.h"
#include "gpumux/policy/interference.h"
#include "gpumux/policy/registry.h"
#include "gpumux/policy/workload_profile.h"
#include "tests/policy/colocation_fixtures.h"
#include "tests/testing/builders.h"

namespace gpumux::policy {
namespace {

using test::ClusterBuilder;

// Several models, a heterogeneous node, an unhealthy GPU, a CPU-only node and nodes whose pod
// limit binds before their resources do. Every GPU has at least 16 GiB and no request asks more
// than 16 GiB of GPU memory: see
// LedgerBug.AnExclusiveTenantAskingMoreGpuMemoryThanTheGpuHasIsRefused.
core::Cluster ContractCluster() {
  return ClusterBuilder()
      .Node("t4-a", 32000, 131072)
      .Gpus(4, "T4", 16384)
      .Node("t4-b", 16000, 65536)
      .Gpus(2, "T4", 16384)
      .Node("v100", 64000, 262144)
      .Gpus(8, "V100M32", 32768)
      .Unhealthy(5)
      .Node("a10", 24000, 98304)
      .Gpus(1, "A10", 24576)
      .Node("mixed", 48000, 196608)
      .Gpus(2, "T4", 16384)
      .Gpus(2, "A10", 24576)
      .Node("g2", 32000, 131072)
      .Gpus(4, "G2", 16384)
      .Node("cpu", 64000, 262144)
      .Node("tiny", 4000, 8192)
      .Gpus(1, "T4", 16384)
      .MaxPods(3)
      .Node("two-pods", 64000, 262144)
      .Gpus(2, "T4", 16384)
      .MaxPods(2)
      .Build();
}

core::Request RandomRequest(core::Rng& rng, int i) {
  core::Request r;
  r.name = test::Numbered("pod-", i);
  r.cpu_milli = 500 * static_cast<core::MilliCpu>(rng.Below(33));
  r.memory_mib = 1024 * static_cast<core::MiB>(rng.Below(33));
  const std::uint64_t kind = rng.Below(100);
  if (kind < 15) {
    // CPU-only.
  } else if (kind < 50) {
    r.gpu_count = 1;
    r.gpu_milli = 50 * static_cast<core::MilliGpu>(1 + rng.Below(19));
  } else if (kind < 65) {
    r.gpu_count = 1;
    r.gpu_milli = core::kMilliPerGpu;
  } else if (kind < 80) {
    r.gpu_count = 2 + static_cast<int>(rng.Below(3));
    r.gpu_milli = rng.Below(2) == 0 ? core::kMilliPerGpu
                                    : 100 * static_cast<core::MilliGpu>(1 + rng.Below(10));
  } else if (kind < 95) {
    r.gpu_count = 1 + static_cast<int>(rng.Below(2));
    r.gpu_milli = 100 * static_cast<core::MilliGpu>(1 + rng.Below(10));
    r.sharing = core::GpuSharing::kExclusive;
  } else {
    r.gpu_count = 8;
    r.gpu_milli = core::kMilliPerGpu;
  }
  if (r.gpu_count > 0 && rng.Below(100) < 20) {
    r.gpu_mib = static_cast<core::MiB>(rng.Below(16385));
  }
  if (r.gpu_count > 0 && rng.Below(100) < 25) {
    static const std::vector<std::vector<std::string>> kLists{{"T4"}, {"A10"},  {"V100M32", "A10"},
                                                              {"G2"}, {"H100"}, {"T4", "G2"}};
    r.gpu_models = kLists[rng.Below(kLists.size())];
  }
  return r;
}

struct Step {
  bool arrival = true;
  std::string key;
  core::Request request;  // arrivals
};

std::vector<Step> RandomWorkload(std::uint64_t seed, int steps) {
  core::Rng rng(seed, "contract-workload");
  std::vector<Step> out;
  std::vector<std::string> arrived;
  for (int i = 0; i < steps; ++i) {
    if (!arrived.empty() && rng.Below(100) < 40) {
      // A departure of some earlier arrival (it may have been turned away: then nothing leaves).
      const auto k = static_cast<std::size_t>(rng.Below(arrived.size()));
      out.push_back(Step{false, arrived[k], {}});
      arrived.erase(arrived.begin() + static_cast<std::ptrdiff_t>(k));
    } else {
      Step s{true, test::Numbered("k", i), RandomRequest(rng, i)};
      arrived.push_back(s.key);
      out.push_back(std::move(s));
    }
  }
  return out;
}

// Job state for the co-location runs: three classes from light to GPU-bound, memory 2..8 GiB
// at b0 (larger batches need more), and one measured pair.
WorkloadProfile ContractProfile() {
  test::LinearClass light;
  light.name = "light";
  light.lo_busy = 0.2;
  light.hi_busy = 0.35;
  test::LinearClass mid;
  mid.name = "mid";
  mid.lo_step_s = 0.05;
  mid.hi_step_s = 0.09;
  mid.lo_busy = 0.55;
  mid.hi_busy = 0.7;
  mid.lo_mib = 4000;
  mid.hi_mib = 7000;
  mid.noise_scale = 400;
  test::LinearClass heavy;
  heavy.name = "heavy";
  heavy.lo_step_s = 0.2;
  heavy.hi_step_s = 0.35;
  heavy.lo_busy = 0.9;
  heavy.hi_busy = 0.97;
  heavy.lo_mib = 8000;
  heavy.hi_mib = 14000;
  heavy.dataset_samples = 5000;
  return test::MakeProfile({test::MakeClass(light), test::MakeClass(mid), test::MakeClass(heavy)},
                           0.05, {test::Measured({"mid", "light"}, {100, 100}, {1.3, 1.1})});
}

// Gives GPU requests a workload class: mostly the profile's, some unknown, some none.
void AssignClasses(std::vector<Step>& workload, std::uint64_t seed) {
  core::Rng rng(seed, "contract-classes");
  static const std::vector<std::string> kClasses{"light", "mid",   "heavy",       "light",
                                                 "mid",   "heavy", "unknown-net", ""};
  for (Step& s : workload) {
    if (!s.arrival || s.request.gpu_count == 0) continue;
    s.request.workload_class = kClasses[rng.Below(kClasses.size())];
  }
}

// A driver's view: one snapshot per placed job (a few jobs it does not know), varied rates,
// some GPUs in a tuning session, and a varying number of queued jobs ahead.
class ContractJobs final : public JobView {
 public:
  ContractJobs(const WorkloadProfile& profile, std::uint64_t seed)
      : profile_(&profile), rng_(seed, "contract-jobs") {}

  std::optional<JobSnapshot> Job(core::TenantIndex t) const override {
    auto it = jobs_.find(t);
    if (it == jobs_.end()) return std::nullopt;
    return it->second;
  }
  int QueuedAhead() const override { return ahead_; }

  void Placed(core::TenantIndex t, const core::Request& r) {
    if (rng_.Below(100) < 5) return;  // unknown to the driver
    JobSnapshot s;
    s.cls = profile_->Find(r.workload_class);
    if (s.cls != nullptr) {
      s.batch = s.cls->default_batch;
      s.work_done = s.cls->WorkSamples() * 0.9 * rng_.Unit();
      s.observed_step_s =
          rng_.Below(100) < 10 ? 0.0 : s.cls->StepSeconds(s.batch) / (0.4 + 0.6 * rng_.Unit());
    }
    s.memory_limit = r.gpu_mib;
    s.tuning = rng_.Below(100) < 10;
    jobs_[t] = s;
  }
  void Released(core::TenantIndex t) { jobs_.erase(t); }
  // Before each decision: how many queued jobs go first.
  void NextDecision() { ahead_ = static_cast<int>(rng_.Below(3)); }

 private:
  const WorkloadProfile* profile_;
  core::Rng rng_;
  std::map<core::TenantIndex, JobSnapshot> jobs_;
  int ahead_ = 0;
};

struct Outcome {
  std::string key;
  core::NodeIndex node = -1;
  std::vector<int> gpus;
  std::int64_t score = 0;
  int feasible = 0;
  bool operator==(const Outcome&) const = default;
};

void PrintTo(const Outcome& o, std::ostream* os) {
  *os << o.key << "->" << o.node << " score " << o.score << " feasible " << o.feasible;
}

bool SameRequest(const core::Request& a, const core::Request& b) {
  return a.name == b.name && a.cpu_milli == b.cpu_milli && a.memory_mib == b.memory_mib &&
         a.gpu_count == b.gpu_count && a.gpu_milli == b.gpu_milli && a.gpu_mib == b.gpu_mib &&
         a.sharing == b.sharing && a.gpu_models == b.gpu_models;
}

struct RunStats {
  int placed = 0;
  int turned_away = 0;  // declined or fitting nowhere
  int declined = 0;
  int departed = 0;
  int filled_gpus = 0;  // placements that brought a GPU to max_jobs_per_gpu tenants
};

// Runs the workload through a fresh ledger and engine, checking the contract at every step.
// With `with_jobs`, requests carry workload classes and the context a profile, an
// interference model and a job view (for the co-location policies).
std::vector<Outcome> RunContract(const std::string& policy_name, std::uint64_t seed,
                                 RunStats& stats, bool with_jobs = false, int steps = 600) {
  const core::Cluster cluster = ContractCluster();
  std::vector<Step> workload = RandomWorkload(seed, steps);
  if (with_jobs) AssignClasses(workload, seed);
  std::vector<core::Request> requests;
  for (const Step& s : workload) {
    if (s.arrival) requests.push_back(s.request);
  }
  const WorkloadProfile profile = ContractProfile();
  const ProfileInterference interference(profile);
  ContractJobs jobs(profile, seed);
  PolicyContext context;
  context.typical_pods = ComputeTypicalPods(requests, cluster);
  if (with_jobs) {
    context.profile = &profile;
    context.interference = &interference;
    context.jobs = &jobs;
  }
  auto made = BuiltinPolicies().Make(policy_name, context);
  if (!made) {
    ADD_FAILURE() << made.error().message;
    return {};
  }
  std::unique_ptr<Policy> policy = std::move(*made);
  core::Ledger ledger(cluster);
  core::Rng rng(seed, "policy");
  std::vector<std::int64_t> ranks(static_cast<std::size_t>(cluster.size()));
  {
    core::Rng rank_rng(seed, "ranks");
    const std::vector<int> perm = rank_rng.Permutation(cluster.size());
    std::copy(perm.begin(), perm.end(), ranks.begin());
  }
  Engine engine(ledger, *policy, ranks, rng);

  std::vector<Outcome> outcomes;
  std::map<std::string, core::Request> live;  // key -> adapted request
  std::map<std::string, core::TenantIndex> tenant_of;
  const bool failed_before = ::testing::Test::HasFailure();
  for (const Step& s : workload) {
    if (!s.arrival) {
      if (live.erase(s.key) == 1) {
        auto r = ledger.Release(s.key);
        EXPECT_TRUE(r.has_value()) << r.error().message;
        jobs.Released(tenant_of.at(s.key));
        ++stats.departed;
      } else {
        EXPECT_EQ(ledger.FindTenant(s.key), nullptr);
      }
      ledger.CheckInvariants();
      continue;
    }
    SCOPED_TRACE(s.key);
    jobs.NextDecision();
    const Decision d = engine.Decide(s.request);
    EXPECT_TRUE(SameRequest(d.request, engine.policy().Adapt(s.request)));
    const core::Request& r = d.request;
    const core::ModelMask models = cluster.MaskOf(r.gpu_models);

    // Brute force: which nodes can take it at all?
    int fits = 0;
    for (core::NodeIndex n = 0; n < cluster.size(); ++n) {
      fits += core::NodeFits(ledger.Node(n), r, models) ? 1 : 0;
    }
    EXPECT_EQ(d.feasible_nodes, fits);
    // A policy may decline every node that fits (the job waits), never place where none fits.
    EXPECT_EQ(d.placement.has_value() || d.declined, fits > 0)
        << "fits on " << fits << " nodes but the engine says "
        << (d.placement ? "placed" : "nowhere");
    EXPECT_FALSE(d.placement.has_value() && d.declined);
    if (engine.policy().colocation() == nullptr && engine.policy().name() != "fgd-sat-reserve") {
      EXPECT_FALSE(d.declined)
          << "only co-location policies and fgd-sat-reserve's reservation may make a job wait";
    }

    Outcome o{s.key, -1, {}, d.score, d.feasible_nodes};
    if (d.placement) {
      const core::Placement& p = *d.placement;
      o.node = p.node;
      o.gpus = p.gpus;
      EXPECT_GE(p.node, 0);
      EXPECT_LT(p.node, cluster.size());
      const core::NodeView v = ledger.Node(p.node);
      EXPECT_TRUE(core::NodeFits(v, r, models)) << "chose an infeasible node";
      EXPECT_EQ(static_cast<int>(p.gpus.size()), r.gpu_count);
      for (std::size_t k = 0; k < p.gpus.size(); ++k) {
        const int g = p.gpus[k];
        EXPECT_TRUE(g >= 0 && g < v.gpu_count()) << "GPU " << g;
        if (k > 0) {
          EXPECT_LT(p.gpus[k - 1], g) << "GPUs must be distinct and ascending";
        }
        if (g < 0 || g >= v.gpu_count()) continue;
        EXPECT_TRUE(core::GpuAdmits(v, g, r, models)) << "GPU " << g << " does not admit";
        const std::string& model = v.spec->gpus[static_cast<std::size_t>(g)].model;
        if (!r.gpu_models.empty()) {
          EXPECT_NE(std::find(r.gpu_models.begin(), r.gpu_models.end(), model), r.gpu_models.end())
              << "GPU " << g << " is a " << model;
        }
      }
      auto assigned = ledger.Assign(s.key, r, p);
      EXPECT_TRUE(assigned.has_value())
          << "the ledger refuses the engine's decision: " << assigned.error().message;
      if (assigned) {
        live.emplace(s.key, r);
        tenant_of[s.key] = *assigned;
        jobs.Placed(*assigned, r);
        ++stats.placed;
      }
    } else {
      ++stats.turned_away;
    }
    ledger.CheckInvariants();
    if (d.declined) ++stats.declined;

    // Co-location policies never put more than max_jobs_per_gpu tenants on a GPU.
    if (engine.policy().colocation() != nullptr && d.placement) {
      const core::NodeView v = ledger.Node(d.placement->node);
      for (int g : d.placement->gpus) {
        const int tenants = v.gpu_tenants[static_cast<std::size_t>(g)];
        EXPECT_LE(tenants, context.colocation.max_jobs_per_gpu)
            << "GPU " << g << " of node " << d.placement->node;
        if (tenants == context.colocation.max_jobs_per_gpu) ++stats.filled_gpus;
      }
    }

    // Exclusive tenants are alone on each of their GPUs.
    for (const auto& [key, req] : live) {
      if (req.sharing != core::GpuSharing::kExclusive) continue;
      const core::Tenant* t = ledger.FindTenant(key);
      EXPECT_NE(t, nullptr);
      if (t == nullptr) continue;
      const core::NodeView v = ledger.Node(t->placement.node);
      for (int g : t->placement.gpus) {
        EXPECT_EQ(v.gpu_tenants[static_cast<std::size_t>(g)], 1)
            << "exclusive tenant " << key << " shares GPU " << g;
      }
    }
    outcomes.push_back(std::move(o));
    // One broken step is enough to read.
    if (!failed_before && ::testing::Test::HasFailure()) break;
  }
  return outcomes;
}

class PolicyContract : public ::testing::TestWithParam<std::tuple<std::string, std::uint64_t>> {};

TEST_P(PolicyContract, EveryDecisionIsAcceptedExactAndDeterministic) {
  const auto& [name, seed] = GetParam();
  RunStats first_stats;
  const std::vector<Outcome> first = RunContract(name, seed, first_stats);
  ASSERT_FALSE(HasFailure());
  // The workload must reach both outcomes and see departures, or the test proves little.
  EXPECT_GT(first_stats.placed, 100);
  EXPECT_GT(first_stats.turned_away, 20);
  EXPECT_GT(first_stats.departed, 80);

  RunStats second_stats;
  const std::vector<Outcome> second = RunContract(name, seed, second_stats);
  ASSERT_FALSE(HasFailure());
  EXPECT_EQ(first, second) << "same workload and seed, different placements";
}

std::string ContractCaseName(
    const ::testing::TestParamInfo<PolicyContract::ParamType>& param_info) {
  std::string name = std::get<0>(param_info.param);
  std::replace(name.begin(), name.end(), '-', '_');
  return name + "_seed" + std::to_string(std::get<1>(param_info.param));
}

INSTANTIATE_TEST_SUITE_P(AllPolicies, PolicyContract,
                         ::testing::Combine(::testing::ValuesIn(BuiltinPolicies().names()),
                                            ::testing::Values(std::uint64_t{1}, std::uint64_t{2},
                                                              std::uint64_t{3})),
                         ContractCaseName);

// The co-location policies with job state.
const std::vector<std::string>& ColocationPolicies() {
  static const std::vector<std::string> kNames = BuiltinPolicies().names(Family::kColocation);
  return kNames;
}

class ColocationContract : public ::testing::TestWithParam<std::tuple<std::string, std::uint64_t>> {
};

TEST_P(ColocationContract, EveryDecisionIsAcceptedExactAndDeterministicWithJobState) {
  const auto& [name, seed] = GetParam();
  RunStats first_stats;
  const std::vector<Outcome> first = RunContract(name, seed, first_stats, true);
  ASSERT_FALSE(HasFailure());
  EXPECT_GT(first_stats.placed, 100);
  EXPECT_GT(first_stats.turned_away, 20);
  EXPECT_GT(first_stats.departed, 80);

  RunStats second_stats;
  const std::vector<Outcome> second = RunContract(name, seed, second_stats, true);
  ASSERT_FALSE(HasFailure());
  EXPECT_EQ(first, second) << "same workload, job state and seed, different placements";
}

INSTANTIATE_TEST_SUITE_P(WithJobState, ColocationContract,
                         ::testing::Combine(::testing::ValuesIn(ColocationPolicies()),
                                            ::testing::Values(std::uint64_t{1}, std::uint64_t{2},
                                                              std::uint64_t{3})),
                         ContractCaseName);

TEST(ColocationContractSuite, CoversEveryCoLocationPolicy) {
  // Every registered policy with co-location traits is in the job-state suite, and only those.
  const WorkloadProfile profile = ContractProfile();
  const ProfileInterference interference(profile);
  PolicyContext context;
  context.profile = &profile;
  context.interference = &interference;
  std::vector<std::string> with_traits;
  for (const std::string& name : BuiltinPolicies().names()) {
    auto made = BuiltinPolicies().Make(name, context);
    ASSERT_TRUE(made.has_value()) << made.error().message;
    if ((*made)->colocation() != nullptr) with_traits.push_back(name);
  }
  EXPECT_EQ(with_traits, ColocationPolicies());
}

TEST(ColocationContractSuite, TheProfileIsValidAndTheWorkloadNamesItsClasses) {
  EXPECT_TRUE(ContractProfile().Validate().has_value());
  std::vector<Step> workload = RandomWorkload(1, 400);
  AssignClasses(workload, 1);
  std::map<std::string, int> seen;
  for (const Step& s : workload) {
    if (s.arrival && s.request.gpu_count > 0) ++seen[s.request.workload_class];
  }
  for (const char* cls : {"light", "mid", "heavy", "unknown-net", ""}) {
    EXPECT_GT(seen[cls], 0) << "class '" << cls << "'";
  }
}

TEST(ColocationContractSuite, TheJobStateRunsMakeJobsWaitAndFillGpus) {
  // The job-state runs reach the outcomes the extra invariants are about, or the contract
  // proves little about them: jobs made to wait, and GPUs brought to max_jobs_per_gpu.
  int declined = 0;
  for (const std::string& name : ColocationPolicies()) {
    RunStats stats;
    RunContract(name, 1, stats, true);
    declined += stats.declined;
    EXPECT_GT(stats.filled_gpus, 0) << name;
  }
  EXPECT_GT(declined, 0);
}

TEST(PolicyContractSuite, CoversEveryRegisteredPolicy) {
  // The suite above is instantiated from the registry itself; this guards against an empty
  // registry making it vacuous (the FGD study's six at least).
  EXPECT_GE(BuiltinPolicies().names().size(), FgdStudyPolicies().size());
  EXPECT_EQ(FgdStudyPolicies().size(), 6U);
}

}  // namespace
}  // namespace gpumux::policy
