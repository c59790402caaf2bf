// The requeuer against the in-test API server: pods the filter turned away get
// gpumux.io/requeued-at once the watch shows room may have been made (fault 2 of the
// real-cluster review: a pending pod waited ~5 minutes when kube-scheduler retried it before
// the extender's watch had seen a GPU pod deleted).
#include "gpumux/extender/requeue.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <thread>

#include "tests/testing/fake_apiserver.h"
#include "tests/testing/kube_fixtures.h"

namespace gpumux::extender {
namespace {

using kube::testing::NodeJson;
using kube::testing::PodWithOne;
using nlohmann::json;

using kube::testing::Eventually;

class RequeuerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    kube::ClientConfig config;
    config.server = server_.url();
    api_ = kube::MakeCurlClient(config);
    RequeuerOptions options;
    options.coalesce = std::chrono::milliseconds(1);
    options.min_interval = std::chrono::milliseconds(0);
    options.now_text = [] { return std::string("2026-11-23T10:00:00.000Z"); };
    options.log = [this](std::string_view line) {
      std::lock_guard lock(mu_);
      logged_.emplace_back(line);
    };
    requeuer_ = std::make_unique<Requeuer>(*api_, options);
    requeuer_->Start();
    pending_ = PodWithOne("pending", 1, 0, 0);
    server_.AddPod(pending_);
  }
  void TearDown() override { requeuer_->Stop(); }

  std::string StampOf(const std::string& name) const {
    const json pod = *server_.GetPod("default", name);
    const json& annotations = pod["metadata"].value("annotations", json::object());
    return annotations.value(std::string(kAnnotationRequeuedAt), std::string());
  }
  void TurnAway() { requeuer_->TurnedAway("default", "pending", pending_["metadata"]["uid"]); }
  static json GrantedPod(const std::string& name) {
    json pod = PodWithOne(name, 1, 0, 0);
    pod["metadata"]["annotations"]["gpumux.io/grant"] = "{}";
    pod["spec"]["nodeName"] = "n1";
    return pod;
  }
  std::vector<std::string> Logged() {
    std::lock_guard lock(mu_);
    return logged_;
  }

  test::FakeApiServer server_;
  std::unique_ptr<kube::KubeApi> api_;
  std::unique_ptr<Requeuer> requeuer_;
  json pending_;
  std::mutex mu_;
  std::vector<std::string> logged_;
};

TEST_F(RequeuerTest, APodTurnedAwayIsRequeuedWhenAGrantedPodIsDeleted) {
  TurnAway();
  requeuer_->ObservePod({"DELETED", GrantedPod("holder")});
  ASSERT_TRUE(Eventually([&] { return StampOf("pending") == "2026-11-23T10:00:00.000Z"; }));
  // The server holds the stamp before the requeuer has counted its answer.
  ASSERT_TRUE(Eventually([&] { return requeuer_->requeued() == 1; }));
  ASSERT_TRUE(Eventually([&] { return !Logged().empty(); }));
  EXPECT_EQ(Logged().front(), "requeued 1 of 1 pod waiting for GPUs (pod default/holder deleted)");
}

TEST_F(RequeuerTest, AGrantedPodThatFinishedMakesRoomToo) {
  TurnAway();
  json done = GrantedPod("holder");
  done["status"]["phase"] = "Succeeded";
  requeuer_->ObservePod({"MODIFIED", done});
  ASSERT_TRUE(Eventually([&] { return !StampOf("pending").empty(); }));
}

TEST_F(RequeuerTest, EventsThatFreeNothingRequeueNothing) {
  TurnAway();
  requeuer_->ObservePod({"DELETED", PodWithOne("no-grant", 1, 0, 0)});
  json running = GrantedPod("running");
  running["status"]["phase"] = "Running";
  requeuer_->ObservePod({"MODIFIED", running});
  json node = NodeJson("n1", 2);
  requeuer_->ObserveNode({"ADDED", node});  // the first sight of a node makes a round
  ASSERT_TRUE(Eventually([&] { return requeuer_->requeued() == 1; }));
  // A status heartbeat changes nothing gpumux reads: no round.
  node["status"]["conditions"] = json::array({{{"type", "Ready"}, {"status", "True"}}});
  requeuer_->ObserveNode({"MODIFIED", node});
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(requeuer_->requeued(), 1);
  // The device plugin's allocatable changing is a round.
  node["status"]["allocatable"]["gpumux.io/gpu"] = "0";
  requeuer_->ObserveNode({"MODIFIED", node});
  ASSERT_TRUE(Eventually([&] { return requeuer_->requeued() == 2; }));
}

TEST_F(RequeuerTest, NothingIsPatchedWhenNoPodWasTurnedAway) {
  requeuer_->ObservePod({"DELETED", GrantedPod("holder")});
  requeuer_->RoomMayHaveBeenMade("synced");
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(server_.requests("patch pod"), 0);
}

TEST_F(RequeuerTest, BoundAndDeletedPodsAreNoLongerFollowed) {
  TurnAway();
  EXPECT_EQ(requeuer_->waiting(), 1u);
  json bound = pending_;
  bound["spec"]["nodeName"] = "n1";
  requeuer_->ObservePod({"MODIFIED", bound});
  EXPECT_EQ(requeuer_->waiting(), 0u);
  TurnAway();
  requeuer_->ObservePod({"DELETED", pending_});
  EXPECT_EQ(requeuer_->waiting(), 0u);
}

TEST_F(RequeuerTest, APodGoneFromTheApiServerIsDropped) {
  TurnAway();
  server_.DeletePod("default", "pending");
  requeuer_->RoomMayHaveBeenMade("synced");
  ASSERT_TRUE(Eventually([&] { return requeuer_->waiting() == 0; }));
  EXPECT_EQ(requeuer_->requeued(), 0);
}

TEST_F(RequeuerTest, APodReplacedUnderTheSameNameIsNotTouched) {
  requeuer_->TurnedAway("default", "pending", "uid-of-an-older-pod");
  requeuer_->RoomMayHaveBeenMade("synced");
  ASSERT_TRUE(Eventually([&] { return requeuer_->waiting() == 0; }));
  EXPECT_EQ(StampOf("pending"), "") << "the uid precondition keeps the new pod untouched";
}

TEST_F(RequeuerTest, APodToRetryLaterIsPatchedWhenItsTimeComesWithoutAnyEvent) {
  // fgd-sat-reserve's wait limit: the filter's answer changes with time alone.
  json later = PodWithOne("later", 1, 0, 0);
  server_.AddPod(later);
  requeuer_->TurnedAway("default", "pending", pending_["metadata"]["uid"],
                        std::chrono::milliseconds(50));
  requeuer_->TurnedAway("default", "later", later["metadata"]["uid"], std::chrono::hours(1));
  ASSERT_TRUE(Eventually([&] { return !StampOf("pending").empty(); }));
  ASSERT_TRUE(Eventually([&] { return !Logged().empty(); }));
  EXPECT_EQ(Logged().front(), "requeued 1 of 1 pod waiting for GPUs (a wait limit passed)");
  EXPECT_EQ(StampOf("later"), "") << "its time has not come";
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(requeuer_->requeued(), 1) << "a retry is made once";
  EXPECT_EQ(requeuer_->waiting(), 2u) << "both still followed for events";
}

TEST_F(RequeuerTest, ATimedRetryWhosePatchFailedIsMadeAgain) {
  requeuer_->Stop();
  RequeuerOptions options;
  options.retry_after_error = std::chrono::milliseconds(50);
  Requeuer requeuer(*api_, options);
  requeuer.Start();
  server_.FailNext("PATCH", "/pods/pending", 503, "ServiceUnavailable", "the API server is busy");
  requeuer.TurnedAway("default", "pending", pending_["metadata"]["uid"],
                      std::chrono::milliseconds(10));
  ASSERT_TRUE(Eventually([&] { return requeuer.requeued() == 1; }))
      << "no event comes: only the retry made again after the failure can patch it";
  EXPECT_EQ(server_.requests("patch pod"), 2);
  requeuer.Stop();
}

TEST_F(RequeuerTest, APodWithARetryToComeIsNotForgotten) {
  requeuer_->Stop();
  RequeuerOptions options;
  options.forget_after = std::chrono::seconds(0);  // every other pod is dropped at a round
  options.min_interval = std::chrono::milliseconds(0);
  Requeuer requeuer(*api_, options);
  requeuer.Start();
  requeuer.TurnedAway("default", "pending", pending_["metadata"]["uid"],
                      std::chrono::milliseconds(200));
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  requeuer.RoomMayHaveBeenMade("synced");
  ASSERT_TRUE(Eventually([&] { return requeuer.requeued() == 2; }))
      << "patched by the round, and again at its retry time";
  EXPECT_EQ(requeuer.waiting(), 1u);
  requeuer.Stop();
}

TEST_F(RequeuerTest, TurnedAwayAgainWithoutARetryTimeCancelsTheEarlierOne) {
  requeuer_->TurnedAway("default", "pending", pending_["metadata"]["uid"],
                        std::chrono::milliseconds(500));
  TurnAway();  // e.g. overdue now: nothing more to wait for
  std::this_thread::sleep_for(std::chrono::milliseconds(800));
  EXPECT_EQ(server_.requests("patch pod"), 0);
}

TEST_F(RequeuerTest, AtMostMaxPodsAreFollowedTheOldestDroppedFirst) {
  requeuer_->Stop();
  RequeuerOptions options;
  options.max_pods = 2;
  Requeuer small(*api_, options);
  small.TurnedAway("default", "a", "uid-a");
  small.TurnedAway("default", "b", "uid-b");
  small.TurnedAway("default", "c", "uid-c");
  EXPECT_EQ(small.waiting(), 2u);
  small.ObservePod({"DELETED", PodWithOne("a", 1, 0, 0)});
  EXPECT_EQ(small.waiting(), 2u) << "a was already dropped as the oldest";
}

}  // namespace
}  // namespace gpumux::extender
