#include "gpumux/policy/engine.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "gpumux/core/check.h"

namespace gpumux::policy {

Engine::Engine(const core::Ledger& ledger, Policy& policy, std::vector<std::int64_t> node_rank,
               core::Rng& rng, EngineOptions options)
    : ledger_(&ledger), policy_(&policy), rng_(&rng) {
  const auto n = static_cast<std::size_t>(ledger.cluster().size());
  max_shapes_ =
      std::max(EngineOptions::kMinMemoShapes, options.memo_entries / std::max<std::size_t>(n, 1));
  GPUMUX_CHECK(node_rank.size() == n, "one rank per node");
  order_.resize(n);
  std::iota(order_.begin(), order_.end(), 0);
  std::sort(order_.begin(), order_.end(), [&](core::NodeIndex a, core::NodeIndex b) {
    return node_rank[static_cast<std::size_t>(a)] < node_rank[static_cast<std::size_t>(b)];
  });
  for (std::size_t i = 1; i < n; ++i) {
    GPUMUX_CHECK(node_rank[static_cast<std::size_t>(order_[i - 1])] !=
                     node_rank[static_cast<std::size_t>(order_[i])],
                 "node ranks must be distinct");
  }
}

std::vector<Engine::MemoEntry>& Engine::MemoFor(const core::Request& r, core::ModelMask models) {
  const ShapeKey key{r.cpu_milli,
                     r.memory_mib,
                     r.gpu_count,
                     r.gpu_milli,
                     r.gpu_mib,
                     r.sharing,
                     models,
                     r.overdue,
                     policy_->ScoreEpoch(*ledger_),
                     r.required_enforcement};
  if (auto it = shapes_.find(key); it != shapes_.end()) {
    MemoShape& hit = memo_[it->second];
    hit.last_use = ++memo_clock_;
    return hit.scores;
  }
  std::size_t slot = memo_.size();
  if (slot < max_shapes_) {
    memo_.push_back(
        {key, 0, std::vector<MemoEntry>(static_cast<std::size_t>(ledger_->cluster().size()))});
  } else {
    // Full: the least recently used shape gives up its slot, and its scores are wiped (they
    // belong to another shape, and a node's generation alone would not tell them apart).
    // O(max_shapes_), only on a miss, which costs a scoring pass over the nodes anyway.
    slot = 0;
    for (std::size_t i = 1; i < memo_.size(); ++i) {
      if (memo_[i].last_use < memo_[slot].last_use) slot = i;
    }
    shapes_.erase(memo_[slot].key);
    memo_[slot].key = key;
    std::fill(memo_[slot].scores.begin(), memo_[slot].scores.end(), MemoEntry{});
  }
  memo_[slot].last_use = ++memo_clock_;
  shapes_.emplace(key, slot);
  return memo_[slot].scores;
}

std::optional<std::size_t> ChooseBest(std::span<const std::int64_t> scores,
                                      std::span<const std::int64_t> ranks) {
  GPUMUX_CHECK(scores.size() == ranks.size(), "one rank per score");
  std::optional<std::size_t> best;
  for (std::size_t i = 0; i < scores.size(); ++i) {
    if (scores[i] == Engine::kNoFit || scores[i] == Policy::kDecline) continue;
    if (!best || scores[i] > scores[*best] ||
        (scores[i] == scores[*best] && ranks[i] < ranks[*best])) {
      best = i;
    }
  }
  return best;
}

Decision Engine::Decide(const core::Request& original) {
  Decision d;
  d.request = policy_->Adapt(original);
  const core::Request& r = d.request;
  const core::ModelMask models = ledger_->cluster().MaskOf(r.gpu_models);
  Cycle cycle{r, models, *ledger_, *rng_, {}};

  core::NodeIndex best = -1;
  std::int64_t best_score = kInfeasible;
  if (policy_->score_kind() == ScoreKind::kPure) {
    std::vector<MemoEntry>& memo = MemoFor(r, models);
    for (core::NodeIndex n : order_) {
      MemoEntry& e = memo[static_cast<std::size_t>(n)];
      const std::uint64_t generation = ledger_->Generation(n);
      if (e.generation_plus_one != generation + 1) {
        const core::NodeView node = ledger_->Node(n);
        e.generation_plus_one = generation + 1;
        e.score = core::NodeFits(node, r, models) ? policy_->Score(cycle, node) : kInfeasible;
      }
      if (e.score == kInfeasible) continue;
      ++d.feasible_nodes;
      if (e.score == Policy::kDecline) continue;
      if (e.score > best_score) {
        best_score = e.score;
        best = n;
      }
    }
  } else {
    feasible_.clear();
    for (core::NodeIndex n : order_) {
      if (core::NodeFits(ledger_->Node(n), r, models)) feasible_.push_back(n);
    }
    d.feasible_nodes = static_cast<int>(feasible_.size());
    cycle.feasible = feasible_;
    policy_->BeginCycle(cycle);
    for (core::NodeIndex n : feasible_) {
      const std::int64_t s = policy_->Score(cycle, ledger_->Node(n));
      if (s == Policy::kDecline) continue;
      if (best < 0 || s > best_score) {
        best_score = s;
        best = n;
      }
    }
  }
  if (best < 0) {
    d.declined = d.feasible_nodes > 0;
    return d;
  }
  const core::NodeView node = ledger_->Node(best);
  d.score = best_score;
  d.placement = core::Placement{best, policy_->ChooseGpus(cycle, node)};
  return d;
}

std::vector<std::int64_t> Engine::ScoreNodes(const core::Request& original,
                                             std::span<const core::NodeIndex> nodes) {
  const core::Request r = policy_->Adapt(original);
  const core::ModelMask models = ledger_->cluster().MaskOf(r.gpu_models);
  Cycle cycle{r, models, *ledger_, *rng_, {}};
  std::vector<std::int64_t> out(nodes.size(), kNoFit);
  if (policy_->score_kind() == ScoreKind::kPure) {
    std::vector<MemoEntry>& memo = MemoFor(r, models);
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      MemoEntry& e = memo[static_cast<std::size_t>(nodes[i])];
      const std::uint64_t generation = ledger_->Generation(nodes[i]);
      if (e.generation_plus_one != generation + 1) {
        const core::NodeView node = ledger_->Node(nodes[i]);
        e.generation_plus_one = generation + 1;
        e.score = core::NodeFits(node, r, models) ? policy_->Score(cycle, node) : kInfeasible;
      }
      out[i] = e.score;
    }
    return out;
  }
  feasible_.clear();
  for (core::NodeIndex n : nodes) {
    if (core::NodeFits(ledger_->Node(n), r, models)) feasible_.push_back(n);
  }
  std::sort(feasible_.begin(), feasible_.end());
  feasible_.erase(std::unique(feasible_.begin(), feasible_.end()), feasible_.end());
  cycle.feasible = feasible_;
  policy_->BeginCycle(cycle);
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    if (std::binary_search(feasible_.begin(), feasible_.end(), nodes[i])) {
      out[i] = policy_->Score(cycle, ledger_->Node(nodes[i]));
    }
  }
  return out;
}

Decision Engine::DecideOn(const core::Request& original, core::NodeIndex n) {
  Decision d;
  d.request = policy_->Adapt(original);
  const core::Request& r = d.request;
  const core::ModelMask models = ledger_->cluster().MaskOf(r.gpu_models);
  const core::NodeView node = ledger_->Node(n);
  if (!core::NodeFits(node, r, models)) return d;
  d.feasible_nodes = 1;
  const core::NodeIndex one[] = {n};
  Cycle cycle{r, models, *ledger_, *rng_, one};
  if (policy_->score_kind() == ScoreKind::kUsesFeasibleSet) policy_->BeginCycle(cycle);
  d.score = policy_->Score(cycle, node);
  if (d.score == Policy::kDecline) {
    d.declined = true;
    return d;
  }
  d.placement = core::Placement{n, policy_->ChooseGpus(cycle, node)};
  return d;
}

const core::Misfit& Engine::ExplainMisfit(const core::Request& original, core::NodeIndex n) {
  const core::Request r = policy_->Adapt(original);
  const core::ModelMask models = ledger_->cluster().MaskOf(r.gpu_models);
  const ShapeKey key{r.cpu_milli, r.memory_mib, r.gpu_count, r.gpu_milli, r.gpu_mib,
                     r.sharing,   models,       r.overdue,   0,           r.required_enforcement};
  if (reasons_.size() != static_cast<std::size_t>(ledger_->cluster().size())) {
    reasons_.assign(static_cast<std::size_t>(ledger_->cluster().size()), {});
  }
  ReasonMemo& memo = reasons_[static_cast<std::size_t>(n)];
  const std::uint64_t generation = ledger_->Generation(n);
  if (!memo.valid || memo.key != key || memo.generation != generation) {
    memo.misfit = core::ExplainMisfit(ledger_->Node(n), r, models);
    memo.key = key;
    memo.generation = generation;
    memo.valid = true;
  }
  return memo.misfit;
}

std::string Engine::DeclineReason() const {
  return "policy " + std::string(policy_->name()) + " would rather wait than use this node";
}

NodePlan Engine::PlanOn(std::span<const core::Request> containers, core::NodeIndex n,
                        core::Ledger& ledger, Explain explain) {
  GPUMUX_CHECK(&ledger == ledger_, "a plan places into the engine's own ledger");
  NodePlan plan;
  std::vector<std::string> placed;
  for (std::size_t i = 0; i < containers.size(); ++i) {
    Decision d = DecideOn(containers[i], n);
    if (!d.placement) {
      plan.failed = i;
      if (d.declined) {
        plan.outcome = NodePlan::Outcome::kDeclined;
        if (explain == Explain::kReason) plan.reason = DeclineReason();
      } else {
        const core::Misfit& misfit = ExplainMisfit(containers[i], n);
        plan.outcome =
            misfit.resolvable ? NodePlan::Outcome::kDoesNotFit : NodePlan::Outcome::kUnresolvable;
        if (explain == Explain::kReason) plan.reason = misfit.reason;
      }
      plan.containers.clear();
      break;
    }
    if (i == 0) plan.score = d.score;
    if (i + 1 < containers.size()) {  // the next container sees this one placed
      const std::string key = "plan/" + std::to_string(i);
      auto assigned = ledger.Assign(key, d.request, *d.placement);
      GPUMUX_CHECK(assigned.has_value(), "the engine's placement is assignable");
      placed.push_back(key);
    }
    plan.containers.push_back(std::move(d));
  }
  for (const std::string& key : placed) (void)ledger.Release(key);
  return plan;
}

}  // namespace gpumux::policy
