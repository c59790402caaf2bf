// The handshake's concurrency against the in-test API server (with injected latency): calls
// that need not wait for each other's API round trips do not, and Claims that race for the
// same node lock are ordered by its resourceVersion precondition (the loser gets 409, reads
// again and serves the next pair), never by a lock held in this process.
//
// The API client is wrapped in a gate that holds PATCH requests until the test opens it, so
// the tests assert on what happens while one call's request is in flight (ordering), not on
// elapsed time.
#include "gpumux/deviceplugin/handshake.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <future>
#include <mutex>
#include <nlohmann/json.hpp>

#include "tests/deviceplugin/handshake_fixtures.h"
#include "tests/testing/fake_apiserver.h"
#include "tests/testing/kube_fixtures.h"

namespace gpumux::deviceplugin {
namespace {

using kube::testing::ContainerOf;
using nlohmann::json;
using testing_fixtures::GrantedPod;
using testing_fixtures::HandshakeNode;
using testing_fixtures::Lock;
using testing_fixtures::Locked;
using namespace std::chrono_literals;

// Forwards to a real client; PATCH requests wait at a gate while it is closed.
class GatedApi : public kube::KubeApi {
 public:
  explicit GatedApi(kube::KubeApi& inner) : inner_(&inner) {}

  void ClosePatches() {
    std::lock_guard lock(mu_);
    closed_ = true;
  }
  void OpenPatches() {
    {
      std::lock_guard lock(mu_);
      closed_ = false;
    }
    cv_.notify_all();
  }
  // Waits until `n` PATCH requests wait at the closed gate; false on timeout.
  bool WaitHeldPatches(int n, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return held_ >= n; });
  }

  kube::ApiResult<json> Get(const std::string& path) override { return inner_->Get(path); }
  kube::ApiResult<json> List(const std::string& path, int page_size) override {
    return inner_->List(path, page_size);
  }
  kube::ApiResult<json> Patch(const std::string& path, const json& body,
                              kube::PatchType type) override {
    {
      std::unique_lock lock(mu_);
      ++held_;
      cv_.notify_all();
      cv_.wait(lock, [&] { return !closed_; });
      --held_;
    }
    return inner_->Patch(path, body, type);
  }
  kube::ApiResult<json> Post(const std::string& path, const json& body) override {
    return inner_->Post(path, body);
  }
  kube::ApiResult<void> Watch(const std::string& path, const std::string& resource_version,
                              const std::function<bool(kube::WatchEvent&&)>& on_event,
                              std::stop_token stop, int timeout_seconds) override {
    return inner_->Watch(path, resource_version, on_event, stop, timeout_seconds);
  }

 private:
  kube::KubeApi* inner_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool closed_ = false;
  int held_ = 0;
};

class HandshakeConcurrency : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(server_.ok()) << server_.error();
    server_.AddNode(HandshakeNode());
    kube::ClientConfig config;
    config.server = server_.url();
    api_ = kube::MakeCurlClient(config);
    gated_ = std::make_unique<GatedApi>(*api_);
    handshake_ = std::make_unique<Handshake>(*gated_, "n1");
    // Every request takes a while, as over a real network.
    server_.SetLatency(20ms);
  }
  void TearDown() override {
    gated_->OpenPatches();  // never leave a call stuck at the gate
  }

  test::FakeApiServer server_;
  std::unique_ptr<kube::KubeApi> api_;
  std::unique_ptr<GatedApi> gated_;
  std::unique_ptr<Handshake> handshake_;
};

// Per GPU, what this node's pods hold (the device plugin's per-GPU gauges): a whole GPU counts
// whole, shares add up, an ended pod and an unreadable grant hold nothing.
TEST_F(HandshakeConcurrency, GrantedSumsWhatThePodsOfTheNodeHoldPerGpu) {
  server_.AddPod(GrantedPod("whole", {ContainerOf{"main", 1, 0, 0}},
                            {{"main", {{0, "GPU-n1-0"}}, 1000, 0, false, true}}));
  server_.AddPod(GrantedPod("share-a", {ContainerOf{"main", 0, 8192, 0}},
                            {{"main", {{1, "GPU-n1-1"}}, 300, 8192, true, false}}));
  server_.AddPod(GrantedPod("share-b", {ContainerOf{"main", 0, 4096, 0}},
                            {{"main", {{1, "GPU-n1-1"}}, 200, 4096, true, false}}));
  json ended = GrantedPod("ended", {ContainerOf{"main", 1, 0, 0}},
                          {{"main", {{2, "GPU-n1-2"}}, 1000, 0, false, true}});
  ended["status"]["phase"] = "Succeeded";
  server_.AddPod(ended);
  json elsewhere = GrantedPod("elsewhere", {ContainerOf{"main", 1, 0, 0}},
                              {{"main", {{3, "GPU-n1-3"}}, 1000, 0, false, true}});
  elsewhere["metadata"]["annotations"][std::string(kube::kAnnotationGrant)] =
      json::parse(R"("x")").get<std::string>();  // unreadable: counted nowhere
  server_.AddPod(elsewhere);
  EXPECT_TRUE(handshake_->Granted().empty()) << "nothing known before the watch";
  handshake_->Watch();
  std::map<int, GrantedOnGpu> granted;
  for (int k = 0; k < 200 && granted.size() < 2; ++k) {
    std::this_thread::sleep_for(25ms);
    granted = handshake_->Granted();
  }
  ASSERT_EQ(granted.size(), 2u) << (granted.empty() ? -1 : granted.begin()->first);
  EXPECT_EQ(granted[0].containers, 1);
  EXPECT_TRUE(granted[0].exclusive);
  EXPECT_EQ(granted[0].milli, 1000);
  EXPECT_EQ(granted[1].containers, 2);
  EXPECT_FALSE(granted[1].exclusive);
  EXPECT_EQ(granted[1].milli, 500);
  EXPECT_EQ(granted[1].memory_mib, 12288);
}

TEST_F(HandshakeConcurrency, PeekAnswersWhileAClaimsPatchIsInFlight) {
  const json pod = GrantedPod("train", {ContainerOf{"main", 1, 0, 0}},
                              {{"main", {{1, "GPU-n1-1"}}, 1000, 0, false, true}});
  server_.AddPod(pod);
  Lock(server_, pod);
  gated_->ClosePatches();
  auto claim =
      std::async(std::launch::async, [&] { return handshake_->Claim(Resource::kGpu, {1}); });
  ASSERT_TRUE(gated_->WaitHeldPatches(1, 10s)) << "the Claim never sent its PATCH";
  // The Claim's PATCH is in flight: GetPreferredAllocation must not wait for it.
  auto peek = std::async(std::launch::async, [&] { return handshake_->Peek(Resource::kGpu, 1); });
  const bool answered = peek.wait_for(10s) == std::future_status::ready;
  gated_->OpenPatches();
  EXPECT_TRUE(answered) << "Peek waited for the Claim's API calls";
  EXPECT_EQ(peek.get(), std::vector<int>{1});
  const auto served = claim.get();
  ASSERT_TRUE(served.has_value()) << served.error().message;
  ASSERT_EQ(served->size(), 1u);
  EXPECT_EQ((*served)[0].grant.name, "main");
  EXPECT_FALSE(Locked(server_));
}

// The kubelet allocates gpu-mem and gpu-milli of one container: both Claims read the same lock
// and send their PATCH at once; one wins, the other gets 409, reads again and records its own
// pair, and the lock is released once both are served.
TEST_F(HandshakeConcurrency, TwoClaimsOverlapAndTheOneThatLosesTheRaceRetriesOnTheConflict) {
  const json pod = GrantedPod("share", {ContainerOf{"main", 0, 8, 250}},
                              {{"main", {{0, "GPU-n1-0"}}, 250, 8192, true, false}});
  server_.AddPod(pod);
  Lock(server_, pod);
  gated_->ClosePatches();
  auto mem =
      std::async(std::launch::async, [&] { return handshake_->Claim(Resource::kGpuMem, {8}); });
  ASSERT_TRUE(gated_->WaitHeldPatches(1, 10s)) << "the first Claim never sent its PATCH";
  auto milli =
      std::async(std::launch::async, [&] { return handshake_->Claim(Resource::kGpuMilli, {250}); });
  const bool overlapped = gated_->WaitHeldPatches(2, 10s);
  gated_->OpenPatches();
  EXPECT_TRUE(overlapped) << "the second Claim waited for the first one's API calls";
  const auto mem_served = mem.get();
  const auto milli_served = milli.get();
  ASSERT_TRUE(mem_served.has_value()) << mem_served.error().message;
  ASSERT_TRUE(milli_served.has_value()) << milli_served.error().message;
  EXPECT_EQ((*mem_served)[0].grant.name, "main");
  EXPECT_EQ((*milli_served)[0].grant.name, "main");
  EXPECT_EQ((*mem_served)[0].pod_name, "share");
  EXPECT_FALSE(Locked(server_)) << "both pairs served: the lock is gone";
  // Both PATCHes raced on one resourceVersion: exactly one was refused and sent again.
  EXPECT_EQ(server_.requests("patch node"), 3);
}

// Caches fed by a watch the caller runs (ObserveNode, ObservePod: one process standing in for
// many nodes' plugins): a Claim then reads nothing from the API server, and costs its PATCH.
TEST_F(HandshakeConcurrency, CachesFedByTheCallersWatchServeAClaimWithoutAnyRead) {
  json pod = GrantedPod("fed", {ContainerOf{"main", 0, 8, 250}},
                        {{"main", {{0, "GPU-n1-0"}}, 250, 8192, true, false}});
  server_.AddPod(pod);
  Lock(server_, pod);
  handshake_->ObserveNode({"MODIFIED", *server_.GetNode("n1")});
  handshake_->ObservePod({"MODIFIED", *server_.GetPod("default", "fed")});
  const std::int64_t gets = server_.requests("get node") + server_.requests("get pod");
  auto served = handshake_->Claim(Resource::kGpuMem, {8});
  ASSERT_TRUE(served.has_value()) << served.error().message;
  EXPECT_EQ((*served)[0].pod_name, "fed");
  EXPECT_EQ(server_.requests("get node") + server_.requests("get pod"), gets);
  EXPECT_EQ(server_.requests("patch node"), 1);
}

// Claims for the same pair at once (a kubelet retrying a call it gave up on): the node lock
// lets exactly one serve it; the other finds nothing left and says so.
TEST_F(HandshakeConcurrency, TwoClaimsForTheSamePairServeItOnce) {
  const json pod = GrantedPod("train", {ContainerOf{"main", 1, 0, 0}},
                              {{"main", {{1, "GPU-n1-1"}}, 1000, 0, false, true}});
  server_.AddPod(pod);
  Lock(server_, pod);
  gated_->ClosePatches();
  auto first =
      std::async(std::launch::async, [&] { return handshake_->Claim(Resource::kGpu, {1}); });
  auto second =
      std::async(std::launch::async, [&] { return handshake_->Claim(Resource::kGpu, {1}); });
  const bool overlapped = gated_->WaitHeldPatches(2, 10s);
  gated_->OpenPatches();
  EXPECT_TRUE(overlapped) << "one Claim waited for the other's API calls";
  const auto a = first.get();
  const auto b = second.get();
  EXPECT_NE(a.has_value(), b.has_value()) << "served exactly once";
  const auto& refused = a.has_value() ? b : a;
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, HandshakeError::Code::kFailedPrecondition);
  EXPECT_NE(refused.error().message.find("no pod holds the node lock"), std::string::npos)
      << refused.error().message;
  EXPECT_FALSE(Locked(server_));
}

}  // namespace
}  // namespace gpumux::deviceplugin
