// The extender reading learned interference observations: ClusterState::SetProfile swapping the
// co-location profile while verbs run, and ObservationFeed reading them from a file store the
// test writes (as a node coordinator would).
#include "gpumux/extender/observation_feed.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "gpumux/policy/observations.h"
#include "gpumux/sim/dl_workload.h"
#include "gpumux/store/store.h"
#include "tests/testing/kube_fixtures.h"

namespace gpumux::extender {
namespace {

namespace fs = std::filesystem;
using kube::testing::GpuOf;
using kube::testing::NodeJson;
using kube::testing::PodWithOne;
using nlohmann::json;
using Kind = sched::NodeVerdict::Kind;

const policy::WorkloadProfile& Shipped() { return *sim::EmbeddedProfile("iadeep-fitted"); }

json ClassPod(const std::string& name, const std::string& cls) {
  json pod = PodWithOne(name, 0, 4096, 100);
  pod["metadata"]["annotations"][std::string(kube::kAnnotationWorkloadClass)] = cls;
  return pod;
}

kube::PodInfo Pod(const json& pod) {
  auto p = kube::DecodePod(pod);
  EXPECT_TRUE(p.has_value());
  return *p;
}

json Bound(json pod, const kube::Grant& grant) {
  pod["metadata"]["annotations"]["gpumux.io/grant"] = kube::EncodeGrant(grant);
  pod["spec"]["nodeName"] = grant.node;
  pod["status"]["phase"] = "Running";
  return pod;
}

policy::Observation Obs(const std::string& a, const std::string& b, double s, std::int64_t count,
                        const std::string& node = "node-1") {
  policy::Observation o;
  o.classes = {a, b};
  o.batches = {Shipped().Find(a)->default_batch, Shipped().Find(b)->default_batch};
  o.slowdown = {s, s};
  o.count = count;
  o.node = node;
  return policy::Canonical(o);
}

std::string Key(const policy::Observation& o) {
  return "/gpumux/observations/" + o.classes[0] + "+" + o.classes[1] + "/" +
         std::to_string(o.batches[0]) + "+" + std::to_string(o.batches[1]) + "/" + o.node;
}

class ObservationFeedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "gpumux-observation-feed-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    scratch_ = pattern;
    url_ = "file://" + (scratch_ / "store.json").string();
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(scratch_, ec);
  }

  // Two nodes of one GPU each: vgg16 on n1, squeezenet on n2, both bound.
  std::unique_ptr<sched::ClusterState> MakeState() {
    sched::ClusterStateOptions options;
    options.policy = "least-delay";
    options.profile = std::make_shared<const policy::WorkloadProfile>(Shipped());
    options.log = [this](std::string_view line) { log_.emplace_back(line); };
    auto state = sched::ClusterState::Create(std::move(options), [] { return 1'800'000'000; });
    EXPECT_TRUE(state.has_value());
    const json nodes[] = {NodeJson("n1", 1, GpuOf{"RTX 3090", 24576}),
                          NodeJson("n2", 1, GpuOf{"RTX 3090", 24576})};
    (*state)->SetNodes(nodes);
    std::vector<json> pods;
    for (auto [name, cls, node] : {std::tuple{"a", "vgg16", "n1"}, {"b", "squeezenet", "n2"}}) {
      const json pod = ClassPod(name, cls);
      auto grant = (*state)->Assume(Pod(pod), node);
      EXPECT_TRUE(grant.has_value()) << grant.error().message;
      pods.push_back(Bound(pod, *grant));
    }
    (*state)->SetPods(pods);
    (*state)->MarkSynced();
    return std::move(*state);
  }

  // The node a googlenet newcomer would go to ("" when every node declines it).
  static std::string Best(sched::ClusterState& state) {
    const std::vector<std::string> names = {"n1", "n2"};
    const auto v = state.Evaluate(Pod(ClassPod("new", "googlenet")), names);
    std::string best;
    std::int64_t score = 0;
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (v[i].kind == Kind::kFits && (best.empty() || v[i].score > score)) {
        best = names[i];
        score = v[i].score;
      }
    }
    return best;
  }

  void Write(const std::vector<std::pair<std::string, std::string>>& kvs) {
    auto store = store::OpenStore(url_);
    ASSERT_TRUE(store.has_value()) << store.error().message;
    for (const auto& [k, v] : kvs) ASSERT_TRUE((*store)->Put(k, v).has_value());
  }

  ObservationFeedOptions FeedOptions() {
    ObservationFeedOptions o;
    o.url = url_;
    o.every = std::chrono::milliseconds(20);
    o.log = [this](std::string_view line) { log_.emplace_back(line); };
    return o;
  }

  std::string Log() const {
    std::string all;
    for (const auto& l : log_) all += l + "\n";
    return all;
  }

  fs::path scratch_;
  std::string url_;
  std::vector<std::string> log_;
};

TEST_F(ObservationFeedTest, ASwappedProfileChangesWhereTheInterferenceAwarePolicyPlaces) {
  auto state = MakeState();
  const std::string before = Best(*state);
  ASSERT_FALSE(before.empty()) << "a googlenet newcomer shares one of the two GPUs";
  const std::string other = before == "n1" ? "n2" : "n1";
  const std::string companion = before == "n1" ? "vgg16" : "squeezenet";
  // Learned: sharing with that companion is terrible.
  policy::ObservationSummary summary;
  auto learned = std::make_shared<const policy::WorkloadProfile>(policy::WithObservations(
      Shipped(), std::vector<policy::Observation>{Obs(companion, "googlenet", 3.9, 5)}, &summary));
  state->SetProfile(learned, summary.observed_sets());
  const std::string after = Best(*state);
  EXPECT_NE(after, before) << "the newcomer no longer goes to " << before;
  if (!after.empty()) {
    EXPECT_EQ(after, other);
  }
  const sched::StateCounters c = state->counters();
  EXPECT_EQ(c.observed_sets, 1);
  EXPECT_EQ(c.profile_swaps, 1);
  EXPECT_EQ(sched::StateJson(state->Snapshot())["profile"]["observed_sets"], 1);
  // Back to the shipped profile: back to the first choice.
  state->SetProfile(std::make_shared<const policy::WorkloadProfile>(Shipped()), 0);
  EXPECT_EQ(Best(*state), before);
}

TEST_F(ObservationFeedTest, WithoutAProfileTheClassesAreUnknownAsBefore) {
  sched::ClusterStateOptions options;
  options.policy = "least-delay";
  auto state = sched::ClusterState::Create(std::move(options), {});
  ASSERT_TRUE(state.has_value());
  EXPECT_FALSE(sched::StateJson((*state)->Snapshot()).contains("profile"));
}

TEST_F(ObservationFeedTest, ReadsTheStoreSwapsOnlyOnChangeAndKeepsTheProfileWhenAReadFails) {
  auto state = MakeState();
  const std::string before = Best(*state);
  const std::string companion = before == "n1" ? "vgg16" : "squeezenet";
  const policy::Observation bad = Obs(companion, "googlenet", 3.9, 3, "node-1");
  Write({{Key(bad), policy::SerializeObservation(bad)},
         {"/gpumux/nodes/node-1/alive", "{}"}});  // not an observation key: not read
  ObservationFeed feed(FeedOptions(), std::make_shared<const policy::WorkloadProfile>(Shipped()),
                       *state);
  ASSERT_TRUE(feed.ReadOnce().has_value()) << Log();
  EXPECT_EQ(state->counters().observed_sets, 1);
  EXPECT_EQ(state->counters().profile_swaps, 1);
  EXPECT_NE(Best(*state), before);
  EXPECT_NE(Log().find("observations applied url=" + url_ +
                       " summary=\"1 observation: 1 observed set, 3 windows on 1 node\""),
            std::string::npos)
      << Log();

  // Nothing changed: nothing swapped.
  ASSERT_TRUE(feed.ReadOnce().has_value());
  EXPECT_EQ(state->counters().profile_swaps, 1);

  // Another node measured the same set (combined), one more set, and a key that is not one.
  const policy::Observation same = Obs(companion, "googlenet", 3.5, 1, "node-2");
  const policy::Observation more = Obs("alexnet", "googlenet", 1.5, 2, "node-2");
  Write({{Key(same), policy::SerializeObservation(same)},
         {Key(more), policy::SerializeObservation(more)},
         {"/gpumux/observations/x/1+1/node-3", "{\"classes\": 1}"}});
  ASSERT_TRUE(feed.ReadOnce().has_value());
  EXPECT_EQ(state->counters().observed_sets, 2);
  EXPECT_EQ(state->counters().profile_swaps, 2);
  FeedStatus status = feed.status();
  EXPECT_EQ(status.unreadable_keys, 1u);
  EXPECT_EQ(status.summary.windows, 6);
  EXPECT_EQ(status.summary.nodes, 2u);
  EXPECT_NE(
      Log().find(
          "skipping an observation error=\"key /gpumux/observations/x/1+1/node-3: \\\"classes\\\""),
      std::string::npos)
      << Log();

  // The store is held by another process (here: this test, as a coordinator would): the read
  // fails, the profile in use stays, it is said once.
  {
    auto held = store::OpenStore(url_);
    ASSERT_TRUE(held.has_value());
    EXPECT_FALSE(feed.ReadOnce().has_value());
    EXPECT_FALSE(feed.ReadOnce().has_value());
    EXPECT_EQ(state->counters().observed_sets, 2);
    EXPECT_EQ(state->counters().observation_read_failures, 2);
    EXPECT_NE(Best(*state), before);
    status = feed.status();
    EXPECT_FALSE(status.ok);
    EXPECT_EQ(status.failed_reads, 2);
  }
  const std::string log = Log();
  const std::string said = "cannot read observations; keeping the profile in use url=" + url_;
  ASSERT_NE(log.find(said), std::string::npos) << log;
  EXPECT_EQ(log.find(said, log.find(said) + 1), std::string::npos) << "said once:\n" << log;
  EXPECT_NE(log.find("observed_sets=2"), std::string::npos) << log;
  ASSERT_TRUE(feed.ReadOnce().has_value());
  EXPECT_NE(Log().find("reading observations again url=" + url_), std::string::npos);
  EXPECT_EQ(state->counters().profile_swaps, 2) << "unchanged since the last swap";
}

TEST_F(ObservationFeedTest, TheThreadReadsAtOnceAndAgainUntilStopped) {
  auto state = MakeState();
  const policy::Observation o = Obs("vgg16", "googlenet", 2.0, 1);
  Write({{Key(o), policy::SerializeObservation(o)}});
  ObservationFeed feed(FeedOptions(), std::make_shared<const policy::WorkloadProfile>(Shipped()),
                       *state);
  feed.Start();
  EXPECT_TRUE(kube::testing::Eventually([&] { return feed.status().reads >= 3; }));
  feed.Stop();
  const std::int64_t reads = feed.status().reads;
  EXPECT_EQ(state->counters().observed_sets, 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  EXPECT_EQ(feed.status().reads, reads) << "no read after Stop";
}

// Verbs and swaps at once (what ASan and TSan builds check): a verb sees one whole profile.
TEST_F(ObservationFeedTest, VerbsRunWhileProfilesAreSwapped) {
  auto state = MakeState();
  auto plain = std::make_shared<const policy::WorkloadProfile>(Shipped());
  auto learned = std::make_shared<const policy::WorkloadProfile>(policy::WithObservations(
      Shipped(), std::vector<policy::Observation>{Obs("vgg16", "googlenet", 3.9, 5),
                                                  Obs("squeezenet", "googlenet", 3.9, 5)}));
  std::atomic<bool> done{false}, started{false};
  std::thread swapper([&] {
    // Swaps only once verbs run: on a loaded machine the 200 swaps could otherwise all happen
    // before the first verb, and the test would check nothing.
    while (!started) std::this_thread::yield();
    for (int i = 0; i < 200; ++i)
      state->SetProfile(i % 2 == 0 ? learned : plain, i % 2 == 0 ? 2 : 0);
    done = true;
  });
  int verbs = 0;
  do {
    const std::string best = Best(*state);
    EXPECT_TRUE(best.empty() || best == "n1" || best == "n2") << best;
    ++verbs;
    started = true;
  } while (!done);
  swapper.join();
  EXPECT_GT(verbs, 0);
  EXPECT_EQ(state->counters().profile_swaps, 200);
}

}  // namespace
}  // namespace gpumux::extender
