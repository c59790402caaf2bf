// `gpumux jobgen --format k8s | gpumux submit` end to end against the in-test API server, the test
// playing the scheduler and the kubelet (it binds each pod, sets it Running and then Succeeded
// or Failed with timestamps), then `gpumux report --from-cluster` on the record. Also: batch/v1
// Jobs (the test plays the job controller), API errors per object, --fail-fast, Ctrl-C, the dry
// run and bad input.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gpumux/core/time.h"
#include "gpumux/kube/grant.h"
#include "gpumux/runs/run_record.h"
#include "tests/testing/fake_apiserver.h"
#include "tests/testing/process.h"

namespace gpumux::runs {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using SteadyClock = std::chrono::steady_clock;
using std::chrono::milliseconds;

void WriteFile(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

std::string Rfc3339Now(int offset_s = 0) {
  return core::FormatRfc3339(static_cast<std::int64_t>(std::time(nullptr)) + offset_s);
}

// The scheduler, the kubelet and (for Jobs) the job controller of the fake API server, driven
// by the test thread: every pod is bound to node-1 with a grant of one GPU (round robin over
// 4), Running `start_after` later, and Succeeded (Failed for the jobs in `failing`, exit code 1)
// `run_for` after that.
class ClusterPlayer {
 public:
  ClusterPlayer(test::FakeApiServer& api, std::set<std::string> failing = {},
                milliseconds start_after = milliseconds(40),
                milliseconds run_for = milliseconds(250))
      : api_(api), failing_(std::move(failing)), start_after_(start_after), run_for_(run_for) {}

  // How long a pod of a workload class runs (others: run_for); GPUs spread over `nodes` nodes.
  void SetRunTimes(std::map<std::string, milliseconds> by_class, int nodes) {
    run_for_class_ = std::move(by_class);
    nodes_ = nodes;
  }

  // One pass over the API server's objects.
  void Step() {
    const auto now = SteadyClock::now();
    for (const json& job : api_.Objects("jobs")) {
      const std::string name = job["metadata"]["name"];
      if (!controlled_.insert(name).second) continue;
      json pod = {{"metadata", job["spec"]["template"].value("metadata", json::object())},
                  {"spec", job["spec"]["template"]["spec"]}};
      pod["metadata"]["name"] = name + "-x7k2p";
      pod["metadata"]["namespace"] = job["metadata"]["namespace"];
      pod["metadata"]["labels"]["job-name"] = name;
      pod["metadata"]["ownerReferences"] = json::array({{{"apiVersion", "batch/v1"},
                                                         {"kind", "Job"},
                                                         {"name", name},
                                                         {"uid", job["metadata"]["uid"]},
                                                         {"controller", true}}});
      pod["status"] = {{"phase", "Pending"}};
      api_.AddPod(pod);
    }
    for (json pod : api_.Objects("pods")) {
      const std::string key = pod["metadata"]["namespace"].get<std::string>() + "/" +
                              pod["metadata"]["name"].get<std::string>();
      auto [it, fresh] = pods_.try_emplace(key);
      State& s = it->second;
      if (fresh) {
        const int slot = next_gpu_++;
        s.gpu = slot % 4;
        s.node = "node-" + std::to_string(1 + (slot / 4) % nodes_);
        s.job = pod["metadata"]["annotations"].value("gpumux.io/job", "");
        s.cls = pod["metadata"]["annotations"].value("gpumux.io/workload-class", "");
        kube::Grant grant;
        grant.node = s.node;
        grant.policy = "fgd";
        grant.containers.push_back(
            {"main", {{s.gpu, "GPU-" + std::to_string(s.gpu)}}, 1, 4096, false, false});
        pod["spec"]["nodeName"] = s.node;
        pod["metadata"]["annotations"]["gpumux.io/grant"] = kube::EncodeGrant(grant);
        api_.UpdatePod(pod);
        s.start_at = now + start_after_;
        continue;
      }
      if (!s.running && now >= s.start_at) {
        s.running = true;
        auto by_class = run_for_class_.find(s.cls);
        s.finish_at = now + (by_class == run_for_class_.end() ? run_for_ : by_class->second);
        pod["status"] = {
            {"phase", "Running"},
            {"startTime", Rfc3339Now()},
            {"containerStatuses",
             json::array(
                 {{{"name", "main"}, {"state", {{"running", {{"startedAt", Rfc3339Now()}}}}}}})}};
        api_.UpdatePod(pod);
      } else if (s.running && !s.done && now >= s.finish_at) {
        s.done = true;
        const bool fail = failing_.count(s.job) > 0;
        pod["status"] = {
            {"phase", fail ? "Failed" : "Succeeded"},
            {"containerStatuses", json::array({{{"name", "main"},
                                                {"state",
                                                 {{"terminated",
                                                   {{"exitCode", fail ? 1 : 0},
                                                    {"reason", fail ? "Error" : "Completed"},
                                                    {"startedAt", Rfc3339Now(-1)},
                                                    {"finishedAt", Rfc3339Now()}}}}}}})}};
        api_.UpdatePod(pod);
      }
    }
  }

  std::size_t pods_seen() const { return pods_.size(); }

 private:
  struct State {
    int gpu = 0;
    std::string node;
    std::string job;
    std::string cls;
    SteadyClock::time_point start_at, finish_at;
    bool running = false;
    bool done = false;
  };
  test::FakeApiServer& api_;
  std::set<std::string> failing_;
  milliseconds start_after_, run_for_;
  std::map<std::string, State> pods_;
  std::set<std::string> controlled_;
  std::map<std::string, milliseconds> run_for_class_;
  int nodes_ = 1;
  int next_gpu_ = 0;
};

class SubmitCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(api_.ok()) << api_.error();
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = info->name();
    std::replace(name.begin(), name.end(), '/', '-');  // parameterised: "Case/Param"
    std::string pattern =
        (fs::temp_directory_path() / ("gpumux-submit-" + name + "-XXXXXX")).string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    // The context's namespace is where objects without one go, as with kubectl.
    WriteFile(dir_ / "kubeconfig",
              "apiVersion: v1\nkind: Config\n"
              "clusters:\n- name: fake\n  cluster:\n    server: " +
                  api_.url() +
                  "\nusers:\n- name: tester\n  user:\n    token: t\n"
                  "contexts:\n- name: test\n  context:\n    cluster: fake\n    user: tester\n"
                  "    namespace: work\n"
                  "current-context: test\n");
  }
  void TearDown() override {
    if (running_ > 0) {
      kill(running_, SIGKILL);
      waitpid(running_, nullptr, 0);
    }
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  std::string Err(const std::string& tag) const {
    return test::ReadFileText(dir_ / (tag + ".err"));
  }
  std::string Out(const std::string& tag) const {
    return test::ReadFileText(dir_ / (tag + ".out"));
  }

  // Starts `sh -c script` with gpumux on PATH's front (as `gpumux`) and KUBECONFIG unset.
  pid_t Start(const std::string& script, const std::string& tag) {
    fs::create_directories(dir_ / "bin");
    std::error_code ec;
    fs::create_symlink(GPUMUX_BINARY, dir_ / "bin" / "gpumux", ec);
    test::ProcessSpec spec;
    spec.argv = {"/bin/sh", "-c", script};
    spec.set_env = {"PATH=" + (dir_ / "bin").string() + ":/usr/bin:/bin"};
    spec.unset_env = {"KUBECONFIG"};
    spec.stdout_path = Path(tag + ".out");
    spec.stderr_path = Path(tag + ".err");
    spec.cwd = dir_.string();
    running_ = test::StartProcess(spec);
    return running_;
  }

  // Runs the cluster player until the process exits (at most `limit`); its exit.
  std::optional<test::ProcessExit> PlayUntilExit(ClusterPlayer* player, milliseconds limit,
                                                 const std::function<void()>& each = {}) {
    const auto give_up = SteadyClock::now() + limit;
    while (SteadyClock::now() < give_up) {
      if (player != nullptr) player->Step();
      if (each) each();
      int status = 0;
      if (waitpid(running_, &status, WNOHANG) == running_) {
        running_ = 0;
        test::ProcessExit e;
        if (WIFEXITED(status)) e.code = WEXITSTATUS(status);
        if (WIFSIGNALED(status)) e.signal = WTERMSIG(status);
        return e;
      }
      std::this_thread::sleep_for(milliseconds(10));
    }
    return std::nullopt;
  }

  RunRecord Record(const std::string& name) {
    const std::string text = test::ReadFileText(dir_ / name);
    auto r = ParseRunRecord(text, name);
    EXPECT_TRUE(r) << (r ? "" : r.error().message) << "\n" << text;
    return r ? *r : RunRecord{};
  }

  test::FakeApiServer api_;
  fs::path dir_;
  pid_t running_ = 0;
};

TEST_F(SubmitCliTest, JobgenPipedIntoSubmitRecordsEveryJobAndReportBuildsTheTables) {
  // 6 training jobs of the classes with a shipped example, arrivals about 1 s apart, 20 times
  // faster; j0002 fails.
  ASSERT_GT(Start("gpumux jobgen --format k8s --profile cpu-example --count 6 --arrival poisson "
                  "--rate 1 --seed 7 --work-scale 0.001 --run e2e | "
                  "gpumux submit - --kubeconfig kubeconfig --time-scale 0.05 --wait "
                  "--wait-timeout 60 --record run.jsonl --label gpumux --progress-every 0.2",
                  "submit"),
            0);
  ClusterPlayer player(api_, {"j0002"});
  auto exit = PlayUntilExit(&player, milliseconds(60000));
  ASSERT_TRUE(exit.has_value()) << Err("submit");
  EXPECT_TRUE(exit->Exited(0)) << Err("submit");
  const std::string err = Err("submit");
  EXPECT_NE(err.find("submitted, "), std::string::npos) << err;  // progress lines
  EXPECT_NE(err.find("finished: 6 jobs created; 5 succeeded, 1 failed, 0 unfinished"),
            std::string::npos)
      << err;

  // What the API server got: 6 pods in the context's namespace, labelled with the run.
  const auto pods = api_.Objects("pods");
  ASSERT_EQ(pods.size(), 6u);
  for (const json& pod : pods) {
    EXPECT_EQ(pod["metadata"]["namespace"], "work");
    EXPECT_EQ(pod["metadata"]["labels"]["gpumux.io/run"], "e2e");
    EXPECT_EQ(pod["spec"]["schedulerName"], "gpumux-scheduler");
    EXPECT_TRUE(pod["metadata"]["annotations"].contains("gpumux.io/workload-class"));
    EXPECT_TRUE(pod["spec"]["containers"][0]["resources"]["limits"].contains("gpumux.io/gpu-mem"));
  }

  const RunRecord r = Record("run.jsonl");
  EXPECT_EQ(r.run.run, "e2e");
  EXPECT_EQ(r.run.label, "gpumux");
  EXPECT_EQ(r.run.ns, "work");
  EXPECT_EQ(r.run.time_scale, 0.05);
  EXPECT_EQ(r.end_reason, "finished");
  ASSERT_EQ(r.jobs.size(), 6u);
  std::set<std::string> classes;
  for (const RecordedJob& j : r.jobs) {
    SCOPED_TRACE(j.job);
    ASSERT_TRUE(j.submitted.has_value());
    ASSERT_TRUE(j.scheduled.has_value());
    ASSERT_TRUE(j.started.has_value());
    ASSERT_TRUE(j.finished.has_value());
    EXPECT_LE(*j.submitted, *j.started);
    EXPECT_LT(*j.started, *j.finished);
    // Created when due: arrival x 0.05 after the start (with some slack for the machine).
    EXPECT_GE(*j.submitted + 1e-3, j.submit_at_s * 0.05);
    EXPECT_LT(*j.submitted, j.submit_at_s * 0.05 + 2.0);
    EXPECT_EQ(j.node, "node-1");
    ASSERT_EQ(j.gpus.size(), 1u);
    EXPECT_EQ(j.gpus[0].rfind("node-1/", 0), 0u);
    classes.insert(j.cls);
    if (j.job == "j0002") {
      EXPECT_EQ(j.phase, "Failed");
      EXPECT_EQ(j.reason, "Error");
    } else {
      EXPECT_TRUE(j.succeeded());
    }
  }
  EXPECT_LE(classes.size(), 3u);
  for (const std::string& c : classes) {
    EXPECT_TRUE(c == "resnet" || c == "lstm" || c == "neumf") << c;
  }

  // The report of that record: the simulator's tables, for the 5 jobs that succeeded.
  ASSERT_GT(Start("gpumux report --from-cluster run.jsonl --out report", "report"), 0);
  auto report_exit = PlayUntilExit(nullptr, milliseconds(30000));
  ASSERT_TRUE(report_exit.has_value());
  EXPECT_TRUE(report_exit->Exited(0)) << Err("report");
  const std::string table = Out("report");
  EXPECT_EQ(table.rfind("JCT measured on a cluster: 1 record (run.jsonl), 6 jobs\n", 0), 0u)
      << table;
  EXPECT_NE(table.find("gpumux: run.jsonl, run e2e in work"), std::string::npos) << table;
  EXPECT_NE(table.find("6 jobs: 5 succeeded, 1 failed, 0 unfinished, 0 not created; ended: "
                       "finished"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("  j0002: failed (Error)"), std::string::npos) << table;
  EXPECT_NE(table.find("\nload 20x\n"), std::string::npos) << table;
  EXPECT_NE(table.find("\n  gpumux     -   "), std::string::npos) << table;
  const json results = json::parse(test::ReadFileText(dir_ / "report" / "results.json"));
  EXPECT_EQ(results["measured"], true);
  ASSERT_EQ(results["runs"].size(), 1u);
  EXPECT_EQ(results["runs"][0]["jobs"], 5);
  EXPECT_GT(results["runs"][0]["metrics"]["avg_jct_s"].get<double>(), 0.2);
  const std::string page = test::ReadFileText(dir_ / "report" / "index.html");
  EXPECT_NE(page.find(">node-1/0</text>"), std::string::npos);
  const std::string csv = test::ReadFileText(dir_ / "report" / "jobs.csv");
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 6);  // header + 5 jobs
}

// Writes examples/cluster-run/record.jsonl, the record the README's try-it reports on; run it on
// purpose: build/tests/gpumux_runs_test --gtest_also_run_disabled_tests
//   --gtest_filter='*WritesTheExampleRecord'
TEST_F(SubmitCliTest, DISABLED_WritesTheExampleRecord) {
  ASSERT_GT(Start("gpumux jobgen --format k8s --profile cpu-example --count 12 --arrival poisson "
                  "--rate 0.5 --seed 11 --work-scale 0.01 --run example | "
                  "gpumux submit - --kubeconfig kubeconfig --time-scale 0.2 --wait "
                  "--wait-timeout 120 --record example.jsonl --label stand-in-kubelet",
                  "example"),
            0);
  ClusterPlayer player(api_, {"j0007"}, milliseconds(300));
  player.SetRunTimes(
      {{"resnet", milliseconds(3000)}, {"lstm", milliseconds(5000)}, {"neumf", milliseconds(1200)}},
      2);
  auto exit = PlayUntilExit(&player, milliseconds(120000));
  ASSERT_TRUE(exit.has_value()) << Err("example");
  ASSERT_TRUE(exit->Exited(0)) << Err("example");
  const fs::path target = fs::path(GPUMUX_SOURCE_DIR) / "examples" / "cluster-run";
  fs::create_directories(target);
  fs::copy_file(dir_ / "example.jsonl", target / "record.jsonl",
                fs::copy_options::overwrite_existing);
}

TEST_F(SubmitCliTest, BatchJobsAreCreatedAndTheirPodsRecordedUnderTheJob) {
  ASSERT_GT(Start("gpumux jobgen --format k8s --kind job --pods default --count 3 "
                  "--host-resources none > pods.yaml && "
                  "gpumux submit pods.yaml --kubeconfig kubeconfig -n trace --time-scale "
                  "0.0000005 --wait --wait-timeout 60 --record jobs.jsonl --run r-jobs",
                  "submit"),
            0);
  ClusterPlayer player(api_);
  auto exit = PlayUntilExit(&player, milliseconds(60000));
  ASSERT_TRUE(exit.has_value()) << Err("submit");
  EXPECT_TRUE(exit->Exited(0)) << Err("submit");
  const auto jobs = api_.Objects("jobs");
  ASSERT_EQ(jobs.size(), 3u);
  // The sleep of each trace pod scaled with the arrivals, the trace's own kept beside it.
  const json& annotations = jobs[0]["spec"]["template"]["metadata"]["annotations"];
  EXPECT_EQ(annotations["gpumux.io/trace-duration-s"], "12537496");
  EXPECT_EQ(annotations["gpumux.io/duration-s"], "6.269");
  EXPECT_EQ(jobs[0]["spec"]["template"]["metadata"]["labels"]["gpumux.io/run"], "r-jobs");
  const RunRecord r = Record("jobs.jsonl");
  ASSERT_EQ(r.jobs.size(), 3u);
  for (const RecordedJob& j : r.jobs) {
    EXPECT_EQ(j.kind, "Job");
    EXPECT_EQ(j.ns, "trace");
    EXPECT_EQ(j.pod, j.name + "-x7k2p");
    EXPECT_TRUE(j.succeeded()) << j.job;
  }
  EXPECT_EQ(r.jobs[0].job, "openb-pod-0000");
}

TEST_F(SubmitCliTest, ApiErrorsAreReportedPerObjectAndTheRunGoesOnUnlessFailFast) {
  // j0002 exists already.
  api_.AddPod({{"metadata", {{"name", "j0002"}, {"namespace", "work"}}},
               {"spec", {{"containers", json::array({{{"name", "c"}}})}}}});
  ASSERT_GT(Start("gpumux jobgen --format k8s --count 4 --work-scale 0.001 > jobs.yaml && "
                  "gpumux submit jobs.yaml --kubeconfig kubeconfig --time-scale 0.001 "
                  "--record errors.jsonl",
                  "errors"),
            0);
  auto exit = PlayUntilExit(nullptr, milliseconds(30000));
  ASSERT_TRUE(exit.has_value()) << Err("errors");
  EXPECT_TRUE(exit->Exited(1)) << Err("errors");
  const std::string err = Err("errors");
  EXPECT_NE(err.find("j0002 (Pod work/j0002): HTTP 409 AlreadyExists: pods \"j0002\" already "
                     "exists"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("submitted: 3 jobs created, 1 create refused"), std::string::npos) << err;
  const RunRecord r = Record("errors.jsonl");
  EXPECT_EQ(r.end_reason, "submitted");
  ASSERT_EQ(r.jobs.size(), 4u);
  EXPECT_EQ(r.jobs[1].error, "HTTP 409 AlreadyExists: pods \"j0002\" already exists");
  EXPECT_TRUE(r.jobs[3].submitted.has_value());

  // --fail-fast: the first refusal ends the run.
  ASSERT_GT(Start("gpumux submit jobs.yaml --kubeconfig kubeconfig --time-scale 0.001 "
                  "--record fast.jsonl --run other --fail-fast",
                  "fast"),
            0);
  exit = PlayUntilExit(nullptr, milliseconds(30000));
  ASSERT_TRUE(exit.has_value()) << Err("fast");
  EXPECT_TRUE(exit->Exited(1)) << Err("fast");
  const RunRecord fast = Record("fast.jsonl");
  EXPECT_EQ(fast.end_reason, "fail-fast");
  ASSERT_EQ(fast.jobs.size(), 1u);  // j0001 exists now: refused, and nothing after it
  EXPECT_NE(fast.jobs[0].error.find("AlreadyExists"), std::string::npos);
}

TEST_F(SubmitCliTest, ATransientFailureIsRetriedAndAnAnswerLostAfterTheCreateIsNoError) {
  // The first create of j0001 answers 503 (nothing stored); the retry works.
  api_.FailNext("POST", "/pods", 503, "ServiceUnavailable", "try later", 1);
  ASSERT_GT(Start("gpumux jobgen --format k8s --count 2 --work-scale 0.001 | "
                  "gpumux submit - --kubeconfig kubeconfig --time-scale 0.001 --record r.jsonl",
                  "retry"),
            0);
  auto exit = PlayUntilExit(nullptr, milliseconds(30000));
  ASSERT_TRUE(exit.has_value()) << Err("retry");
  EXPECT_TRUE(exit->Exited(0)) << Err("retry");
  EXPECT_NE(Err("retry").find("HTTP 503 ServiceUnavailable: try later; trying again"),
            std::string::npos)
      << Err("retry");
  EXPECT_EQ(api_.Objects("pods").size(), 2u);
  const RunRecord r = Record("r.jsonl");
  ASSERT_EQ(r.jobs.size(), 2u);
  EXPECT_TRUE(r.jobs[0].submitted.has_value());

  // The create of j0001 is applied but its answer lost (a 504 from a proxy): the retry gets
  // AlreadyExists for a pod of this very run, which is no error.
  api_.FailNextAfterApplying("POST", "/pods", 504, "Timeout", "the answer was lost", 1);
  ASSERT_GT(Start("gpumux jobgen --format k8s --count 2 --work-scale 0.001 --name-prefix b- | "
                  "gpumux submit - --kubeconfig kubeconfig --time-scale 0.001 --record lost.jsonl "
                  "--progress bar",
                  "lost"),
            0);
  exit = PlayUntilExit(nullptr, milliseconds(30000));
  ASSERT_TRUE(exit.has_value()) << Err("lost");
  EXPECT_TRUE(exit->Exited(0)) << Err("lost");
  EXPECT_NE(Err("lost").find("HTTP 504 Timeout: the answer was lost; trying again"),
            std::string::npos)
      << Err("lost");
  // --progress bar redraws one line in place (\r, erase to its end).
  EXPECT_NE(Err("lost").find("\r\033[K[########################] 2/2 submitted"), std::string::npos)
      << Err("lost");
  const RunRecord lost = Record("lost.jsonl");
  ASSERT_EQ(lost.jobs.size(), 2u);
  EXPECT_TRUE(lost.jobs[0].submitted.has_value()) << lost.jobs[0].error;
  EXPECT_TRUE(lost.jobs[0].error.empty()) << lost.jobs[0].error;
  EXPECT_EQ(api_.Objects("pods").size(), 4u);
}

TEST_F(SubmitCliTest, CtrlCStopsSubmittingAndTheRecordEndsInterrupted) {
  // Arrivals 10 s apart at scale 1: after the first create, SIGINT.
  WriteFile(dir_ / "two.yaml",
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\n  annotations:\n"
            "    gpumux.io/submit-at-s: \"0\"\nspec:\n  containers:\n  - name: c\n    image: i\n"
            "---\n"
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: b\n  annotations:\n"
            "    gpumux.io/submit-at-s: \"10\"\nspec:\n  containers:\n  - name: c\n    image: i\n");
  ASSERT_GT(
      Start("exec gpumux submit two.yaml --kubeconfig kubeconfig --record int.jsonl --wait", "int"),
      0);
  ClusterPlayer player(api_, {}, milliseconds(40), milliseconds(600));
  bool signalled = false;
  auto exit = PlayUntilExit(&player, milliseconds(30000), [&] {
    if (!signalled && api_.Objects("pods").size() == 1) {
      signalled = true;
      kill(running_, SIGINT);
    }
  });
  ASSERT_TRUE(exit.has_value()) << Err("int");
  EXPECT_TRUE(exit->Exited(130)) << Err("int");
  EXPECT_NE(Err("int").find("stopping: no more creates"), std::string::npos) << Err("int");
  EXPECT_EQ(api_.Objects("pods").size(), 1u);
  // With --wait, the pod already created was still recorded to its end.
  const RunRecord r = Record("int.jsonl");
  EXPECT_EQ(r.end_reason, "interrupted");
  ASSERT_EQ(r.jobs.size(), 1u);
  EXPECT_TRUE(r.jobs[0].succeeded());
}

TEST_F(SubmitCliTest, TheDryRunPrintsTheScheduleAndNeedsNoCluster) {
  ASSERT_GT(Start("gpumux jobgen --format k8s-json --count 3 | "
                  "HOME=/nonexistent gpumux submit - --dry-run --time-scale 0.5 --run plan",
                  "dry"),
            0);
  auto exit = PlayUntilExit(nullptr, milliseconds(30000));
  ASSERT_TRUE(exit.has_value());
  EXPECT_TRUE(exit->Exited(0)) << Err("dry");
  const std::string out = Out("dry");
  EXPECT_NE(out.find("3 objects from <stdin>, run plan, time scale 0.5 (dry run"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("default/j0001"), std::string::npos) << out;
  EXPECT_NE(out.find("gpumux.io/gpu-mem="), std::string::npos) << out;
  EXPECT_EQ(api_.total_requests(), 0);
}

struct BadSubmitCase {
  std::string name;
  std::string manifest;
  std::string args;
  std::string message;
};

class SubmitCliErrors : public SubmitCliTest,
                        public ::testing::WithParamInterface<BadSubmitCase> {};

TEST_P(SubmitCliErrors, ExitTwoNamingTheInput) {
  WriteFile(dir_ / "in.yaml", GetParam().manifest);
  ASSERT_GT(Start("gpumux submit in.yaml --kubeconfig kubeconfig " + GetParam().args, "bad"), 0);
  auto exit = PlayUntilExit(nullptr, milliseconds(30000));
  ASSERT_TRUE(exit.has_value());
  EXPECT_TRUE(exit->Exited(2)) << Err("bad");
  EXPECT_NE(Err("bad").find(GetParam().message), std::string::npos) << Err("bad");
  EXPECT_EQ(api_.creations(), 0);
}

const char* kPod =
    "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c}]}\n";

INSTANTIATE_TEST_SUITE_P(
    Submit, SubmitCliErrors,
    ::testing::Values(
        BadSubmitCase{"AServiceIsNotSubmitted",
                      "apiVersion: v1\nkind: Service\nmetadata: {name: s}\n", "",
                      "in.yaml: object 1 (Service s): only Pods (apiVersion v1) and Jobs"},
        BadSubmitCase{"AnotherNamespaceThanTheGivenOne",
                      "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: a}\n", "-n b",
                      "in.yaml: object 1 (Pod p): its namespace a is not the one given (-n b)"},
        BadSubmitCase{"ABadArrival",
                      "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  annotations:\n"
                      "    gpumux.io/submit-at-s: soon\n",
                      "", "annotation gpumux.io/submit-at-s 'soon' is not seconds >= 0"},
        BadSubmitCase{"TwoObjectsOfOneName", std::string(kPod) + "---\n" + kPod, "",
                      "object 2 (Pod p): a second Pod named work/p"},
        BadSubmitCase{"NotYaml", "a: [1, 2\n", "", "in.yaml:"},
        BadSubmitCase{"NoObjects", "# nothing\n", "", "in.yaml: no objects to submit"},
        BadSubmitCase{"AnExistingRecord", kPod, "--record in.yaml",
                      "--record: in.yaml: exists (a record holds one run"},
        BadSubmitCase{"ABadRunName", kPod, "--run 'no spaces'", "is not a label value"},
        BadSubmitCase{"WaitTimeoutWithoutWait", kPod, "--wait-timeout 5",
                      "--wait-timeout needs --wait"}),
    [](const auto& test_case) { return test_case.param.name; });

TEST_F(SubmitCliTest, ReportRefusesABadRecordNamingTheLine) {
  WriteFile(dir_ / "bad.jsonl",
            "{\"event\":\"run\",\"t\":0,\"version\":1,\"time_scale\":1}\n"
            "{\"event\":\"submit\",\"t\":0.1,\"job\":\"a\"}\n"
            "{\"event\":\"start\",\"t\":\"later\",\"job\":\"a\"}\n");
  ASSERT_GT(Start("gpumux report --from-cluster bad.jsonl --no-report", "report"), 0);
  auto exit = PlayUntilExit(nullptr, milliseconds(30000));
  ASSERT_TRUE(exit.has_value());
  EXPECT_TRUE(exit->Exited(2)) << Err("report");
  EXPECT_NE(Err("report").find("gpumux report: --from-cluster: bad.jsonl:3: \"t\" is not a "
                               "number >= 0"),
            std::string::npos)
      << Err("report");
}

}  // namespace
}  // namespace gpumux::runs
