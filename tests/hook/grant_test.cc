// hook::GrantGpus and hook::ReleaseGpus against a real ledger file, and the checks that keep the
// OCI runtime path and a device plugin from both granting GPUs on one node (coexistence.h).
#include "gpumux/hook/grant.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "gpumux/hook/coexistence.h"
#include "tests/hook/hook_fixtures.h"
#include "tests/testing/builders.h"
#include "tests/testing/process.h"

namespace gpumux::hook {
namespace {

using testing_fixtures::Held;

namespace fs = std::filesystem;

Inventory Host(int gpus) {
  Inventory inv;
  inv.source = "test-host";
  for (int i = 0; i < gpus; ++i) {
    HostGpu g;
    g.index = i;
    g.uuid = test::Numbered("GPU-", i);
    inv.gpus.push_back(g);
  }
  return inv;
}

GpuAsk Reserve(int count) {
  GpuAsk a;
  a.kind = AskKind::kReserve;
  a.count = count;
  a.source = "HOUDINI_GPU_REQUESTED=" + std::to_string(count);
  return a;
}

ProcessRef Me() { return CurrentProcess(::getpid()); }

// This process's pid with another start time: a holder that died and whose pid was reused.
ProcessRef Dead() {
  ProcessRef p = Me();
  p.start_time += 1;
  return p;
}

class GrantTest : public ::testing::Test {
 protected:
  ReservationFile Ledger() {
    auto f = store_.Read();
    EXPECT_TRUE(f.has_value()) << f.error().message;
    return f ? *f : ReservationFile{};
  }
  const Reservation* Find(const ReservationFile& f, const std::string& container) {
    for (const Reservation& r : f.reservations) {
      if (r.container == container) return &r;
    }
    return nullptr;
  }
  void Put(Reservation r) {
    ASSERT_TRUE(store_
                    .Update([&](ReservationFile& f) -> core::Result<bool> {
                      f.reservations.push_back(r);
                      return true;
                    })
                    .has_value());
  }

  test::ScratchDir dir_;
  ReservationStore store_{(dir_.path() / "state").string()};
  Inventory host_ = Host(4);
};

TEST_F(GrantTest, NoAskGrantsNothingAndLeavesTheLedgerAlone) {
  const auto g = GrantGpus("c1", GpuAsk{}, host_, store_, Me(), "pending");
  ASSERT_TRUE(g.has_value()) << g.error().message;
  EXPECT_TRUE(g->gpus.empty());
  EXPECT_FALSE(g->reserved);
  EXPECT_FALSE(fs::exists(store_.path()));
}

TEST_F(GrantTest, AllSharesEveryGpuWithoutReserving) {
  GpuAsk all;
  all.kind = AskKind::kAll;
  all.source = "HOUDINI_GPU_ENABLED=true";
  const auto g = GrantGpus("c1", all, host_, store_, Me(), "pending");
  ASSERT_TRUE(g.has_value()) << g.error().message;
  EXPECT_EQ(g->gpus, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_FALSE(g->reserved);
  EXPECT_EQ(g->message, "container 'c1' gets all 4 GPUs, shared (HOUDINI_GPU_ENABLED=true)");
  EXPECT_FALSE(fs::exists(store_.path()));
}

// The reproducer oci-runtime-shared-ask-ignores-reservation: a container whose own env says
// NVIDIA_VISIBLE_DEVICES=all (or names a GPU) was handed the GPU another container reserved.
TEST_F(GrantTest, ASharedAskNeverReachesAGpuAnotherContainerReserved) {
  Put(Held("other", {1}, Me()));
  GpuAsk all;
  all.kind = AskKind::kAll;
  all.source = "NVIDIA_VISIBLE_DEVICES=all";
  auto g = GrantGpus("c1", all, host_, store_, Me(), "pending");
  ASSERT_TRUE(g.has_value()) << g.error().message;
  EXPECT_EQ(g->gpus, (std::vector<int>{0, 2, 3}));
  EXPECT_EQ(g->message,
            "container 'c1' gets GPUs 0,2,3, shared: the others are reserved "
            "(NVIDIA_VISIBLE_DEVICES=all)");
  GpuAsk listed;
  listed.kind = AskKind::kListed;
  listed.listed = {"1"};
  listed.source = "NVIDIA_VISIBLE_DEVICES=1";
  g = GrantGpus("c2", listed, host_, store_, Me(), "pending");
  ASSERT_FALSE(g.has_value());
  EXPECT_EQ(g.error().code, core::ErrorCode::kFailedPrecondition);
  EXPECT_EQ(g.error().message.rfind("container 'c2' asks for GPU 1 (NVIDIA_VISIBLE_DEVICES=1), "
                                    "which 'other' has reserved since ",
                                    0),
            0u)
      << g.error().message;
  EXPECT_TRUE(GrantGpus("other", listed, host_, store_, Me(), "pending").has_value())
      << "its own reservation is no obstacle";
  for (int k : {0, 2, 3}) Put(Held("o" + std::to_string(k), {k}, Me()));
  g = GrantGpus("c1", all, host_, store_, Me(), "pending");
  ASSERT_FALSE(g.has_value());
  EXPECT_EQ(g.error().message,
            "container 'c1' asks for every GPU (NVIDIA_VISIBLE_DEVICES=all), but other "
            "containers have reserved all 4 GPUs");
  EXPECT_EQ(Ledger().reservations.size(), 4u);
}

TEST_F(GrantTest, ASharedAskIsGrantedTheGpusOfReservationsWhoseHolderIsGone) {
  Put(Held("gone", {1}, Dead()));
  GpuAsk all;
  all.kind = AskKind::kAll;
  all.source = "NVIDIA_VISIBLE_DEVICES=all";
  const auto g = GrantGpus("c1", all, host_, store_, Me(), "pending");
  ASSERT_TRUE(g.has_value()) << g.error().message;
  EXPECT_EQ(g->gpus, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_TRUE(Ledger().reservations.empty()) << "reclaimed on the way";
}

TEST_F(GrantTest, ListedGivesExactlyThoseGpusShared) {
  GpuAsk listed;
  listed.kind = AskKind::kListed;
  listed.listed = {"GPU-2", "0"};
  listed.source = "NVIDIA_VISIBLE_DEVICES=GPU-2,0";
  const auto g = GrantGpus("c1", listed, host_, store_, Me(), "pending");
  ASSERT_TRUE(g.has_value()) << g.error().message;
  EXPECT_EQ(g->gpus, (std::vector<int>{0, 2}));
  EXPECT_FALSE(g->reserved);
  EXPECT_EQ(g->message, "container 'c1' gets GPUs 0,2, shared (NVIDIA_VISIBLE_DEVICES=GPU-2,0)");
  EXPECT_FALSE(fs::exists(store_.path()));
}

// One GPU is "GPU", never "1 GPUs": a new reservation, the same one found again, a single
// host GPU shared.
TEST_F(GrantTest, MessagesAboutOneGpuAreSingular) {
  const auto made = GrantGpus("c1", Reserve(1), host_, store_, Me(), "pending");
  ASSERT_TRUE(made.has_value()) << made.error().message;
  const std::string gpu = JoinIndices(made->gpus);
  EXPECT_EQ(made->message, "Reserved GPU " + gpu + " for 'c1' (HOUDINI_GPU_REQUESTED=1)");
  const auto found = GrantGpus("c1", Reserve(1), host_, store_, Me(), "running");
  ASSERT_TRUE(found.has_value()) << found.error().message;
  EXPECT_EQ(found->message.rfind("Found existing reservation for 'c1': GPU " + gpu + " (since ", 0),
            0u)
      << found->message;
  const auto more = GrantGpus("c1", Reserve(2), host_, store_, Me(), "running");
  ASSERT_FALSE(more.has_value());
  EXPECT_NE(more.error().message.find("container 'c1' already holds GPU " + gpu + " but"),
            std::string::npos)
      << more.error().message;
  ASSERT_TRUE(ReleaseGpus("c1", store_).has_value());

  GpuAsk all;
  all.kind = AskKind::kAll;
  all.source = "NVIDIA_VISIBLE_DEVICES=all";
  const auto shared = GrantGpus("c2", all, Host(1), store_, Me(), "pending");
  ASSERT_TRUE(shared.has_value()) << shared.error().message;
  EXPECT_EQ(shared->message,
            "container 'c2' gets the host's one GPU, shared (NVIDIA_VISIBLE_DEVICES=all)");
  GpuAsk listed;
  listed.kind = AskKind::kListed;
  listed.listed = {"3"};
  listed.source = "NVIDIA_VISIBLE_DEVICES=3";
  const auto one = GrantGpus("c3", listed, host_, store_, Me(), "pending");
  ASSERT_TRUE(one.has_value()) << one.error().message;
  EXPECT_EQ(one->message, "container 'c3' gets GPU 3, shared (NVIDIA_VISIBLE_DEVICES=3)");
  ASSERT_TRUE(GrantGpus("c1", Reserve(1), Host(1), store_, Me(), "pending").has_value());
  const auto none = GrantGpus("c2", all, Host(1), store_, Me(), "pending");
  ASSERT_FALSE(none.has_value());
  EXPECT_EQ(none.error().message,
            "container 'c2' asks for every GPU (NVIDIA_VISIBLE_DEVICES=all), but other "
            "containers have reserved the host's one GPU");
}

TEST_F(GrantTest, ListedNamingAnUnknownGpuIsAnError) {
  GpuAsk listed;
  listed.kind = AskKind::kListed;
  listed.listed = {"7"};
  const auto g = GrantGpus("c1", listed, host_, store_, Me(), "pending");
  ASSERT_FALSE(g.has_value());
  EXPECT_EQ(g.error().message,
            "NVIDIA_VISIBLE_DEVICES names GPU '7', but the host has 4 GPUs (test-host)");
}

TEST_F(GrantTest, AReservationIsWrittenWithItsHolderStateAndTime) {
  const std::int64_t now = static_cast<std::int64_t>(std::time(nullptr));
  const auto g = GrantGpus("c1", Reserve(2), host_, store_, Me(), "pending");
  ASSERT_TRUE(g.has_value()) << g.error().message;
  EXPECT_EQ(g->gpus.size(), 2u);
  EXPECT_TRUE(std::is_sorted(g->gpus.begin(), g->gpus.end()));
  EXPECT_TRUE(g->reserved);
  EXPECT_FALSE(g->existing);
  EXPECT_EQ(g->message,
            "Reserved GPUs " + JoinIndices(g->gpus) + " for 'c1' (HOUDINI_GPU_REQUESTED=2)")
      << "a new reservation is not 'found'";
  const ReservationFile f = Ledger();
  ASSERT_EQ(f.reservations.size(), 1u);
  const Reservation& r = f.reservations[0];
  EXPECT_EQ(r.container, "c1");
  EXPECT_EQ(r.gpus, g->gpus);
  EXPECT_EQ(r.state, "pending");
  EXPECT_EQ(r.holder.pid, Me().pid);
  EXPECT_EQ(r.holder.start_time, Me().start_time);
  // UTC ISO 8601, e.g. 2026-11-21T01:21:20Z: digits everywhere but the separators.
  ASSERT_EQ(r.since.size(), 20U) << r.since;
  for (std::size_t i = 0; i < r.since.size(); ++i) {
    const char want = i == 4 || i == 7     ? '-'
                      : i == 10            ? 'T'
                      : i == 13 || i == 16 ? ':'
                      : i == 19            ? 'Z'
                                           : '0';
    if (want == '0') {
      EXPECT_TRUE(r.since[i] >= '0' && r.since[i] <= '9') << r.since;
    } else {
      EXPECT_EQ(r.since[i], want) << r.since;
    }
  }
  EXPECT_GE(r.since_unix, now);
  EXPECT_LE(r.since_unix, now + 60);
}

TEST_F(GrantTest, TheSameContainerAgainGetsTheSameGpusAndANewHolder) {
  const auto first = GrantGpus("c1", Reserve(2), host_, store_, Me(), "pending");
  ASSERT_TRUE(first.has_value()) << first.error().message;
  const auto other = GrantGpus("c2", Reserve(1), host_, store_, Me(), "pending");
  ASSERT_TRUE(other.has_value()) << other.error().message;
  const ProcessRef init{1, CurrentProcess(1).start_time};
  const auto again = GrantGpus("c1", Reserve(2), host_, store_, init, "running");
  ASSERT_TRUE(again.has_value()) << again.error().message;
  EXPECT_EQ(again->gpus, first->gpus);
  EXPECT_TRUE(again->reserved);
  EXPECT_TRUE(again->existing);
  EXPECT_EQ(
      again->message.rfind(
          "Found existing reservation for 'c1': GPUs " + JoinIndices(first->gpus) + " (since ", 0),
      0u)
      << again->message;
  const ReservationFile f = Ledger();
  ASSERT_EQ(f.reservations.size(), 2u) << "no second entry for c1";
  const Reservation* r = Find(f, "c1");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->state, "running");
  EXPECT_EQ(r->holder.pid, 1);
}

TEST_F(GrantTest, TheSameContainerAskingForADifferentCountIsAnError) {
  ASSERT_TRUE(GrantGpus("c1", Reserve(2), host_, store_, Me(), "pending").has_value());
  const auto g = GrantGpus("c1", Reserve(3), host_, store_, Me(), "running");
  ASSERT_FALSE(g.has_value());
  EXPECT_EQ(g.error().code, core::ErrorCode::kAlreadyExists);
  EXPECT_NE(g.error().message.find("container 'c1' already holds GPUs"), std::string::npos)
      << g.error().message;
  EXPECT_NE(g.error().message.find("now asks for 3"), std::string::npos) << g.error().message;
}

TEST_F(GrantTest, ContainersNeverShareAReservedGpu) {
  std::set<int> seen;
  for (int c = 0; c < 4; ++c) {
    const auto g = GrantGpus(test::Numbered("c", c), Reserve(1), host_, store_, Me(), "running");
    ASSERT_TRUE(g.has_value()) << g.error().message;
    ASSERT_EQ(g->gpus.size(), 1u);
    EXPECT_TRUE(seen.insert(g->gpus[0]).second) << "GPU " << g->gpus[0] << " granted twice";
  }
  EXPECT_EQ(seen, (std::set<int>{0, 1, 2, 3}));
}

TEST_F(GrantTest, NotEnoughFreeGpusNamesTheAskTheFreeCountAndTheHolders) {
  Put(Held("render-a", {0, 1}, Me()));
  Put(Held("render-b", {3}, Me()));
  const auto g = GrantGpus("c9", Reserve(2), host_, store_, Me(), "pending");
  ASSERT_FALSE(g.has_value());
  EXPECT_EQ(g.error().code, core::ErrorCode::kFailedPrecondition);
  const std::string& m = g.error().message;
  EXPECT_NE(m.find("container 'c9' asks for 2 GPUs (HOUDINI_GPU_REQUESTED=2)"), std::string::npos)
      << m;
  EXPECT_NE(m.find("1 of 4"), std::string::npos) << m;
  EXPECT_NE(m.find("GPUs 0,1 reserved by 'render-a' since 2024-05-01T10:00:00Z"), std::string::npos)
      << m;
  EXPECT_NE(m.find("GPU 3 reserved by 'render-b' since 2024-05-01T10:00:00Z"), std::string::npos)
      << m;
  EXPECT_EQ(Ledger().reservations.size(), 2u) << "a refused ask writes nothing";
}

TEST_F(GrantTest, AskingForMoreGpusThanTheHostHasSaysHowManyItHas) {
  const auto g = GrantGpus("c1", Reserve(5), host_, store_, Me(), "pending");
  ASSERT_FALSE(g.has_value());
  EXPECT_EQ(g.error().message,
            "container 'c1' asks for 5 GPUs (HOUDINI_GPU_REQUESTED=5), but the host has only 4 "
            "(test-host)");
}

TEST_F(GrantTest, AHostWithoutGpusRefusesAReservation) {
  const Inventory none = Host(0);
  const auto g = GrantGpus("c1", Reserve(1), none, store_, Me(), "pending");
  ASSERT_FALSE(g.has_value());
  EXPECT_NE(g.error().message.find("the host has only 0"), std::string::npos) << g.error().message;
}

TEST_F(GrantTest, AReservationWhoseHolderIsGoneIsReclaimed) {
  Put(Held("crashed", {0, 1, 2}, Dead()));
  Put(Held("alive", {3}, Me()));
  const auto g = GrantGpus("c2", Reserve(3), host_, store_, Me(), "pending");
  ASSERT_TRUE(g.has_value()) << g.error().message;
  EXPECT_EQ(g->gpus, (std::vector<int>{0, 1, 2}));
  const ReservationFile f = Ledger();
  EXPECT_EQ(Find(f, "crashed"), nullptr) << "the dead reservation is dropped";
  EXPECT_NE(Find(f, "alive"), nullptr) << "a live one is kept";
  EXPECT_NE(Find(f, "c2"), nullptr);
}

TEST_F(GrantTest, AHolderThatNeverExistedIsGone) {
  Put(Held("ghost", {0, 1, 2, 3}, ProcessRef{0, 0}));
  const auto g = GrantGpus("c2", Reserve(4), host_, store_, Me(), "pending");
  ASSERT_TRUE(g.has_value()) << g.error().message;
  EXPECT_EQ(g->gpus.size(), 4u);
}

TEST_F(GrantTest, AContainerWhoseOwnHolderDiedGetsItsReservationBack) {
  Put(Held("c1", {2}, Dead()));
  const auto g = GrantGpus("c1", Reserve(1), host_, store_, Me(), "running");
  ASSERT_TRUE(g.has_value()) << g.error().message;
  EXPECT_EQ(g->gpus, std::vector<int>{2});
  EXPECT_TRUE(g->existing);
}

// The host lost a GPU (or the ledger was edited) while a live reservation names it: refused,
// naming the ledger, the container and the GPU, and the ledger is left for a person to look at.
TEST_F(GrantTest, ALiveReservationOfAGpuTheHostDoesNotHaveIsRefusedAndTheLedgerKept) {
  Put(Held("old-host", {7}, Me()));
  const std::string before = test::ReadFileText(store_.path());
  const auto g = GrantGpus("c1", Reserve(1), host_, store_, Me(), "pending");
  ASSERT_FALSE(g.has_value());
  EXPECT_EQ(g.error().message,
            store_.path() +
                ": the reservation of container 'old-host' names GPU 7, but the host "
                "has 4 GPUs (test-host); the ledger is left as it is: remove that "
                "reservation once its container is gone");
  EXPECT_EQ(test::ReadFileText(store_.path()), before);
}

// The reproducer: the container's own reservation names a GPU beyond the host's; handing it
// back would index past the inventory.
TEST_F(GrantTest, TheContainersOwnReservationOfAGpuTheHostDoesNotHaveIsRefused) {
  const Inventory two = Host(2);
  for (const ProcessRef holder : {Me(), Dead()}) {
    test::ScratchDir dir;
    ReservationStore store((dir.path() / "state").string());
    ASSERT_TRUE(store
                    .Update([&](ReservationFile& f) -> core::Result<bool> {
                      f.reservations.push_back(Held("c1", {2}, holder));
                      return true;
                    })
                    .has_value());
    const std::string before = test::ReadFileText(store.path());
    const auto g = GrantGpus("c1", Reserve(1), two, store, Me(), "running");
    ASSERT_FALSE(g.has_value());
    EXPECT_NE(g.error().message.find(store.path() + ": the reservation of container 'c1' names "
                                                    "GPU 2, but the host has 2 GPUs"),
              std::string::npos)
        << g.error().message;
    EXPECT_EQ(test::ReadFileText(store.path()), before);
  }
}

// A dead holder's reservation is reclaimed before the check: a GPU the host lost is no reason
// to refuse once nobody holds it.
TEST_F(GrantTest, ADeadReservationOfAGpuTheHostNoLongerHasIsReclaimed) {
  const Inventory three = Host(3);
  Put(Held("a", {0, 1}, Me()));
  Put(Held("old-host", {3}, Dead()));
  const auto g = GrantGpus("c1", Reserve(1), three, store_, Me(), "pending");
  ASSERT_TRUE(g.has_value()) << g.error().message;
  EXPECT_EQ(g->gpus, std::vector<int>{2});
  EXPECT_EQ(Find(Ledger(), "old-host"), nullptr);
}

TEST_F(GrantTest, ALedgerGivingOneGpuToTwoContainersIsReportedAsInconsistent) {
  Put(Held("a", {1}, Me()));
  Put(Held("b", {1}, Me()));
  const auto g = GrantGpus("c1", Reserve(1), host_, store_, Me(), "pending");
  ASSERT_FALSE(g.has_value());
  EXPECT_EQ(g.error().message.rfind(store_.path() + ": inconsistent ledger: ", 0), 0u)
      << g.error().message;
}

TEST_F(GrantTest, AMalformedLedgerIsAnErrorNamingTheFile) {
  fs::create_directories(dir_.path() / "state");
  dir_.Write("state/reservations.json", "{ not json");
  const auto g = GrantGpus("c1", Reserve(1), host_, store_, Me(), "pending");
  ASSERT_FALSE(g.has_value());
  EXPECT_EQ(g.error().message.rfind(store_.path() + ": malformed reservation ledger", 0), 0u)
      << g.error().message;
  EXPECT_EQ(test::ReadFileText(store_.path()), "{ not json");
}

TEST_F(GrantTest, ReleaseDropsOnlyThatContainersReservation) {
  ASSERT_TRUE(GrantGpus("c1", Reserve(2), host_, store_, Me(), "running").has_value());
  ASSERT_TRUE(GrantGpus("c2", Reserve(1), host_, store_, Me(), "running").has_value());
  const auto released = ReleaseGpus("c1", store_);
  ASSERT_TRUE(released.has_value()) << released.error().message;
  EXPECT_TRUE(*released);
  const ReservationFile f = Ledger();
  ASSERT_EQ(f.reservations.size(), 1u);
  EXPECT_EQ(f.reservations[0].container, "c2");
  const auto twice = ReleaseGpus("c1", store_);
  ASSERT_TRUE(twice.has_value());
  EXPECT_FALSE(*twice);
  // The GPUs are free again.
  const auto g = GrantGpus("c3", Reserve(3), host_, store_, Me(), "running");
  ASSERT_TRUE(g.has_value()) << g.error().message;
}

TEST_F(GrantTest, ReleasingWithoutALedgerIsNotAnError) {
  const auto released = ReleaseGpus("nobody", store_);
  ASSERT_TRUE(released.has_value()) << released.error().message;
  EXPECT_FALSE(*released);
  EXPECT_FALSE(fs::exists(store_.path()));
}

// Twelve processes ask for one GPU each at the same time on a 4-GPU host; their holder is this
// test process, which stays alive, so nothing is reclaimed: exactly four win, on four GPUs.
TEST_F(GrantTest, ConcurrentGrantsFromManyProcessesNeverShareAGpu) {
  constexpr int kProcesses = 12;
  const ProcessRef holder = Me();
  std::vector<pid_t> children;
  std::fflush(nullptr);
  for (int p = 0; p < kProcesses; ++p) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ReservationStore store(store_.path().substr(0, store_.path().rfind('/')));
      const auto g = GrantGpus(test::Numbered("c", p), Reserve(1), host_, store, holder, "running");
      if (g) ::_exit(0);
      const bool clear = g.error().message.find("0 of 4") != std::string::npos;
      ::_exit(clear ? 3 : 4);
    }
    children.push_back(pid);
  }
  int granted = 0;
  int refused = 0;
  for (pid_t pid : children) {
    const test::ProcessExit e = test::WaitProcess(pid);
    if (e.Exited(0)) {
      ++granted;
    } else if (e.Exited(3)) {
      ++refused;
    } else {
      ADD_FAILURE() << "a grant ended with " << ::testing::PrintToString(e);
    }
  }
  EXPECT_EQ(granted, 4);
  EXPECT_EQ(refused, kProcesses - 4);
  std::set<int> gpus;
  const ReservationFile f = Ledger();
  for (const Reservation& r : f.reservations) {
    for (int g : r.gpus) EXPECT_TRUE(gpus.insert(g).second) << "GPU " << g << " twice";
  }
  EXPECT_EQ(f.reservations.size(), 4u);
  EXPECT_EQ(gpus, (std::set<int>{0, 1, 2, 3}));
}

// --- The pod behind a container id, and the device plugin beside the ledger ---

TEST_F(GrantTest, TheReservationRecordsThePodAndARefusalNamesItsHolderByIt) {
  const std::string id(64, 'a');
  const auto g = GrantGpus(id, Reserve(4), host_, store_, Me(), "running",
                           {PodContainer{"render", "blender-7f9c", "worker"}, ""});
  ASSERT_TRUE(g.has_value()) << g.error().message;
  const ReservationFile f = Ledger();
  ASSERT_EQ(f.reservations.size(), 1u);
  EXPECT_EQ(f.reservations[0].container, id);
  EXPECT_EQ(f.reservations[0].pod.ns, "render");
  EXPECT_EQ(f.reservations[0].pod.pod, "blender-7f9c");
  EXPECT_EQ(f.reservations[0].pod.container, "worker");
  EXPECT_EQ(f.reservations[0].holder_pid_ns, OwnPidNamespace());
  const auto refused = GrantGpus(std::string(64, 'b'), Reserve(1), host_, store_, Me(), "pending");
  ASSERT_FALSE(refused.has_value());
  EXPECT_NE(refused.error().message.find("GPUs 0,1,2,3 reserved by 'render/blender-7f9c/worker' "
                                         "since "),
            std::string::npos)
      << refused.error().message;
  EXPECT_EQ(refused.error().message.find(id), std::string::npos)
      << "the holder's 64-hex id says nothing to a person: " << refused.error().message;
}

TEST_F(GrantTest, ANewReservationIsRefusedWhileAGpumuxDevicePluginServesTheNode) {
  const testing_fixtures::ShortDir sockets;
  const fs::path plugins = sockets.path() / "device-plugins";
  fs::create_directories(plugins);
  const GrantContext context{{}, plugins.string()};
  testing_fixtures::ListeningSocket other((plugins / "nvidia-gpu.sock").string());
  ASSERT_TRUE(GrantGpus("c0", Reserve(1), host_, store_, Me(), "running", context).has_value())
      << "another vendor's plugin is not gpumux's";
  ASSERT_TRUE(ReleaseGpus("c0", store_).has_value());

  testing_fixtures::ListeningSocket plugin((plugins / "gpumux-gpu-mem.sock").string());
  const auto g = GrantGpus("c1", Reserve(1), host_, store_, Me(), "pending", context);
  ASSERT_FALSE(g.has_value());
  EXPECT_EQ(g.error().code, core::ErrorCode::kFailedPrecondition);
  EXPECT_EQ(g.error().message, "a gpumux device plugin serves this node (" +
                                   (plugins / "gpumux-gpu-mem.sock").string() +
                                   "); the OCI runtime path keeps its own GPU ledger and would "
                                   "grant GPUs twice; use one of the two");
  EXPECT_TRUE(Ledger().reservations.empty());
  // A shared ask would reach GPUs the plugin granted to pods: refused the same way.
  GpuAsk all;
  all.kind = AskKind::kAll;
  const auto shared = GrantGpus("c2", all, host_, store_, Me(), "pending", context);
  ASSERT_FALSE(shared.has_value());
  EXPECT_NE(shared.error().message.find("a gpumux device plugin serves this node"),
            std::string::npos);

  // A plugin that was killed leaves its socket behind, refusing connections: not serving.
  plugin.Close();
  ASSERT_TRUE(fs::exists(plugins / "gpumux-gpu-mem.sock"));
  const auto after = GrantGpus("c1", Reserve(1), host_, store_, Me(), "pending", context);
  EXPECT_TRUE(after.has_value()) << after.error().message;
}

TEST_F(GrantTest, AContainerThatAlreadyHoldsItsReservationGetsItBackBeforeAnyPluginCheck) {
  ASSERT_TRUE(GrantGpus("c1", Reserve(1), host_, store_, Me(), "pending").has_value());
  const testing_fixtures::ShortDir sockets;
  const fs::path plugins = sockets.path() / "device-plugins";
  fs::create_directories(plugins);
  testing_fixtures::ListeningSocket plugin((plugins / "gpumux-gpu.sock").string());
  const auto again =
      GrantGpus("c1", Reserve(1), host_, store_, Me(), "running", {{}, plugins.string()});
  ASSERT_TRUE(again.has_value()) << again.error().message;
  EXPECT_TRUE(again->existing);
}

struct LedgerCase {
  const char* name;
  std::vector<Reservation> reservations;
  std::string message;  // "" = no conflict
};

class ActiveReservations : public ::testing::TestWithParam<LedgerCase> {};

Reservation WithNamespace(Reservation r, std::string ns) {
  r.holder_pid_ns = std::move(ns);
  return r;
}

TEST_P(ActiveReservations, KeepTheDevicePluginFromStarting) {
  test::ScratchDir dir;
  ReservationStore store(dir.path().string());
  for (const Reservation& r : GetParam().reservations) {
    ASSERT_TRUE(store
                    .Update([&](ReservationFile& f) -> core::Result<bool> {
                      f.reservations.push_back(r);
                      return true;
                    })
                    .has_value());
  }
  const auto checked = CheckNoActiveReservations(dir.path().string());
  if (GetParam().message.empty()) {
    EXPECT_TRUE(checked.has_value()) << checked.error().message;
    return;
  }
  ASSERT_FALSE(checked.has_value());
  EXPECT_EQ(checked.error().code, core::ErrorCode::kFailedPrecondition);
  EXPECT_NE(checked.error().message.find(GetParam().message), std::string::npos)
      << checked.error().message;
  EXPECT_NE(checked.error().message.find(store.path()), std::string::npos);
  EXPECT_NE(checked.error().message.find("would grant GPUs twice; use one of the two"),
            std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(
    Table, ActiveReservations,
    ::testing::Values(
        LedgerCase{"an_empty_ledger", {}, ""},
        LedgerCase{"only_reservations_whose_holder_is_gone", {Held("c1", {0}, Dead())}, ""},
        LedgerCase{"a_running_container",
                   {Held("c1", {0, 1}, Me()), Held("c2", {2}, Dead())},
                   "holds 1 live reservation (GPUs 0,1 reserved by 'c1' since "
                   "2024-05-01T10:00:00Z)"},
        LedgerCase{"a_holder_in_another_pid_namespace",
                   {WithNamespace(Held("c1", {3}, Dead()), "pid:[1]")},
                   "GPU 3 reserved by 'c1' since 2024-05-01T10:00:00Z (its holder, pid "},
        LedgerCase{"more_than_four",
                   {Held("a", {0}, Me()), Held("b", {1}, Me()), Held("c", {2}, Me()),
                    Held("d", {3}, Me()), Held("e", {4}, Me()), Held("f", {5}, Me())},
                   "holds 6 live reservations (GPU 0 reserved by 'a'"}),
    test::CaseName());

TEST(ActiveReservationsCheck, AFolderWithoutALedgerIsNoConflictAndIsNotCreated) {
  test::ScratchDir dir;
  EXPECT_TRUE(CheckNoActiveReservations((dir.path() / "absent").string()).has_value());
  EXPECT_FALSE(fs::exists(dir.path() / "absent"));
}

TEST(ActiveReservationsCheck, AnUnreadableLedgerIsAnErrorNamingIt) {
  test::ScratchDir dir;
  ASSERT_TRUE(ReservationStore(dir.path().string())
                  .Update([](ReservationFile&) -> core::Result<bool> { return false; })
                  .has_value());  // creates the lock file
  dir.Write("reservations.json", "[");
  const auto checked = CheckNoActiveReservations(dir.path().string());
  ASSERT_FALSE(checked.has_value());
  EXPECT_NE(checked.error().message.find("malformed reservation ledger"), std::string::npos)
      << checked.error().message;
}

}  // namespace
}  // namespace gpumux::hook
