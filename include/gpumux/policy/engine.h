// The placement engine: the one code path that answers "does this request fit, where, and on
// which GPUs" for the simulator and every cluster adapter.
//
// Decide(): adapt the request (Policy::Adapt), filter every node with core::NodeFits, score the
// feasible ones with the policy, take the highest score (ties: the smallest node rank), and ask
// the policy for the GPUs on that node. The ledger is not changed: the caller commits the
// decision with Ledger::Assign (so a daemon can write its grant elsewhere first).
//
// Cost: O(nodes) per request. For ScoreKind::kPure policies, each (request shape, node) score is
// memoised until the node's generation changes, so a node is re-scored only after it changed.
// The memo is bounded (EngineOptions): it keeps the most recently used shapes, so shapes that
// recur (replicas of one deployment, the trace's common pods) stay memoised while one-off
// shapes come and go; a dropped shape seen again is scored afresh.
// Thread safety: none; one engine per ledger, used from one thread at a time.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "gpumux/core/explain.h"
#include "gpumux/core/ledger.h"
#include "gpumux/core/rng.h"
#include "gpumux/policy/policy.h"

namespace gpumux::policy {

struct Decision {
  core::Request request;                     // as adapted by the policy
  std::optional<core::Placement> placement;  // empty: fits nowhere
  std::int64_t score = 0;
  int feasible_nodes = 0;
  bool declined = false;  // it fits somewhere, but the policy declined every such node
};

// Where the containers of one pod go on one node, or why not (Engine::PlanOn).
struct NodePlan {
  enum class Outcome : std::uint8_t {
    kFits,
    kDoesNotFit,    // resources are taken now (core::Misfit::resolvable)
    kUnresolvable,  // never on this node as it is (too few GPUs, the wrong model, ...)
    kDeclined,      // it fits, but the policy would rather wait
  };
  Outcome outcome = Outcome::kFits;
  std::int64_t score = 0;            // the first container's score (kFits)
  std::vector<Decision> containers;  // kFits: each container's decision, in order
  std::size_t failed = 0;            // the container that does not fit (not kFits)
  std::string reason;                // why not, for humans (not kFits)
  bool fits() const { return outcome == Outcome::kFits; }
};

// Whether a plan explains a failure (a reason costs core::ExplainMisfit on the failing node).
enum class Explain : std::uint8_t { kReason, kNoReason };

struct EngineOptions {
  // The score memo holds one 16-byte entry per (request shape, node); it keeps at most
  // max(kMinMemoShapes, memo_entries / nodes) shapes, dropping the least recently used.
  // The default, 2^20 entries, is 16 MiB: 688 shapes on the 1,523-node Alibaba cluster (its
  // default pod list has 151), 209 on 5,000 nodes.
  static constexpr std::size_t kDefaultMemoEntries = std::size_t{1} << 20;
  static constexpr std::size_t kMinMemoShapes = 8;
  std::size_t memo_entries = kDefaultMemoEntries;
};

// The choice Engine::Decide makes, for callers that hold scores of a list of nodes (Engine::
// ScoreNodes): the index of the highest score that is neither Engine::kNoFit nor
// Policy::kDecline, ties to the smaller rank (`ranks[i]` is node i's); none when no node
// qualifies. Both spans have one entry per node.
std::optional<std::size_t> ChooseBest(std::span<const std::int64_t> scores,
                                      std::span<const std::int64_t> ranks);

class Engine {
 public:
  // `node_rank[i]` is node i's tie-break rank (smaller wins); it must be a permutation-like
  // list of distinct values with one entry per node. The ledger, policy and rng must outlive
  // the engine.
  Engine(const core::Ledger& ledger, Policy& policy, std::vector<std::int64_t> node_rank,
         core::Rng& rng, EngineOptions options = {});

  Decision Decide(const core::Request& request);

  // For adapters that are handed a candidate list (the scheduler extender): one entry per node
  // of `nodes`, in order: kNoFit when the adapted request does not fit (core::NodeFits),
  // Policy::kDecline when the policy refuses it, else the policy's score. Same memo and the
  // same BeginCycle rules as Decide (for kUsesFeasibleSet policies the feasible set is the
  // fitting subset of `nodes`).
  static constexpr std::int64_t kNoFit = INT64_MIN;
  std::vector<std::int64_t> ScoreNodes(const core::Request& request,
                                       std::span<const core::NodeIndex> nodes);
  // The decision restricted to one node: the GPUs the policy picks there, or no placement when
  // the request does not fit or the policy declines the node.
  Decision DecideOn(const core::Request& request, core::NodeIndex node);

  // Where `containers` (one pod's, in order) go on node n: each is decided there (DecideOn) with
  // the earlier ones placed, then the ledger is given back as it was. `ledger` must be the
  // engine's own (the temporary placements change it); the caller commits the plan with
  // Ledger::Assign. The one code path that places several requests on one node.
  // Cost: DecideOn per container, plus ExplainMisfit (memoised) for the one that fails.
  NodePlan PlanOn(std::span<const core::Request> containers, core::NodeIndex n,
                  core::Ledger& ledger, Explain explain = Explain::kReason);
  // Why `request` does not fit node n: core::ExplainMisfit of the adapted request, memoised
  // per node next to the scores (valid while the node's generation and the request's shape are
  // unchanged: replicas share a shape, and most nodes do not change between two cycles).
  const core::Misfit& ExplainMisfit(const core::Request& request, core::NodeIndex n);
  // PlanOn's words for a node the policy declines.
  std::string DeclineReason() const;

  const Policy& policy() const { return *policy_; }
  // Request shapes memoised now, and the most the memo keeps.
  std::size_t memo_shapes() const { return shapes_.size(); }
  std::size_t memo_shape_limit() const { return max_shapes_; }

 private:
  static constexpr std::int64_t kInfeasible = INT64_MIN;
  struct MemoEntry {
    std::uint64_t generation_plus_one = 0;  // 0 = empty
    std::int64_t score = 0;
  };
  // The request's shape, the acceptable models, and the policy's ScoreEpoch: a score memoised
  // under one epoch is never read under another, and comes back valid if the epoch does.
  using ShapeKey = std::tuple<core::MilliCpu, core::MiB, int, core::MilliGpu, core::MiB,
                              core::GpuSharing, core::ModelMask, bool, std::uint64_t, std::uint8_t>;
  struct MemoShape {
    ShapeKey key;
    std::uint64_t last_use = 0;     // memo_clock_ when last asked for
    std::vector<MemoEntry> scores;  // [node]
  };
  // The shape's scores under the policy's current ScoreEpoch, valid until the next call (it may
  // reuse the least recently used slot).
  std::vector<MemoEntry>& MemoFor(const core::Request& r, core::ModelMask models);

  const core::Ledger* ledger_;
  Policy* policy_;
  core::Rng* rng_;
  std::vector<core::NodeIndex> order_;  // nodes by ascending rank
  std::size_t max_shapes_ = 0;
  std::map<ShapeKey, std::size_t> shapes_;  // shape -> its slot in memo_
  std::vector<MemoShape> memo_;             // at most max_shapes_ slots
  std::uint64_t memo_clock_ = 0;
  std::vector<core::NodeIndex> feasible_;
  struct ReasonMemo {
    bool valid = false;
    ShapeKey key{};
    std::uint64_t generation = 0;
    core::Misfit misfit;
  };
  std::vector<ReasonMemo> reasons_;  // [node]
};

}  // namespace gpumux::policy
