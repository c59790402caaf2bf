// The booking life cycle of ClusterState (cluster_state.h): assumed -> binding -> bound, a
// conflict, a release; a pod seen bound with its grant always wins over any local belief.
#include <gtest/gtest.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "gpumux/sched/cluster_state.h"
#include "tests/testing/kube_fixtures.h"

namespace gpumux::sched {
namespace {

using kube::testing::NodeJson;
using kube::testing::PodWithOne;
using nlohmann::json;
using Kind = NodeVerdict::Kind;

class BookingTest : public ::testing::Test {
 protected:
  // One node n1 with one GPU; every pod asks for it whole.
  std::unique_ptr<ClusterState> Make(std::int64_t ttl = 60) {
    ClusterStateOptions options;
    options.policy = "best-fit";
    options.grant_ttl_seconds = ttl;
    options.log = [this](std::string_view line) { log_.emplace_back(line); };
    auto state = ClusterState::Create(std::move(options), [this] { return now_; });
    EXPECT_TRUE(state.has_value());
    const json nodes[] = {NodeJson("n1", 1)};
    (*state)->SetNodes(nodes);
    return std::move(*state);
  }
  static kube::PodInfo Pod(const json& pod) {
    auto p = kube::DecodePod(pod);
    EXPECT_TRUE(p.has_value());
    return *p;
  }
  // The pod as the API server shows it once bound with `grant`.
  static json Bound(json pod, const kube::Grant& grant) {
    pod["metadata"]["annotations"]["gpumux.io/grant"] = kube::EncodeGrant(grant);
    pod["spec"]["nodeName"] = grant.node;
    pod["status"]["phase"] = "Running";
    return pod;
  }
  // A grant of GPU 0 of n1, as another extender (or this one before a restart) wrote it.
  kube::Grant GpuZero() const {
    kube::Grant g;
    g.node = "n1";
    g.policy = "best-fit";
    g.assumed_at = now_;
    g.containers.push_back({"main", {{0, "GPU-n1-0"}}, 1000, 0, false, true});
    return g;
  }
  // Whether the single GPU is free for yet another pod.
  static bool GpuFree(ClusterState& state) {
    const std::vector<std::string> names = {"n1"};
    return state.Evaluate(Pod(PodWithOne("other", 1, 0, 0)), names)[0].kind == Kind::kFits;
  }
  std::int64_t now_ = 1'800'000'000;
  std::vector<std::string> log_;
};

TEST_F(BookingTest, APodSeenBoundWithItsGrantWinsOverAGrantGivenBackAfterAFailedBind) {
  auto state = Make();
  const json a = PodWithOne("a", 1, 0, 0);
  auto grant = state->Assume(Pod(a), "n1");
  ASSERT_TRUE(grant.has_value());
  state->Forget("uid-a", *grant);  // the bind reported an error, but the Binding was applied
  ASSERT_TRUE(GpuFree(*state));
  state->UpsertPod(Bound(a, *grant));
  EXPECT_FALSE(GpuFree(*state)) << "the pod holds the GPU: it must not be granted again";
  EXPECT_FALSE(state->Assume(Pod(PodWithOne("b", 1, 0, 0)), "n1").has_value());
  EXPECT_EQ(state->counters().grants_bound, 1);
}

TEST_F(BookingTest, APodSeenBoundWithItsGrantWinsOverAnExpiredAssumption) {
  auto state = Make(60);
  const json a = PodWithOne("a", 1, 0, 0);
  auto grant = state->Assume(Pod(a), "n1");
  ASSERT_TRUE(grant.has_value());
  now_ += 61;
  ASSERT_EQ(state->ExpireAssumed(), 1);
  state->UpsertPod(Bound(a, *grant));
  EXPECT_FALSE(GpuFree(*state));
  EXPECT_EQ(state->counters().grants_bound, 1);
}

TEST_F(BookingTest, APodSeenBoundEvictsAnAssumedBookingOfTheSameGpu) {
  auto state = Make();
  ASSERT_TRUE(state->Assume(Pod(PodWithOne("a", 1, 0, 0)), "n1").has_value());
  // Pod c is bound to GPU 0 (a grant this extender lost track of): it wins over a's assumption.
  state->UpsertPod(Bound(PodWithOne("c", 1, 0, 0), GpuZero()));
  const StateCounters c = state->counters();
  EXPECT_EQ(c.grants_bound, 1);
  EXPECT_EQ(c.grants_assumed, 0) << "a's assumption was evicted";
  EXPECT_EQ(c.grant_conflicts, 1) << "and the conflict counted";
  const json inspect = sched::StateJson(state->Snapshot());
  const json& tenants = inspect["nodes"][0]["gpus"][0]["tenants"];
  ASSERT_EQ(tenants.size(), 1u) << inspect.dump();
  EXPECT_EQ(tenants[0]["pod"], "default/c");
  EXPECT_EQ(tenants[0]["state"], "bound");
  ASSERT_FALSE(log_.empty());
  EXPECT_NE(log_.back().find("default/a"), std::string::npos) << log_.back();
  EXPECT_NE(log_.back().find("default/c"), std::string::npos) << log_.back();
}

TEST_F(BookingTest, ABindIsRefusedWhenABoundPodTookItsGpusBeforeTheBinding) {
  auto state = Make();
  auto grant = state->Assume(Pod(PodWithOne("a", 1, 0, 0)), "n1");
  ASSERT_TRUE(grant.has_value());
  state->UpsertPod(Bound(PodWithOne("c", 1, 0, 0), GpuZero()));
  EXPECT_FALSE(state->BeginBinding("uid-a", *grant)) << "a's Binding must not be created";
  const auto a = state->Booking("uid-a");
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->state, BookingState::kNone);
  EXPECT_NE(a->problem.find("gives way to pod default/c"), std::string::npos) << a->problem;
  EXPECT_EQ(sched::StateJson(state->Snapshot())["grants_not_in_ledger"][0]["pod"], "default/a");
}

TEST_F(BookingTest, ARetriedBindOfAPodWhoseBindingHasAnUnknownOutcomeIsRefused) {
  auto state = Make();
  const kube::PodInfo a = Pod(PodWithOne("a", 1, 0, 0));
  auto grant = state->Assume(a, "n1");
  ASSERT_TRUE(grant.has_value());
  ASSERT_TRUE(state->BeginBinding("uid-a", *grant));
  auto again = state->Assume(a, "n1");
  ASSERT_FALSE(again.has_value());
  EXPECT_NE(again.error().message.find("unknown outcome"), std::string::npos)
      << again.error().message;
  EXPECT_EQ(state->Booking("uid-a")->grant, *grant) << "the booking is kept as it was";
}

TEST_F(BookingTest, TwoPodsBoundToOneGpuAreAConflictUntilOneEnds) {
  auto state = Make();
  json b = Bound(PodWithOne("b", 1, 0, 0), GpuZero());
  state->UpsertPod(Bound(PodWithOne("a", 1, 0, 0), GpuZero()));
  state->UpsertPod(b);
  EXPECT_EQ(state->Booking("uid-a")->state, BookingState::kBound);
  EXPECT_EQ(state->Booking("uid-b")->state, BookingState::kConflict);
  EXPECT_NE(state->Booking("uid-b")->problem.find("GPU 0 of node n1"), std::string::npos)
      << state->Booking("uid-b")->problem;
  EXPECT_EQ(state->counters().grant_conflicts, 1);
  state->UpsertPod(b);  // seen again: not counted again
  EXPECT_EQ(state->counters().grant_conflicts, 1);
  // A node change rebuilds the ledger: the same pod stays in it.
  state->UpsertNode(NodeJson("n2", 1));
  EXPECT_EQ(state->Booking("uid-a")->state, BookingState::kBound);
  EXPECT_EQ(state->Booking("uid-b")->state, BookingState::kConflict);
  state->RemovePod(Bound(PodWithOne("a", 1, 0, 0), GpuZero()));
  EXPECT_EQ(state->Booking("uid-b")->state, BookingState::kBound);
  EXPECT_TRUE(state->Booking("uid-b")->in_ledger);
  EXPECT_FALSE(GpuFree(*state));
}

TEST_F(BookingTest, APodBoundElsewhereThanItsGrantNamesIsACountedConflictHoldingNothing) {
  auto state = Make();
  json pod = Bound(PodWithOne("a", 1, 0, 0), GpuZero());
  pod["spec"]["nodeName"] = "n2";
  state->UpsertPod(pod);
  state->UpsertPod(pod);
  EXPECT_EQ(state->counters().grant_conflicts, 1);
  EXPECT_TRUE(GpuFree(*state));
  const json inspect = sched::StateJson(state->Snapshot());
  ASSERT_EQ(inspect["grants_not_in_ledger"].size(), 1u) << inspect.dump();
  EXPECT_NE(inspect["grants_not_in_ledger"][0]["problem"].get<std::string>().find(
                "bound to n2 but its grant names n1"),
            std::string::npos);
}

// --- the life cycle, one event after another ---------------------------------------------------

enum class Step : std::uint8_t {
  kAssume,               // bind picks GPU 0 for pod a
  kBeginBinding,         // its grant is written, the Binding about to be sent
  kConfirm,              // the Binding succeeded (or the pod was read back bound)
  kForget,               // the bind failed and the pod is known not to be bound
  kExpire,               // the TTL passes
  kSeePending,           // the watch shows a pending, without annotation (an old event)
  kSeePendingWithGrant,  // pending, carrying a's grant (the patch went through)
  kSeeBound,             // bound with its grant
  kSeeFinished,          // Succeeded
  kSeeDeleted,           // DELETED
  kRelistWithoutIt,      // a relist that does not contain a
};

struct LifeCase {
  std::string name;
  std::vector<Step> steps;
  BookingState state;  // a's state after the steps
  bool gpu_free;       // whether another pod could have GPU 0 now
};

void PrintTo(const LifeCase& c, std::ostream* os) { *os << c.name; }

class BookingLifeCycle : public BookingTest, public ::testing::WithParamInterface<LifeCase> {};

TEST_P(BookingLifeCycle, FollowsTheTable) {
  auto state = Make(60);
  const json pod = PodWithOne("a", 1, 0, 0);
  kube::Grant grant = GpuZero();  // what a holds when no step assumed it (a grant from elsewhere)
  for (Step step : GetParam().steps) {
    switch (step) {
      case Step::kAssume: {
        auto assumed = state->Assume(Pod(pod), "n1");
        ASSERT_TRUE(assumed.has_value()) << assumed.error().message;
        grant = *assumed;
        break;
      }
      case Step::kBeginBinding:
        ASSERT_TRUE(state->BeginBinding("uid-a", grant));
        break;
      case Step::kConfirm:
        state->ConfirmBound("uid-a", grant);
        break;
      case Step::kForget:
        state->Forget("uid-a", grant);
        break;
      case Step::kExpire:
        now_ += 61;
        (void)state->ExpireAssumed();
        break;
      case Step::kSeePending:
        state->UpsertPod(pod);
        break;
      case Step::kSeePendingWithGrant: {
        json seen = pod;
        seen["metadata"]["annotations"]["gpumux.io/grant"] = kube::EncodeGrant(grant);
        state->UpsertPod(seen);
        break;
      }
      case Step::kSeeBound:
        state->UpsertPod(Bound(pod, grant));
        break;
      case Step::kSeeFinished: {
        json done = Bound(pod, grant);
        done["status"]["phase"] = "Succeeded";
        state->UpsertPod(done);
        break;
      }
      case Step::kSeeDeleted:
        state->RemovePod(pod);
        break;
      case Step::kRelistWithoutIt: {
        const json others[] = {PodWithOne("unrelated", 0, 0, 0)};
        state->SetPods(others);
        break;
      }
    }
  }
  const auto booking = state->Booking("uid-a");
  const BookingState actual = booking ? booking->state : BookingState::kNone;
  EXPECT_EQ(BookingStateName(actual), BookingStateName(GetParam().state));
  EXPECT_EQ(GpuFree(*state), GetParam().gpu_free);
  if (booking && actual != BookingState::kNone && actual != BookingState::kConflict) {
    EXPECT_TRUE(booking->in_ledger);
    EXPECT_EQ(booking->grant, grant);
  }
}

using S = Step;
using B = BookingState;
INSTANTIATE_TEST_SUITE_P(
    Table, BookingLifeCycle,
    ::testing::Values(
        LifeCase{"bind_picks_gpus_assumed", {S::kAssume}, B::kAssumed, false},
        LifeCase{"grant_written_binding", {S::kAssume, S::kBeginBinding}, B::kBinding, false},
        LifeCase{"binding_confirmed_bound",
                 {S::kAssume, S::kBeginBinding, S::kConfirm},
                 B::kBound,
                 false},
        LifeCase{"assumed_seen_bound_bound", {S::kAssume, S::kSeeBound}, B::kBound, false},
        LifeCase{"binding_seen_bound_bound",
                 {S::kAssume, S::kBeginBinding, S::kSeeBound},
                 B::kBound,
                 false},
        LifeCase{"failed_before_binding_released", {S::kAssume, S::kForget}, B::kNone, true},
        LifeCase{"binding_known_unbound_released",
                 {S::kAssume, S::kBeginBinding, S::kForget},
                 B::kNone,
                 true},
        LifeCase{"assumed_past_ttl_released", {S::kAssume, S::kExpire}, B::kNone, true},
        LifeCase{"binding_never_seen_bound_expires",
                 {S::kAssume, S::kBeginBinding, S::kExpire},
                 B::kNone,
                 true},
        LifeCase{"binding_seen_pending_is_kept",
                 {S::kAssume, S::kBeginBinding, S::kSeePending},
                 B::kBinding,
                 false},
        LifeCase{"binding_seen_pending_with_its_grant_is_kept",
                 {S::kAssume, S::kBeginBinding, S::kSeePendingWithGrant},
                 B::kBinding,
                 false},
        LifeCase{"binding_survives_a_relist_without_it",
                 {S::kAssume, S::kBeginBinding, S::kRelistWithoutIt},
                 B::kBinding,
                 false},
        LifeCase{"released_then_seen_bound_wins",
                 {S::kAssume, S::kForget, S::kSeeBound},
                 B::kBound,
                 false},
        LifeCase{"expired_then_seen_bound_wins",
                 {S::kAssume, S::kBeginBinding, S::kExpire, S::kSeeBound},
                 B::kBound,
                 false},
        LifeCase{"released_then_seen_pending_with_it_stays_released",
                 {S::kAssume, S::kForget, S::kSeePendingWithGrant},
                 B::kNone,
                 true},
        LifeCase{"bound_then_an_old_pending_event_stays_bound",
                 {S::kAssume, S::kBeginBinding, S::kConfirm, S::kSeePending},
                 B::kBound,
                 false},
        LifeCase{"bound_is_never_forgotten",
                 {S::kAssume, S::kBeginBinding, S::kConfirm, S::kForget},
                 B::kBound,
                 false},
        LifeCase{"bound_never_expires",
                 {S::kAssume, S::kSeeBound, S::kExpire, S::kExpire},
                 B::kBound,
                 false},
        LifeCase{"a_grant_from_before_a_restart_is_assumed",
                 {S::kSeePendingWithGrant},
                 B::kAssumed,
                 false},
        LifeCase{"a_pod_seen_bound_after_a_restart_is_bound", {S::kSeeBound}, B::kBound, false},
        LifeCase{"finished_released", {S::kAssume, S::kSeeBound, S::kSeeFinished}, B::kNone, true},
        LifeCase{"deleted_released", {S::kAssume, S::kSeeBound, S::kSeeDeleted}, B::kNone, true},
        LifeCase{"bound_gone_from_a_relist_released",
                 {S::kAssume, S::kSeeBound, S::kRelistWithoutIt},
                 B::kNone,
                 true}),
    [](const ::testing::TestParamInfo<LifeCase>& param_info) { return param_info.param.name; });

}  // namespace
}  // namespace gpumux::sched
