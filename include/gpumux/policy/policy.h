// The placement policy interface. A policy ranks the nodes that can take a request and picks
// the concrete GPUs on the chosen node. The filter (does it fit at all) is not a policy's
// business: the engine (engine.h) applies core::NodeFits first and calls a policy only for
// feasible nodes, so every policy sees the same feasibility rules.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "gpumux/core/cluster.h"
#include "gpumux/core/ledger.h"
#include "gpumux/core/request.h"
#include "gpumux/core/rng.h"

namespace gpumux::policy {

struct ColocationTraits;  // colocation.h

// Everything a policy may look at during one scheduling cycle (one request).
struct Cycle {
  const core::Request& request;  // already adapted by Policy::Adapt
  core::ModelMask models;        // acceptable GPU models of the request
  const core::Ledger& ledger;
  core::Rng& rng;                             // the policy's own random stream
  std::span<const core::NodeIndex> feasible;  // only for policies with kUsesFeasibleSet
};

enum class ScoreKind {
  // Score(cycle, node) depends only on the request and that node's state (and on the policy's
  // ScoreEpoch, below): the engine may memoise it until the node or the epoch changes.
  kPure,
  // Score depends on the whole feasible set or on randomness: BeginCycle sees the feasible
  // nodes first and nothing is memoised.
  kUsesFeasibleSet,
};

// Contract: Score and ChooseGpus are called only for nodes where core::NodeFits holds;
// Score may return kDecline to refuse a node that fits (e.g. a co-location policy that would
// rather queue the job than pair it badly, or fgd-sat-reserve keeping an idle GPU): the engine
// never picks a declined node, and when every feasible node is declined the decision is "wait"
// (Decision::declined).
// ChooseGpus returns exactly request.gpu_count ascending indices of GPUs that admit the request
// (core::GpuAdmits). Higher scores are better; the engine breaks ties by node rank.
// A policy object serves one engine and is not thread-safe (it may keep caches).
class Policy {
 public:
  static constexpr std::int64_t kDecline = INT64_MIN + 1;

  virtual ~Policy() = default;
  virtual std::string_view name() const = 0;
  // Non-null for co-location policies: how a driver must queue and tune for them.
  virtual const ColocationTraits* colocation() const { return nullptr; }
  virtual ScoreKind score_kind() const { return ScoreKind::kPure; }
  // For kPure policies whose scores also depend on a coarse cluster-wide condition (e.g.
  // fgd-sat-reserve: "idle GPUs are scarce"): a value that changes when that condition does.
  // The epoch is part of the engine's memo key: scores memoised under one value are never read
  // under another, and are read again (as valid as the nodes' generations say) when it comes
  // back. Keep it coarse: it is asked once per decision, and each value fills memo slots of its
  // own.
  virtual std::uint64_t ScoreEpoch(const core::Ledger& /*ledger*/) const { return 0; }
  // A policy that holds requests back (declines nodes they fit, e.g. fgd-sat-reserve) says how
  // long a request may be held, in seconds; 0: no limit, or the policy holds nothing back. A
  // driver that lets requests wait (the extender) marks a request older than this overdue
  // (core::Request::overdue), and the policy must never hold an overdue request.
  virtual std::int64_t HoldLimitSeconds() const { return 0; }
  // Rewrites a request before filtering, e.g. `exclusive` turns shares into whole GPUs.
  virtual core::Request Adapt(const core::Request& request) const { return request; }
  virtual void BeginCycle(const Cycle& /*cycle*/) {}
  virtual std::int64_t Score(const Cycle& cycle, const core::NodeView& node) = 0;
  virtual std::vector<int> ChooseGpus(const Cycle& cycle, const core::NodeView& node) = 0;
};

// GPU selection rules shared by several policies (the FGD study's open-gpu-share plugin).
// All return request.gpu_count ascending indices of admitting GPUs; the node must fit.
//  * BestFitGpus: a fractional single-GPU request takes the admitting GPU with the least free
//    milli-GPU (lowest index on ties); other requests take the lowest-indexed admitting GPUs.
//  * LowestIndexGpus: the lowest-indexed admitting GPUs.
//  * RandomFitGpus: a uniformly random admitting GPU (reservoir sampling in index order), or
//    for several GPUs a uniformly random subset of the admitting ones.
std::vector<int> BestFitGpus(const Cycle& cycle, const core::NodeView& node);
std::vector<int> LowestIndexGpus(const Cycle& cycle, const core::NodeView& node);
std::vector<int> RandomFitGpus(const Cycle& cycle, const core::NodeView& node);

// Base of the policies that grant GPUs by best fit, the FGD study's default GPU choice
// (dotprod, gpu-clustering, gpu-packing, best-fit): they only define a name and a score.
class BestFitGpuPolicy : public Policy {
 public:
  std::vector<int> ChooseGpus(const Cycle& cycle, const core::NodeView& node) final {
    return BestFitGpus(cycle, node);
  }
};

}  // namespace gpumux::policy
