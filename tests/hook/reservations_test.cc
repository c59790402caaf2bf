// hook::ReservationStore (the ledger file), CurrentProcess and IsAlive.
#include "gpumux/hook/reservations.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/hook/hook_fixtures.h"
#include "tests/testing/builders.h"
#include "tests/testing/process.h"
#include "tests/testing/subprocess.h"

namespace gpumux::hook {
namespace {

namespace fs = std::filesystem;

Reservation Entry(const std::string& container, std::vector<int> gpus) {
  return testing_fixtures::Held(container, std::move(gpus), ProcessRef{4242, 987654321});
}

core::Result<void> Append(ReservationStore& store, const Reservation& r) {
  return store.Update([&](ReservationFile& f) -> core::Result<bool> {
    f.reservations.push_back(r);
    return true;
  });
}

TEST(ReservationStore, NoLedgerFileIsAnEmptyLedger) {
  test::ScratchDir dir;
  ReservationStore store((dir.path() / "state").string());
  EXPECT_EQ(store.path(), (dir.path() / "state" / "reservations.json").string());
  const auto f = store.Read();
  ASSERT_TRUE(f.has_value()) << f.error().message;
  EXPECT_TRUE(f->reservations.empty());
}

TEST(ReservationStore, UpdateWritesEveryFieldAndReadGivesItBack) {
  test::ScratchDir dir;
  ReservationStore store((dir.path() / "a" / "b").string());  // folders made on demand
  ASSERT_TRUE(Append(store, Entry("c1", {0, 2})).has_value());
  ASSERT_TRUE(Append(store, Entry("c2", {1})).has_value());
  const auto f = store.Read();
  ASSERT_TRUE(f.has_value()) << f.error().message;
  ASSERT_EQ(f->reservations.size(), 2u);
  const Reservation& r = f->reservations[0];
  EXPECT_EQ(r.container, "c1");
  EXPECT_EQ(r.gpus, (std::vector<int>{0, 2}));
  EXPECT_EQ(r.since, "2024-05-01T10:00:00Z");
  EXPECT_EQ(r.since_unix, 1714557600);
  EXPECT_EQ(r.state, "running");
  EXPECT_EQ(r.holder.pid, 4242);
  EXPECT_EQ(r.holder.start_time, 987654321u);
  EXPECT_EQ(f->reservations[1].container, "c2");
  EXPECT_FALSE(fs::exists(store.path() + ".tmp")) << "the temporary file was renamed";
}

TEST(ReservationStore, AnUnchangedLedgerIsNotWritten) {
  test::ScratchDir dir;
  ReservationStore store(dir.path().string());
  const auto r = store.Update([](ReservationFile&) -> core::Result<bool> { return false; });
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_FALSE(fs::exists(store.path()));
}

TEST(ReservationStore, AnErrorFromTheChangeIsPassedOnAndNothingIsWritten) {
  test::ScratchDir dir;
  ReservationStore store(dir.path().string());
  ASSERT_TRUE(Append(store, Entry("c1", {0})).has_value());
  const std::string before = test::ReadFileText(store.path());
  const auto r = store.Update([](ReservationFile& f) -> core::Result<bool> {
    f.reservations.clear();
    return core::MakeError(core::ErrorCode::kFailedPrecondition, "no room");
  });
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().message, "no room");
  EXPECT_EQ(test::ReadFileText(store.path()), before);
}

// One entry of a ledger as JSON; `fields` are added after the defaults (a later key wins).
// (Built with append: GCC 12 warns falsely about "literal" + std::string chains, -Wrestrict.)
std::string EntryJson(const std::string& container, const std::string& gpus,
                      const std::string& fields = "") {
  std::string json = R"({"container":")";
  json.append(container).append(R"(","gpus":[)").append(gpus);
  json.append(R"(],"since":"x","since_unix":1,"state":"running","holder_pid":1,)");
  json.append(R"("holder_start_time":1)");
  if (!fields.empty()) json.append(",").append(fields);
  return json.append("}");
}

// A ledger of one entry for container `container_json` (JSON text) whose fields are the
// defaults overridden by `fields` (a repeated key: the last one wins).
std::string LedgerWith(const std::string& fields, const std::string& container_json = "\"c1\"") {
  std::string json = R"({"version":1,"reservations":[{"container":)";
  json.append(container_json);
  json.append(R"(,"gpus":[0],"since":"x","since_unix":1,"state":"running","holder_pid":1,)");
  json.append(R"("holder_start_time":1,)").append(fields);
  return json.append("}]}");
}

std::string ManyReservations(std::size_t n) {
  std::string json = R"({"reservations":[)";
  for (std::size_t i = 0; i < n; ++i) {
    if (i > 0) json.append(",");
    json.append(EntryJson(test::Numbered("c", static_cast<int>(i)), "0"));
  }
  return json.append("]}");
}

std::string ThreeEntriesWithC1Twice() {
  std::string json = R"({"reservations":[)";
  json.append(EntryJson("c1", "0")).append(",").append(EntryJson("c2", "1")).append(",");
  return json.append(EntryJson("c1", "2")).append("]}");
}

// The message of a fault in the 'gpus' field of c1's entry.
std::string GpusFault(const std::string& what) {
  std::string message = ": malformed reservation ledger: reservation 1 (container 'c1'): ";
  message.append("field 'gpus' ");
  return message.append(what);
}

struct BadLedger {
  const char* name;
  std::string text;
  std::string message_after_path;  // the message starts with "<path>" + this
};

class MalformedLedger : public ::testing::TestWithParam<BadLedger> {};

TEST_P(MalformedLedger, IsAnErrorNamingTheFileAndIsNeverOverwritten) {
  test::ScratchDir dir;
  ReservationStore store(dir.path().string());
  dir.Write("reservations.json", GetParam().text);
  const auto read = store.Read();
  ASSERT_FALSE(read.has_value()) << "accepted " << GetParam().text;
  EXPECT_EQ(read.error().code, core::ErrorCode::kInvalidArgument);
  EXPECT_EQ(read.error().message.rfind(store.path() + GetParam().message_after_path, 0), 0u)
      << read.error().message;
  bool called = false;
  const auto update = store.Update([&](ReservationFile&) -> core::Result<bool> {
    called = true;
    return true;
  });
  ASSERT_FALSE(update.has_value());
  EXPECT_EQ(update.error().message, read.error().message);
  EXPECT_FALSE(called);
  EXPECT_EQ(test::ReadFileText(store.path()), GetParam().text) << "the evidence is kept";
}

INSTANTIATE_TEST_SUITE_P(
    Table, MalformedLedger,
    ::testing::Values(
        BadLedger{"not_json", "{\"reservations\": [", ": malformed reservation ledger: "},
        BadLedger{"only_whitespace", "\n", ": malformed reservation ledger: "},
        BadLedger{"nested_too_deep",
                  R"({"reservations":)" + std::string(100000, '[') + std::string(100000, ']') + "}",
                  ": malformed reservation ledger: nested deeper than 128 levels"},
        BadLedger{"no_reservations_list", R"({"version":1})",
                  ": not a gpumux reservation ledger (no 'reservations' list)"},
        BadLedger{"reservations_not_a_list", R"({"reservations":{}})",
                  ": not a gpumux reservation ledger (no 'reservations' list)"},
        BadLedger{"a_list_at_top_level", R"([])",
                  ": not a gpumux reservation ledger (no 'reservations' list)"},
        BadLedger{"an_entry_without_holder",
                  R"({"reservations":[{"container":"c1","gpus":[0],"since":"x",)"
                  R"("since_unix":1,"state":"running"}]})",
                  ": malformed reservation ledger: "},
        BadLedger{"gpus_that_are_not_numbers",
                  R"({"reservations":[{"container":"c1","gpus":["zero"],"since":"x",)"
                  R"("since_unix":1,"state":"running","holder_pid":1,"holder_start_time":1}]})",
                  ": malformed reservation ledger: "},
        BadLedger{"a_gpu_beyond_what_a_node_may_have", LedgerWith(R"("gpus":[100000])"),
                  GpusFault("names GPU 100000, not a GPU index 0..63")},
        BadLedger{"a_gpu_beyond_int", LedgerWith(R"("gpus":[4294967296])"),
                  GpusFault("names GPU 4294967296, not a GPU index 0..63")},
        BadLedger{"a_negative_gpu", LedgerWith(R"("gpus":[-1])"),
                  GpusFault("names GPU -1, not a GPU index 0..63")},
        BadLedger{"a_fractional_gpu", LedgerWith(R"("gpus":[1.5])"),
                  GpusFault("names GPU 1.5, not a GPU index 0..63")},
        BadLedger{"a_gpu_named_twice", LedgerWith(R"("gpus":[1,1])"),
                  GpusFault("names GPU 1 twice")},
        BadLedger{"no_gpu", LedgerWith(R"("gpus":[])"), GpusFault("is empty")},
        BadLedger{"gpus_an_object", LedgerWith(R"("gpus":{"0":1})"), GpusFault("is not a list")},
        BadLedger{"an_empty_container", LedgerWith(R"("gpus":[0])", "\"\""),
                  ": malformed reservation ledger: reservation 1: field 'container' is empty"},
        BadLedger{"a_numeric_container", LedgerWith(R"("gpus":[0])", "7"),
                  ": malformed reservation ledger: reservation 1: field 'container' is not a "
                  "string"},
        BadLedger{"a_holder_pid_beyond_pid_max", LedgerWith(R"("gpus":[0],"holder_pid":4194305)"),
                  ": malformed reservation ledger: reservation 1 (container 'c1'): field "
                  "'holder_pid' is not an integer in 0..4194304"},
        BadLedger{"a_negative_start_time", LedgerWith(R"("gpus":[0],"holder_start_time":-1)"),
                  ": malformed reservation ledger: reservation 1 (container 'c1'): field "
                  "'holder_start_time' is not a non-negative integer"},
        BadLedger{"a_since_unix_beyond_int64",
                  LedgerWith(R"("gpus":[0],"since_unix":18446744073709551615)"),
                  ": malformed reservation ledger: reservation 1 (container 'c1'): field "
                  "'since_unix' is not an integer in "},
        BadLedger{"a_pod_name_that_is_a_number", LedgerWith(R"("gpus":[0],"pod_name":3)"),
                  ": malformed reservation ledger: reservation 1 (container 'c1'): field "
                  "'pod_name' is not a string"},
        BadLedger{"an_entry_that_is_a_string", R"({"reservations":["c1"]})",
                  ": malformed reservation ledger: reservation 1: not a JSON object"},
        BadLedger{"a_container_reserved_twice", ThreeEntriesWithC1Twice(),
                  ": malformed reservation ledger: reservation 3: container 'c1' is already "
                  "reserved by reservation 1"},
        BadLedger{"another_version", R"({"version":2,"reservations":[]})",
                  ": malformed reservation ledger: field 'version' is 2, not 1"},
        BadLedger{"more_reservations_than_the_limit", ManyReservations(kMaxReservations + 1),
                  ": malformed reservation ledger: 1025 reservations, more than the 1024 a "
                  "ledger may hold (hook::kMaxReservations)"}),
    test::CaseName());

TEST(ReservationStore, ALedgerThatIsAFolderIsAnErrorNamingIt) {
  test::ScratchDir dir;
  ReservationStore store(dir.path().string());
  fs::create_directories(store.path());
  const auto read = store.Read();
  ASSERT_FALSE(read.has_value());
  EXPECT_EQ(read.error().message, store.path() + ": is a directory (expected a file)");
  const auto update = store.Update([](ReservationFile&) -> core::Result<bool> { return true; });
  ASSERT_FALSE(update.has_value());
  EXPECT_EQ(update.error().message, read.error().message);
}

TEST(ReservationStore, ALedgerLargerThanTheLimitIsAnErrorNamingIt) {
  test::ScratchDir dir;
  ReservationStore store(dir.path().string());
  std::string big = R"({"reservations":[]})";
  big.append(kMaxLedgerBytes, ' ');
  dir.Write("reservations.json", big);
  const auto read = store.Read();
  ASSERT_FALSE(read.has_value());
  EXPECT_EQ(read.error().message,
            store.path() + ": larger than " + std::to_string(kMaxLedgerBytes) + " bytes");
}

// The writer never writes a ledger that the reader would refuse.
TEST(ReservationStore, AnUpdateBeyondTheReservationLimitIsRefusedAndNothingIsWritten) {
  test::ScratchDir dir;
  ReservationStore store(dir.path().string());
  const auto r = store.Update([](ReservationFile& f) -> core::Result<bool> {
    for (std::size_t i = 0; i <= kMaxReservations; ++i) {
      f.reservations.push_back(Entry(test::Numbered("c", static_cast<int>(i)), {0}));
    }
    return true;
  });
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().message, store.path() +
                                   ": the ledger would hold 1025 reservations, more "
                                   "than the 1024 it may hold (hook::kMaxReservations)");
  EXPECT_FALSE(fs::exists(store.path()));
}

TEST(ReservationStore, ALedgerOfExactlyTheLimitIsRead) {
  test::ScratchDir dir;
  ReservationStore store(dir.path().string());
  dir.Write("reservations.json", ManyReservations(kMaxReservations));
  const auto read = store.Read();
  ASSERT_TRUE(read.has_value()) << read.error().message;
  EXPECT_EQ(read->reservations.size(), kMaxReservations);
}

// Several processes append to the ledger at once; the lock makes every update land.
TEST(ReservationStore, ConcurrentUpdatesFromManyProcessesNeverLoseOne) {
  test::ScratchDir dir;
  const std::string state = dir.path().string();
  constexpr int kProcesses = 6;
  constexpr int kUpdatesEach = 15;
  std::vector<pid_t> children;
  std::fflush(nullptr);
  for (int p = 0; p < kProcesses; ++p) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ReservationStore store(state);
      for (int u = 0; u < kUpdatesEach; ++u) {
        Reservation r = Entry("p" + std::to_string(p) + "-u" + std::to_string(u), {p});
        const auto done = store.Update([&](ReservationFile& f) -> core::Result<bool> {
          f.reservations.push_back(r);
          return true;
        });
        if (!done) ::_exit(1);
      }
      ::_exit(0);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) EXPECT_TRUE(test::WaitProcess(pid).Exited(0));
  const auto f = ReservationStore(state).Read();
  ASSERT_TRUE(f.has_value()) << f.error().message;
  std::set<std::string> names;
  for (const Reservation& r : f->reservations) names.insert(r.container);
  EXPECT_EQ(f->reservations.size(), static_cast<std::size_t>(kProcesses * kUpdatesEach));
  EXPECT_EQ(names.size(), static_cast<std::size_t>(kProcesses * kUpdatesEach));
}

// GPUMUX_FAULT=kill-before-rename: the process dies with the new ledger complete in
// "<ledger>.tmp" and the old one in place. The old one must stay readable and the lock free.
TEST(ReservationStore, AWriterKilledBeforeTheRenameLeavesThePreviousLedger) {
  test::ScratchDir dir;
  ReservationStore store(dir.path().string());
  ASSERT_TRUE(Append(store, Entry("before", {0})).has_value());
  const std::string before = test::ReadFileText(store.path());
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::setenv("GPUMUX_FAULT", "kill-before-rename", 1);
    ReservationStore child(dir.path().string());
    (void)Append(child, Entry("lost", {1}));
    ::_exit(0);  // not reached when the fault fires
  }
  const test::ProcessExit e = test::WaitProcess(pid);
  ASSERT_EQ(e.signal, SIGKILL) << "the fault injection point did not fire";
  EXPECT_EQ(test::ReadFileText(store.path()), before);
  EXPECT_NE(test::ReadFileText(store.path() + ".tmp").find("\"lost\""), std::string::npos)
      << "the temporary file holds the update that was never renamed";
  const auto f = store.Read();
  ASSERT_TRUE(f.has_value()) << f.error().message;
  ASSERT_EQ(f->reservations.size(), 1u);
  EXPECT_EQ(f->reservations[0].container, "before");
  // The next writer is not blocked by the dead one's lock and replaces the stale .tmp.
  ASSERT_TRUE(test::FinishesInChild(
      [&] {
        ReservationStore again(dir.path().string());
        if (!Append(again, Entry("after", {2}))) std::abort();
      },
      10));
  const auto g = store.Read();
  ASSERT_TRUE(g.has_value()) << g.error().message;
  ASSERT_EQ(g->reservations.size(), 2u);
  EXPECT_EQ(g->reservations[1].container, "after");
  EXPECT_FALSE(fs::exists(store.path() + ".tmp"));
}

TEST(CurrentProcess, ThisProcessIsAliveWithAStartTime) {
  const ProcessRef me = CurrentProcess(::getpid());
  EXPECT_EQ(me.pid, ::getpid());
  EXPECT_GT(me.start_time, 0u);
  EXPECT_TRUE(IsAlive(me));
}

TEST(CurrentProcess, APidThatDoesNotExistHasNoStartTime) {
  EXPECT_EQ(CurrentProcess(0).start_time, 0u);
  EXPECT_EQ(CurrentProcess(-3).start_time, 0u);
  EXPECT_EQ(CurrentProcess(999999999).start_time, 0u);
}

TEST(IsAlive, AReusedPidWithAnotherStartTimeIsDead) {
  ProcessRef me = CurrentProcess(::getpid());
  me.start_time += 1;
  EXPECT_FALSE(IsAlive(me));
  EXPECT_FALSE(IsAlive(ProcessRef{::getpid(), 0}));
  EXPECT_FALSE(IsAlive(ProcessRef{0, 1}));
}

TEST(IsAlive, AnExitedAndReapedProcessIsDead) {
  const pid_t pid = test::StartProcess({.argv = {"sleep", "30"}});
  ASSERT_GT(pid, 0);
  const ProcessRef child = CurrentProcess(pid);
  EXPECT_TRUE(IsAlive(child));
  ::kill(pid, SIGKILL);
  test::WaitProcess(pid);
  EXPECT_FALSE(IsAlive(child));
}

TEST(IsAlive, AZombieProcessIsDead) {
  const pid_t pid = test::StartProcess({.argv = {"sleep", "30"}});
  ASSERT_GT(pid, 0);
  const ProcessRef child = CurrentProcess(pid);
  ::kill(pid, SIGKILL);
  // Wait for it to be a zombie, without reaping it.
  siginfo_t info{};
  ASSERT_EQ(::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOWAIT), 0);
  EXPECT_FALSE(IsAlive(child));
  test::WaitProcess(pid);
}

// The command name in /proc/<pid>/stat is in parentheses and may contain ") " itself.
TEST(CurrentProcess, AProcessNameWithParenthesesAndSpacesDoesNotShiftTheFields) {
  int go[2];
  int ack[2];
  ASSERT_EQ(::pipe(go), 0);
  ASSERT_EQ(::pipe(ack), 0);
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    char c = 0;
    if (::read(go[0], &c, 1) != 1) ::_exit(1);
    ::prctl(PR_SET_NAME, "a) b ) 1 2 3 (", 0, 0, 0);
    if (::write(ack[1], &c, 1) != 1) ::_exit(1);
    ::pause();
    ::_exit(0);
  }
  const ProcessRef before = CurrentProcess(pid);
  ASSERT_EQ(::write(go[1], "x", 1), 1);
  char c = 0;
  ASSERT_EQ(::read(ack[0], &c, 1), 1);
  const ProcessRef after = CurrentProcess(pid);
  ::kill(pid, SIGKILL);
  test::WaitProcess(pid);
  for (int fd : {go[0], go[1], ack[0], ack[1]}) ::close(fd);
  EXPECT_GT(before.start_time, 0u);
  EXPECT_EQ(after.start_time, before.start_time);
}

TEST(ReservationStore, ThePodAndThePidNamespaceAreKeptAndOlderLedgersReadWithoutThem) {
  test::ScratchDir dir;
  ReservationStore store(dir.path().string());
  Reservation r = Entry("3f2a", {1});
  r.pod = {"default", "render", "main"};
  r.holder_pid_ns = "pid:[4026531836]";
  ASSERT_TRUE(Append(store, r).has_value());
  ASSERT_TRUE(Append(store, Entry("c2", {2})).has_value());
  auto f = store.Read();
  ASSERT_TRUE(f.has_value()) << f.error().message;
  EXPECT_EQ(f->reservations[0].pod.ns, "default");
  EXPECT_EQ(f->reservations[0].pod.pod, "render");
  EXPECT_EQ(f->reservations[0].pod.container, "main");
  EXPECT_EQ(f->reservations[0].holder_pid_ns, "pid:[4026531836]");
  EXPECT_TRUE(f->reservations[1].pod.empty());
  EXPECT_EQ(f->reservations[1].holder_pid_ns, "");
  // A ledger written before these fields existed.
  dir.Write("reservations.json",
            R"({"version":1,"reservations":[{"container":"c1","gpus":[0],"since":"s",)"
            R"("since_unix":1,"state":"running","holder_pid":1,"holder_start_time":1}]})");
  f = store.Read();
  ASSERT_TRUE(f.has_value()) << f.error().message;
  ASSERT_EQ(f->reservations.size(), 1u);
  EXPECT_TRUE(f->reservations[0].pod.empty());
  EXPECT_EQ(HolderName(f->reservations[0]), "c1");
}

struct NameCase {
  const char* name;
  PodContainer pod;
  std::string shown;
};

class HolderNames : public ::testing::TestWithParam<NameCase> {};

TEST_P(HolderNames, AreNamespacePodContainerWhenKnownElseTheContainerId) {
  Reservation r = Entry("3f2a9c", {0});
  r.pod = GetParam().pod;
  EXPECT_EQ(HolderName(r), GetParam().shown);
}

INSTANTIATE_TEST_SUITE_P(
    Table, HolderNames,
    ::testing::Values(
        NameCase{"everything_known", {"default", "render", "main"}, "default/render/main"},
        NameCase{"no_container_name", {"default", "render", ""}, "default/render"},
        NameCase{"no_pod", {"default", "", "main"}, "3f2a9c"},
        NameCase{"nothing_known", {}, "3f2a9c"}),
    test::CaseName());

TEST(HolderLiveness, FollowsTheProcessInOurPidNamespaceAndIsUnknownInAnother) {
  Reservation r = Entry("c1", {0});
  r.holder = CurrentProcess(::getpid());
  EXPECT_EQ(HolderLiveness(r), Liveness::kAlive) << "no namespace recorded: an older ledger";
  r.holder_pid_ns = OwnPidNamespace();
  ASSERT_NE(r.holder_pid_ns, "");
  EXPECT_EQ(HolderLiveness(r), Liveness::kAlive);
  r.holder.start_time += 1;
  EXPECT_EQ(HolderLiveness(r), Liveness::kGone);
  r.holder_pid_ns = "pid:[1]";
  EXPECT_EQ(HolderLiveness(r), Liveness::kUnknown)
      << "a pid from another namespace says nothing here";
}

TEST(ReservationStore, ReadLockedCreatesNothingWhereNoGrantWasEverMade) {
  test::ScratchDir dir;
  ReservationStore store((dir.path() / "nope").string());
  bool called = false;
  const auto r = store.ReadLocked([&](const ReservationFile& f) {
    called = true;
    EXPECT_TRUE(f.reservations.empty());
  });
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_TRUE(called);
  EXPECT_FALSE(fs::exists(dir.path() / "nope"));
}

TEST(ReservationStore, ReadLockedWaitsForAWriterHoldingTheLock) {
  test::ScratchDir dir;
  ReservationStore store(dir.path().string());
  ASSERT_TRUE(Append(store, Entry("c1", {0})).has_value());
  // Hold the writers' lock as an update in progress would.
  const int lock = ::open((dir.path() / "reservations.lock").c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(lock, 0);
  ASSERT_EQ(::flock(lock, LOCK_EX), 0);
  std::atomic<bool> read{false};
  std::size_t seen = 0;
  std::thread reader([&] {
    (void)store.ReadLocked([&](const ReservationFile& f) { seen = f.reservations.size(); });
    read = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(read.load()) << "read while a writer held the lock";
  ::flock(lock, LOCK_UN);
  ::close(lock);
  reader.join();
  EXPECT_TRUE(read.load());
  EXPECT_EQ(seen, 1u);
}

}  // namespace
}  // namespace gpumux::hook
