// A tiny cluster with a ledger, to call a policy's Score/ChooseGpus on hand-made node states,
// and ScriptedPolicy, a fake policy whose scores a test writes.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "gpumux/core/cluster.h"
#include "gpumux/core/ledger.h"
#include "gpumux/core/request.h"
#include "gpumux/core/rng.h"
#include "gpumux/policy/policy.h"

namespace gpumux::test {

// Owns a cluster, a ledger over it and a random stream. Not copyable or movable (the ledger
// points at the cluster).
//
//   PolicyHarness h(ClusterBuilder().Node("n", 32000, 65536).Gpus(2).Specs());
//   h.Place("t", RequestBuilder().Share(500), 0, {1});   // GPUs free {1000, 500}
//   EXPECT_EQ(h.Score(policy, RequestBuilder().Cpu(8000).Share(500), 0), 84);
class PolicyHarness {
 public:
  explicit PolicyHarness(std::vector<core::NodeSpec> nodes, std::uint64_t seed = 1);
  PolicyHarness(const PolicyHarness&) = delete;
  PolicyHarness& operator=(const PolicyHarness&) = delete;

  const core::Cluster& cluster() const { return cluster_; }
  core::Ledger& ledger() { return ledger_; }
  core::Rng& rng() { return rng_; }

  // Assigns or fails the test (ADD_FAILURE) with the ledger's message.
  void Place(const std::string& key, const core::Request& request, core::NodeIndex node,
             std::vector<int> gpus);
  // Node index by name; a test failure when absent.
  core::NodeIndex NodeNamed(std::string_view name) const;

  // The policy's score / GPU choice for `request` (adapted by the policy) on `node`, through a
  // Cycle as the engine builds it. The node must fit (the policy contract); a test failure
  // otherwise. `feasible` is passed for policies that use the feasible set.
  std::int64_t Score(policy::Policy& policy, const core::Request& request, core::NodeIndex node,
                     std::vector<core::NodeIndex> feasible = {});
  std::vector<int> ChooseGpus(policy::Policy& policy, const core::Request& request,
                              core::NodeIndex node, std::vector<core::NodeIndex> feasible = {});

 private:
  core::Cluster cluster_;
  core::Ledger ledger_;
  core::Rng rng_;
};

// A fake policy: scores come from a function the test provides; GPUs are the lowest-indexed
// admitting ones. Counts calls so that tests can see what the engine memoises.
class ScriptedPolicy final : public policy::Policy {
 public:
  using ScoreFn = std::function<std::int64_t(const policy::Cycle&, const core::NodeView&)>;
  explicit ScriptedPolicy(ScoreFn score, policy::ScoreKind kind = policy::ScoreKind::kPure)
      : score_(std::move(score)), kind_(kind) {}

  std::string_view name() const override { return "scripted"; }
  policy::ScoreKind score_kind() const override { return kind_; }
  // The score epoch (policy.h) the engine sees: 0 unless a test sets it.
  std::uint64_t ScoreEpoch(const core::Ledger&) const override { return epoch; }
  std::uint64_t epoch = 0;
  void BeginCycle(const policy::Cycle& cycle) override;
  std::int64_t Score(const policy::Cycle& cycle, const core::NodeView& node) override;
  std::vector<int> ChooseGpus(const policy::Cycle& cycle, const core::NodeView& node) override;

  int score_calls() const { return score_calls_; }
  int begin_calls() const { return begin_calls_; }
  // Nodes scored, in call order, since the last ClearLog().
  const std::vector<core::NodeIndex>& scored() const { return scored_; }
  // The feasible set the last BeginCycle saw.
  const std::vector<core::NodeIndex>& last_feasible() const { return last_feasible_; }
  void ClearLog() { scored_.clear(); }

 private:
  ScoreFn score_;
  policy::ScoreKind kind_;
  int score_calls_ = 0;
  int begin_calls_ = 0;
  std::vector<core::NodeIndex> scored_;
  std::vector<core::NodeIndex> last_feasible_;
};

}  // namespace gpumux::test
