// The GPU reservation hook with the real runtime: runc runs busybox-static containers on a fake
// 4-GPU host (a temporary folder of mknod'ed nvidia device nodes standing for /dev), through the
// `gpumux oci-runtime` wrapper or with the hooks declared directly in config.json.
//
// Skipped, with the reason, only where runc cannot run a trivial container at all (or we are
// not root). Every test uses its own runc root (never the host's containers), its own state
// folder and container ids, and deletes its containers in TearDown.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gpumux/hook/reservations.h"
#include "tests/hook/hook_fixtures.h"
#include "tests/testing/builders.h"
#include "tests/testing/fake_gpu_host.h"
#include "tests/testing/process.h"
#include "tests/testing/runc_bundle.h"

namespace gpumux::hook {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr int kHostGpus = 4;

// What a container printed about itself (see kShowGpus).
struct Seen {
  std::string visible = "<unset>";
  std::string gpus = "<unset>";
  std::string reserved = "<unset>";
  std::vector<std::string> devices;       // nvidia* names in the container's /dev
  std::vector<std::string> open_results;  // one line per /dev/nvidia<N> opened
  bool ran = false;
};

// Prints the GPU variables, lists /dev, and tries to open every GPU node: "No such device or
// address" (no driver behind the fake node) shows the device cgroup let the container through.
const char* const kShowGpus =
    "echo RAN; echo VISIBLE=${NVIDIA_VISIBLE_DEVICES-<unset>}; echo GPUS=${GPUMUX_GPUS-<unset>}; "
    "echo RESERVED=${GPUMUX_GPU_RESERVED-<unset>}; ls /dev; "
    "for d in /dev/nvidia[0-9]*; do [ -e \"$d\" ] && cat \"$d\" 2>&1 | sed 's/^/OPEN /'; done; "
    "true";

Seen ParseSeen(const std::string& out) {
  Seen s;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    if (line == "RAN") s.ran = true;
    if (line.rfind("VISIBLE=", 0) == 0) s.visible = line.substr(8);
    if (line.rfind("GPUS=", 0) == 0) s.gpus = line.substr(5);
    if (line.rfind("RESERVED=", 0) == 0) s.reserved = line.substr(9);
    if (line.rfind("nvidia", 0) == 0) s.devices.push_back(line);
    if (line.rfind("OPEN ", 0) == 0) s.open_results.push_back(line.substr(5));
  }
  std::sort(s.devices.begin(), s.devices.end());
  return s;
}

// The device names a container should see for GPUs "0,2": nvidia-uvm, nvidia0, nvidia2,
// nvidiactl (sorted, as ParseSeen sorts).
std::vector<std::string> DevicesFor(const std::string& gpus_csv) {
  std::vector<std::string> out{"nvidia-uvm", "nvidiactl"};
  std::istringstream in(gpus_csv);
  for (std::string g; std::getline(in, g, ',');) out.push_back("nvidia" + g);
  std::sort(out.begin(), out.end());
  return out;
}

int CountOf(const std::string& csv) {
  return csv.empty() ? 0 : static_cast<int>(std::count(csv.begin(), csv.end(), ',')) + 1;
}

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

class RuncHook : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string& reason = test::RuncUnavailableReason();
    if (!reason.empty()) GTEST_SKIP() << reason;
    active_ = true;
    ASSERT_EQ(test::MakeFakeDevDir(dev_, kHostGpus), "");
    fs::create_directories(root_);
    fs::copy_file(test::kBusybox, busybox_);
    // Containers made by `runc create` outlive runc: have them reparented to this process, so
    // that a killed container's init is reaped here (not left a zombie under a pid 1 that may
    // not reap), and reap them all in TearDown.
    ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), 0);
  }

  void TearDown() override {
    if (!active_) return;
    for (auto it = ids_.rbegin(); it != ids_.rend(); ++it) {
      test::RunProcess({.argv = {"runc", "--root", root_.string(), "delete", "--force", *it}});
    }
    ::prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0);
    while (::waitpid(-1, nullptr, WNOHANG) > 0) {
    }
  }

  // A container id unique to this process and test, deleted in TearDown.
  std::string Id(const std::string& name) {
    std::string id = "gpumux-test-" + std::to_string(::getpid()) + "-" + name;
    ids_.push_back(id);
    return id;
  }

  fs::path Bundle(const std::string& name, const std::vector<std::string>& args,
                  const std::vector<std::string>& env) {
    const fs::path b = dir_.path() / "bundles" / name;
    const std::string made = test::MakeBusyboxBundle(b, busybox_, args, env);
    EXPECT_EQ(made, "");
    return b;
  }

  std::vector<std::string> WrapperEnv(const std::vector<std::string>& extra) const {
    std::vector<std::string> env{"GPUMUX_STATE_DIR=" + state_.string(),
                                 "GPUMUX_DEV_DIR=" + dev_.string(),
                                 "GPUMUX_DEVICE_PLUGIN_DIR=" + plugins_.string()};
    env.insert(env.end(), extra.begin(), extra.end());
    return env;
  }
  std::vector<std::string> Unset() const {
    return {"GPUMUX_GPUS_FILE", "GPUMUX_RUNTIME", "GPUMUX_FAULT"};
  }

  // `gpumux oci-runtime --root <ours> <args>` with its stdio in files named after `tag`.
  test::Captured Wrapper(const std::vector<std::string>& args, const std::string& tag,
                         const std::vector<std::string>& extra_env = {}) {
    std::vector<std::string> argv{GPUMUX_BINARY, "oci-runtime", "--root", root_.string()};
    argv.insert(argv.end(), args.begin(), args.end());
    return test::RunCaptured({.argv = argv, .set_env = WrapperEnv(extra_env), .unset_env = Unset()},
                             dir_.path(), tag);
  }

  // Runs a short-lived container showing its GPUs through the wrapper.
  test::Captured RunShowing(const std::string& name, const std::vector<std::string>& env,
                            const std::vector<std::string>& extra_wrapper_env = {}) {
    const std::string id = Id(name);
    const fs::path b = Bundle(name, {"sh", "-c", kShowGpus}, env);
    return Wrapper({"run", "-b", b.string(), id}, name, extra_wrapper_env);
  }

  // Creates and starts a container that sleeps, through the wrapper; its stdio go to files.
  test::Captured CreateAndStart(const std::string& name, const std::vector<std::string>& env) {
    const std::string id = Id(name);
    const fs::path b = Bundle(name, {"sleep", "60"}, env);
    test::Captured c = Wrapper({"create", "-b", b.string(), id}, name);
    if (c.exit.Exited(0)) {
      const test::Captured s = Runc({"start", id}, name + "-start");
      EXPECT_TRUE(s.exit.Exited(0)) << s.err;
    }
    return c;
  }

  test::Captured Runc(const std::vector<std::string>& args, const std::string& tag) {
    std::vector<std::string> argv{"runc", "--root", root_.string()};
    argv.insert(argv.end(), args.begin(), args.end());
    return test::RunCaptured({.argv = argv}, dir_.path(), tag);
  }

  // `runc state`: {} when runc does not know the container.
  Json State(const std::string& id) {
    const test::Captured s = Runc({"state", id}, "state");
    if (!s.exit.Exited(0)) return Json::object();
    return Json::parse(s.out, nullptr, false);
  }

  ReservationFile Ledger() const {
    auto f = ReservationStore(state_.string()).Read();
    EXPECT_TRUE(f.has_value()) << f.error().message;
    return f ? *f : ReservationFile{};
  }
  // The container's reservation in the ledger now, if any.
  std::optional<Reservation> ReservationOf(const std::string& container) const {
    for (const Reservation& r : Ledger().reservations) {
      if (r.container == container) return r;
    }
    return std::nullopt;
  }
  std::string HookLog() const { return test::ReadFileText(state_ / "hook.log"); }

  // Reserves `gpus` for a container that is not one of runc's, kept alive by this process.
  void Hold(const std::string& container, std::vector<int> gpus) {
    testing_fixtures::HoldForThisProcess(state_.string(), container, std::move(gpus));
  }

  bool active_ = false;
  test::ScratchDir dir_;
  fs::path dev_ = dir_.path() / "dev";
  fs::path state_ = dir_.path() / "state";
  fs::path root_ = dir_.path() / "runc-root";
  fs::path busybox_ = dir_.path() / "busybox";
  fs::path plugins_ = dir_.path() / "device-plugins";  // none: this test's own empty folder
  std::vector<std::string> ids_;
};

// --- Reservations: HOUDINI_GPU_REQUESTED and its aliases ---

struct ReserveCase {
  const char* name;
  std::string variable;
  int count;
};

class RuncReserve : public RuncHook, public ::testing::WithParamInterface<ReserveCase> {};

TEST_P(RuncReserve, TheContainerSeesExactlyItsReservedGpusWhichAreReleasedWhenItExits) {
  const test::Captured c = RunShowing("c1", {GetParam().variable});
  const std::string cid = ids_.back();
  ASSERT_TRUE(c.exit.Exited(0)) << c.err;
  const Seen seen = ParseSeen(c.out);
  ASSERT_TRUE(seen.ran) << c.out;
  EXPECT_EQ(CountOf(seen.gpus), GetParam().count) << c.out;
  EXPECT_EQ(seen.visible, seen.gpus) << "no UUIDs known: NVIDIA_VISIBLE_DEVICES says indices";
  EXPECT_EQ(seen.reserved, "true");
  EXPECT_EQ(seen.devices, DevicesFor(seen.gpus)) << c.out;
  ASSERT_EQ(seen.open_results.size(), static_cast<std::size_t>(GetParam().count)) << c.out;
  for (const std::string& r : seen.open_results) {
    EXPECT_TRUE(Contains(r, "No such device or address"))
        << "the device cgroup must allow the granted GPUs: " << r;
  }
  // The wrapper reserves; the createRuntime hook it adds finds that reservation.
  EXPECT_TRUE(Contains(c.err, "gpumux: Reserved GPU")) << c.err;
  EXPECT_TRUE(Contains(c.err, " for '" + cid + "' (")) << c.err;
  EXPECT_TRUE(Contains(HookLog(), "Found existing reservation for '" + cid + "'")) << HookLog();
  EXPECT_TRUE(Contains(HookLog(), "Released reservation of '" + cid + "'")) << HookLog();
  EXPECT_TRUE(Ledger().reservations.empty()) << "released when the container stopped";
  EXPECT_TRUE(State(cid).empty()) << "runc run removed the container";
}

INSTANTIATE_TEST_SUITE_P(
    Table, RuncReserve,
    ::testing::Values(ReserveCase{"houdini_gpu_requested_2", "HOUDINI_GPU_REQUESTED=2", 2},
                      ReserveCase{"houdini_gpu_request_1", "HOUDINI_GPU_REQUEST=1", 1},
                      ReserveCase{"gpumux_gpu_request_3", "GPUMUX_GPU_REQUEST=3", 3},
                      ReserveCase{"every_gpu_of_the_host", "HOUDINI_GPU_REQUESTED=4", 4}),
    test::CaseName());

// --- Shared GPUs: HOUDINI_GPU_ENABLED, NVIDIA_VISIBLE_DEVICES ---

struct SharedCase {
  const char* name;
  std::string variable;
  std::string visible;  // what NVIDIA_VISIBLE_DEVICES says inside
  std::string gpus;     // GPUMUX_GPUS inside
  bool with_uuids;      // the host described by a GPU file with UUIDs
};

class RuncShared : public RuncHook, public ::testing::WithParamInterface<SharedCase> {};

TEST_P(RuncShared, TheContainerSeesThoseGpusWithoutReservingThem) {
  std::vector<std::string> extra;
  if (GetParam().with_uuids) {
    std::string csv = "index,uuid,model,memory_mib\n";
    for (int i = 0; i < kHostGpus; ++i) {
      csv += std::to_string(i) + ",GPU-" + std::string(1, static_cast<char>('a' + i)) +
             "0000000-0000-0000-0000-000000000000,A100,40960\n";
    }
    extra.push_back("GPUMUX_GPUS_FILE=" + dir_.Write("gpus.csv", csv));
  }
  const test::Captured c = RunShowing("c1", {GetParam().variable}, extra);
  ASSERT_TRUE(c.exit.Exited(0)) << c.err;
  const Seen seen = ParseSeen(c.out);
  ASSERT_TRUE(seen.ran) << c.out;
  EXPECT_EQ(seen.visible, GetParam().visible);
  EXPECT_EQ(seen.gpus, GetParam().gpus);
  EXPECT_EQ(seen.reserved, "false");
  EXPECT_EQ(seen.devices, DevicesFor(GetParam().gpus)) << c.out;
  for (const std::string& r : seen.open_results) {
    EXPECT_TRUE(Contains(r, "No such device or address")) << r;
  }
  EXPECT_TRUE(Ledger().reservations.empty()) << "a shared grant reserves nothing";
}

INSTANTIATE_TEST_SUITE_P(
    Table, RuncShared,
    ::testing::Values(SharedCase{"houdini_gpu_enabled_true", "HOUDINI_GPU_ENABLED=true", "0,1,2,3",
                                 "0,1,2,3", false},
                      SharedCase{"visible_devices_all", "NVIDIA_VISIBLE_DEVICES=all", "0,1,2,3",
                                 "0,1,2,3", false},
                      SharedCase{"visible_devices_indices", "NVIDIA_VISIBLE_DEVICES=0,2", "0,2",
                                 "0,2", false},
                      SharedCase{"visible_devices_uuids",
                                 "NVIDIA_VISIBLE_DEVICES=GPU-d0000000-0000-0000-0000-000000000000,"
                                 "GPU-b0000000-0000-0000-0000-000000000000",
                                 "GPU-b0000000-0000-0000-0000-000000000000,"
                                 "GPU-d0000000-0000-0000-0000-000000000000",
                                 "1,3", true}),
    test::CaseName());

TEST_F(RuncHook, AContainerAskingForNoGpuSeesNone) {
  const test::Captured c = RunShowing("c1", {"TERM=dumb"});
  ASSERT_TRUE(c.exit.Exited(0)) << c.err;
  const Seen seen = ParseSeen(c.out);
  ASSERT_TRUE(seen.ran) << c.out;
  EXPECT_TRUE(seen.devices.empty()) << c.out;
  EXPECT_EQ(seen.visible, "<unset>");
  EXPECT_FALSE(fs::exists(state_ / "reservations.json"));
}

// --- Refusals: the container must not start, and the message says why ---

TEST_F(RuncHook, NotEnoughFreeGpusKeepsTheContainerFromStarting) {
  Hold("render-a", {0, 1, 2});
  const test::Captured c = RunShowing("c1", {"HOUDINI_GPU_REQUESTED=2"});
  const std::string id = ids_.back();
  EXPECT_TRUE(c.exit.Exited(1)) << c.err;
  EXPECT_FALSE(ParseSeen(c.out).ran) << c.out;
  EXPECT_TRUE(State(id).empty()) << "runc never saw the container";
  EXPECT_TRUE(
      Contains(c.err, "container '" + id + "' asks for 2 GPUs (HOUDINI_GPU_REQUESTED=2); 1 of 4"))
      << c.err;
  EXPECT_TRUE(Contains(c.err, "reserved by 'render-a'")) << c.err;
  EXPECT_TRUE(Contains(HookLog(), "asks for 2 GPUs")) << HookLog();
}

// containerd's shim runs the runtime with --log <bundle>/log.json --log-format json and shows
// the last error line's msg in the pod's events; the refusal must be there, and runc's own
// errors must still reach it (the options are passed on).
TEST_F(RuncHook, RefusalsAndRuncsOwnErrorsReachTheRuntimeLogContainerdReads) {
  Hold("render-a", {0, 1, 2, 3});
  const std::string id = Id("c1");
  const fs::path b = Bundle("c1", {"sh", "-c", kShowGpus}, {"HOUDINI_GPU_REQUESTED=1"});
  const std::string log = (b / "log.json").string();
  const test::Captured c =
      Wrapper({"--log", log, "--log-format", "json", "run", "-b", b.string(), id}, "c1");
  EXPECT_TRUE(c.exit.Exited(1)) << c.err;
  EXPECT_FALSE(ParseSeen(c.out).ran);
  EXPECT_EQ(testing_fixtures::LastRuntimeError(log),
            "gpumux: container '" + id +
                "' asks for 1 GPU (HOUDINI_GPU_REQUESTED=1); 0 of 4 free; GPUs 0,1,2,3 reserved "
                "by 'render-a' since 2024-05-01T10:00:00Z");

  const std::string id2 = Id("c2");
  const fs::path b2 = Bundle("c2", {"/no/such/program"}, {"TERM=dumb"});
  const std::string log2 = (b2 / "log.json").string();
  const test::Captured r =
      Wrapper({"--log", log2, "--log-format", "json", "run", "-b", b2.string(), id2}, "c2");
  EXPECT_FALSE(r.exit.Exited(0)) << r.err;
  EXPECT_TRUE(Contains(testing_fixtures::LastRuntimeError(log2), "/no/such/program"))
      << "runc writes its own error to the log it was given: " << test::ReadFileText(log2);
}

struct RefusalCase {
  const char* name;
  std::vector<std::string> env;
  std::string message;
};

class RuncRefusal : public RuncHook, public ::testing::WithParamInterface<RefusalCase> {};

TEST_P(RuncRefusal, ABadValueIsAClearErrorAndNoContainer) {
  const test::Captured c = RunShowing("c1", GetParam().env);
  EXPECT_TRUE(c.exit.Exited(1)) << c.err;
  EXPECT_FALSE(ParseSeen(c.out).ran) << c.out;
  EXPECT_TRUE(State(ids_.back()).empty());
  EXPECT_TRUE(Contains(c.err, GetParam().message)) << c.err;
}

INSTANTIATE_TEST_SUITE_P(
    Table, RuncRefusal,
    ::testing::Values(
        RefusalCase{"a_negative_count",
                    {"HOUDINI_GPU_REQUESTED=-1"},
                    "HOUDINI_GPU_REQUESTED=-1: expected a whole number of GPUs (0 or more)"},
        RefusalCase{"a_word",
                    {"HOUDINI_GPU_REQUESTED=abc"},
                    "HOUDINI_GPU_REQUESTED=abc: expected a whole number of GPUs (0 or more)"},
        RefusalCase{"more_than_the_host_has",
                    {"HOUDINI_GPU_REQUESTED=5"},
                    "asks for 5 GPUs (HOUDINI_GPU_REQUESTED=5), but the host has only 4"},
        RefusalCase{"an_unknown_gpu",
                    {"NVIDIA_VISIBLE_DEVICES=0,7"},
                    "NVIDIA_VISIBLE_DEVICES names GPU '7', but the host has 4 GPUs"}),
    test::CaseName());

TEST_F(RuncHook, AMalformedConfigJsonIsAClearError) {
  const std::string id = Id("c1");
  const fs::path b = Bundle("c1", {"sh", "-c", kShowGpus}, {"HOUDINI_GPU_REQUESTED=1"});
  std::string text = test::ReadFileText(b / "config.json");
  text.resize(text.size() / 2);
  dir_.Write("bundles/c1/config.json", text);
  const test::Captured c = Wrapper({"run", "-b", b.string(), id}, "c1");
  EXPECT_TRUE(c.exit.Exited(1)) << c.err;
  EXPECT_TRUE(Contains(c.err, (b / "config.json").string() + ": not JSON (")) << c.err;
  EXPECT_TRUE(State(id).empty());
}

TEST_F(RuncHook, AMalformedLedgerIsAClearErrorAndIsLeftForInspection) {
  fs::create_directories(state_);
  dir_.Write("state/reservations.json", "{\"reservations\": [ {\"container\": ");
  const test::Captured c = RunShowing("c1", {"HOUDINI_GPU_REQUESTED=1"});
  EXPECT_TRUE(c.exit.Exited(1)) << c.err;
  EXPECT_FALSE(ParseSeen(c.out).ran);
  EXPECT_TRUE(
      Contains(c.err, (state_ / "reservations.json").string() + ": malformed reservation ledger"))
      << c.err;
  EXPECT_EQ(test::ReadFileText(state_ / "reservations.json"),
            "{\"reservations\": [ {\"container\": ");
}

// --- Concurrency: 20 containers at once, one GPU each, on a 4-GPU host ---

TEST_F(RuncHook, TwentyConcurrentContainersAskingForOneGpuEachExactlyFourRun) {
  constexpr int kContainers = 20;
  struct Started {
    std::string id;
    fs::path bundle;
    pid_t pid;
  };
  std::vector<Started> started;
  for (int i = 0; i < kContainers; ++i) {
    const std::string name = test::Numbered("c", i);
    Started s{Id(name), Bundle(name, {"sleep", "60"}, {"HOUDINI_GPU_REQUESTED=1"}), -1};
    started.push_back(s);
  }
  for (Started& s : started) {
    const std::string tag = (dir_.path() / s.id).string();
    std::vector<std::string> argv{GPUMUX_BINARY, "oci-runtime", "--root",          root_.string(),
                                  "create",      "-b",          s.bundle.string(), s.id};
    s.pid = test::StartProcess({.argv = argv,
                                .set_env = WrapperEnv({}),
                                .unset_env = Unset(),
                                .stdout_path = tag + ".out",
                                .stderr_path = tag + ".err"});
    ASSERT_GT(s.pid, 0);
  }
  std::vector<std::string> winners;
  int refused = 0;
  for (const Started& s : started) {
    const test::ProcessExit e = test::WaitProcess(s.pid);
    const std::string err = test::ReadFileText(dir_.path() / (s.id + ".err"));
    if (e.Exited(0)) {
      winners.push_back(s.id);
      EXPECT_TRUE(Contains(err, " for '" + s.id + "' (")) << err;
      EXPECT_TRUE(Contains(err, "gpumux: Reserved GPU")) << err;
    } else {
      ++refused;
      EXPECT_TRUE(e.Exited(1)) << s.id << ": " << ::testing::PrintToString(e) << "\n" << err;
      EXPECT_TRUE(Contains(
          err, "container '" + s.id + "' asks for 1 GPU (HOUDINI_GPU_REQUESTED=1); 0 of 4 free"))
          << err;
      EXPECT_TRUE(State(s.id).empty()) << s.id << " must not exist";
    }
  }
  ASSERT_EQ(winners.size(), 4u);
  EXPECT_EQ(refused, kContainers - 4);

  std::set<std::string> visible;
  for (const std::string& id : winners) {
    ASSERT_TRUE(Runc({"start", id}, "start").exit.Exited(0));
    const Json st = State(id);
    EXPECT_EQ(st.value("status", ""), "running") << st.dump();
    Json config = Json::parse(
        test::ReadFileText(dir_.path() / "bundles" / id.substr(id.rfind('-') + 1) / "config.json"));
    for (const Json& e : config["process"]["env"]) {
      const std::string s = e.get<std::string>();
      if (s.rfind("NVIDIA_VISIBLE_DEVICES=", 0) == 0) visible.insert(s);
    }
  }
  EXPECT_EQ(visible.size(), 4u) << "each container is told a different GPU";

  const ReservationFile f = Ledger();
  ASSERT_EQ(f.reservations.size(), 4u);
  std::set<int> gpus;
  for (const Reservation& r : f.reservations) {
    EXPECT_NE(std::find(winners.begin(), winners.end(), r.container), winners.end()) << r.container;
    ASSERT_EQ(r.gpus.size(), 1u);
    EXPECT_TRUE(gpus.insert(r.gpus[0]).second) << "GPU " << r.gpus[0] << " granted twice";
    EXPECT_EQ(r.state, "running");
    EXPECT_TRUE(IsAlive(r.holder)) << r.container;
    EXPECT_EQ(r.holder.pid, State(r.container).value("pid", -1))
        << "the container's init process keeps the reservation";
  }
  EXPECT_EQ(gpus, (std::set<int>{0, 1, 2, 3}));

  for (const std::string& id : winners) {
    EXPECT_TRUE(Runc({"delete", "--force", id}, "delete").exit.Exited(0));
  }
  EXPECT_TRUE(Ledger().reservations.empty()) << "poststop released every reservation";
}

// --- Release and reclaim ---

TEST_F(RuncHook, StoppingAndDeletingAContainerReleasesItsGpus) {
  const test::Captured a = CreateAndStart("a", {"HOUDINI_GPU_REQUESTED=2"});
  ASSERT_TRUE(a.exit.Exited(0)) << a.err;
  const std::string a_id = ids_.back();
  ASSERT_EQ(State(a_id).value("status", ""), "running");
  ASSERT_TRUE(ReservationOf(a_id).has_value());

  const test::Captured refused = RunShowing("b1", {"HOUDINI_GPU_REQUESTED=3"});
  EXPECT_TRUE(refused.exit.Exited(1)) << refused.err;
  EXPECT_TRUE(Contains(refused.err, "2 of 4 free")) << refused.err;
  EXPECT_TRUE(Contains(refused.err, "reserved by '" + a_id + "'")) << refused.err;

  ASSERT_TRUE(Runc({"kill", a_id, "KILL"}, "kill").exit.Exited(0));
  for (int i = 0; i < 100 && State(a_id).value("status", "") != "stopped"; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(State(a_id).value("status", ""), "stopped");
  const test::Captured del = Runc({"delete", a_id}, "delete");
  ASSERT_TRUE(del.exit.Exited(0)) << del.err;
  EXPECT_TRUE(Ledger().reservations.empty());
  EXPECT_TRUE(Contains(HookLog(), "Released reservation of '" + a_id + "'")) << HookLog();

  const test::Captured b = RunShowing("b2", {"HOUDINI_GPU_REQUESTED=3"});
  ASSERT_TRUE(b.exit.Exited(0)) << b.err;
  EXPECT_EQ(CountOf(ParseSeen(b.out).gpus), 3);
}

// The container's init dies and nobody runs its poststop hook (a killed shim, a crashed
// engine): the next grant reclaims its GPUs, and a late poststop does not free the new holder's.
TEST_F(RuncHook, AReservationWhoseContainerDiedIsReclaimedByTheNextGrant) {
  const test::Captured a = CreateAndStart("a", {"HOUDINI_GPU_REQUESTED=4"});
  ASSERT_TRUE(a.exit.Exited(0)) << a.err;
  const std::string a_id = ids_.back();
  const int init = State(a_id).value("pid", -1);
  ASSERT_GT(init, 0);
  ASSERT_EQ(::kill(init, SIGKILL), 0);
  // A subreaper, this process reaps it (else it would linger as a zombie).
  ASSERT_EQ(::waitpid(init, nullptr, 0), init);
  const std::optional<Reservation> dead = ReservationOf(a_id);
  ASSERT_TRUE(dead.has_value());
  EXPECT_FALSE(IsAlive(dead->holder));

  const test::Captured b = CreateAndStart("b", {"HOUDINI_GPU_REQUESTED=2"});
  ASSERT_TRUE(b.exit.Exited(0)) << b.err;
  const std::string b_id = ids_.back();
  EXPECT_FALSE(ReservationOf(a_id).has_value()) << "reclaimed";
  ASSERT_TRUE(ReservationOf(b_id).has_value());

  const test::Captured late = Runc({"delete", "--force", a_id}, "delete-a");
  EXPECT_TRUE(late.exit.Exited(0)) << late.err;
  const std::optional<Reservation> kept = ReservationOf(b_id);
  ASSERT_TRUE(kept.has_value()) << "the dead container's poststop must not free b's GPUs";
  EXPECT_EQ(kept->gpus.size(), 2u);
}

TEST_F(RuncHook, AReservationOfAKilledRuntimeIsReclaimedByTheNextGrant) {
  const std::string killer = dir_.Write("killed-runc", "#!/bin/sh\nkill -9 $$\n");
  fs::permissions(killer, fs::perms::owner_all);
  const std::string id = Id("a");
  const fs::path b = Bundle("a", {"sleep", "60"}, {"HOUDINI_GPU_REQUESTED=4"});
  const test::Captured killed =
      Wrapper({"create", "-b", b.string(), id}, "a", {"GPUMUX_RUNTIME=" + killer});
  ASSERT_EQ(killed.exit.signal, SIGKILL) << killed.err;
  const std::optional<Reservation> pending = ReservationOf(id);
  ASSERT_TRUE(pending.has_value());
  EXPECT_EQ(pending->state, "pending");

  const test::Captured next = RunShowing("b", {"HOUDINI_GPU_REQUESTED=4"});
  ASSERT_TRUE(next.exit.Exited(0)) << next.err;
  EXPECT_EQ(ParseSeen(next.out).gpus, "0,1,2,3");
}

// GPUMUX_FAULT=kill-before-rename: the wrapper is SIGKILLed after writing reservations.json.tmp
// and before the rename. The ledger must still be the previous one, and the next grant work.
TEST_F(RuncHook, AWrapperKilledMidWriteLeavesAUsableLedger) {
  const test::Captured a = CreateAndStart("a", {"HOUDINI_GPU_REQUESTED=1"});
  ASSERT_TRUE(a.exit.Exited(0)) << a.err;
  const std::string a_id = ids_.back();
  const std::string before = test::ReadFileText(state_ / "reservations.json");
  ASSERT_TRUE(ReservationOf(a_id).has_value());

  const test::Captured killed =
      RunShowing("b", {"HOUDINI_GPU_REQUESTED=2"}, {"GPUMUX_FAULT=kill-before-rename"});
  ASSERT_EQ(killed.exit.signal, SIGKILL)
      << "the fault injection point did not fire: " << killed.err;
  EXPECT_FALSE(ParseSeen(killed.out).ran);
  EXPECT_TRUE(State(ids_.back()).empty());
  EXPECT_EQ(test::ReadFileText(state_ / "reservations.json"), before);
  EXPECT_TRUE(fs::exists(state_ / "reservations.json.tmp"));

  const test::Captured next = RunShowing("c", {"HOUDINI_GPU_REQUESTED=3"});
  ASSERT_TRUE(next.exit.Exited(0)) << next.err;
  const Seen seen = ParseSeen(next.out);
  const std::optional<Reservation> a_held = ReservationOf(a_id);
  ASSERT_TRUE(a_held.has_value());
  const std::vector<int> a_gpus = a_held->gpus;
  ASSERT_EQ(a_gpus.size(), 1u);
  EXPECT_EQ(CountOf(seen.gpus), 3);
  EXPECT_FALSE(Contains("," + seen.gpus + ",", "," + std::to_string(a_gpus[0]) + ","))
      << "c got a's GPU: " << seen.gpus;
  const ReservationFile f = Ledger();
  ASSERT_EQ(f.reservations.size(), 1u) << "c released on exit, a still holds";
  EXPECT_EQ(f.reservations[0].container, a_id);
}

// --- Hook-only mode: the hooks declared in config.json, runc run directly ---

class RuncHookOnly : public RuncHook {
 protected:
  fs::path HookBundle(const std::string& name, const std::vector<std::string>& env) {
    const fs::path b = Bundle(name, {"sh", "-c", kShowGpus}, env);
    Json c = Json::parse(test::ReadFileText(b / "config.json"));
    const std::vector<std::string> hook_env{"GPUMUX_STATE_DIR=" + state_.string(),
                                            "GPUMUX_DEV_DIR=" + dev_.string(),
                                            "GPUMUX_DEVICE_PLUGIN_DIR=" + plugins_.string()};
    for (const char* stage : {"createRuntime", "poststop"}) {
      c["hooks"][stage] = Json::array(
          {{{"path", GPUMUX_BINARY}, {"args", {"gpumux", "hook", stage}}, {"env", hook_env}}});
    }
    dir_.Write("bundles/" + name + "/config.json", c.dump(2));
    return b;
  }
  test::Captured RuncRun(const std::string& name, const std::vector<std::string>& env) {
    const std::string id = Id(name);
    return Runc({"run", "-b", HookBundle(name, env).string(), id}, name);
  }
};

TEST_F(RuncHookOnly, AReservationInjectsTheDevicesButCannotRewriteTheEnvironment) {
  const test::Captured c = RuncRun("c1", {"HOUDINI_GPU_REQUESTED=2"});
  const std::string id = ids_.back();
  ASSERT_TRUE(c.exit.Exited(0)) << c.err;
  const Seen seen = ParseSeen(c.out);
  ASSERT_TRUE(seen.ran) << c.out;
  EXPECT_EQ(seen.visible, "<unset>") << "hook-only mode cannot change the environment";
  EXPECT_EQ(seen.gpus, "<unset>");
  ASSERT_EQ(seen.devices.size(), 4u) << c.out;  // two GPUs, nvidiactl, nvidia-uvm
  EXPECT_EQ(std::count_if(
                seen.devices.begin(), seen.devices.end(),
                [](const std::string& d) { return d.size() > 6 && d[6] >= '0' && d[6] <= '9'; }),
            2)
      << c.out;
  ASSERT_EQ(seen.open_results.size(), 2u) << c.out;
  for (const std::string& r : seen.open_results) {
    EXPECT_TRUE(Contains(r, "No such device or address")) << r;
  }
  EXPECT_TRUE(Contains(HookLog(), "Reserved GPUs ")) << HookLog();
  EXPECT_TRUE(Contains(HookLog(), " for '" + id + "' (")) << HookLog();
  EXPECT_TRUE(Contains(HookLog(), "Released reservation of '" + id + "'")) << HookLog();
  EXPECT_TRUE(Ledger().reservations.empty());
}

TEST_F(RuncHookOnly, ListedGpusAreInjectedShared) {
  Hold("render-farm", {0, 2});  // a shared ask may name any GPU nobody reserved
  const test::Captured c = RuncRun("c1", {"NVIDIA_VISIBLE_DEVICES=1,3"});
  ASSERT_TRUE(c.exit.Exited(0)) << c.err;
  const Seen seen = ParseSeen(c.out);
  EXPECT_EQ(seen.visible, "1,3");
  EXPECT_EQ(seen.devices, DevicesFor("1,3")) << c.out;
  EXPECT_EQ(Ledger().reservations.size(), 1u);
}

TEST_F(RuncHookOnly, NotEnoughFreeGpusFailsTheHookAndTheContainerDoesNotRun) {
  Hold("render-a", {0, 1, 2, 3});
  const test::Captured c = RuncRun("c1", {"HOUDINI_GPU_REQUESTED=1"});
  const std::string id = ids_.back();
  EXPECT_FALSE(c.exit.Exited(0)) << c.out;
  EXPECT_FALSE(ParseSeen(c.out).ran) << c.out;
  EXPECT_TRUE(Contains(
      HookLog(), "container '" + id + "' asks for 1 GPU (HOUDINI_GPU_REQUESTED=1); 0 of 4 free"))
      << HookLog();
  EXPECT_EQ(Ledger().reservations.size(), 1u);
}

}  // namespace
}  // namespace gpumux::hook
