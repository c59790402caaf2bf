// The commands around the hook library: `gpumux hook <stage>` and `gpumux gpus` in process
// (cli::Main), and the runtime wrapper `gpumux oci-runtime` as a subprocess of the built binary
// with a fake runtime (a shell script that records its arguments) standing in for runc.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "gpumux/cli/cli.h"
#include "gpumux/hook/reservations.h"
#include "tests/hook/hook_fixtures.h"
#include "tests/testing/builders.h"
#include "tests/testing/process.h"

namespace gpumux::hook {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

struct CliRun {
  int code = -1;
  std::string out;
  std::string err;
};

// Runs cli::Main in this process with `stdin_text` as std::cin.
CliRun Gpumux(const std::vector<std::string>& args, const std::string& stdin_text = "") {
  std::vector<const char*> argv{"gpumux"};
  for (const std::string& a : args) argv.push_back(a.c_str());
  std::istringstream in(stdin_text);
  std::streambuf* saved = std::cin.rdbuf(in.rdbuf());
  std::ostringstream out, err;
  CliRun r;
  r.code = cli::Main(static_cast<int>(argv.size()), argv.data(), out, err);
  std::cin.rdbuf(saved);
  std::cin.clear();
  r.out = out.str();
  r.err = err.str();
  return r;
}

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::string EnvValue(const Json& config, const std::string& name) {
  for (const Json& e : config["process"]["env"]) {
    const std::string s = e.get<std::string>();
    if (s.rfind(name + "=", 0) == 0) return s.substr(name.size() + 1);
  }
  return "<unset>";
}

// A host of four GPUs with UUIDs (a GPU file whose device column names /dev/null, so that no
// mknod is needed), a state folder, a bundle, and a device-plugin folder of its own
// (GPUMUX_DEVICE_PLUGIN_DIR, set for the commands run in this process and their children).
class HostFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(dev_);
    fs::create_directories(bundle_);
    fs::create_directories(plugins_);
    ::setenv("GPUMUX_DEVICE_PLUGIN_DIR", plugins_.c_str(), 1);
    gpus_file_ = dir_.Write("gpus.csv",
                            "index,uuid,model,memory_mib,device\n"
                            "0,GPU-aaaa,A100,40960,/dev/null\n"
                            "1,GPU-bbbb,A100,40960,/dev/null\n"
                            "2,GPU-cccc,A100,40960,/dev/null\n"
                            "3,GPU-dddd,A100,40960,/dev/null\n");
  }
  void TearDown() override { ::unsetenv("GPUMUX_DEVICE_PLUGIN_DIR"); }

  // config.json with `env` added to process.env, and `annotations` when given.
  void WriteConfig(const std::vector<std::string>& env, const Json& annotations = nullptr) {
    Json c = {{"ociVersion", "1.0.2"},
              {"process", {{"terminal", false}, {"args", {"sh"}}, {"env", {"PATH=/bin"}}}},
              {"root", {{"path", "rootfs"}}},
              {"x-unknown", {{"kept", true}}}};
    for (const std::string& e : env) c["process"]["env"].push_back(e);
    if (!annotations.is_null()) c["annotations"] = annotations;
    dir_.Write("bundle/config.json", c.dump(2));
  }
  Json Config() const { return Json::parse(test::ReadFileText(bundle_ / "config.json")); }
  std::string State(const std::string& id, std::int64_t pid = 0) const {
    Json s = {
        {"ociVersion", "1.0.2"}, {"id", id}, {"status", "creating"}, {"bundle", bundle_.string()}};
    if (pid > 0) s["pid"] = pid;
    return s.dump();
  }
  std::vector<std::string> HostFlags() const {
    return {"--state-dir", state_.string(), "--dev-dir", dev_.string(), "--gpus", gpus_file_};
  }
  CliRun Hook(const std::string& stage, const std::string& state_json) {
    std::vector<std::string> args{"hook"};
    for (const std::string& f : HostFlags()) args.push_back(f);
    args.push_back(stage);
    return Gpumux(args, state_json);
  }
  ReservationFile Ledger() const {
    auto f = ReservationStore(state_.string()).Read();
    EXPECT_TRUE(f.has_value()) << f.error().message;
    return f ? *f : ReservationFile{};
  }
  // Reserves `gpus` for `container`, kept alive by this test process.
  void Hold(const std::string& container, std::vector<int> gpus) {
    testing_fixtures::HoldForThisProcess(state_.string(), container, std::move(gpus));
  }
  std::string HookLog() const { return test::ReadFileText(state_ / "hook.log"); }

  test::ScratchDir dir_;
  fs::path state_ = dir_.path() / "state";
  fs::path dev_ = dir_.path() / "dev";
  fs::path bundle_ = dir_.path() / "bundle";
  testing_fixtures::ShortDir short_dir_;  // room for unix sockets
  fs::path plugins_ = short_dir_.path() / "device-plugins";
  std::string gpus_file_;
};

// The annotations containerd's CRI plugin puts in a pod container's config.json.
Json CriAnnotations(const std::string& ns, const std::string& pod, const std::string& container) {
  return {{"io.kubernetes.cri.container-type", "container"},
          {"io.kubernetes.cri.sandbox-namespace", ns},
          {"io.kubernetes.cri.sandbox-name", pod},
          {"io.kubernetes.cri.container-name", container}};
}

using HookCommand = HostFixture;

TEST_F(HookCommand, CreateRuntimeReservesAndLogsFoundReservation) {
  WriteConfig({"HOUDINI_GPU_REQUESTED=2"});
  const CliRun r = Hook("createRuntime", State("c1"));
  EXPECT_EQ(r.code, 0) << r.err;
  // A new reservation is "Reserved", not "Found" (that is for one the container already held).
  EXPECT_TRUE(Contains(r.err, "gpumux: Reserved GPUs ")) << r.err;
  EXPECT_TRUE(Contains(HookLog(), " for 'c1' (HOUDINI_GPU_REQUESTED=2)")) << HookLog();
  EXPECT_TRUE(Contains(HookLog(), " gpumux[")) << "log lines say which process wrote them";
  const ReservationFile f = Ledger();
  ASSERT_EQ(f.reservations.size(), 1u);
  EXPECT_EQ(f.reservations[0].container, "c1");
  EXPECT_EQ(f.reservations[0].gpus.size(), 2u);
  EXPECT_EQ(f.reservations[0].state, "running");
}

TEST_F(HookCommand, PrestartGrantsLikeCreateRuntime) {
  WriteConfig({"GPUMUX_GPU_REQUEST=1"});
  const CliRun r = Hook("prestart", State("c1"));
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(Ledger().reservations.size(), 1u);
}

TEST_F(HookCommand, PoststopReleasesTheReservation) {
  WriteConfig({"HOUDINI_GPU_REQUESTED=4"});
  ASSERT_EQ(Hook("createRuntime", State("c1")).code, 0);
  const CliRun r = Hook("poststop", State("c1"));
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(Contains(r.err, "Released reservation of 'c1'")) << r.err;
  EXPECT_TRUE(Contains(HookLog(), "Released reservation of 'c1'")) << HookLog();
  EXPECT_TRUE(Ledger().reservations.empty());
  const CliRun again = Hook("poststop", State("c1"));
  EXPECT_EQ(again.code, 0) << again.err;
  EXPECT_EQ(again.err, "") << "nothing to release, nothing said";
}

TEST_F(HookCommand, PoststopDoesNotNeedTheBundle) {
  Hold("c1", {0});
  fs::remove_all(bundle_);
  const CliRun r = Hook("poststop", State("c1"));
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(Ledger().reservations.empty());
}

TEST_F(HookCommand, NoGpuVariablesDoNothing) {
  WriteConfig({"TERM=xterm"});
  const CliRun r = Hook("createRuntime", State("c1"));
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_FALSE(fs::exists(state_ / "reservations.json"));
}

TEST_F(HookCommand, NotEnoughFreeGpusFailsTheHookWithTheReason) {
  Hold("render-a", {0, 1, 2});
  WriteConfig({"HOUDINI_GPU_REQUESTED=2"});
  const CliRun r = Hook("createRuntime", State("c2"));
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(Contains(r.err,
                       "hook createRuntime: container 'c2' asks for 2 GPUs "
                       "(HOUDINI_GPU_REQUESTED=2); 1 of 4"))
      << r.err;
  EXPECT_TRUE(Contains(r.err, "reserved by 'render-a'")) << r.err;
  EXPECT_TRUE(Contains(HookLog(), "container 'c2' asks for 2 GPUs")) << HookLog();
  EXPECT_EQ(Ledger().reservations.size(), 1u);
}

struct BadInput {
  const char* name;
  std::vector<std::string> env;
  std::string message;
};

class HookCommandBadValues : public HostFixture, public ::testing::WithParamInterface<BadInput> {};

TEST_P(HookCommandBadValues, FailTheHookNamingTheContainerAndTheVariable) {
  WriteConfig(GetParam().env);
  const CliRun r = Hook("createRuntime", State("c1"));
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(Contains(r.err, GetParam().message)) << r.err;
  EXPECT_FALSE(fs::exists(state_ / "reservations.json"));
}

INSTANTIATE_TEST_SUITE_P(
    Table, HookCommandBadValues,
    ::testing::Values(
        BadInput{"a_negative_count",
                 {"HOUDINI_GPU_REQUESTED=-1"},
                 "container 'c1': HOUDINI_GPU_REQUESTED=-1: expected a whole number of GPUs (0 or "
                 "more)"},
        BadInput{"a_word",
                 {"HOUDINI_GPU_REQUESTED=abc"},
                 "container 'c1': HOUDINI_GPU_REQUESTED=abc: expected a whole number"},
        BadInput{"more_than_the_host_has",
                 {"HOUDINI_GPU_REQUESTED=5"},
                 "container 'c1' asks for 5 GPUs (HOUDINI_GPU_REQUESTED=5), but the host has only "
                 "4"},
        BadInput{"an_unknown_uuid",
                 {"NVIDIA_VISIBLE_DEVICES=GPU-zzzz"},
                 "NVIDIA_VISIBLE_DEVICES names GPU 'GPU-zzzz', but the host has 4 GPUs"}),
    test::CaseName());

TEST_F(HookCommand, MalformedStateOnStdinIsAClearError) {
  const CliRun r = Hook("createRuntime", "{\"id\": ");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(Contains(r.err, "hook createRuntime: container state on stdin: not JSON")) << r.err;
  const CliRun no_id = Hook("poststop", R"({"bundle":"/b"})");
  EXPECT_EQ(no_id.code, 1);
  EXPECT_TRUE(Contains(no_id.err, "field 'id' missing")) << no_id.err;
}

TEST_F(HookCommand, MalformedConfigJsonIsAnErrorNamingIt) {
  dir_.Write("bundle/config.json", "{\"process\": ");
  const CliRun r = Hook("createRuntime", State("c1"));
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(Contains(r.err, (bundle_ / "config.json").string() + ": not JSON (")) << r.err;
  dir_.Write("bundle/config.json", R"({"process": {"env": "HOUDINI_GPU_REQUESTED=1"}})");
  const CliRun env = Hook("createRuntime", State("c1"));
  EXPECT_EQ(env.code, 1);
  EXPECT_TRUE(Contains(env.err, "config.json: 'process.env' is not a list")) << env.err;
}

TEST_F(HookCommand, AMalformedLedgerFailsBothStagesNamingTheFile) {
  fs::create_directories(state_);
  dir_.Write("state/reservations.json", "garbage");
  WriteConfig({"HOUDINI_GPU_REQUESTED=1"});
  const std::string ledger = (state_ / "reservations.json").string();
  const CliRun create = Hook("createRuntime", State("c1"));
  EXPECT_EQ(create.code, 1);
  EXPECT_TRUE(Contains(create.err, ledger + ": malformed reservation ledger")) << create.err;
  const CliRun stop = Hook("poststop", State("c1"));
  EXPECT_EQ(stop.code, 1);
  EXPECT_TRUE(Contains(stop.err, ledger + ": malformed reservation ledger")) << stop.err;
}

// config.json is checked before any GPU is granted: a field of the wrong type fails the hook,
// naming the file and the field, and leaves no reservation behind.
TEST_F(HookCommand, AConfigJsonFieldOfTheWrongTypeFailsBeforeAnyGpuIsGranted) {
  for (const auto& [field, value] : std::vector<std::pair<std::string, Json>>{
           {"root", "rootfs"}, {"linux", "x"}, {"hooks", Json::array()}}) {
    Json c = {{"process", {{"env", {"HOUDINI_GPU_REQUESTED=1"}}}}, {field, value}};
    dir_.Write("bundle/config.json", c.dump());
    const CliRun r = Hook("createRuntime", State("c1", 4000000));
    EXPECT_EQ(r.code, 1) << field;
    EXPECT_TRUE(Contains(r.err, (bundle_ / "config.json").string() + ": ")) << r.err;
    EXPECT_TRUE(Contains(r.err, "'" + field + "' is not")) << r.err;
    EXPECT_TRUE(Ledger().reservations.empty()) << field;
  }
}

TEST_F(HookCommand, AConfigJsonThatIsAFolderIsAnErrorSayingSo) {
  fs::create_directories(bundle_ / "config.json");
  const CliRun r = Hook("createRuntime", State("c1"));
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(
      Contains(r.err, (bundle_ / "config.json").string() + ": is a directory (expected a file)"))
      << r.err;
}

// The reproducer: the container's own reservation names a GPU the host does not have. Handing
// it back would index past the host's GPUs; the hook refuses, naming the ledger, the container
// and the GPU, and the ledger stays byte for byte.
TEST_F(HookCommand, ALedgerNamingAGpuTheHostDoesNotHaveFailsTheHookAndIsKept) {
  WriteConfig({"HOUDINI_GPU_REQUESTED=1"});
  fs::create_directories(state_);
  const std::string ledger = (state_ / "reservations.json").string();
  for (const char* gpu : {"4", "100000"}) {
    const std::string text =
        std::string(R"({"version":1,"reservations":[{"container":"c1","gpus":[)") + gpu +
        R"(],"since":"2026-01-01T00:00:00Z","since_unix":1,"state":"running",)"
        R"("holder_pid":1,"holder_start_time":1}]})";
    dir_.Write("state/reservations.json", text);
    const CliRun r = Hook("createRuntime", State("c1", 4000000));
    EXPECT_EQ(r.code, 1) << gpu;
    EXPECT_TRUE(Contains(r.err, ledger + ": ")) << r.err;
    EXPECT_TRUE(Contains(r.err, "container 'c1'")) << r.err;
    EXPECT_TRUE(Contains(r.err, std::string("GPU ") + gpu)) << r.err;
    EXPECT_EQ(test::ReadFileText(ledger), text);
  }
}

TEST_F(HookCommand, AnUnknownStageIsAUsageError) {
  const CliRun r = Hook("poststart-ish", State("c1"));
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(Contains(r.err, "poststart-ish")) << r.err;
}

using GpusCommand = HostFixture;

TEST_F(GpusCommand, ListsTheGpusLikeNvidiaSmi) {
  std::vector<std::string> args{"gpus"};
  for (const std::string& f : HostFlags()) args.push_back(f);
  const CliRun r = Gpumux(args);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out,
            "GPU 0: A100 (UUID: GPU-aaaa)\nGPU 1: A100 (UUID: GPU-bbbb)\n"
            "GPU 2: A100 (UUID: GPU-cccc)\nGPU 3: A100 (UUID: GPU-dddd)\n");
}

TEST_F(GpusCommand, ReservationsSayWhoHoldsEachGpuAndWhetherTheHolderIsGone) {
  Hold("render-a", {1, 2});
  ASSERT_TRUE(ReservationStore(state_.string())
                  .Update([](ReservationFile& f) -> core::Result<bool> {
                    Reservation r;
                    r.container = "crashed";
                    r.gpus = {3};
                    r.since = "2024-05-01T09:00:00Z";
                    r.state = "pending";
                    r.holder = ProcessRef{0, 0};
                    f.reservations.push_back(r);
                    return true;
                  })
                  .has_value());
  std::vector<std::string> args{"gpus", "--reservations"};
  for (const std::string& f : HostFlags()) args.push_back(f);
  const CliRun r = Gpumux(args);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "GPU 0: A100 (UUID: GPU-aaaa)  free\n")) << r.out;
  EXPECT_TRUE(Contains(r.out,
                       "GPU 1: A100 (UUID: GPU-bbbb)  reserved by 'render-a' since "
                       "2024-05-01T10:00:00Z (running)\n"))
      << r.out;
  EXPECT_TRUE(Contains(r.out,
                       "GPU 3: A100 (UUID: GPU-dddd)  reserved by 'crashed' since "
                       "2024-05-01T09:00:00Z (pending, holder gone"))
      << r.out;

  args.push_back("--json");
  const CliRun j = Gpumux(args);
  EXPECT_EQ(j.code, 0) << j.err;
  const Json gpus = Json::parse(j.out);
  ASSERT_EQ(gpus.size(), 4u);
  EXPECT_EQ(gpus[0]["uuid"], "GPU-aaaa");
  EXPECT_TRUE(gpus[0]["reserved_by"].is_null());
  EXPECT_EQ(gpus[2]["reserved_by"], "render-a");
  EXPECT_EQ(gpus[2]["holder_alive"], true);
  EXPECT_EQ(gpus[3]["reserved_by"], "crashed");
  EXPECT_EQ(gpus[3]["holder_alive"], false);
}

TEST_F(GpusCommand, AMalformedLedgerOrMissingDeviceFolderIsAnError) {
  fs::create_directories(state_);
  dir_.Write("state/reservations.json", "[");
  std::vector<std::string> args{"gpus", "--reservations"};
  for (const std::string& f : HostFlags()) args.push_back(f);
  const CliRun r = Gpumux(args);
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(Contains(r.err, "reservations.json: malformed reservation ledger")) << r.err;
  const CliRun no_dev = Gpumux({"gpus", "--dev-dir", (dir_.path() / "nope").string()});
  EXPECT_EQ(no_dev.code, 2);
  EXPECT_TRUE(Contains(no_dev.err, "nope: device folder does not exist")) << no_dev.err;
}

// The runtime wrapper, run as the built binary; GPUMUX_RUNTIME is a script that records its
// arguments, so what the wrapper hands to the runtime can be checked without runc.
class OciRuntimeWrapper : public HostFixture {
 protected:
  void SetUp() override {
    HostFixture::SetUp();
    runtime_ =
        dir_.Write("fake-runtime", "#!/bin/sh\nprintf '%s\\n' \"$@\" > \"$FAKE_RUNTIME_LOG\"\n");
    ::chmod(runtime_.c_str(), 0755);
  }
  test::Captured Wrapper(std::vector<std::string> args, std::vector<std::string> env = {}) {
    std::vector<std::string> argv{GPUMUX_BINARY, "oci-runtime"};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<std::string> set_env{"GPUMUX_STATE_DIR=" + state_.string(),
                                     "GPUMUX_DEV_DIR=" + dev_.string(),
                                     "GPUMUX_DEVICE_PLUGIN_DIR=" + plugins_.string(),
                                     "GPUMUX_GPUS_FILE=" + gpus_file_,
                                     "GPUMUX_RUNTIME=" + runtime_,
                                     "FAKE_RUNTIME_LOG=" + (dir_.path() / "runtime.args").string()};
    set_env.insert(set_env.end(), env.begin(), env.end());
    fs::remove(dir_.path() / "runtime.args");
    return test::RunCaptured({.argv = argv, .set_env = set_env, .unset_env = {"GPUMUX_FAULT"}},
                             dir_.path(), "wrapper");
  }
  std::vector<std::string> Create(const std::string& id) const {
    return {"--root",         "/run/x",     "--debug", "create", "--bundle",
            bundle_.string(), "--pid-file", "/tmp/p",  id};
  }
  // The arguments the runtime got, or {} when it never ran.
  std::vector<std::string> RuntimeArgs() const {
    std::vector<std::string> out;
    std::istringstream in(test::ReadFileText(dir_.path() / "runtime.args"));
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
  }
  static std::vector<std::string> DevicePaths(const Json& config) {
    std::vector<std::string> out;
    if (!config.contains("linux")) return out;
    for (const Json& d : config["linux"]["devices"]) out.push_back(d["path"].get<std::string>());
    return out;
  }

  std::string runtime_;
};

TEST_F(OciRuntimeWrapper, AReservationRewritesConfigJsonAndRunsTheRuntimeWithTheSameArguments) {
  WriteConfig({"HOUDINI_GPU_REQUESTED=2"});
  const test::Captured w = Wrapper(Create("c1"));
  ASSERT_TRUE(w.exit.Exited(0)) << w.err;
  EXPECT_EQ(RuntimeArgs(), Create("c1"));
  EXPECT_TRUE(Contains(w.err, "gpumux: Reserved GPUs ")) << w.err;
  EXPECT_TRUE(Contains(HookLog(), " for 'c1' (HOUDINI_GPU_REQUESTED=2)")) << HookLog();

  const ReservationFile f = Ledger();
  ASSERT_EQ(f.reservations.size(), 1u);
  EXPECT_EQ(f.reservations[0].state, "pending");
  const std::vector<int> gpus = f.reservations[0].gpus;
  ASSERT_EQ(gpus.size(), 2u);
  const std::vector<std::string> uuids{"GPU-aaaa", "GPU-bbbb", "GPU-cccc", "GPU-dddd"};

  const Json c = Config();
  EXPECT_EQ(EnvValue(c, "NVIDIA_VISIBLE_DEVICES"), uuids[static_cast<std::size_t>(gpus[0])] + "," +
                                                       uuids[static_cast<std::size_t>(gpus[1])]);
  EXPECT_EQ(EnvValue(c, "GPUMUX_GPUS"), std::to_string(gpus[0]) + "," + std::to_string(gpus[1]));
  EXPECT_EQ(EnvValue(c, "GPUMUX_GPU_RESERVED"), "true");
  EXPECT_EQ(EnvValue(c, "PATH"), "/bin");
  EXPECT_EQ(EnvValue(c, "HOUDINI_GPU_REQUESTED"), "2");
  EXPECT_EQ(c["x-unknown"]["kept"], true);
  EXPECT_EQ(DevicePaths(c), (std::vector<std::string>{test::Numbered("/dev/nvidia", gpus[0]),
                                                      test::Numbered("/dev/nvidia", gpus[1])}));
  const std::string self = fs::canonical(GPUMUX_BINARY).string();
  for (const char* stage : {"createRuntime", "poststop"}) {
    ASSERT_TRUE(c.contains("hooks") && c["hooks"].contains(stage)) << c.dump(2);
    ASSERT_EQ(c["hooks"][stage].size(), 1u) << c.dump(2);
    const Json& h = c["hooks"][stage][0];
    EXPECT_EQ(h["path"], self);
    EXPECT_EQ(h["args"], Json({"gpumux", "hook", stage}));
    EXPECT_TRUE(Contains(h["env"].dump(), "GPUMUX_STATE_DIR=" + state_.string())) << h.dump();
    EXPECT_TRUE(Contains(h["env"].dump(), "GPUMUX_GPUS_FILE=" + gpus_file_)) << h.dump();
    EXPECT_TRUE(Contains(h["env"].dump(), "GPUMUX_DEVICE_PLUGIN_DIR=" + plugins_.string()))
        << h.dump();
  }
}

// Runs a hook the way the runtime would: its path, args as argv, env as the environment only.
test::Captured RunHookEntry(const Json& hook, const std::string& state_json,
                            const fs::path& scratch, const std::string& tag) {
  test::ProcessSpec spec;
  spec.argv = {hook["path"].get<std::string>()};
  const std::vector<std::string> args = hook["args"].get<std::vector<std::string>>();
  spec.argv.insert(spec.argv.end(), args.begin() + 1, args.end());
  spec.set_env = hook["env"].get<std::vector<std::string>>();
  for (const char* name : {"GPUMUX_STATE_DIR", "GPUMUX_DEV_DIR", "GPUMUX_GPUS_FILE",
                           "GPUMUX_RUNTIME", "GPUMUX_FAULT", "GPUMUX_DEVICE_PLUGIN_DIR"}) {
    bool set = false;
    for (const std::string& e : spec.set_env) set = set || e.rfind(std::string(name) + "=", 0) == 0;
    if (!set) spec.unset_env.push_back(name);
  }
  return test::RunCaptured(spec, scratch, tag, state_json);
}

TEST_F(OciRuntimeWrapper, TheHooksItAddsFindTheReservationAndReleaseIt) {
  WriteConfig({"HOUDINI_GPU_REQUESTED=1"});
  ASSERT_TRUE(Wrapper(Create("c1")).exit.Exited(0));
  const Json c = Config();
  const test::Captured create =
      RunHookEntry(c["hooks"]["createRuntime"][0], State("c1"), dir_.path(), "create-hook");
  EXPECT_TRUE(create.exit.Exited(0)) << create.err;
  EXPECT_TRUE(Contains(create.err, "Found existing reservation for 'c1'")) << create.err;
  ASSERT_EQ(Ledger().reservations.size(), 1u);
  EXPECT_EQ(Ledger().reservations[0].state, "running");
  const test::Captured stop =
      RunHookEntry(c["hooks"]["poststop"][0], State("c1"), dir_.path(), "stop-hook");
  EXPECT_TRUE(stop.exit.Exited(0)) << stop.err;
  EXPECT_TRUE(Ledger().reservations.empty());
}

struct SharedCase {
  const char* name;
  std::string env;
  std::string visible;
  std::string gpus;
};

class OciRuntimeWrapperShared : public OciRuntimeWrapper,
                                public ::testing::WithParamInterface<SharedCase> {};

TEST_P(OciRuntimeWrapperShared, GivesTheGpusWithoutReservingThem) {
  WriteConfig({GetParam().env});
  const test::Captured w = Wrapper({"run", "-b", bundle_.string(), "c1"});
  ASSERT_TRUE(w.exit.Exited(0)) << w.err;
  const Json c = Config();
  EXPECT_EQ(EnvValue(c, "NVIDIA_VISIBLE_DEVICES"), GetParam().visible);
  EXPECT_EQ(EnvValue(c, "GPUMUX_GPUS"), GetParam().gpus);
  EXPECT_EQ(EnvValue(c, "GPUMUX_GPU_RESERVED"), "false");
  EXPECT_FALSE(c.contains("hooks")) << "nothing to release";
  std::vector<std::string> want_devices;
  std::istringstream gpus(GetParam().gpus);
  for (std::string g; std::getline(gpus, g, ',');) want_devices.push_back("/dev/nvidia" + g);
  EXPECT_EQ(DevicePaths(c), want_devices);
  EXPECT_TRUE(Ledger().reservations.empty());
}

// The reproducer oci-runtime-shared-ask-ignores-reservation, through the wrapper: a container
// whose own env asks for every GPU, or names the reserved one, never gets another's reservation.
TEST_F(OciRuntimeWrapper, ASharedAskIsNeverHandedAnotherContainersReservedGpu) {
  Hold("c1", {0});
  WriteConfig({"NVIDIA_VISIBLE_DEVICES=all"});
  const test::Captured all = Wrapper(Create("c2"));
  ASSERT_TRUE(all.exit.Exited(0)) << all.err;
  EXPECT_EQ(EnvValue(Config(), "NVIDIA_VISIBLE_DEVICES"), "GPU-bbbb,GPU-cccc,GPU-dddd");
  EXPECT_EQ(EnvValue(Config(), "GPUMUX_GPUS"), "1,2,3");
  WriteConfig({"NVIDIA_VISIBLE_DEVICES=0"});
  const test::Captured named = Wrapper(Create("c3"));
  EXPECT_TRUE(named.exit.Exited(1)) << named.err;
  EXPECT_TRUE(Contains(named.err,
                       "container 'c3' asks for GPU 0 (NVIDIA_VISIBLE_DEVICES=0), "
                       "which 'c1' has reserved since "))
      << named.err;
  EXPECT_TRUE(RuntimeArgs().empty()) << "c3 must not start";
}

INSTANTIATE_TEST_SUITE_P(
    Table, OciRuntimeWrapperShared,
    ::testing::Values(SharedCase{"houdini_gpu_enabled", "HOUDINI_GPU_ENABLED=true",
                                 "GPU-aaaa,GPU-bbbb,GPU-cccc,GPU-dddd", "0,1,2,3"},
                      SharedCase{"visible_devices_all", "NVIDIA_VISIBLE_DEVICES=all",
                                 "GPU-aaaa,GPU-bbbb,GPU-cccc,GPU-dddd", "0,1,2,3"},
                      SharedCase{"visible_devices_indices", "NVIDIA_VISIBLE_DEVICES=0,2",
                                 "GPU-aaaa,GPU-cccc", "0,2"},
                      SharedCase{"visible_devices_uuids",
                                 "NVIDIA_VISIBLE_DEVICES=GPU-dddd,GPU-bbbb", "GPU-bbbb,GPU-dddd",
                                 "1,3"}),
    test::CaseName());

TEST_F(OciRuntimeWrapper, NoGpuVariablesLeaveConfigJsonByteForByte) {
  WriteConfig({"TERM=xterm"});
  const std::string before = test::ReadFileText(bundle_ / "config.json");
  const test::Captured w = Wrapper(Create("c1"));
  ASSERT_TRUE(w.exit.Exited(0)) << w.err;
  EXPECT_EQ(test::ReadFileText(bundle_ / "config.json"), before);
  EXPECT_EQ(RuntimeArgs(), Create("c1"));
  EXPECT_FALSE(fs::exists(state_ / "reservations.json"));
}

TEST_F(OciRuntimeWrapper, AskingForZeroGpusHidesEveryGpuEvenWithVisibleDevicesAll) {
  // HOUDINI_GPU_REQUESTED=0 wins over NVIDIA_VISIBLE_DEVICES=all: an NVIDIA hook or runtime run
  // after the wrapper must not hand the container every GPU.
  WriteConfig({"HOUDINI_GPU_REQUESTED=0", "NVIDIA_VISIBLE_DEVICES=all"});
  const test::Captured w = Wrapper(Create("c1"));
  ASSERT_TRUE(w.exit.Exited(0)) << w.err;
  EXPECT_EQ(EnvValue(Config(), "NVIDIA_VISIBLE_DEVICES"), "void");
  EXPECT_EQ(RuntimeArgs(), Create("c1"));
  EXPECT_FALSE(fs::exists(state_ / "reservations.json"));
}

TEST_F(OciRuntimeWrapper, OtherRuntimeCommandsPassThroughUntouched) {
  WriteConfig({"HOUDINI_GPU_REQUESTED=1"});
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--root", "/r", "state", "c1"},
        std::vector<std::string>{"delete", "--force", "c1"},
        std::vector<std::string>{"--root=/r", "kill", "c1", "KILL"},
        std::vector<std::string>{"start", "c1"}}) {
    const test::Captured w = Wrapper(args);
    EXPECT_TRUE(w.exit.Exited(0)) << w.err;
    EXPECT_EQ(RuntimeArgs(), args);
  }
  EXPECT_FALSE(fs::exists(state_ / "reservations.json"));
}

// (The fake runtime exits at once, so each reservation's holder is gone by the next grant,
// which reclaims it: only the last one stays in the ledger.)
TEST_F(OciRuntimeWrapper, FindsTheBundleAndIdInEveryFlagSpelling) {
  WriteConfig({"HOUDINI_GPU_REQUESTED=1"});
  ASSERT_TRUE(Wrapper({"create", "--bundle=" + bundle_.string(), "c1"}).exit.Exited(0));
  EXPECT_EQ(EnvValue(Config(), "GPUMUX_GPU_RESERVED"), "true");
  ASSERT_EQ(Ledger().reservations.size(), 1u);
  EXPECT_EQ(Ledger().reservations[0].container, "c1");
  WriteConfig({"HOUDINI_GPU_REQUESTED=1"});
  ASSERT_TRUE(Wrapper({"--log", "/tmp/l", "run", "c2", "-b", bundle_.string(), "--no-pivot"})
                  .exit.Exited(0));
  EXPECT_EQ(EnvValue(Config(), "GPUMUX_GPU_RESERVED"), "true");
  ASSERT_EQ(Ledger().reservations.size(), 1u);
  EXPECT_EQ(Ledger().reservations[0].container, "c2");
  WriteConfig({"HOUDINI_GPU_REQUESTED=1"});
  ASSERT_TRUE(Wrapper({"--root=/r", "--systemd-cgroup", "create", "--console-socket", "/tmp/s",
                       "--bundle", bundle_.string(), "c3"})
                  .exit.Exited(0));
  ASSERT_EQ(Ledger().reservations.size(), 1u);
  EXPECT_EQ(Ledger().reservations[0].container, "c3");
}

TEST_F(OciRuntimeWrapper, NotEnoughFreeGpusStopsBeforeTheRuntime) {
  Hold("render-a", {0, 1, 2, 3});
  WriteConfig({"HOUDINI_GPU_REQUESTED=1"});
  const std::string before = test::ReadFileText(bundle_ / "config.json");
  const test::Captured w = Wrapper(Create("c2"));
  EXPECT_TRUE(w.exit.Exited(1)) << w.err;
  EXPECT_TRUE(RuntimeArgs().empty()) << "the container must not start";
  EXPECT_TRUE(Contains(w.err, "container 'c2' asks for 1 GPU (HOUDINI_GPU_REQUESTED=1); 0 of 4"))
      << w.err;
  EXPECT_TRUE(Contains(w.err, "reserved by 'render-a'")) << w.err;
  EXPECT_TRUE(Contains(HookLog(), "container 'c2' asks for 1 GPU")) << HookLog();
  EXPECT_EQ(test::ReadFileText(bundle_ / "config.json"), before);
}

class OciRuntimeWrapperBadValues : public OciRuntimeWrapper,
                                   public ::testing::WithParamInterface<BadInput> {};

TEST_P(OciRuntimeWrapperBadValues, StopBeforeTheRuntimeWithAClearMessage) {
  WriteConfig(GetParam().env);
  const std::string log = (bundle_ / "log.json").string();
  std::vector<std::string> args{"--log", log, "--log-format", "json"};
  for (const std::string& a : Create("c1")) args.push_back(a);
  const test::Captured w = Wrapper(args);
  EXPECT_TRUE(w.exit.Exited(1)) << w.err;
  EXPECT_TRUE(RuntimeArgs().empty());
  EXPECT_TRUE(Contains(w.err, GetParam().message)) << w.err;
  const std::string shown = testing_fixtures::LastRuntimeError(log);  // what containerd shows
  EXPECT_EQ(shown.rfind("gpumux: ", 0), 0u) << test::ReadFileText(log);
  EXPECT_TRUE(Contains(shown, GetParam().message)) << test::ReadFileText(log);
}

INSTANTIATE_TEST_SUITE_P(
    Table, OciRuntimeWrapperBadValues,
    ::testing::Values(
        BadInput{"a_negative_count",
                 {"HOUDINI_GPU_REQUESTED=-1"},
                 "container 'c1': HOUDINI_GPU_REQUESTED=-1: expected a whole number of GPUs (0 or "
                 "more)"},
        BadInput{"a_word",
                 {"HOUDINI_GPU_REQUEST=abc"},
                 "container 'c1': HOUDINI_GPU_REQUEST=abc: expected a whole number of GPUs"},
        BadInput{"more_than_the_host_has",
                 {"GPUMUX_GPU_REQUEST=9"},
                 "container 'c1' asks for 9 GPUs (GPUMUX_GPU_REQUEST=9), but the host has only 4"},
        BadInput{"gpu_enabled_maybe",
                 {"HOUDINI_GPU_ENABLED=maybe"},
                 "HOUDINI_GPU_ENABLED=maybe: expected true or false"}),
    test::CaseName());

TEST_F(OciRuntimeWrapper, AMalformedConfigJsonIsAnErrorNamingIt) {
  dir_.Write("bundle/config.json", "{\"process\": {\"env\": [\"HOUDINI_GPU_REQUESTED=1\"");
  const test::Captured w = Wrapper(Create("c1"));
  EXPECT_TRUE(w.exit.Exited(1)) << w.err;
  EXPECT_TRUE(RuntimeArgs().empty());
  EXPECT_TRUE(
      Contains(w.err, "gpumux oci-runtime: " + (bundle_ / "config.json").string() + ": not JSON ("))
      << w.err;
}

TEST_F(OciRuntimeWrapper, AMalformedLedgerIsAnErrorNamingIt) {
  fs::create_directories(state_);
  dir_.Write("state/reservations.json", "{\"reservations\": [{\"container\": 1}]}");
  WriteConfig({"HOUDINI_GPU_REQUESTED=1"});
  const test::Captured w = Wrapper(Create("c1"));
  EXPECT_TRUE(w.exit.Exited(1)) << w.err;
  EXPECT_TRUE(RuntimeArgs().empty());
  EXPECT_TRUE(
      Contains(w.err, (state_ / "reservations.json").string() + ": malformed reservation ledger"))
      << w.err;
}

// The reproducer: wrongly typed config.json fields used to abort the wrapper after the
// reservation was written. Now: refused before the grant, naming file and field; no
// reservation, no runtime, config.json untouched.
TEST_F(OciRuntimeWrapper, AConfigJsonFieldOfTheWrongTypeIsRefusedBeforeTheGrant) {
  for (const auto& [field, patch] : std::vector<std::pair<std::string, Json>>{
           {"linux", {{"linux", "x"}}},
           {"hooks", {{"hooks", Json::array()}}},
           {"devices", {{"linux", {{"devices", Json::object()}}}}},
           {"resources", {{"linux", {{"resources", 1}}}}},
           {"env", {{"process", {{"env", "NVIDIA_VISIBLE_DEVICES=all"}}}}}}) {
    Json c = {{"ociVersion", "1.0.2"}, {"process", {{"env", {"HOUDINI_GPU_REQUESTED=1"}}}}};
    for (const auto& [k, v] : patch.items()) c[k] = v;
    const std::string text = c.dump();
    dir_.Write("bundle/config.json", text);
    const test::Captured w = Wrapper(Create("c1"));
    EXPECT_TRUE(w.exit.Exited(1)) << field << ": " << w.err;
    EXPECT_TRUE(RuntimeArgs().empty()) << field;
    EXPECT_TRUE(Contains(w.err, (bundle_ / "config.json").string() + ": ")) << w.err;
    EXPECT_TRUE(Contains(w.err, field)) << w.err;
    EXPECT_TRUE(Ledger().reservations.empty()) << field;
    EXPECT_EQ(test::ReadFileText(bundle_ / "config.json"), text) << field;
  }
}

TEST_F(OciRuntimeWrapper, ALedgerNamingAGpuTheHostDoesNotHaveIsRefusedAndKept) {
  fs::create_directories(state_);
  const std::string text =
      R"({"version":1,"reservations":[{"container":"c1","gpus":[4],"since":"x","since_unix":1,)"
      R"("state":"running","holder_pid":1,"holder_start_time":1}]})";
  dir_.Write("state/reservations.json", text);
  WriteConfig({"HOUDINI_GPU_REQUESTED=1"});
  const test::Captured w = Wrapper(Create("c1"));
  EXPECT_TRUE(w.exit.Exited(1)) << w.err;
  EXPECT_TRUE(RuntimeArgs().empty());
  EXPECT_TRUE(Contains(w.err, (state_ / "reservations.json").string() +
                                  ": the reservation of container 'c1' names GPU 4, but the "
                                  "host has 4 GPUs"))
      << w.err;
  EXPECT_EQ(test::ReadFileText(state_ / "reservations.json"), text);
}

TEST_F(OciRuntimeWrapper, AContainerIdWithAControlCharacterIsNotRecorded) {
  WriteConfig({"HOUDINI_GPU_REQUESTED=1"});
  const test::Captured w = Wrapper(Create("c1\nforged"));
  EXPECT_TRUE(w.exit.Exited(1)) << w.err;
  EXPECT_TRUE(RuntimeArgs().empty());
  EXPECT_TRUE(Contains(w.err, "the container id holds a control character ('c1?forged')")) << w.err;
  EXPECT_TRUE(Ledger().reservations.empty());
}

TEST_F(OciRuntimeWrapper, AConfigJsonThatIsAFolderIsAnErrorSayingSo) {
  fs::create_directories(bundle_ / "config.json");
  const test::Captured w = Wrapper(Create("c1"));
  EXPECT_TRUE(w.exit.Exited(1)) << w.err;
  EXPECT_TRUE(RuntimeArgs().empty());
  EXPECT_TRUE(
      Contains(w.err, (bundle_ / "config.json").string() + ": is a directory (expected a file)"))
      << w.err;
}

TEST_F(OciRuntimeWrapper, AMissingRuntimeSaysSo) {
  WriteConfig({"TERM=xterm"});
  const test::Captured w =
      Wrapper(Create("c1"), {"GPUMUX_RUNTIME=" + (dir_.path() / "no-runc").string()});
  EXPECT_TRUE(w.exit.Exited(127)) << w.err;
  EXPECT_TRUE(Contains(w.err, "gpumux oci-runtime: cannot run '")) << w.err;
  EXPECT_TRUE(Contains(w.err, "GPUMUX_RUNTIME")) << w.err;
}

// The runtime is killed after the grant (before any hook took over the reservation): its
// "pending" reservation has a dead holder and the next grant reclaims it.
TEST_F(OciRuntimeWrapper, AReservationOfAKilledRuntimeIsReclaimedByTheNextGrant) {
  const std::string killer = dir_.Write("killed-runtime", "#!/bin/sh\nkill -9 $$\n");
  ::chmod(killer.c_str(), 0755);
  WriteConfig({"HOUDINI_GPU_REQUESTED=4"});
  const test::Captured killed = Wrapper(Create("c1"), {"GPUMUX_RUNTIME=" + killer});
  ASSERT_EQ(killed.exit.signal, SIGKILL) << killed.err;
  ReservationFile f = Ledger();
  ASSERT_EQ(f.reservations.size(), 1u);
  EXPECT_EQ(f.reservations[0].container, "c1");
  EXPECT_EQ(f.reservations[0].state, "pending");
  EXPECT_FALSE(IsAlive(f.reservations[0].holder));

  WriteConfig({"HOUDINI_GPU_REQUESTED=4"});
  const test::Captured next = Wrapper(Create("c2"));
  ASSERT_TRUE(next.exit.Exited(0)) << next.err;
  f = Ledger();
  ASSERT_EQ(f.reservations.size(), 1u);
  EXPECT_EQ(f.reservations[0].container, "c2");
  EXPECT_EQ(f.reservations[0].gpus, (std::vector<int>{0, 1, 2, 3}));
}

// GPUMUX_FAULT=kill-before-rename: the wrapper dies in the middle of writing the ledger.
TEST_F(OciRuntimeWrapper, AWrapperKilledMidWriteLeavesTheLedgerUsable) {
  Hold("render-a", {0});
  const std::string before = test::ReadFileText(state_ / "reservations.json");
  WriteConfig({"HOUDINI_GPU_REQUESTED=2"});
  const test::Captured killed = Wrapper(Create("c1"), {"GPUMUX_FAULT=kill-before-rename"});
  ASSERT_EQ(killed.exit.signal, SIGKILL)
      << "the fault injection point did not fire: " << killed.err;
  EXPECT_TRUE(RuntimeArgs().empty());
  EXPECT_EQ(test::ReadFileText(state_ / "reservations.json"), before);
  EXPECT_TRUE(fs::exists(state_ / "reservations.json.tmp"));

  std::vector<std::string> gpus_args{"gpus", "--reservations"};
  for (const std::string& f : HostFlags()) gpus_args.push_back(f);
  const CliRun listing = Gpumux(gpus_args);
  EXPECT_EQ(listing.code, 0) << listing.err;
  EXPECT_TRUE(Contains(listing.out, "reserved by 'render-a'")) << listing.out;

  WriteConfig({"HOUDINI_GPU_REQUESTED=3"});
  const test::Captured next = Wrapper(Create("c2"));
  ASSERT_TRUE(next.exit.Exited(0)) << next.err;
  const ReservationFile f = Ledger();
  ASSERT_EQ(f.reservations.size(), 2u);
  EXPECT_EQ(f.reservations[1].container, "c2");
  EXPECT_EQ(f.reservations[1].gpus, (std::vector<int>{1, 2, 3}));
  EXPECT_FALSE(fs::exists(state_ / "reservations.json.tmp"));
}

// --- The runtime's --log file: where containerd's shim reads why the runtime failed ---

struct LogCase {
  const char* name;
  std::vector<std::string> flags;  // LOG stands for the log file's path
  bool json;
};

class OciRuntimeWrapperLog : public OciRuntimeWrapper,
                             public ::testing::WithParamInterface<LogCase> {};

TEST_P(OciRuntimeWrapperLog, ARefusalIsTheLastErrorLineOfTheRuntimeLog) {
  Hold("render-a", {0, 1, 2, 3});
  WriteConfig({"HOUDINI_GPU_REQUESTED=1"});
  const std::string log = (bundle_ / "log.json").string();
  const std::string earlier =
      GetParam().json ? R"({"level":"info","msg":"earlier","time":"2024-05-01T09:00:00Z"})"
                      : R"(time="2024-05-01T09:00:00Z" level=info msg=earlier)";
  dir_.Write("bundle/log.json", earlier + "\n");
  std::vector<std::string> args;
  for (const std::string& f : GetParam().flags) {
    const auto at = f.find("LOG");
    args.push_back(at == std::string::npos ? f : f.substr(0, at) + log);
  }
  for (const std::string& a : Create("c2")) args.push_back(a);
  const test::Captured w = Wrapper(args);
  EXPECT_TRUE(w.exit.Exited(1)) << w.err;
  EXPECT_TRUE(RuntimeArgs().empty());
  const std::string reason =
      "container 'c2' asks for 1 GPU (HOUDINI_GPU_REQUESTED=1); 0 of 4 free; GPUs 0,1,2,3 "
      "reserved by 'render-a' since 2024-05-01T10:00:00Z";
  EXPECT_TRUE(Contains(w.err, reason)) << w.err;
  std::vector<std::string> lines;
  std::istringstream in(test::ReadFileText(log));
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 2u) << test::ReadFileText(log);
  EXPECT_EQ(lines[0], earlier) << "appended, not overwritten";
  if (GetParam().json) {
    EXPECT_EQ(testing_fixtures::LastRuntimeError(log), "gpumux: " + reason);
    const Json last = Json::parse(lines[1]);
    EXPECT_EQ(last["level"], "error");
    EXPECT_TRUE(std::regex_match(last["time"].get<std::string>(),
                                 std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)")))
        << lines[1];
  } else {
    EXPECT_TRUE(std::regex_match(
        lines[1], std::regex(R"(time="\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ" level=error msg=".*")")))
        << lines[1];
    EXPECT_TRUE(Contains(lines[1], R"(msg="gpumux: )" + reason + "\"")) << lines[1];
  }
}

INSTANTIATE_TEST_SUITE_P(
    Table, OciRuntimeWrapperLog,
    ::testing::Values(
        LogCase{"json_as_containerd_passes_it", {"--log", "LOG", "--log-format", "json"}, true},
        LogCase{"json_with_equals_signs", {"--log=LOG", "--log-format=json"}, true},
        LogCase{"json_with_single_dashes", {"-log", "LOG", "-log-format", "json"}, true},
        LogCase{"text_by_default", {"--log", "LOG"}, false},
        LogCase{"text_when_asked", {"--log-format", "text", "--log", "LOG"}, false}),
    test::CaseName());

TEST_F(OciRuntimeWrapper, TheLogOptionsReachTheRuntimeWhichWritesTheLogItself) {
  WriteConfig({"HOUDINI_GPU_REQUESTED=1"});
  const std::string log = (bundle_ / "log.json").string();
  std::vector<std::string> args{"--log", log, "--log-format", "json"};
  for (const std::string& a : Create("c1")) args.push_back(a);
  const test::Captured w = Wrapper(args);
  ASSERT_TRUE(w.exit.Exited(0)) << w.err;
  EXPECT_EQ(RuntimeArgs(), args);
  EXPECT_FALSE(fs::exists(log)) << "nothing to say when the runtime runs";
}

TEST_F(OciRuntimeWrapper, ARuntimeThatCannotRunIsInTheLogToo) {
  WriteConfig({"TERM=xterm"});
  const std::string log = (bundle_ / "log.json").string();
  std::vector<std::string> args{"--log", log, "--log-format", "json"};
  for (const std::string& a : Create("c1")) args.push_back(a);
  const test::Captured w = Wrapper(args, {"GPUMUX_RUNTIME=" + (dir_.path() / "no-runc").string()});
  EXPECT_TRUE(w.exit.Exited(127)) << w.err;
  EXPECT_TRUE(Contains(testing_fixtures::LastRuntimeError(log),
                       "gpumux: cannot run '" + (dir_.path() / "no-runc").string() + "'"))
      << test::ReadFileText(log);
}

// --- Holders named by their pod ---

TEST_F(OciRuntimeWrapper, AReservationRecordsThePodAndHoldersAreShownByIt) {
  const std::string id(64, 'a');
  WriteConfig({"HOUDINI_GPU_REQUESTED=2"}, CriAnnotations("render", "blender-7f9c", "worker"));
  ASSERT_TRUE(Wrapper(Create(id)).exit.Exited(0));
  ReservationFile f = Ledger();
  ASSERT_EQ(f.reservations.size(), 1u);
  EXPECT_EQ(f.reservations[0].container, id);
  EXPECT_EQ(HolderName(f.reservations[0]), "render/blender-7f9c/worker");

  // The fake runtime has exited, so that reservation is reclaimable; hold GPUs for real.
  ASSERT_TRUE(
      ReservationStore(state_.string())
          .Update([&](ReservationFile& file) -> core::Result<bool> {
            file.reservations.clear();
            Reservation r = testing_fixtures::Held(id, {0, 1, 2}, CurrentProcess(::getpid()));
            r.pod = {"render", "blender-7f9c", "worker"};
            file.reservations.push_back(r);
            return true;
          })
          .has_value());
  const std::string log = (bundle_ / "log.json").string();
  std::vector<std::string> args{"--log", log, "--log-format", "json"};
  const std::string other(64, 'b');
  for (const std::string& a : Create(other)) args.push_back(a);
  WriteConfig({"HOUDINI_GPU_REQUESTED=2"}, CriAnnotations("default", "train", "main"));
  const test::Captured w = Wrapper(args);
  EXPECT_TRUE(w.exit.Exited(1)) << w.err;
  const std::string held = "GPUs 0,1,2 reserved by 'render/blender-7f9c/worker' since";
  EXPECT_TRUE(Contains(w.err, held)) << w.err;
  EXPECT_TRUE(Contains(testing_fixtures::LastRuntimeError(log), held)) << test::ReadFileText(log);
  EXPECT_FALSE(Contains(w.err, "reserved by '" + id)) << w.err;

  std::vector<std::string> list_args{"gpus", "--reservations"};
  for (const std::string& flag : HostFlags()) list_args.push_back(flag);
  const CliRun listing = Gpumux(list_args);
  EXPECT_EQ(listing.code, 0) << listing.err;
  EXPECT_TRUE(Contains(listing.out,
                       "GPU 1: A100 (UUID: GPU-bbbb)  reserved by 'render/blender-7f9c/worker' "
                       "(container aaaaaaaaaaaa) since 2024-05-01T10:00:00Z (running)\n"))
      << listing.out;
  list_args.push_back("--json");
  const CliRun j = Gpumux(list_args);
  EXPECT_EQ(j.code, 0) << j.err;
  const Json gpus = Json::parse(j.out);
  EXPECT_EQ(gpus[1]["reserved_by"], id);
  EXPECT_EQ(gpus[1]["reserved_by_pod"], "render/blender-7f9c/worker");
  EXPECT_TRUE(gpus[3]["reserved_by"].is_null());
}

// --- A gpumux device plugin on the same node ---

TEST_F(OciRuntimeWrapper, AGpumuxDevicePluginOnTheNodeStopsAReservationBeforeTheRuntime) {
  const std::string socket = (plugins_ / "gpumux-gpu.sock").string();
  testing_fixtures::ListeningSocket plugin(socket);
  WriteConfig({"HOUDINI_GPU_REQUESTED=1"});
  const std::string log = (bundle_ / "log.json").string();
  std::vector<std::string> args{"--log", log, "--log-format", "json"};
  for (const std::string& a : Create("c1")) args.push_back(a);
  const test::Captured w = Wrapper(args);
  EXPECT_TRUE(w.exit.Exited(1)) << w.err;
  EXPECT_TRUE(RuntimeArgs().empty()) << "the container must not start";
  const std::string reason = "a gpumux device plugin serves this node (" + socket +
                             "); the OCI runtime path keeps its own GPU ledger and would grant "
                             "GPUs twice; use one of the two";
  EXPECT_TRUE(Contains(w.err, "gpumux: " + reason)) << w.err;
  EXPECT_EQ(testing_fixtures::LastRuntimeError(log), "gpumux: " + reason);
  EXPECT_TRUE(Contains(HookLog(), reason)) << HookLog();
  EXPECT_TRUE(Ledger().reservations.empty());

  // A shared ask would reach the GPUs the plugin grants to pods: refused the same way.
  WriteConfig({"NVIDIA_VISIBLE_DEVICES=0"});
  const test::Captured shared = Wrapper(Create("c2"));
  EXPECT_TRUE(shared.exit.Exited(1)) << shared.err;
  EXPECT_TRUE(Contains(shared.err, "gpumux: " + reason)) << shared.err;
  // A plugin that was killed left its socket behind: reservations work again.
  plugin.Close();
  WriteConfig({"HOUDINI_GPU_REQUESTED=1"});
  const test::Captured after = Wrapper(Create("c3"));
  EXPECT_TRUE(after.exit.Exited(0)) << after.err;
}

TEST_F(HookCommand, AGpumuxDevicePluginOnTheNodeFailsTheHook) {
  const std::string socket = (plugins_ / "gpumux-gpu-milli.sock").string();
  testing_fixtures::ListeningSocket plugin(socket);
  WriteConfig({"HOUDINI_GPU_REQUESTED=1"});
  const CliRun r = Hook("createRuntime", State("c1"));
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(Contains(
      r.err, "hook createRuntime: a gpumux device plugin serves this node (" + socket + ")"))
      << r.err;
  EXPECT_FALSE(fs::exists(state_ / "reservations.json"));
}

}  // namespace
}  // namespace gpumux::hook
