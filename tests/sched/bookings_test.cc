// The bookings state machine on its own, over a fake ledger that records what is placed: the
// events of bookings.h move a pod as its table says, and only then touch the ledger.
#include "gpumux/sched/bookings.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace gpumux::sched {
namespace {

using Kind = BookingEvent::Kind;

// A ledger with one GPU per node name: a grant fits unless its GPU is taken.
class FakeLedger final : public GrantLedger {
 public:
  bool built() const override { return built_; }
  std::optional<PlaceFailure> Place(const PodRecord& r) override {
    const std::string gpu =
        r.booked->node + "/" + std::to_string(r.booked->containers[0].gpus[0].index);
    if (!taken.insert(gpu).second) return PlaceFailure{gpu + " is taken", true};
    return std::nullopt;
  }
  void Unplace(const PodRecord& r) override {
    taken.erase(r.booked->node + "/" + std::to_string(r.booked->containers[0].gpus[0].index));
  }
  bool built_ = true;
  std::set<std::string> taken;
};

kube::Grant GrantOn(const std::string& node, int gpu, std::int64_t at) {
  kube::Grant g;
  g.node = node;
  g.assumed_at = at;
  kube::ContainerGrant c;
  c.name = "main";
  c.gpus.push_back({gpu, "GPU-" + std::to_string(gpu)});
  g.containers.push_back(c);
  return g;
}

kube::PodInfo Pod(const std::string& uid) {
  kube::PodInfo p;
  p.uid = uid;
  p.ns = "default";
  p.name = uid;
  kube::ContainerRequest c;
  c.container = "main";
  c.request.gpu_count = 1;
  p.containers.push_back(c);
  return p;
}

class BookingsTest : public ::testing::Test {
 protected:
  FakeLedger ledger_;
  std::int64_t now_ = 1000;
  Bookings bookings_{ledger_, {60, [this] { return now_; }, nullptr}};
};

TEST_F(BookingsTest, BindWalksAPodFromAssumedToBindingToBound) {
  const kube::PodInfo pod = Pod("u1");
  const kube::Grant grant = GrantOn("n1", 0, now_);
  Transition t = bookings_.Apply("u1", {Kind::kAssumed, &pod, &grant});
  EXPECT_EQ(t.from, BookingState::kNone);
  EXPECT_EQ(t.to, BookingState::kAssumed);
  EXPECT_EQ(ledger_.taken.count("n1/0"), 1U);
  t = bookings_.Apply("u1", {Kind::kBindingBegun, nullptr, &grant});
  EXPECT_EQ(t.to, BookingState::kBinding);
  t = bookings_.Apply("u1", {Kind::kConfirmedBound, nullptr, &grant});
  EXPECT_EQ(t.to, BookingState::kBound);
  // Nothing local takes a bound grant away.
  t = bookings_.Apply("u1", {Kind::kForgotten, nullptr, &grant});
  EXPECT_EQ(t.to, BookingState::kBound);
  EXPECT_TRUE(bookings_.Apply("u1", {Kind::kExpired}).refused);
  EXPECT_EQ(ledger_.taken.count("n1/0"), 1U);
}

TEST_F(BookingsTest, AnAssumptionPastItsTtlExpiresAndGivesItsGpuBack) {
  const kube::PodInfo pod = Pod("u1");
  const kube::Grant grant = GrantOn("n1", 0, now_);
  bookings_.Apply("u1", {Kind::kAssumed, &pod, &grant});
  EXPECT_TRUE(bookings_.Overdue().empty());
  now_ += 61;
  EXPECT_EQ(bookings_.Overdue(), std::vector<std::string>{"u1"});
  const Transition t = bookings_.Apply("u1", {Kind::kExpired});
  EXPECT_EQ(t.to, BookingState::kNone);
  EXPECT_TRUE(ledger_.taken.empty());
  EXPECT_EQ(*bookings_.Find("u1")->released, grant) << "remembered: a pending view won't rebook it";
}

TEST_F(BookingsTest, APodSeenBoundOnTheGpuOfAnAssumptionEvictsIt) {
  const kube::PodInfo mine = Pod("u1");
  const kube::Grant grant = GrantOn("n1", 0, now_);
  bookings_.Apply("u1", {Kind::kAssumed, &mine, &grant});
  kube::PodInfo theirs = Pod("u2");
  theirs.node_name = "n1";
  theirs.grant = GrantOn("n1", 0, now_ - 5);
  const Transition t = bookings_.Apply("u2", {Kind::kSeen, &theirs});
  EXPECT_EQ(t.to, BookingState::kBound);
  EXPECT_EQ(bookings_.Find("u1")->state, BookingState::kNone);
  EXPECT_NE(bookings_.Find("u1")->problem.find("gives way to pod default/u2"), std::string::npos);
  EXPECT_EQ(bookings_.counters().grant_conflicts, 1);
}

TEST_F(BookingsTest, TwoBoundPodsOnOneGpuLeaveOneInConflictUntilTheOtherGoes) {
  kube::PodInfo a = Pod("a");
  a.node_name = "n1";
  a.grant = GrantOn("n1", 0, now_);
  kube::PodInfo b = Pod("b");
  b.node_name = "n1";
  b.grant = GrantOn("n1", 0, now_ + 1);
  bookings_.Apply("a", {Kind::kSeen, &a});
  EXPECT_EQ(bookings_.Apply("b", {Kind::kSeen, &b}).to, BookingState::kConflict);
  EXPECT_EQ(bookings_.in_conflict(), 1);
  bookings_.Apply("a", {Kind::kRemoved});
  EXPECT_EQ(bookings_.Find("b")->state, BookingState::kBound) << "retried once the GPU was freed";
  EXPECT_EQ(bookings_.in_conflict(), 0);
}

TEST_F(BookingsTest, WhileTheLedgerAwaitsARebuildNothingIsPlacedUntilTheReplay) {
  ledger_.built_ = false;
  kube::PodInfo a = Pod("a");
  a.node_name = "n1";
  a.grant = GrantOn("n1", 0, now_);
  bookings_.Apply("a", {Kind::kSeen, &a});
  EXPECT_TRUE(ledger_.taken.empty());
  ledger_.built_ = true;
  bookings_.Replay();
  EXPECT_EQ(ledger_.taken.count("n1/0"), 1U);
  EXPECT_TRUE(bookings_.Find("a")->in_ledger);
}

}  // namespace
}  // namespace gpumux::sched
