// The coordinator's state machine driven with a scripted clock: registration, tuning sessions
// over measurement windows, timeouts, observations, and a restart from what it stored.
#include "gpumux/coordinator/coordinator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "gpumux/coordinator/server.h"
#include "tests/coordinator/map_sink.h"
#include "tests/policy/colocation_fixtures.h"

namespace gpumux::coordinator {
namespace {

using Json = nlohmann::json;
using std::chrono::milliseconds;

using test::MapSink;

policy::WorkloadProfile TwoClasses() {
  test::LinearClass a;
  a.name = "a";
  test::LinearClass b;
  b.name = "b";
  b.noise_scale = 400;  // solo optimum 200: the tuner wants larger batches for b
  b.lo_busy = b.hi_busy = 0.8;
  return test::MakeProfile({test::MakeClass(a), test::MakeClass(b)});
}

class CoordinatorTest : public ::testing::Test {
 protected:
  CoordinatorTest() : profile_(TwoClasses()) { Make(); }

  void Make() {
    CoordinatorOptions o;
    o.node = "n1";
    o.window_steps = 4;
    o.warmup_steps = 1;
    o.window_timeout = milliseconds(10'000);
    o.job_timeout = milliseconds(30'000);
    c_ = std::make_unique<Coordinator>(
        o, profile_, &sink_, [this] { return now_; },
        [this](std::string_view l) { log_.emplace_back(l); });
  }

  Reply Register(const std::string& job, const std::string& cls, int batch,
                 const std::string& gpu = "GPU-0") {
    Registration r;
    r.job = job;
    r.cls = cls;
    r.batch_size = batch;
    r.gpus = {gpu};
    auto reply = c_->Register(r);
    EXPECT_TRUE(reply.has_value()) << (reply ? "" : reply.error().message);
    return reply ? *reply : Reply{};
  }

  void Leave(const std::string& job) { ASSERT_TRUE(c_->Leave(job).has_value()); }

  // `n` steps of `seconds` at `batch`.
  Reply Steps(const std::string& job, int batch, double seconds, int n) {
    std::vector<StepSample> s(static_cast<std::size_t>(n), StepSample{batch, seconds});
    auto reply = c_->Report(job, s, 0);
    EXPECT_TRUE(reply.has_value()) << (reply ? "" : reply.error().message);
    return reply ? *reply : Reply{};
  }

  // Every job runs at its target until the GPU's session ends (at most `rounds` reports each).
  void RunToTuned(const std::vector<std::string>& jobs, double seconds, int rounds = 10) {
    std::map<std::string, int> batch;
    for (const auto& j : jobs) batch[j] = Steps(j, TargetOf(j), seconds, 1).batch_size;
    for (int r = 0; r < rounds; ++r) {
      bool done = true;
      for (const auto& j : jobs) {
        Reply reply = Steps(j, batch[j], seconds, 5);
        batch[j] = reply.batch_size;
        done = done && reply.state != "measuring";
      }
      if (done) return;
    }
    FAIL() << "still measuring after " << rounds << " rounds";
  }

  int TargetOf(const std::string& job) const {
    for (const auto& g : c_->State()) {
      for (const auto& j : g.jobs) {
        if (j.job == job) return j.target_batch;
      }
    }
    return 0;
  }
  std::string StateOf(const std::string& gpu) const {
    for (const auto& g : c_->State()) {
      if (g.uuid == gpu) return g.state;
    }
    return "";
  }

  policy::WorkloadProfile profile_;
  MapSink sink_;
  Clock::time_point now_{};
  std::vector<std::string> log_;
  std::unique_ptr<Coordinator> c_;
};

// shared/reliability-repros/coordinator-reregister-ignores-max-batch: a job that registers again
// at the same place with a lower max_batch (the natural answer to running out of memory at the
// batch it was told) is told a batch within its new bounds, then and in every report after.
TEST_F(CoordinatorTest, ARegistrationAgainWithALowerMaxBatchIsToldABatchWithinIt) {
  Register("j1", "b", 100);
  RunToTuned({"j1"}, 0.08);
  const int tuned = TargetOf("j1");
  ASSERT_GT(tuned, 150) << "b's solo optimum is 200";
  Registration r;
  r.job = "j1";
  r.cls = "b";
  r.batch_size = 100;
  r.max_batch = 150;
  r.gpus = {"GPU-0"};
  auto again = c_->Register(r);
  ASSERT_TRUE(again.has_value()) << again.error().message;
  EXPECT_LE(again->batch_size, 150);
  EXPECT_LE(TargetOf("j1"), 150);
  EXPECT_LE(Steps("j1", again->batch_size, 0.08, 1).batch_size, 150);
  r.max_batch = 0;
  r.min_batch = 400;  // and the other way
  auto raised = c_->Register(r);
  ASSERT_TRUE(raised.has_value());
  EXPECT_GE(raised->batch_size, 400);
}

TEST_F(CoordinatorTest, ASecondJobOnTheGpuStartsASessionThatEndsTunedAfterOneWindow) {
  Register("j1", "a", 100);
  RunToTuned({"j1"}, 0.08);
  const std::int64_t before = c_->sessions_started();
  Register("j2", "b", 100);
  EXPECT_EQ(StateOf("GPU-0"), "measuring");
  EXPECT_EQ(c_->sessions_started(), before + 1);
  RunToTuned({"j1", "j2"}, 0.12);
  EXPECT_EQ(StateOf("GPU-0"), "tuned");
  EXPECT_GE(c_->windows_closed(), 1);
  // The joint tuner moves b towards its larger solo optimum.
  EXPECT_GT(TargetOf("j2"), 100);
  const Json stored = Json::parse(sink_.kv.at("/gpumux/nodes/n1/gpus/GPU-0"));
  EXPECT_EQ(stored["state"], "tuned");
  EXPECT_EQ(stored["assignment"]["j2"], TargetOf("j2"));
  EXPECT_TRUE(sink_.kv.count("/gpumux/nodes/n1/tuner"));
}

TEST_F(CoordinatorTest, AClosedWindowOfTwoJobsIsStoredAsAnObservationAgainstTheirSoloTimes) {
  Register("j1", "a", 100);
  Steps("j1", 100, 0.1, 20);  // alone: its own solo reference at batch 100
  Register("j2", "a", 100);
  RunToTuned({"j1", "j2"}, 0.15);
  std::string key;
  for (const auto& [k, v] : sink_.kv) {
    if (k.rfind("/gpumux/observations/a+a/", 0) == 0) key = k;
  }
  ASSERT_FALSE(key.empty());
  const Json o = Json::parse(sink_.kv.at(key));
  EXPECT_EQ(o["classes"], Json::array({"a", "a"}));
  EXPECT_EQ(o["node"], "n1");
  EXPECT_GE(o["count"].get<int>(), 1);
  for (const auto& s : o["slowdown"]) EXPECT_GE(s.get<double>(), 1.0);
  // It is the observation the extender and the simulator read.
  auto parsed = policy::ParseObservation(sink_.kv.at(key), key);
  ASSERT_TRUE(parsed.has_value()) << parsed.error().message;
  EXPECT_TRUE(policy::CheckObservation(*parsed).has_value());
}

// Two jobs measured 20 times slower together than alone: a host loaded by something else, or a
// forgery. The window still drives the tuner, but nothing is learned from it.
TEST_F(CoordinatorTest, AnImplausibleWindowIsNotRecordedAsAnObservation) {
  Register("j1", "a", 100);
  Steps("j1", 100, 0.1, 20);  // alone: its own solo reference at batch 100
  Register("j2", "a", 100);
  Steps("j2", 100, 0.1, 20);
  RunToTuned({"j1", "j2"}, 2.0);
  for (const auto& [k, v] : sink_.kv) EXPECT_NE(k.rfind("/gpumux/observations/", 0), 0u) << k;
  EXPECT_TRUE(std::any_of(log_.begin(), log_.end(), [](const std::string& l) {
    return l.find("window not recorded gpu=GPU-0 why=\"slowdown") != std::string::npos &&
           l.find("is above 4 for 2 jobs") != std::string::npos;
  }));
}

TEST_F(CoordinatorTest, ARestartedCoordinatorKeepsCountingItsObservations) {
  Register("j1", "a", 100);
  Register("j2", "b", 100);
  RunToTuned({"j1", "j2"}, 0.15);
  std::string key;
  for (const auto& [k, v] : sink_.kv) {
    if (k.rfind("/gpumux/observations/a+b/", 0) == 0) key = k;
  }
  ASSERT_FALSE(key.empty());
  const std::int64_t before = policy::ParseObservation(sink_.kv.at(key), key)->count;
  // A new process whose tuner forgot the pair (no tuner key), so the pair is measured again
  // at the same batch sizes: the window adds to the stored observation.
  sink_.kv.erase("/gpumux/nodes/n1/tuner");
  Make();
  c_->Restore(sink_.Pairs());
  Leave("j2");
  Leave("j1");
  Register("j1", "a", 100);
  RunToTuned({"j1"}, 0.08);
  Register("j2", "b", 100);
  RunToTuned({"j1", "j2"}, 0.15);
  EXPECT_GT(policy::ParseObservation(sink_.kv.at(key), key)->count, before);
}

TEST_F(CoordinatorTest, AJobThatNeverAnswersDoesNotHoldTheSessionPastTheWindowTimeout) {
  Register("j1", "a", 100);
  RunToTuned({"j1"}, 0.08);
  Register("j2", "b", 100);
  ASSERT_EQ(StateOf("GPU-0"), "measuring");
  for (int r = 0; r < 3; ++r) Steps("j1", TargetOf("j1"), 0.1, 5);  // j2 stays silent
  EXPECT_EQ(StateOf("GPU-0"), "measuring");
  now_ += milliseconds(10'001);
  c_->Tick();
  EXPECT_NE(StateOf("GPU-0"), "measuring");
}

TEST_F(CoordinatorTest, AJobThatStopsReportingLeavesAndItsGpuRetunes) {
  Register("j1", "a", 100);
  Register("j2", "b", 100);
  RunToTuned({"j1", "j2"}, 0.1);
  const std::int64_t before = c_->sessions_started();
  for (int k = 0; k < 4; ++k) {
    now_ += milliseconds(9'000);
    Steps("j1", TargetOf("j1"), 0.08, 5);
    c_->Tick();
  }
  ASSERT_EQ(c_->State().size(), 1u);
  EXPECT_EQ(c_->State()[0].jobs.size(), 1u);
  EXPECT_GT(c_->sessions_started(), before);
  EXPECT_FALSE(sink_.kv.count("/gpumux/nodes/n1/jobs/j2"));
}

TEST_F(CoordinatorTest, AnUnknownClassIsServedButItsGpuIsNeverTuned) {
  Register("j1", "a", 100);
  const Reply r = Register("j2", "mystery", 64);
  EXPECT_EQ(r.batch_size, 64);
  EXPECT_EQ(r.state, "untuned");
  EXPECT_EQ(Steps("j2", 64, 0.2, 5).state, "untuned");
}

TEST_F(CoordinatorTest, JobsOnDifferentGpusAreTunedApart) {
  Register("j1", "a", 100, "GPU-0");
  Register("j2", "b", 100, "GPU-1");
  RunToTuned({"j1", "j2"}, 0.1);
  EXPECT_EQ(c_->State().size(), 2u);
  EXPECT_EQ(StateOf("GPU-0"), "solo");
  EXPECT_EQ(StateOf("GPU-1"), "solo");
}

TEST_F(CoordinatorTest, ARestartedCoordinatorKeepsTheStoredAssignmentWithoutRetuning) {
  Register("j1", "a", 100);
  Register("j2", "b", 100);
  RunToTuned({"j1", "j2"}, 0.1);
  const int t1 = TargetOf("j1"), t2 = TargetOf("j2");
  // A new process: everything it knows comes from the store.
  Make();
  c_->Restore(sink_.Pairs());
  EXPECT_EQ(c_->sessions_started(), 0);
  EXPECT_EQ(Steps("j1", t1, 0.1, 3).batch_size, t1);
  EXPECT_EQ(Steps("j2", t2, 0.1, 3).batch_size, t2);
  EXPECT_EQ(StateOf("GPU-0"), "tuned");
  // A job registering again after the restart (its SDK saw a 404) keeps its target too.
  EXPECT_EQ(Register("j2", "b", t2).batch_size, t2);
  EXPECT_EQ(c_->sessions_started(), 0);
}

// The repro coordinator-store-gpu-entry-type: values of the wrong shape in the store (a file
// another program or an older gpumux wrote) aborted every start, an uncaught type_error. Each
// is now skipped with a line naming its key; what is sound is restored.
TEST_F(CoordinatorTest, AStoredValueOfTheWrongShapeIsSkippedAndNamed) {
  Register("j1", "a", 100);
  Register("j2", "b", 100);
  RunToTuned({"j1", "j2"}, 0.1);
  const int t1 = TargetOf("j1");
  const std::string gpu_key = "/gpumux/nodes/n1/gpus/GPU-0";
  const std::string job = R"({"job":"jx","class":"a","gpus":["GPU-0"],"batch_size":)";
  for (const std::string& bad_group :
       {std::string(R"({"jobs":"j1","state":"tuned","assignment":{"j1":64}})"), std::string("[1]"),
        std::string(R"({"jobs":["j1"],"state":7})")}) {
    auto stored = sink_.Pairs();
    for (auto& [k, v] : stored) {
      if (k == gpu_key) v = bad_group;
    }
    stored.emplace_back("/gpumux/nodes/n1/jobs/jx1", job + "1e300}");
    stored.emplace_back("/gpumux/nodes/n1/jobs/jx2", job + "18446744073709551615}");
    stored.emplace_back("/gpumux/nodes/n1/jobs/jx3", job + "32, \"target_batch\": 1e300}");
    stored.emplace_back("/gpumux/nodes/n1/jobs/jx4", job + "32, \"owner\": 5}");
    stored.emplace_back("/gpumux/nodes/n1/jobs/jx5", "[]");
    stored.emplace_back(
        "/gpumux/nodes/n1/jobs/jx6",
        job + "32, \"owner\": " + std::string(100000, '[') + std::string(100000, ']') + "}");
    log_.clear();
    Make();
    c_->Restore(stored);
    const auto state = c_->State();
    ASSERT_EQ(state.size(), 1u) << bad_group;
    ASSERT_EQ(state[0].jobs.size(), 2u) << "j1 and j2 only";
    for (const char* key : {"jx1", "jx2", "jx3", "jx4", "jx5", "jx6"}) {
      EXPECT_TRUE(std::any_of(log_.begin(), log_.end(), [&](const std::string& l) {
        return l.find("skipping a key key=/gpumux/nodes/n1/jobs/" + std::string(key)) !=
               std::string::npos;
      })) << key;
    }
    EXPECT_TRUE(std::any_of(log_.begin(), log_.end(), [&](const std::string& l) {
      return l.find("skipping a key key=" + gpu_key) != std::string::npos;
    })) << bad_group;
    // The group's tuned assignment was in the skipped key: a restored job still runs the
    // target stored with it.
    EXPECT_EQ(Steps("j1", t1, 0.1, 1).batch_size, t1);
  }
}

TEST_F(CoordinatorTest, AGroupThatChangesDuringTuningStartsOver) {
  Register("j1", "a", 100);
  Register("j2", "b", 100);
  ASSERT_EQ(StateOf("GPU-0"), "measuring");
  const std::int64_t before = c_->sessions_started();
  Register("j3", "a", 100);
  EXPECT_EQ(c_->sessions_started(), before + 1);
  RunToTuned({"j1", "j2", "j3"}, 0.2);
  EXPECT_EQ(StateOf("GPU-0"), "tuned");
}

// With a runner (the daemon's tuning thread), the tuner's work is asked for, not done, inside
// the call; a result for a group whose jobs changed meanwhile is never applied.
TEST_F(CoordinatorTest, ATuningResultForAGroupThatChangedMeanwhileIsDropped) {
  std::vector<Coordinator::TuningWork> asked;
  c_->set_tuning_runner([&](Coordinator::TuningWork w) { asked.push_back(std::move(w)); });
  const auto lines = [&](const std::string& text) {
    return std::count_if(log_.begin(), log_.end(),
                         [&](const std::string& l) { return l.find(text) != std::string::npos; });
  };
  // As the daemon's runner does: compute, then apply what was computed (stale work: nothing).
  const auto run = [](const Coordinator::TuningWork& w) {
    if (auto apply = w()) apply();
  };
  EXPECT_EQ(Register("j1", "a", 21).batch_size, 21);  // the tuner would move it
  ASSERT_EQ(asked.size(), 1u);
  EXPECT_EQ(StateOf("GPU-0"), "measuring");
  EXPECT_EQ(c_->sessions_started(), 0);
  std::function<void()> computed_for_one = asked[0]();  // computed before j2 joins ...
  Register("j2", "b", 100);
  ASSERT_EQ(asked.size(), 2u);
  computed_for_one();  // ... and applied after: dropped
  EXPECT_EQ(lines("tuning started gpu=GPU-0 jobs=1 "), 0);
  EXPECT_EQ(c_->sessions_started(), 0);
  Register("j3", "a", 100);  // j2+j1's work was not computed yet: it never will be
  ASSERT_EQ(asked.size(), 3u);
  run(asked[1]);
  EXPECT_EQ(lines("tuning started gpu=GPU-0 jobs=2 "), 0);
  run(asked[2]);
  EXPECT_EQ(lines("tuning started gpu=GPU-0 jobs=3 "), 1);
  EXPECT_EQ(c_->sessions_started(), 1);
  EXPECT_EQ(StateOf("GPU-0"), "measuring");
  // Steps are asked for the same way: each closed window posts one computation.
  for (int round = 0; round < 10 && StateOf("GPU-0") == "measuring"; ++round) {
    const std::size_t before = asked.size();
    for (const char* j : {"j1", "j2", "j3"}) Steps(j, TargetOf(j), 0.2, 6);
    for (std::size_t k = before; k < asked.size(); ++k) run(asked[k]);
  }
  EXPECT_EQ(StateOf("GPU-0"), "tuned");
}

// The same decisions as without a runner when every result is applied at once.
TEST_F(CoordinatorTest, AnImmediateRunnerDecidesAsTheInlineCoordinator) {
  const auto run = [&](bool runner) {
    Make();
    if (runner) {
      c_->set_tuning_runner([](Coordinator::TuningWork w) {
        if (auto apply = w()) apply();
      });
    }
    Register("j1", "a", 100);
    Register("j2", "b", 100);
    RunToTuned({"j1", "j2"}, 0.12);
    return std::make_pair(TargetOf("j1"), TargetOf("j2"));
  };
  EXPECT_EQ(run(true), run(false));
}

struct BadMessage {
  std::string name, path, body, error_part;
};

class MalformedMessages : public CoordinatorTest,
                          public ::testing::WithParamInterface<BadMessage> {};

TEST_P(MalformedMessages, GetAClearErrorAndDisturbNoOtherJob) {
  Register("j1", "a", 100);
  const HttpReply reply = Handle(*c_, "POST", GetParam().path, GetParam().body);
  EXPECT_EQ(reply.status, 400) << reply.body;
  EXPECT_NE(Json::parse(reply.body)["error"].get<std::string>().find(GetParam().error_part),
            std::string::npos)
      << reply.body;
  EXPECT_EQ(Steps("j1", 100, 0.1, 3).batch_size, 100);
}

INSTANTIATE_TEST_SUITE_P(
    Coordinator, MalformedMessages,
    ::testing::Values(
        BadMessage{"NotJson", "/v1/report", "{nope", "not JSON"},
        BadMessage{"NotAnObject", "/v1/register", "[1]", "JSON object"},
        BadMessage{"NoJob", "/v1/register", R"({"class":"a","batch_size":1})", "job"},
        BadMessage{"BatchAsString", "/v1/register", R"({"job":"x","class":"a","batch_size":"9"})",
                   "batch_size"},
        BadMessage{"ZeroBatch", "/v1/register", R"({"job":"x","class":"a","batch_size":0})",
                   "batch_size"},
        BadMessage{"GpusNotStrings", "/v1/register",
                   R"({"job":"x","class":"a","batch_size":1,"gpus":[1]})", "gpus"},
        BadMessage{"StepNotAPair", "/v1/report", R"({"job":"j1","steps":[[100]]})", "steps"},
        BadMessage{"NegativeSeconds", "/v1/report", R"({"job":"j1","steps":[[100,-1]]})", "steps"},
        BadMessage{"NanNoise", "/v1/report", R"({"job":"j1","noise_scale":-3})", "noise_scale"},
        // Through core::ParseJson: refused before the JSON library sees it.
        BadMessage{
            "NestedTooDeep", "/v1/register",
            R"({"job":"x","class":)" + std::string(100000, '[') + std::string(100000, ']') + "}",
            "the body: nested deeper than 128 levels"}),
    [](const auto& p) { return p.param.name; });

TEST_F(CoordinatorTest, AReportFromAnUnknownJobIs404SoTheSdkRegistersAgain) {
  EXPECT_EQ(Handle(*c_, "POST", "/v1/report", R"({"job":"ghost","steps":[]})").status, 404);
  EXPECT_EQ(Handle(*c_, "POST", "/v1/leave", R"({"job":"ghost"})").status, 404);
  EXPECT_EQ(Handle(*c_, "GET", "/v1/register", "").status, 405);
  EXPECT_EQ(Handle(*c_, "GET", "/nope", "").status, 404);
}

TEST(KeySegmentOf, SlashesAndPercentsAreEncodedSoANameIsOneSegment) {
  EXPECT_EQ(KeySegment("ns/pod/c"), "ns%2Fpod%2Fc");
  EXPECT_EQ(KeySegment("100%"), "100%25");
  EXPECT_EQ(KeySegment("GPU-1a"), "GPU-1a");
}

}  // namespace
}  // namespace gpumux::coordinator

namespace gpumux::coordinator {
namespace {

// The coordinator adds no tuning logic of its own: driven with the step times a job reports,
// it ends with exactly the batch sizes the policy's tuner session gives when driven directly
// (as the simulator drives it) with the same measurements.
TEST_F(CoordinatorTest, EndsWithTheBatchSizesOfThePolicyTunerDrivenDirectly) {
  // Direct: the joint tuner on {a at 100, b at 100}, b the newcomer, measured at 0.12 s each.
  policy::ProfileInterference model(profile_);
  auto tuner = policy::MakeTuner("joint");
  ASSERT_TRUE(tuner.has_value());
  core::Rng rng(1, "test");
  auto session = (*tuner)->Start(
      {{profile_.Find("a"), 100, 0, false, 0}, {profile_.Find("b"), 100, 0, true, 0}}, model, rng);
  ASSERT_NE(session, nullptr);
  policy::TuneStep step = session->Next();
  ASSERT_FALSE(step.final);
  const std::vector<double> measured{0.12, 0.12};
  session->Observe(step.batches, measured, {});
  const policy::TuneStep last = session->Next();
  ASSERT_TRUE(last.final);

  // Through the coordinator: j1 already tuned alone (no tuner state carries over to the pair:
  // the set key differs), then j2 joins and both report 0.12 s per step at their targets.
  Register("j1", "a", 100);
  Register("j2", "b", 100);
  RunToTuned({"j1", "j2"}, 0.12);
  EXPECT_EQ(TargetOf("j1"), last.batches[0]);
  EXPECT_EQ(TargetOf("j2"), last.batches[1]);
}

}  // namespace
}  // namespace gpumux::coordinator
