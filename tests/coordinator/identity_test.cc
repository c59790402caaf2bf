// Who may act for a job: callers read from cgroups, jobs owned by the caller that registered
// them, registrations from the pod (or container) that holds the GPU, the job limits, and a
// restart that forgets jobs gone for longer than the job timeout.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "gpumux/coordinator/caller.h"
#include "gpumux/coordinator/coordinator.h"
#include "tests/coordinator/map_sink.h"
#include "tests/policy/colocation_fixtures.h"

namespace gpumux::coordinator {
namespace {

using std::chrono::milliseconds;
constexpr const char* kPodA = "7c0f4d1e-3b2a-4c5d-8e9f-0a1b2c3d4e5f";
constexpr const char* kPodB = "11111111-2222-3333-4444-555555555555";
const std::string kContainer(64, 'a');

TEST(ParseCgroup, CgroupfsPodAndContainerOnCgroupV1) {
  const auto id = ParseCgroup(
      "12:pids:/kubepods/besteffort/pod7c0f4d1e-3b2a-4c5d-8e9f-0a1b2c3d4e5f/" + kContainer +
      "\n4:memory:/kubepods/besteffort/pod7c0f4d1e-3b2a-4c5d-8e9f-0a1b2c3d4e5f/" + kContainer +
      "\n1:name=systemd:/\n");
  EXPECT_EQ(id.pod_uid, kPodA);
  EXPECT_EQ(id.container_id, kContainer);
  EXPECT_TRUE(id.in_container());
}

TEST(ParseCgroup, SystemdSlicesOnTheUnifiedHierarchyEvenSeenFromAnotherNamespace) {
  const auto id = ParseCgroup(
      "0::/../../kubepods.slice/kubepods-burstable.slice/"
      "kubepods-burstable-pod7C0F4D1E_3B2A_4C5D_8E9F_0A1B2C3D4E5F.slice/cri-containerd-" +
      kContainer + ".scope\n");
  EXPECT_EQ(id.pod_uid, kPodA);
  EXPECT_EQ(id.container_id, kContainer);
}

TEST(ParseCgroup, AContainerOutsideKubernetesAndAHostProcess) {
  const auto docker = ParseCgroup("0::/system.slice/docker-" + kContainer + ".scope\n");
  EXPECT_EQ(docker.pod_uid, "");
  EXPECT_EQ(docker.container_id, kContainer);
  const auto host = ParseCgroup("0::/user.slice/user-1000.slice/session-3.scope\n");
  EXPECT_TRUE(host.read);
  EXPECT_FALSE(host.in_container());
  EXPECT_EQ(host.segments.back(), "session-3.scope");
  EXPECT_FALSE(ParseCgroup("garbage").read);
  // "pod" inside another word is not a pod segment; a short hex id is not a container.
  EXPECT_FALSE(ParseCgroup("0::/ipod7c0f4d1e-3b2a-4c5d-8e9f-0a1b2c3d4e5f/abc123\n").in_container());
}

// shared/reliability-repros/coordinator-hybrid-cgroup-admin: on a "hybrid" host the runtime puts
// a container in every v1 hierarchy but not in the unified one, whose line stays the runtime's
// service. The line that names the pod decides, in whichever hierarchy it is: such a caller is
// in its pod, not a host process (which as root would be the node's administrator).
TEST(ParseCgroup, OnAHybridHostTheV1LinesNameThePodWhenTheUnifiedOneDoesNot) {
  const std::string pod = std::string("/kubepods/besteffort/pod") + kPodB + "/" + kContainer;
  const auto id = ParseCgroup("12:pids:" + pod + "\n4:memory:" + pod + "\n1:name=systemd:" + pod +
                              "\n0::/system.slice/containerd.service\n");
  EXPECT_EQ(id.pod_uid, kPodB);
  EXPECT_EQ(id.container_id, kContainer);
  EXPECT_TRUE(id.in_container());
  // The unified line still wins when it names a pod; a host process stays a host process.
  const auto unified = ParseCgroup("4:memory:/elsewhere\n0::/kubepods/pod" + std::string(kPodA) +
                                   "/" + kContainer + "\n");
  EXPECT_EQ(unified.pod_uid, kPodA);
  const auto host = ParseCgroup("4:memory:/user.slice\n0::/user.slice/session-3.scope\n");
  EXPECT_FALSE(host.in_container());
  EXPECT_EQ(host.segments.back(), "session-3.scope") << "the unified path, as before";
}

Caller InPod(const char* pod, std::int64_t uid = 1000) {
  Caller c;
  c.kind = Caller::Kind::kProcess;
  c.pid = 4242;
  c.uid = uid;
  c.cgroup = ParseCgroup(std::string("0::/kubepods/pod") + pod + "/" + kContainer + "\n");
  return c;
}

Caller HostProcess(std::int64_t uid) {
  Caller c;
  c.kind = Caller::Kind::kProcess;
  c.pid = 4343;
  c.uid = uid;
  c.cgroup = ParseCgroup("0::/user.slice/session-1.scope\n");
  return c;
}

TEST(CallerTest, OnlyTheNodeAndRootSeenOutsideAnyContainerAreTrusted) {
  EXPECT_TRUE(Caller::Node().trusted());
  EXPECT_TRUE(HostProcess(0).trusted());
  EXPECT_FALSE(HostProcess(1000).trusted());
  EXPECT_FALSE(InPod(kPodA, 0).trusted()) << "root in a pod is a tenant";
  Caller unseen;  // in a PID namespace the coordinator cannot see: SO_PEERCRED gives pid 0
  unseen.kind = Caller::Kind::kProcess;
  unseen.pid = 0;
  unseen.uid = 0;
  EXPECT_FALSE(unseen.trusted()) << "an unreadable cgroup may hide a container";
  EXPECT_FALSE(Caller::Tcp("127.0.0.1").trusted());
  EXPECT_EQ(InPod(kPodA).Principal(), std::string("pod ") + kPodA);
  EXPECT_EQ(HostProcess(1000).Principal(), "uid 1000");
}

TEST(CallerTest, ReadCallerReadsThePeersCgroupUnderProc) {
  const auto proc =
      std::filesystem::temp_directory_path() / ("gpumux-proc-" + std::to_string(::getpid()));
  std::filesystem::create_directories(proc / "77");
  std::ofstream(proc / "77" / "cgroup") << "0::/kubepods/pod" << kPodB << "/" << kContainer << "\n";
  const Caller c = ReadCaller(77, 1000, proc.string());
  EXPECT_EQ(c.cgroup.pod_uid, kPodB);
  EXPECT_EQ(c.Describe(), std::string("a process of uid 1000 in pod ") + kPodB);
  EXPECT_EQ(c.LogName(), std::string("pid 77: a process of uid 1000 in pod ") + kPodB);
  const Caller gone = ReadCaller(78, 0, proc.string());
  EXPECT_FALSE(gone.cgroup.read);
  EXPECT_FALSE(gone.trusted());
  std::filesystem::remove_all(proc);
}

using test::MapSink;

class IdentityTest : public ::testing::Test {
 protected:
  IdentityTest() {
    test::LinearClass a;
    a.name = "a";
    profile_ = test::MakeProfile({test::MakeClass(a)});
    options_.node = "n1";
    options_.job_timeout = milliseconds(30'000);
    options_.unix_now = [this] { return unix_now_; };
  }
  void Make() {
    c_ = std::make_unique<Coordinator>(
        options_, profile_, &sink_, [this] { return now_; }, [](std::string_view) {});
  }
  // A new coordinator restored from `stored`: the ids of the jobs it holds.
  std::vector<std::string> RestoredJobs(
      const std::vector<std::pair<std::string, std::string>>& stored) {
    Make();
    c_->Restore(stored);
    std::vector<std::string> ids;
    for (const auto& g : c_->State()) {
      for (const auto& j : g.jobs) ids.push_back(j.job);
    }
    return ids;
  }
  static Registration Reg(const std::string& job, int batch = 32,
                          const std::string& gpu = "GPU-0") {
    Registration r;
    r.job = job;
    r.cls = "a";
    r.batch_size = batch;
    r.gpus = {gpu};
    return r;
  }
  // Pods "ns/a" (kPodA) and "ns/b" (kPodB); container "train" of each holds GPU-0.
  void UsePods() {
    options_.identity = CoordinatorOptions::Identity::kPods;
    options_.pod_of_uid = [](std::string_view uid) -> std::optional<std::string> {
      if (uid == kPodA) return "ns/a";
      if (uid == kPodB) return "ns/b";
      return std::nullopt;
    };
    options_.resolve_gpus = [](std::string_view job) -> std::optional<std::vector<std::string>> {
      if (job == "ns/a/train" || job == "ns/b/train") return std::vector<std::string>{"GPU-0"};
      return std::nullopt;
    };
  }
  static void ExpectCode(const core::Error& e, core::ErrorCode code, const std::string& says) {
    EXPECT_EQ(e.code, code) << e.message;
    EXPECT_NE(e.message.find(says), std::string::npos) << e.message;
  }

  policy::WorkloadProfile profile_;
  CoordinatorOptions options_;
  MapSink sink_;
  Clock::time_point now_{};
  std::int64_t unix_now_ = 1'800'000'000;
  std::unique_ptr<Coordinator> c_;
};

// The issue's forgery: another local process registers the victim's id with a huge batch size.
TEST_F(IdentityTest, AnotherCallerCannotReplaceReportForOrRemoveAJob) {
  Make();
  const Caller victim = HostProcess(1000), other = HostProcess(1001);
  auto registered = c_->Register(Reg("resnet", 21), victim);
  ASSERT_TRUE(registered);
  auto forged = c_->Register(Reg("resnet", policy::kMaxProfileBatch), other);
  ASSERT_FALSE(forged);
  ExpectCode(forged.error(), core::ErrorCode::kPermissionDenied, "registered by another caller");
  const StepSample step{21, 0.1};
  auto report = c_->Report("resnet", {&step, 1}, 0, other);
  ASSERT_FALSE(report);
  EXPECT_EQ(report.error().code, core::ErrorCode::kPermissionDenied);
  EXPECT_FALSE(c_->Leave("resnet", Caller::Tcp("127.0.0.1")));
  auto own = c_->Report("resnet", {&step, 1}, 0, victim);
  ASSERT_TRUE(own) << own.error().message;
  EXPECT_EQ(own->batch_size, registered->batch_size) << "the victim's target is untouched";
  EXPECT_TRUE(c_->Register(Reg("resnet", 21), victim)) << "its owner may register it again";
  EXPECT_TRUE(c_->Leave("resnet", HostProcess(0))) << "the node's administrator may act for it";
}

TEST_F(IdentityTest, AProcessSeesOnlyItsOwnJobsInTheState) {
  Make();
  ASSERT_TRUE(c_->Register(Reg("mine"), HostProcess(1000)));
  ASSERT_TRUE(c_->Register(Reg("theirs"), HostProcess(1001)));
  const auto seen = c_->State(HostProcess(1000));
  ASSERT_EQ(seen.size(), 1u);
  ASSERT_EQ(seen[0].jobs.size(), 1u);
  EXPECT_EQ(seen[0].jobs[0].job, "mine");
  EXPECT_EQ(c_->State(HostProcess(1002)).size(), 0u);
  EXPECT_EQ(c_->State()[0].jobs.size(), 2u);
}

TEST_F(IdentityTest, WithPodsAJobRegistersOnlyFromItsOwnPodWithAGrant) {
  UsePods();
  Make();
  EXPECT_TRUE(c_->Register(Reg("ns/a/train"), InPod(kPodA)));
  auto other_pod = c_->Register(Reg("ns/a/train", 64), InPod(kPodB));
  ASSERT_FALSE(other_pod);
  ExpectCode(other_pod.error(), core::ErrorCode::kPermissionDenied, "'ns/b/<container>'");
  auto no_grant = c_->Register(Reg("ns/b/sidecar"), InPod(kPodB));
  ASSERT_FALSE(no_grant);
  ExpectCode(no_grant.error(), core::ErrorCode::kPermissionDenied, "holds no gpumux grant");
  auto unknown = c_->Register(Reg("ns/c/train"), InPod("99999999-2222-3333-4444-555555555555"));
  ASSERT_FALSE(unknown);
  ExpectCode(unknown.error(), core::ErrorCode::kUnavailable, "not (yet) known");
  auto host = c_->Register(Reg("ns/b/train"), HostProcess(1000));
  ASSERT_FALSE(host);
  ExpectCode(host.error(), core::ErrorCode::kPermissionDenied, "is not in a pod");
  auto tcp = c_->Register(Reg("ns/b/train"), Caller::Tcp("127.0.0.1"));
  ASSERT_FALSE(tcp);
  ExpectCode(tcp.error(), core::ErrorCode::kPermissionDenied, "unix socket");
  const StepSample step{32, 0.1};
  EXPECT_FALSE(c_->Report("ns/a/train", {&step, 1}, 0, InPod(kPodB)));
  EXPECT_TRUE(c_->Report("ns/a/train", {&step, 1}, 0, InPod(kPodA)));
}

TEST_F(IdentityTest, WithContainersTheAdmitCheckSeesTheCaller) {
  options_.identity = CoordinatorOptions::Identity::kContainers;
  std::vector<std::string> asked_by;
  options_.admit = [&](const Registration&, const Caller& c) -> std::optional<std::string> {
    asked_by.push_back(c.Principal());
    if (c.cgroup.container_id == kContainer) return std::nullopt;
    return "not reserved by " + c.Describe();
  };
  Make();
  auto host = c_->Register(Reg("j"), HostProcess(1000));
  ASSERT_FALSE(host);
  ExpectCode(host.error(), core::ErrorCode::kPermissionDenied, "not in a container");
  Caller container = HostProcess(1000);
  container.cgroup = ParseCgroup("0::/system.slice/docker-" + kContainer + ".scope\n");
  EXPECT_TRUE(c_->Register(Reg("j"), container));
  Caller another = container;
  another.cgroup = ParseCgroup("0::/system.slice/docker-" + std::string(64, 'b') + ".scope\n");
  auto refused = c_->Register(Reg("k"), another);
  ASSERT_FALSE(refused);
  ExpectCode(refused.error(), core::ErrorCode::kPermissionDenied, "not reserved by");
  EXPECT_EQ(asked_by.size(), 2u);
}

TEST_F(IdentityTest, JobLimitsPerGpuAndPerNodeAreClearRefusals) {
  options_.max_jobs_per_gpu = 2;
  options_.max_jobs = 3;
  Make();
  ASSERT_TRUE(c_->Register(Reg("j1")));
  ASSERT_TRUE(c_->Register(Reg("j2")));
  auto third = c_->Register(Reg("j3"));
  ASSERT_FALSE(third);
  ExpectCode(third.error(), core::ErrorCode::kUnavailable, "GPU GPU-0 already has 2 jobs");
  EXPECT_TRUE(c_->Register(Reg("j2", 64))) << "a job already there may register again";
  ASSERT_TRUE(c_->Register(Reg("j3", 32, "GPU-1")));
  auto fourth = c_->Register(Reg("j4", 32, "GPU-2"));
  ASSERT_FALSE(fourth);
  ExpectCode(fourth.error(), core::ErrorCode::kUnavailable, "node n1 already has 3 jobs");
}

// One tenant cannot take the node's whole share of jobs (without a membership source anyone
// may register): the node's other callers and its administrator still can.
TEST_F(IdentityTest, OneCallerHoldsAtMostItsShareOfJobs) {
  options_.max_jobs_per_caller = 2;
  Make();
  const Caller flood = HostProcess(1000), other = HostProcess(1001);
  ASSERT_TRUE(c_->Register(Reg("f1", 32, "GPU-0"), flood));
  ASSERT_TRUE(c_->Register(Reg("f2", 32, "GPU-1"), flood));
  auto third = c_->Register(Reg("f3", 32, "GPU-2"), flood);
  ASSERT_FALSE(third);
  ExpectCode(third.error(), core::ErrorCode::kUnavailable,
             "already holds 2 jobs (the limit, --max-jobs-per-caller)");
  EXPECT_TRUE(c_->Register(Reg("f2", 64, "GPU-1"), flood)) << "its own job may register again";
  EXPECT_TRUE(c_->Register(Reg("o1", 32, "GPU-2"), other));
  EXPECT_TRUE(c_->Register(Reg("n1", 32, "GPU-2"), Caller::Node()));
  EXPECT_TRUE(c_->Register(Reg("n2", 32, "GPU-3"), Caller::Node()));
  EXPECT_TRUE(c_->Register(Reg("n3", 32, "GPU-3"), Caller::Node()));
  ASSERT_TRUE(c_->Leave("f1", flood));
  EXPECT_TRUE(c_->Register(Reg("f3", 32, "GPU-2"), flood)) << "a job left: room again";
}

TEST_F(IdentityTest, AControlCharacterInAnIdIsRefused) {
  Make();
  auto forged = c_->Register(Reg("j\nlevel=error msg=\"forged\""));
  ASSERT_FALSE(forged);
  ExpectCode(forged.error(), core::ErrorCode::kInvalidArgument, "without control characters");
  Registration r = Reg("j");
  r.cls = "a\r";
  EXPECT_FALSE(c_->Register(r));
}

TEST_F(IdentityTest, ARestartForgetsJobsGoneLongerThanTheJobTimeoutAndKeepsOwners) {
  Make();
  ASSERT_TRUE(c_->Register(Reg("old"), HostProcess(1000)));
  unix_now_ += 20;
  ASSERT_TRUE(c_->Register(Reg("recent"), HostProcess(1001)));
  unix_now_ += 15;  // "old" last seen 35 s ago, "recent" 15 s ago; the timeout is 30 s
  EXPECT_EQ(RestoredJobs(sink_.Pairs()), std::vector<std::string>{"recent"});
  EXPECT_EQ(sink_.kv.count("/gpumux/nodes/n1/jobs/old"), 0u) << "the stale key is deleted";
  const StepSample step{32, 0.1};
  EXPECT_FALSE(c_->Report("recent", {&step, 1}, 0, HostProcess(1000)))
      << "the owner is restored with the job";
  EXPECT_TRUE(c_->Report("recent", {&step, 1}, 0, HostProcess(1001)));
}

// A restart on a node whose GPU set changed (a GPU replaced): the jobs stored for the GPU it
// no longer has are dropped and their keys deleted, as stale ones are; the others come back.
// A stored `seen` below 0 (a store another program wrote) would overflow the next report's
// arithmetic: that key is skipped.
TEST_F(IdentityTest, ARestartDropsTheJobsOfAGpuTheNodeNoLongerHas) {
  Make();
  ASSERT_TRUE(c_->Register(Reg("kept", 32, "GPU-0")));
  ASSERT_TRUE(c_->Register(Reg("gone", 32, "GPU-9")));
  auto stored = sink_.Pairs();
  stored.emplace_back("/gpumux/nodes/n1/jobs/neg",
                      R"({"job":"neg","class":"a","batch_size":32,"gpus":["GPU-0"],)"
                      R"("seen":-9223372036854775808})");
  options_.node_gpus = {"GPU-0", "GPU-1"};
  EXPECT_EQ(RestoredJobs(stored), std::vector<std::string>{"kept"});
  EXPECT_EQ(sink_.kv.count("/gpumux/nodes/n1/jobs/gone"), 0u) << "its key is deleted";
  EXPECT_EQ(sink_.kv.count("/gpumux/nodes/n1/jobs/kept"), 1u);
}

// A target is clamped into [min_batch, max_batch] and stored; a restart reads a stored target
// only within 1..kMaxProfileBatch, so the bounds are held to that too.
TEST_F(IdentityTest, BatchBoundsBeyondTheProfilesLargestBatchAreRefused) {
  Make();
  Registration r = Reg("j");
  r.min_batch = policy::kMaxProfileBatch + 1;
  auto refused = c_->Register(r);
  ASSERT_FALSE(refused);
  ExpectCode(refused.error(), core::ErrorCode::kInvalidArgument, "max_batch <= ");
  r.min_batch = 0;
  r.max_batch = policy::kMaxProfileBatch;
  EXPECT_TRUE(c_->Register(r));
}

// The repro coordinator-job-flood's store: left by a run without limits, it must not come back
// whole (300,000 jobs kept the old restart busy for minutes).
TEST_F(IdentityTest, ARestartKeepsNoMoreJobsThanTheLimits) {
  Make();
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(c_->Register(Reg("a" + std::to_string(i), 32, "GPU-0")));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(c_->Register(Reg("b" + std::to_string(i), 32, "GPU-1")));
  const auto stored = sink_.Pairs();
  options_.max_jobs_per_gpu = 4;
  options_.max_jobs = 6;
  Make();
  c_->Restore(stored);
  std::map<std::string, std::size_t> per_gpu;
  std::size_t total = 0;
  for (const auto& g : c_->State()) {
    per_gpu[g.uuid] = g.jobs.size();
    total += g.jobs.size();
  }
  EXPECT_EQ(per_gpu["GPU-0"], 4u);
  EXPECT_EQ(total, 6u);
  std::size_t keys = 0;
  for (const auto& [key, value] : sink_.kv) keys += key.find("/jobs/") != std::string::npos;
  EXPECT_EQ(keys, 6u) << "the dropped jobs' keys are deleted";
}

}  // namespace
}  // namespace gpumux::coordinator
