// The node lock (node_lock.h): its annotation's encoding, and taking, releasing and replacing it
// through a real client against the in-test API server (resourceVersion preconditions, 409
// retries, several acquirers at once).
#include "gpumux/kube/node_lock.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gpumux/core/time.h"
#include "gpumux/kube/grant.h"
#include "tests/testing/fake_apiserver.h"
#include "tests/testing/kube_fixtures.h"

namespace gpumux::kube {
namespace {

using kube::testing::HandshakeNodeJson;
using kube::testing::NodeJson;
using nlohmann::json;

constexpr std::int64_t kNow = 1'800'000'000;

NodeLock LockOf(const std::string& name, std::int64_t since, std::vector<std::string> served = {}) {
  NodeLock lock;
  lock.ns = "default";
  lock.name = name;
  lock.uid = "uid-" + name;
  lock.since = since;
  lock.served = std::move(served);
  return lock;
}

// --- the annotation -------------------------------------------------------------------------

TEST(NodeLockCodec, RoundTripsWithAndWithoutServedPairs) {
  for (const NodeLock& lock :
       {LockOf("a", kNow),
        LockOf("b", kNow - 7, {"main/gpumux.io/gpu-mem", "main/gpumux.io/gpu"})}) {
    const std::string text = EncodeNodeLock(lock);
    auto decoded = DecodeNodeLock(text);
    ASSERT_TRUE(decoded.has_value()) << decoded.error().message << " in " << text;
    EXPECT_EQ(*decoded, lock) << text;
  }
}

TEST(NodeLockCodec, WritesTheDocumentedFields) {
  const json doc = json::parse(EncodeNodeLock(LockOf("train", kNow, {"main/gpumux.io/gpu-mem"})));
  EXPECT_EQ(doc["version"], 1);
  EXPECT_EQ(doc["pod"], "default/train");
  EXPECT_EQ(doc["uid"], "uid-train");
  EXPECT_EQ(doc["since"], core::FormatRfc3339(kNow));
  EXPECT_EQ(doc["served"], json::array({"main/gpumux.io/gpu-mem"}));
}

TEST(NodeLockCodec, AMissingServedListMeansNothingServedYet) {
  auto decoded =
      DecodeNodeLock(R"({"version":1,"pod":"ns/p","uid":"u","since":"2026-11-21T10:00:00Z"})");
  ASSERT_TRUE(decoded.has_value()) << decoded.error().message;
  EXPECT_TRUE(decoded->served.empty());
  EXPECT_EQ(decoded->PodKey(), "ns/p");
}

struct BadLockCase {
  std::string name;
  std::string text;
  std::string expected;  // a substring of the error
};

class NodeLockDecodeRejects : public ::testing::TestWithParam<BadLockCase> {};

TEST_P(NodeLockDecodeRejects, NamingTheField) {
  const BadLockCase& c = GetParam();
  auto decoded = DecodeNodeLock(c.text);
  ASSERT_FALSE(decoded.has_value()) << c.text;
  EXPECT_NE(decoded.error().message.find("annotation gpumux.io/allocating"), std::string::npos)
      << decoded.error().message;
  EXPECT_NE(decoded.error().message.find(c.expected), std::string::npos)
      << "want '" << c.expected << "' in: " << decoded.error().message;
}

INSTANTIATE_TEST_SUITE_P(
    NodeLock, NodeLockDecodeRejects,
    ::testing::Values(
        BadLockCase{"NotJson", "{", "not JSON (line 1, column 2: "},
        BadLockCase{"AnArray", "[]", "not a JSON object"},
        BadLockCase{"NoVersion", R"({"pod":"a/b","uid":"u","since":"2026-11-21T10:00:00Z"})",
                    "missing field \"version\""},
        BadLockCase{"VersionAsText",
                    R"({"version":"1","pod":"a/b","uid":"u","since":"2026-11-21T10:00:00Z"})",
                    "field \"version\" has the wrong type"},
        BadLockCase{"AFutureVersion",
                    R"({"version":2,"pod":"a/b","uid":"u","since":"2026-11-21T10:00:00Z"})",
                    "unsupported version 2"},
        BadLockCase{"NoPod", R"({"version":1,"uid":"u","since":"2026-11-21T10:00:00Z"})",
                    "missing field \"pod\""},
        BadLockCase{"PodWithoutNamespace",
                    R"({"version":1,"pod":"train","uid":"u","since":"2026-11-21T10:00:00Z"})",
                    "\"pod\" must be \"<namespace>/<name>\""},
        BadLockCase{"PodWithTwoSlashes",
                    R"({"version":1,"pod":"a/b/c","uid":"u","since":"2026-11-21T10:00:00Z"})",
                    "\"pod\" must be"},
        BadLockCase{"NoUid", R"({"version":1,"pod":"a/b","since":"2026-11-21T10:00:00Z"})",
                    "missing field \"uid\""},
        BadLockCase{"EmptyUid",
                    R"({"version":1,"pod":"a/b","uid":"","since":"2026-11-21T10:00:00Z"})",
                    "empty \"uid\""},
        BadLockCase{"NoSince", R"({"version":1,"pod":"a/b","uid":"u"})", "missing field \"since\""},
        BadLockCase{"SinceNotATime", R"({"version":1,"pod":"a/b","uid":"u","since":"yesterday"})",
                    "since: not an RFC 3339 time"},
        BadLockCase{"ServedNotAList",
                    R"({"version":1,"pod":"a/b","uid":"u","since":"2026-11-21T10:00:00Z",)"
                    R"("served":"main"})",
                    "field \"served\" has the wrong type"},
        BadLockCase{"ServedItemNotAString",
                    R"({"version":1,"pod":"a/b","uid":"u","since":"2026-11-21T10:00:00Z",)"
                    R"("served":["main/gpumux.io/gpu",3]})",
                    "served[1]"}),
    [](const auto& test_case) { return test_case.param.name; });

TEST(ReadNodeLock, SeesTheHandshakeTheLockAndTheResourceVersion) {
  json node = HandshakeNodeJson("n1", 1);
  node["metadata"]["resourceVersion"] = "42";
  NodeLockView view = ReadNodeLock(node);
  EXPECT_TRUE(view.handshake);
  EXPECT_FALSE(view.lock.has_value());
  EXPECT_TRUE(view.lock_error.empty());
  EXPECT_EQ(view.resource_version, "42");

  node["metadata"]["annotations"]["gpumux.io/allocating"] = EncodeNodeLock(LockOf("a", kNow));
  view = ReadNodeLock(node);
  ASSERT_TRUE(view.lock.has_value());
  EXPECT_EQ(*view.lock, LockOf("a", kNow));

  node["metadata"]["annotations"]["gpumux.io/allocating"] = "{broken";
  view = ReadNodeLock(node);
  EXPECT_FALSE(view.lock.has_value());
  EXPECT_NE(view.lock_error.find("gpumux.io/allocating: not JSON ("), std::string::npos)
      << view.lock_error;

  EXPECT_FALSE(ReadNodeLock(NodeJson("plain", 1)).handshake);
  json other = HandshakeNodeJson("n2", 1);
  other["metadata"]["annotations"]["gpumux.io/handshake"] = "node-lock/v2";
  EXPECT_FALSE(ReadNodeLock(other).handshake) << "only node-lock/v1 is understood";
  EXPECT_FALSE(ReadNodeLock(json::array()).handshake);
}

TEST(NodeLockPatch, SetsOrRemovesTheAnnotationWithTheResourceVersion) {
  const json set = NodeLockPatch(LockOf("a", kNow), "17");
  EXPECT_EQ(set["metadata"]["resourceVersion"], "17");
  EXPECT_EQ(set["metadata"]["annotations"]["gpumux.io/allocating"],
            EncodeNodeLock(LockOf("a", kNow)));
  const json remove = NodeLockPatch(std::nullopt, "");
  EXPECT_FALSE(remove["metadata"].contains("resourceVersion"));
  ASSERT_TRUE(remove["metadata"]["annotations"].contains("gpumux.io/allocating"));
  EXPECT_TRUE(remove["metadata"]["annotations"]["gpumux.io/allocating"].is_null())
      << "a merge patch removes a key by setting it to null";
}

// --- through the API server ------------------------------------------------------------------

class NodeLockApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(server_.ok()) << server_.error();
    ClientConfig config;
    config.server = server_.url();
    api_ = MakeCurlClient(config);
  }
  void TearDown() override { api_.reset(); }

  // The lock the API server holds on `node` (or nullopt).
  std::optional<NodeLock> Held(const std::string& node) {
    auto stored = server_.GetNode(node);
    EXPECT_TRUE(stored.has_value());
    if (!stored) return std::nullopt;
    return ReadNodeLock(*stored).lock;
  }
  void Put(const std::string& node, const NodeLock& lock) {
    json stored = *server_.GetNode(node);
    stored["metadata"]["annotations"]["gpumux.io/allocating"] = EncodeNodeLock(lock);
    server_.UpdateNode(stored);
  }

  test::FakeApiServer server_;
  std::unique_ptr<KubeApi> api_;
};

TEST_F(NodeLockApiTest, AFreeLockIsTakenAndNamesThePod) {
  server_.AddNode(HandshakeNodeJson("n1", 2));
  auto r = AcquireNodeLock(*api_, "n1", LockOf("a", kNow), kNow, {});
  ASSERT_TRUE(r.has_value()) << r.error().ToString();
  EXPECT_EQ(r->outcome, AcquireOutcome::kTaken);
  EXPECT_FALSE(r->reentered);
  EXPECT_EQ(Held("n1"), LockOf("a", kNow));
  EXPECT_EQ(server_.requests("get node"), 1);
  EXPECT_EQ(server_.requests("patch node"), 1);
}

TEST_F(NodeLockApiTest, ANodeWithoutTheHandshakeNeedsNoLockAndIsNotWritten) {
  server_.AddNode(NodeJson("n1", 2));
  const std::string rv = server_.resource_version();
  auto r = AcquireNodeLock(*api_, "n1", LockOf("a", kNow), kNow, {});
  ASSERT_TRUE(r.has_value()) << r.error().ToString();
  EXPECT_EQ(r->outcome, AcquireOutcome::kNotNeeded);
  EXPECT_EQ(server_.requests("patch node"), 0);
  EXPECT_EQ(server_.resource_version(), rv);
  EXPECT_FALSE(Held("n1").has_value());
}

TEST_F(NodeLockApiTest, ALiveHolderMakesItBusyWithItsNameAndAge) {
  server_.AddNode(HandshakeNodeJson("n1", 2));
  Put("n1", LockOf("a", kNow - 3));
  AcquireOptions options;
  options.holder_state = [](const NodeLock& held) {
    return held.uid == "uid-a" ? HolderState::kNeedsDevices : HolderState::kDone;
  };
  auto r = AcquireNodeLock(*api_, "n1", LockOf("b", kNow), kNow, options);
  ASSERT_TRUE(r.has_value()) << r.error().ToString();
  EXPECT_EQ(r->outcome, AcquireOutcome::kBusy);
  EXPECT_EQ(r->message, "node n1 is allocating devices for pod default/a (3 s)");
  EXPECT_EQ(Held("n1"), LockOf("a", kNow - 3)) << "a busy lock is left alone";
  EXPECT_EQ(server_.requests("patch node"), 0);
}

TEST_F(NodeLockApiTest, AnUnboundHoldersLockOlderThanTheTtlIsTakenOver) {
  server_.AddNode(HandshakeNodeJson("n1", 2));
  AcquireOptions options;
  options.ttl_seconds = 120;
  options.holder_state = [](const NodeLock&) { return HolderState::kUnknown; };
  Put("n1", LockOf("a", kNow - 120));
  auto at_ttl = AcquireNodeLock(*api_, "n1", LockOf("b", kNow), kNow, options);
  ASSERT_TRUE(at_ttl.has_value());
  EXPECT_EQ(at_ttl->outcome, AcquireOutcome::kBusy) << "exactly the TTL old is not yet stale";

  auto later = AcquireNodeLock(*api_, "n1", LockOf("b", kNow + 1), kNow + 1, options);
  ASSERT_TRUE(later.has_value()) << later.error().ToString();
  EXPECT_EQ(later->outcome, AcquireOutcome::kTaken);
  EXPECT_NE(later->message.find(
                "took over the lock of pod default/a (121 s, not bound and older than the TTL)"),
            std::string::npos)
      << later->message;
  EXPECT_EQ(Held("n1"), LockOf("b", kNow + 1));
}

// Fault 12 of the real-cluster review: a holder bound to the node that the kubelet has not
// admitted yet (e.g. during a long kubelet restart) would, once admitted, be served by
// Allocate with the new holder's grant. Its lock is never taken over, however old.
TEST_F(NodeLockApiTest, ABoundHolderStillWaitingForItsDevicesKeepsTheLockPastTheTtl) {
  server_.AddNode(HandshakeNodeJson("n1", 2));
  AcquireOptions options;
  options.ttl_seconds = 120;
  options.holder_state = [](const NodeLock&) { return HolderState::kNeedsDevices; };
  Put("n1", LockOf("a", kNow - 3600));
  auto r = AcquireNodeLock(*api_, "n1", LockOf("b", kNow), kNow, options);
  ASSERT_TRUE(r.has_value()) << r.error().ToString();
  EXPECT_EQ(r->outcome, AcquireOutcome::kBusy);
  EXPECT_EQ(Held("n1"), LockOf("a", kNow - 3600));
  EXPECT_EQ(server_.requests("patch node"), 0);
}

TEST_F(NodeLockApiTest, ALockWhoseHolderNoLongerNeedsDevicesIsTakenOverAtOnce) {
  server_.AddNode(HandshakeNodeJson("n1", 2));
  Put("n1", LockOf("gone", kNow - 1));
  AcquireOptions options;
  options.holder_state = [](const NodeLock& held) {
    return held.uid == "uid-gone" ? HolderState::kDone : HolderState::kNeedsDevices;
  };
  auto r = AcquireNodeLock(*api_, "n1", LockOf("b", kNow), kNow, options);
  ASSERT_TRUE(r.has_value()) << r.error().ToString();
  EXPECT_EQ(r->outcome, AcquireOutcome::kTaken);
  EXPECT_NE(r->message.find("no longer needs devices"), std::string::npos) << r->message;
  EXPECT_EQ(Held("n1"), LockOf("b", kNow));
}

// Fault 5 of the real-cluster review: a pod bound while the device plugin restarted was
// rejected by the kubelet (UnexpectedAdmissionError: unhealthy devices gpumux.io/gpu-mem).
TEST_F(NodeLockApiTest, ANodeWhoseDevicePluginIsStartingOrStoppingIsNotReady) {
  server_.AddNode(HandshakeNodeJson("n1", 2));
  for (const char* state : {"starting", "stopping"}) {
    SCOPED_TRACE(state);
    json node = *server_.GetNode("n1");
    node["metadata"]["annotations"]["gpumux.io/device-plugin"] = state;
    server_.UpdateNode(node);
    auto r = AcquireNodeLock(*api_, "n1", LockOf("a", kNow), kNow, {});
    ASSERT_TRUE(r.has_value()) << r.error().ToString();
    EXPECT_EQ(r->outcome, AcquireOutcome::kNotReady);
    EXPECT_EQ(r->message, std::string("the device plugin on node n1 is ") + state +
                              " (gpumux.io/device-plugin); the kubelet would reject a pod "
                              "admitted now");
    EXPECT_FALSE(Held("n1").has_value());
  }
  json node = *server_.GetNode("n1");
  node["metadata"]["annotations"]["gpumux.io/device-plugin"] = "ready";
  server_.UpdateNode(node);
  auto r = AcquireNodeLock(*api_, "n1", LockOf("a", kNow), kNow, {});
  ASSERT_TRUE(r.has_value()) << r.error().ToString();
  EXPECT_EQ(r->outcome, AcquireOutcome::kTaken);
}

TEST_F(NodeLockApiTest, OurOwnLockIsReenteredKeepingWhatWasServed) {
  server_.AddNode(HandshakeNodeJson("n1", 2));
  Put("n1", LockOf("a", kNow - 5, {"main/gpumux.io/gpu-mem"}));
  AcquireOptions options;
  options.holder_state = [](const NodeLock&) { return HolderState::kNeedsDevices; };
  auto r = AcquireNodeLock(*api_, "n1", LockOf("a", kNow), kNow, options);
  ASSERT_TRUE(r.has_value()) << r.error().ToString();
  EXPECT_EQ(r->outcome, AcquireOutcome::kTaken);
  EXPECT_TRUE(r->reentered);
  EXPECT_EQ(Held("n1"), LockOf("a", kNow, {"main/gpumux.io/gpu-mem"}));
}

TEST_F(NodeLockApiTest, AnUnreadableLockIsReplacedAndSaidSo) {
  server_.AddNode(HandshakeNodeJson("n1", 2));
  json node = *server_.GetNode("n1");
  node["metadata"]["annotations"]["gpumux.io/allocating"] = "garbage";
  server_.UpdateNode(node);
  auto r = AcquireNodeLock(*api_, "n1", LockOf("a", kNow), kNow, {});
  ASSERT_TRUE(r.has_value()) << r.error().ToString();
  EXPECT_EQ(r->outcome, AcquireOutcome::kTaken);
  EXPECT_NE(r->message.find("unreadable"), std::string::npos) << r->message;
  EXPECT_EQ(Held("n1"), LockOf("a", kNow));
}

TEST_F(NodeLockApiTest, AConflictIsRetriedWithAFreshRead) {
  server_.AddNode(HandshakeNodeJson("n1", 2));
  server_.FailNext("PATCH", "/api/v1/nodes/n1", 409, "Conflict", "the object has been modified");
  auto r = AcquireNodeLock(*api_, "n1", LockOf("a", kNow), kNow, {});
  ASSERT_TRUE(r.has_value()) << r.error().ToString();
  EXPECT_EQ(r->outcome, AcquireOutcome::kTaken);
  EXPECT_EQ(server_.requests("get node"), 2);
  EXPECT_EQ(Held("n1"), LockOf("a", kNow));
}

TEST_F(NodeLockApiTest, ConflictsBeyondTheAttemptsAndOtherFailuresAreApiErrors) {
  server_.AddNode(HandshakeNodeJson("n1", 2));
  AcquireOptions options;
  options.attempts = 3;
  server_.FailNext("PATCH", "/api/v1/nodes/n1", 409, "Conflict", "modified", 3);
  auto r = AcquireNodeLock(*api_, "n1", LockOf("a", kNow), kNow, options);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().http_status, 409);
  EXPECT_EQ(server_.requests("get node"), 3);

  server_.FailNext("GET", "/api/v1/nodes/n1", 500, "InternalError", "etcd is unhappy");
  r = AcquireNodeLock(*api_, "n1", LockOf("a", kNow), kNow, options);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().ToString().find("etcd is unhappy"), std::string::npos);

  r = AcquireNodeLock(*api_, "missing", LockOf("a", kNow), kNow, options);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().http_status, 404);
}

// Many binds at once on one node: exactly one takes the lock, every other one is told it is
// busy (after at most one conflict), and the lock names the winner (no update was lost).
TEST_F(NodeLockApiTest, ConcurrentAcquirersExactlyOneWins) {
  server_.AddNode(HandshakeNodeJson("n1", 8));
  constexpr int kThreads = 8;
  constexpr int kRounds = 10;
  AcquireOptions options;
  options.attempts = 4;
  options.holder_state = [](const NodeLock&) { return HolderState::kNeedsDevices; };
  for (int round = 0; round < kRounds; ++round) {
    SCOPED_TRACE(round);
    std::atomic<int> taken{0}, busy{0}, failed{0};
    std::vector<std::string> winners(kThreads);
    std::vector<std::thread> threads;
    std::atomic<bool> go{false};
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        std::string name = "p";
        name += std::to_string(round);
        name += "-";
        name += std::to_string(t);
        while (!go.load()) std::this_thread::yield();
        auto r = AcquireNodeLock(*api_, "n1", LockOf(name, kNow), kNow, options);
        if (!r) {
          ++failed;
        } else if (r->outcome == AcquireOutcome::kTaken) {
          ++taken;
          winners[static_cast<std::size_t>(t)] = "uid-" + name;
        } else if (r->outcome == AcquireOutcome::kBusy) {
          ++busy;
        }
      });
    }
    go.store(true);
    for (auto& th : threads) th.join();
    EXPECT_EQ(taken.load(), 1);
    EXPECT_EQ(busy.load(), kThreads - 1);
    EXPECT_EQ(failed.load(), 0);
    std::set<std::string> won;
    for (const std::string& w : winners) {
      if (!w.empty()) won.insert(w);
    }
    const auto held = Held("n1");
    ASSERT_TRUE(held.has_value());
    ASSERT_EQ(won.size(), 1u);
    EXPECT_EQ(held->uid, *won.begin()) << "the lock names the one that was told it won";
    ASSERT_TRUE(ReleaseNodeLock(*api_, "n1", held->uid).has_value());
  }
}

TEST_F(NodeLockApiTest, ReleaseRemovesOnlyOurOwnLock) {
  server_.AddNode(HandshakeNodeJson("n1", 2));
  ASSERT_TRUE(ReleaseNodeLock(*api_, "n1", "uid-a").has_value()) << "no lock: nothing to do";
  Put("n1", LockOf("a", kNow));
  ASSERT_TRUE(ReleaseNodeLock(*api_, "n1", "uid-b").has_value());
  EXPECT_EQ(Held("n1"), LockOf("a", kNow)) << "another pod's lock is left alone";
  ASSERT_TRUE(ReleaseNodeLock(*api_, "n1", "uid-a").has_value());
  EXPECT_FALSE(Held("n1").has_value());
  const json node = *server_.GetNode("n1");
  EXPECT_FALSE(node["metadata"]["annotations"].contains("gpumux.io/allocating"));
  EXPECT_EQ(node["metadata"]["annotations"]["gpumux.io/handshake"], "node-lock/v1");
  EXPECT_TRUE(ReleaseNodeLock(*api_, "gone", "uid-a").has_value()) << "a deleted node has no lock";
}

TEST_F(NodeLockApiTest, ReleaseRetriesAConflict) {
  server_.AddNode(HandshakeNodeJson("n1", 2));
  Put("n1", LockOf("a", kNow));
  server_.FailNext("PATCH", "/api/v1/nodes/n1", 409, "Conflict", "modified");
  ASSERT_TRUE(ReleaseNodeLock(*api_, "n1", "uid-a").has_value());
  EXPECT_FALSE(Held("n1").has_value());
  EXPECT_EQ(server_.requests("patch node"), 2);
}

// The device plugin's side: it decides on what it read, and a change in between is a 409.
TEST_F(NodeLockApiTest, ReplaceHonoursTheResourceVersionItWasDecidedOn) {
  server_.AddNode(HandshakeNodeJson("n1", 2));
  Put("n1", LockOf("a", kNow));
  const NodeLockView read = ReadNodeLock(*server_.GetNode("n1"));
  ASSERT_FALSE(read.resource_version.empty());
  // Someone else changes the node (a kubelet status update, another plugin call).
  json node = *server_.GetNode("n1");
  node["metadata"]["labels"]["touched"] = "yes";
  server_.UpdateNode(node);

  NodeLock next = *read.lock;
  next.served.push_back("main/gpumux.io/gpu-mem");
  auto stale = ReplaceNodeLock(*api_, "n1", read.resource_version, next);
  ASSERT_FALSE(stale.has_value());
  EXPECT_EQ(stale.error().http_status, 409);
  EXPECT_EQ(Held("n1"), LockOf("a", kNow)) << "nothing changed";

  const NodeLockView fresh = ReadNodeLock(*server_.GetNode("n1"));
  auto served = ReplaceNodeLock(*api_, "n1", fresh.resource_version, next);
  ASSERT_TRUE(served.has_value()) << served.error().ToString();
  EXPECT_EQ(ReadNodeLock(*served).lock, next) << "the patched node comes back";
  EXPECT_NE(ReadNodeLock(*served).resource_version, fresh.resource_version)
      << "every change bumps the node's resourceVersion";
  EXPECT_EQ(Held("n1"), next);

  auto removed = ReplaceNodeLock(*api_, "n1", ReadNodeLock(*served).resource_version, std::nullopt);
  ASSERT_TRUE(removed.has_value()) << removed.error().ToString();
  EXPECT_FALSE(Held("n1").has_value());
}

}  // namespace
}  // namespace gpumux::kube
