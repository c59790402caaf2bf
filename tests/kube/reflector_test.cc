// The reflector against the in-test API server: list, watch, relist on 410, reconnects,
// backoff and prompt stops.
#include "gpumux/kube/reflector.h"

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tests/testing/fake_apiserver.h"

namespace gpumux::kube {
namespace {

using nlohmann::json;
using test::FakeApiServer;
using test::FakeApiServerOptions;
using test::GoneMode;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

json Pod(const std::string& name) {
  return json{{"metadata", {{"name", name}, {"namespace", "ns"}}}, {"spec", json::object()}};
}

// Polls `condition` every 2 ms for up to 5 s.
bool Eventually(const std::function<bool()>& condition) {
  const auto give_up = Clock::now() + std::chrono::seconds(5);
  while (Clock::now() < give_up) {
    if (condition()) return true;
    std::this_thread::sleep_for(milliseconds(2));
  }
  return condition();
}

// Records what the reflector hands over (from its thread) for the test thread to read.
class Recorder {
 public:
  ReflectorHandler Handler() {
    return ReflectorHandler{
        [this](std::vector<json> items) {
          std::vector<std::string> names;
          for (const json& item : items) names.push_back(item["metadata"]["name"]);
          std::lock_guard lock(mu_);
          replaces_.push_back(std::move(names));
        },
        [this](const WatchEvent& event) {
          std::lock_guard lock(mu_);
          events_.push_back(event.type + " " + event.object["metadata"]["name"].get<std::string>());
        },
        [this](std::string_view line) {
          std::lock_guard lock(mu_);
          logs_.emplace_back(line);
        }};
  }
  std::vector<std::vector<std::string>> replaces() const {
    std::lock_guard lock(mu_);
    return replaces_;
  }
  std::vector<std::string> events() const {
    std::lock_guard lock(mu_);
    return events_;
  }
  std::string logs() const {
    std::lock_guard lock(mu_);
    std::string all;
    for (const auto& line : logs_) all += line + "\n";
    return all;
  }
  bool Logged(const std::string& part) const { return logs().find(part) != std::string::npos; }

 private:
  mutable std::mutex mu_;
  std::vector<std::vector<std::string>> replaces_;
  std::vector<std::string> events_;
  std::vector<std::string> logs_;
};

ReflectorOptions FastOptions() {
  ReflectorOptions options;
  options.initial_backoff = milliseconds(10);
  options.max_backoff = milliseconds(40);
  options.page_size = 2;
  return options;
}

// One server, one client, one reflector of /api/v1/pods; Start runs it on a thread.
// Members are destroyed in reverse: the reflector thread stops before the client goes, and
// the client before the server.
class ReflectorTest : public ::testing::Test {
 protected:
  explicit ReflectorTest(FakeApiServerOptions server_options = {})
      : server_(std::move(server_options)) {}

  void Start(ReflectorOptions options = FastOptions()) {
    ClientConfig config;
    config.server = server_.url();
    api_ = MakeCurlClient(config);
    reflector_ =
        std::make_unique<Reflector>(*api_, "/api/v1/pods", recorder_.Handler(), std::move(options));
    runner_ = std::jthread([this](std::stop_token stop) { reflector_->Run(stop); });
  }

  // Stops the reflector; the time that took.
  milliseconds Stop() {
    const auto start = Clock::now();
    runner_.request_stop();
    runner_.join();
    return std::chrono::duration_cast<milliseconds>(Clock::now() - start);
  }

  bool WaitForWatch() { return server_.WaitForOpenWatches(1, std::chrono::seconds(5)); }

  FakeApiServer server_;
  Recorder recorder_;
  std::unique_ptr<KubeApi> api_;
  std::unique_ptr<Reflector> reflector_;
  std::jthread runner_;
};

TEST_F(ReflectorTest, ListsEveryPageThenStreamsChanges) {
  for (const char* name : {"a", "b", "c"}) server_.AddPod(Pod(name));
  Start();
  ASSERT_TRUE(Eventually([&] { return reflector_->synced(); }));
  EXPECT_EQ(recorder_.replaces(), (std::vector<std::vector<std::string>>{{"a", "b", "c"}}));
  EXPECT_EQ(server_.requests("list pods"), 2);  // pages of 2
  ASSERT_TRUE(WaitForWatch());
  server_.AddPod(Pod("d"));
  server_.DeletePod("ns", "a");
  ASSERT_TRUE(Eventually([&] { return recorder_.events().size() == 2; }));
  EXPECT_EQ(recorder_.events(), (std::vector<std::string>{"ADDED d", "DELETED a"}));
  EXPECT_EQ(reflector_->relists(), 0);
  EXPECT_EQ(reflector_->failures(), 0);
}

TEST_F(ReflectorTest, RelistsWhenItsResourceVersionWasCompactedAway) {
  server_.AddPod(Pod("a"));
  Start();
  ASSERT_TRUE(WaitForWatch());
  server_.Compact();       // the reflector's resourceVersion is now too old...
  server_.CloseWatches();  // ...and it must watch again: HTTP 410
  ASSERT_TRUE(Eventually([&] { return reflector_->relists() == 1; }));
  EXPECT_EQ(recorder_.replaces().size(), 2u);
  EXPECT_TRUE(
      recorder_.Logged("resourceVersion too old; relisting path=/api/v1/pods resource_version="))
      << recorder_.logs();
  ASSERT_TRUE(WaitForWatch());
  server_.AddPod(Pod("b"));
  ASSERT_TRUE(Eventually([&] { return recorder_.events().size() == 1; }));
  EXPECT_EQ(recorder_.events()[0], "ADDED b");
}

class ReflectorErrorEventTest : public ReflectorTest {
 protected:
  ReflectorErrorEventTest() : ReflectorTest(FakeApiServerOptions::Gone(GoneMode::kErrorEvent)) {}
};

TEST_F(ReflectorErrorEventTest, RelistsOnAnErrorEventWithCode410) {
  server_.AddPod(Pod("a"));
  Start();
  ASSERT_TRUE(WaitForWatch());
  server_.Compact();  // open watches get ERROR {code: 410}
  ASSERT_TRUE(Eventually([&] { return reflector_->relists() == 1; }));
  EXPECT_TRUE(recorder_.Logged("an ERROR event with code 410")) << recorder_.logs();
  EXPECT_TRUE(recorder_.events().empty());  // errors are not handed over
}

TEST_F(ReflectorTest, WatchesAgainFromTheLastResourceVersionWhenTheServerEndsTheStream) {
  Start();
  ASSERT_TRUE(WaitForWatch());
  const std::string rv = server_.AddPod(Pod("x"));
  ASSERT_TRUE(Eventually([&] { return recorder_.events().size() == 1; }));
  server_.CloseWatches();
  ASSERT_TRUE(Eventually([&] { return server_.requests("watch pods") == 2; }));
  EXPECT_EQ(server_.last_watch_resource_version(), rv);
  EXPECT_EQ(reflector_->relists(), 0);
  EXPECT_EQ(reflector_->failures(), 0);
  EXPECT_TRUE(recorder_.Logged("resource_version=" + rv)) << recorder_.logs();
}

TEST_F(ReflectorTest, AGoneAnswerRightAfterAListIsBackedOffBeforeRelisting) {
  server_.FailNext("GET", "watch=1", 410, "Expired", "too old resource version: 1 (2)");
  Start();
  ASSERT_TRUE(Eventually([&] { return reflector_->relists() == 1; }));
  EXPECT_EQ(reflector_->failures(), 1);
  EXPECT_TRUE(recorder_.Logged("watch gone right after a list; relisting path=/api/v1/pods from="))
      << recorder_.logs();
}

TEST_F(ReflectorTest, AWatchThatEndsAtOnceWithNothingIsBackedOff) {
  server_.FailNextWithBody("GET", "watch=1", 200, "application/json", "", 3);
  Start();
  ASSERT_TRUE(WaitForWatch());  // the fourth watch stays open
  EXPECT_EQ(reflector_->failures(), 3);
  EXPECT_EQ(reflector_->last_backoff(), milliseconds(40));
  EXPECT_TRUE(recorder_.Logged("the watch ended at once without any event")) << recorder_.logs();
}

TEST_F(ReflectorTest, BookmarksMoveTheResourceVersionForward) {
  Start();
  ASSERT_TRUE(WaitForWatch());
  const std::string rv = server_.AddNode({{"metadata", {{"name", "n1"}}}});  // not a pod
  server_.SendBookmarks();
  server_.CloseWatches();
  ASSERT_TRUE(Eventually([&] { return server_.requests("watch pods") == 2; }));
  EXPECT_EQ(server_.last_watch_resource_version(), rv);
  EXPECT_TRUE(recorder_.events().empty());
}

TEST_F(ReflectorTest, BacksOffExponentiallyUpToTheMaximumWhileListingFails) {
  server_.FailNext("GET", "/api/v1/pods?limit", 500, "InternalError", "etcd is down", 5);
  Start();
  ASSERT_TRUE(Eventually([&] { return reflector_->synced(); }));
  EXPECT_EQ(reflector_->failures(), 5);
  EXPECT_EQ(reflector_->last_backoff(), milliseconds(40));
  const std::string logs = recorder_.logs();
  std::size_t at = 0;
  for (const char* delay : {"retry_in=\"10 ms\"", "retry_in=\"20 ms\"", "retry_in=\"40 ms\"",
                            "retry_in=\"40 ms\"", "retry_in=\"40 ms\""}) {
    at = logs.find(delay, at);
    ASSERT_NE(at, std::string::npos) << delay << " missing from\n" << logs;
    ++at;
  }
  EXPECT_TRUE(recorder_.Logged(
      "list failed; retrying path=/api/v1/pods error=\"HTTP 500 InternalError: etcd is down\""))
      << logs;
  EXPECT_EQ(reflector_->relists(), 0);  // failed attempts are not relists
}

TEST_F(ReflectorTest, ASuccessfulWatchResetsTheBackoff) {
  server_.FailNext("GET", "watch=1", 500, "InternalError", "boom", 2);
  Start();
  ASSERT_TRUE(WaitForWatch());  // after two failures: 10 ms, 20 ms
  EXPECT_EQ(reflector_->last_backoff(), milliseconds(20));
  server_.AddPod(Pod("a"));
  ASSERT_TRUE(Eventually([&] { return recorder_.events().size() == 1; }));
  server_.FailNext("GET", "watch=1", 500, "InternalError", "boom again");
  server_.CloseWatches();  // a watch that delivered an event: success, backoff reset
  ASSERT_TRUE(Eventually([&] { return reflector_->failures() == 3; }));
  EXPECT_EQ(reflector_->last_backoff(), milliseconds(10));
}

TEST_F(ReflectorTest, JitterIsDrawnFromTheInjectedSource) {
  server_.FailNext("GET", "/api/v1/pods?limit", 500, "InternalError", "boom");
  std::vector<std::uint64_t> asked;
  ReflectorOptions options = FastOptions();
  options.initial_backoff = milliseconds(100);
  options.max_backoff = milliseconds(100);
  options.jitter_percent = 20;
  options.random_below = [&asked](std::uint64_t n) {
    asked.push_back(n);
    return n - 1;
  };
  Start(std::move(options));
  ASSERT_TRUE(Eventually([&] { return reflector_->synced(); }));
  Stop();
  EXPECT_EQ(asked, (std::vector<std::uint64_t>{21}));  // 0..20 ms on top of 100 ms
  EXPECT_EQ(reflector_->last_backoff(), milliseconds(120));
}

TEST_F(ReflectorTest, StopsPromptlyDuringABackoff) {
  server_.FailNext("GET", "/api/v1/pods", 500, "InternalError", "boom");
  ReflectorOptions options = FastOptions();
  options.initial_backoff = std::chrono::seconds(20);
  Start(std::move(options));
  ASSERT_TRUE(Eventually([&] { return reflector_->failures() == 1; }));
  EXPECT_LT(Stop(), milliseconds(500));
  EXPECT_FALSE(reflector_->synced());
}

TEST_F(ReflectorTest, StopsPromptlyDuringASilentWatch) {
  Start();
  ASSERT_TRUE(WaitForWatch());
  EXPECT_LT(Stop(), milliseconds(500));
}

}  // namespace
}  // namespace gpumux::kube
