// hook::ParseState, LoadConfig/SaveConfig, ConfigEnv, PodOf, SetEnv, AddDevices, AddHook.
#include "gpumux/hook/oci.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "tests/testing/builders.h"

namespace gpumux::hook {
namespace {

using Json = nlohmann::json;

core::Result<ContainerState> StateOf(const std::string& text) {
  std::istringstream in(text);
  return ParseState(in);
}

TEST(ParseState, ReadsIdPidAndBundle) {
  const auto s =
      StateOf(R"({"ociVersion":"1.0.2","id":"c1","status":"creating","pid":4242,"bundle":"/b/c1",)"
              R"("annotations":{"x":"y"}})");
  ASSERT_TRUE(s.has_value()) << s.error().message;
  EXPECT_EQ(s->id, "c1");
  EXPECT_EQ(s->pid, 4242);
  EXPECT_EQ(s->bundle, "/b/c1");
}

TEST(ParseState, APoststopStateWithoutPidHasPidZero) {
  const auto s = StateOf(R"({"id":"c1","status":"stopped","bundle":"/b"})");
  ASSERT_TRUE(s.has_value()) << s.error().message;
  EXPECT_EQ(s->pid, 0);
}

struct BadState {
  const char* name;
  std::string text;
  std::string message_start;  // the message starts with this
};

class ParseStateErrors : public ::testing::TestWithParam<BadState> {};

TEST_P(ParseStateErrors, NameTheInputAndTheField) {
  const auto s = StateOf(GetParam().text);
  ASSERT_FALSE(s.has_value()) << "accepted " << GetParam().text;
  EXPECT_EQ(s.error().code, core::ErrorCode::kInvalidArgument);
  EXPECT_EQ(s.error().message.rfind(GetParam().message_start, 0), 0u) << s.error().message;
}

INSTANTIATE_TEST_SUITE_P(
    Table, ParseStateErrors,
    ::testing::Values(
        BadState{"empty_input", "", "container state on stdin: not JSON ("},
        BadState{"truncated_json", R"({"id":"c1","bun)", "container state on stdin: not JSON ("},
        BadState{"a_list", R"(["c1"])", "container state on stdin: not a JSON object"},
        BadState{"nested_too_deep",
                 R"({"id":"c1","annotations":)" + std::string(100000, '[') +
                     std::string(100000, ']') + "}",
                 "container state on stdin: nested deeper than 128 levels"},
        BadState{"no_id", R"({"pid":1,"bundle":"/b"})",
                 "container state on stdin: field 'id' missing or not a non-empty string"},
        BadState{"an_empty_id", R"({"id":"","pid":1,"bundle":"/b"})",
                 "container state on stdin: field 'id' missing or not a non-empty string"},
        BadState{"a_numeric_id", R"({"id":7,"pid":1,"bundle":"/b"})",
                 "container state on stdin: field 'id' missing or not a non-empty string"},
        BadState{"a_negative_pid", R"({"id":"c1","pid":-5,"bundle":"/b"})",
                 "container state on stdin: field 'pid' is not a non-negative integer"},
        BadState{"a_string_pid", R"({"id":"c1","pid":"12","bundle":"/b"})",
                 "container state on stdin: field 'pid' is not a non-negative integer"},
        BadState{"a_fractional_pid", R"({"id":"c1","pid":1.5,"bundle":"/b"})",
                 "container state on stdin: field 'pid' is not a non-negative integer"},
        BadState{"no_bundle", R"({"id":"c1","pid":1})",
                 "container state on stdin: field 'bundle' missing or not a non-empty string"},
        BadState{"an_empty_bundle", R"({"id":"c1","pid":1,"bundle":""})",
                 "container state on stdin: field 'bundle' missing or not a non-empty string"},
        BadState{"a_numeric_bundle", R"({"id":"c1","pid":1,"bundle":7})",
                 "container state on stdin: field 'bundle' missing or not a non-empty string"},
        BadState{"a_bundle_with_a_nul", R"({"id":"c1","pid":1,"bundle":"/b\u0000/x"})",
                 "container state on stdin: field 'bundle' holds a NUL character"},
        BadState{"a_pid_beyond_pid_max_limit", R"({"id":"c1","pid":4194305,"bundle":"/b"})",
                 "container state on stdin: field 'pid' is not a non-negative integer up to "
                 "4194304 (hook::kMaxPid)"},
        BadState{"a_pid_beyond_int64", R"({"id":"c1","pid":18446744073709551615,"bundle":"/b"})",
                 "container state on stdin: field 'pid' is not a non-negative integer"},
        BadState{"a_pid_below_int64", R"({"id":"c1","pid":-9223372036854775808,"bundle":"/b"})",
                 "container state on stdin: field 'pid' is not a non-negative integer"},
        BadState{"an_id_with_a_newline", R"({"id":"c1\nforged log line","bundle":"/b"})",
                 "container state on stdin: field 'id' holds a control character"},
        BadState{"an_id_longer_than_the_limit",
                 R"({"id":")" + std::string(kMaxContainerIdBytes + 1, 'a') + R"(","bundle":"/b"})",
                 "container state on stdin: field 'id' is longer than 1024 bytes "
                 "(hook::kMaxContainerIdBytes)"},
        BadState{"more_than_the_limit_on_stdin",
                 R"({"id":"c1","bundle":"/b","x":")" + std::string(kMaxStateBytes, 'x') + R"("})",
                 "container state on stdin: larger than 1048576 bytes (hook::kMaxStateBytes)"}),
    test::CaseName());

TEST(CheckContainerId, AcceptsRuntimeIdsAndRefusesEmptyLongOrControlCharacters) {
  EXPECT_TRUE(CheckContainerId(std::string(64, 'f'), "id").has_value());
  EXPECT_TRUE(CheckContainerId("default_render-7f9c.main", "id").has_value());
  EXPECT_EQ(CheckContainerId("", "id").error().message, "id is empty");
  EXPECT_EQ(CheckContainerId(std::string(kMaxContainerIdBytes + 1, 'a'), "id").error().message,
            "id is longer than 1024 bytes (hook::kMaxContainerIdBytes)");
  EXPECT_EQ(CheckContainerId("c1\nGPU 0 free", "id").error().message,
            "id holds a control character ('c1?GPU 0 free')");
}

TEST(LoadConfig, ReadsTheBundlesConfigJson) {
  test::ScratchDir dir;
  dir.Write("config.json", R"({"ociVersion":"1.0.2","process":{"env":["A=1"]}})");
  const auto c = LoadConfig(dir.path().string());
  ASSERT_TRUE(c.has_value()) << c.error().message;
  EXPECT_EQ((*c)["process"]["env"][0], "A=1");
}

TEST(LoadConfig, ErrorsNameTheFile) {
  test::ScratchDir dir;
  const std::string bundle = dir.path().string();
  const std::string path = bundle + "/config.json";
  auto missing = LoadConfig(bundle);
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().message, path + ": no such file");

  dir.Write("config.json", R"({"process": {"env": [)");
  auto malformed = LoadConfig(bundle);
  ASSERT_FALSE(malformed.has_value());
  EXPECT_EQ(malformed.error().message.rfind(path + ": not JSON (", 0), 0u)
      << malformed.error().message;

  dir.Write("config.json", "[1,2]");
  auto list = LoadConfig(bundle);
  ASSERT_FALSE(list.has_value());
  EXPECT_EQ(list.error().message, path + ": not a JSON object");
}

TEST(LoadConfig, AConfigJsonThatIsAFolderIsAnErrorSayingSo) {
  test::ScratchDir dir;
  std::filesystem::create_directories(dir.path() / "config.json");
  const auto c = LoadConfig(dir.path().string());
  ASSERT_FALSE(c.has_value());
  EXPECT_EQ(c.error().message,
            dir.path().string() + "/config.json: is a directory (expected a file)");
}

TEST(LoadConfig, ADocumentNestedDeeperThanTheLimitIsRefusedNotRecursedInto) {
  test::ScratchDir dir;
  const int depth = 100000;
  dir.Write("config.json",
            R"({"x-vendor":)" + std::string(depth, '[') + std::string(depth, ']') + "}");
  const auto c = LoadConfig(dir.path().string());
  ASSERT_FALSE(c.has_value());
  EXPECT_EQ(c.error().message,
            dir.path().string() + "/config.json: nested deeper than 64 levels (at byte 75)");
}

TEST(LoadConfig, AFieldOfTheWrongTypeIsRefusedNamingTheFileAndTheField) {
  test::ScratchDir dir;
  dir.Write("config.json", R"({"process":{"env":["A=1"]},"root":"rootfs"})");
  const auto c = LoadConfig(dir.path().string());
  ASSERT_FALSE(c.has_value());
  EXPECT_EQ(c.error().message, dir.path().string() + "/config.json: 'root' is not an object");
}

struct ConfigCase {
  const char* name;
  std::string json;
  std::string message;  // CheckConfig's error after "cfg: "; "" = accepted
};

class CheckConfigTable : public ::testing::TestWithParam<ConfigCase> {};

TEST_P(CheckConfigTable, RefusesEveryFieldGpumuxTouchesWhenItHasTheWrongType) {
  const auto ok = CheckConfig(Json::parse(GetParam().json), "cfg");
  if (GetParam().message.empty()) {
    EXPECT_TRUE(ok.has_value()) << ok.error().message;
  } else {
    ASSERT_FALSE(ok.has_value()) << "accepted " << GetParam().json;
    EXPECT_EQ(ok.error().code, core::ErrorCode::kInvalidArgument);
    EXPECT_EQ(ok.error().message, "cfg: " + GetParam().message);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Table, CheckConfigTable,
    ::testing::Values(
        ConfigCase{"a_runc_spec_config",
                   R"({"ociVersion":"1.0.2","process":{"env":["A=1"],"args":["sh"]},)"
                   R"("root":{"path":"rootfs","readonly":true},"hooks":{"poststop":[]},)"
                   R"("linux":{"devices":[{"path":"/dev/fuse"}],"resources":{"devices":[]}},)"
                   R"("annotations":{"a":"b"}})",
                   ""},
        ConfigCase{"nulls_are_absent_fields",
                   R"({"process":null,"root":null,"linux":{"devices":null,"resources":null},)"
                   R"("hooks":{"poststop":null},"annotations":null})",
                   ""},
        ConfigCase{"not_an_object", R"([1])", "not a JSON object"},
        ConfigCase{"process_a_string", R"({"process":"sh"})", "'process' is not an object"},
        ConfigCase{"process_env_a_string", R"({"process":{"env":"A=1"}})",
                   "'process.env' is not a list"},
        ConfigCase{"process_env_a_number", R"({"process":{"env":["A=1",2]}})",
                   "'process.env[1]' is not a string"},
        ConfigCase{"root_a_string", R"({"root":"rootfs"})", "'root' is not an object"},
        ConfigCase{"root_path_a_number", R"({"root":{"path":1}})", "'root.path' is not a string"},
        ConfigCase{"linux_a_string", R"({"linux":"x"})", "'linux' is not an object"},
        ConfigCase{"linux_devices_an_object", R"({"linux":{"devices":{}}})",
                   "'linux.devices' is not a list"},
        ConfigCase{"a_device_that_is_a_string", R"({"linux":{"devices":["/dev/fuse"]}})",
                   "'linux.devices[0]' is not an object"},
        ConfigCase{"a_device_path_that_is_a_number", R"({"linux":{"devices":[{},{"path":7}]}})",
                   "'linux.devices[1].path' is not a string"},
        ConfigCase{"linux_resources_a_number", R"({"linux":{"resources":1}})",
                   "'linux.resources' is not an object"},
        ConfigCase{"linux_resources_devices_an_object", R"({"linux":{"resources":{"devices":{}}}})",
                   "'linux.resources.devices' is not a list"},
        ConfigCase{"hooks_a_list", R"({"hooks":[]})", "'hooks' is not an object"},
        ConfigCase{"a_hook_stage_an_object", R"({"hooks":{"poststop":{}}})",
                   "'hooks.poststop' is not a list"},
        ConfigCase{"a_hooks_key_that_is_no_stage_is_left_alone",
                   R"({"hooks":{"x-vendor":{"any":"thing"}}})", ""},
        ConfigCase{"annotations_a_list", R"({"annotations":[]})", "'annotations' is not an object"},
        ConfigCase{"every_fault_is_named_at_once", R"({"linux":"x","hooks":[],"root":1})",
                   "'root' is not an object; 'linux' is not an object; 'hooks' is not an object"}),
    test::CaseName());

TEST(ConfigRootPath, IsRootfsByDefaultAndRootPathWhenGiven) {
  EXPECT_EQ(ConfigRootPath(Json::object(), "cfg"), std::string("rootfs"));
  EXPECT_EQ(ConfigRootPath(Json::parse(R"({"root":{"path":"/abs"}})"), "cfg"), std::string("/abs"));
  const auto bad = ConfigRootPath(Json::parse(R"({"root":{"path":[]}})"), "b/config.json");
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().message, "b/config.json: 'root.path' is not a string");
}

// The editors never throw on a config.json that skipped CheckConfig: they say which field is
// in the way and change nothing.
TEST(ConfigEditors, AFieldOfTheWrongTypeIsAnErrorAndTheConfigIsLeftAsItWas) {
  struct Edit {
    const char* json;
    std::function<core::Result<void>(Json&)> edit;
    std::string message;
  };
  const std::vector<DeviceNode> devices{DeviceNode{"/dev/null", "/dev/nvidia0", 1, 3}};
  const std::vector<Edit> edits{
      {R"({"process":"sh"})", [](Json& c) { return SetEnv(c, "A", "1"); },
       "'process' is not an object"},
      {R"({"process":{"env":{}}})", [](Json& c) { return SetEnv(c, "A", "1"); },
       "'process.env' is not a list"},
      {R"({"linux":"x"})", [&](Json& c) { return AddDevices(c, devices); },
       "'linux' is not an object"},
      {R"({"linux":{"devices":{}}})", [&](Json& c) { return AddDevices(c, devices); },
       "'linux.devices' is not a list"},
      {R"({"linux":{"devices":[1]}})", [&](Json& c) { return AddDevices(c, devices); },
       "'linux.devices[0]' is not an object"},
      {R"({"linux":{"resources":1}})", [&](Json& c) { return AddDevices(c, devices); },
       "'linux.resources' is not an object"},
      {R"({"linux":{"resources":{"devices":"all"}}})",
       [&](Json& c) { return AddDevices(c, devices); }, "'linux.resources.devices' is not a list"},
      {R"({"hooks":[]})", [](Json& c) { return AddHook(c, "poststop", "/g", {"g"}, {}); },
       "'hooks' is not an object"},
      {R"({"hooks":{"poststop":"x"}})",
       [](Json& c) { return AddHook(c, "poststop", "/g", {"g"}, {}); },
       "'hooks.poststop' is not a list"},
      {R"("a string")", [](Json& c) { return SetEnv(c, "A", "1"); }, "not a JSON object"},
  };
  for (const Edit& e : edits) {
    Json c = Json::parse(e.json);
    const Json before = c;
    const auto r = e.edit(c);
    ASSERT_FALSE(r.has_value()) << e.json;
    EXPECT_EQ(r.error().message, e.message) << e.json;
    EXPECT_EQ(c, before) << e.json;
  }
}

TEST(SaveConfig, WritesWhatLoadConfigReadsBackKeepingUnknownFields) {
  test::ScratchDir dir;
  dir.Write("config.json",
            R"({"ociVersion":"1.0.2","x-vendor":{"keep":[1,2,3]},"process":{"env":["A=1"]}})");
  auto c = LoadConfig(dir.path().string());
  ASSERT_TRUE(c.has_value()) << c.error().message;
  ASSERT_TRUE(SetEnv(*c, "B", "2").has_value());
  ASSERT_TRUE(SaveConfig(dir.path().string(), *c).has_value());
  const auto back = LoadConfig(dir.path().string());
  ASSERT_TRUE(back.has_value()) << back.error().message;
  EXPECT_EQ(*back, *c);
  EXPECT_EQ((*back)["x-vendor"]["keep"], Json({1, 2, 3}));
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "config.json.tmp"));
}

TEST(ConfigEnv, ReadsProcessEnv) {
  const auto env = ConfigEnv(Json::parse(R"({"process":{"env":["A=1","B=2"]}})"), "cfg");
  ASSERT_TRUE(env.has_value()) << env.error().message;
  EXPECT_EQ(*env, (std::vector<std::string>{"A=1", "B=2"}));
}

TEST(ConfigEnv, NoProcessOrNoEnvIsAnEmptyEnvironment) {
  for (const char* text :
       {R"({})", R"({"process":null})", R"({"process":{}})", R"({"process":{"env":null}})"}) {
    const auto env = ConfigEnv(Json::parse(text), "cfg");
    ASSERT_TRUE(env.has_value()) << text << ": " << env.error().message;
    EXPECT_TRUE(env->empty()) << text;
  }
}

TEST(ConfigEnv, ErrorsNameTheSourceAndTheField) {
  const auto not_object = ConfigEnv(Json::parse(R"({"process":"sh"})"), "b/config.json");
  ASSERT_FALSE(not_object.has_value());
  EXPECT_EQ(not_object.error().message, "b/config.json: 'process' is not an object");
  const auto not_list = ConfigEnv(Json::parse(R"({"process":{"env":"A=1"}})"), "b/config.json");
  ASSERT_FALSE(not_list.has_value());
  EXPECT_EQ(not_list.error().message, "b/config.json: 'process.env' is not a list");
  const auto not_string =
      ConfigEnv(Json::parse(R"({"process":{"env":["A=1",2]}})"), "b/config.json");
  ASSERT_FALSE(not_string.has_value());
  EXPECT_EQ(not_string.error().message, "b/config.json: 'process.env' holds a non-string entry");
}

TEST(SetEnv, ReplacesEveryEarlierEntryOfTheNameAndKeepsTheOthersInOrder) {
  Json c = Json::parse(R"({"process":{"env":["PATH=/bin","NVIDIA_VISIBLE_DEVICES=all","X=1",)"
                       R"("NVIDIA_VISIBLE_DEVICES=0","NVIDIA_VISIBLE_DEVICES_X=keep"]}})");
  ASSERT_TRUE(SetEnv(c, "NVIDIA_VISIBLE_DEVICES", "GPU-a,GPU-b").has_value());
  EXPECT_EQ(c["process"]["env"], Json({"PATH=/bin", "X=1", "NVIDIA_VISIBLE_DEVICES_X=keep",
                                       "NVIDIA_VISIBLE_DEVICES=GPU-a,GPU-b"}));
}

TEST(SetEnv, CreatesProcessAndEnvWhenAbsent) {
  Json c = Json::object();
  ASSERT_TRUE(SetEnv(c, "GPUMUX_GPUS", "1").has_value());
  EXPECT_EQ(c["process"]["env"], Json({"GPUMUX_GPUS=1"}));
  Json null_env = Json::parse(R"({"process":{"args":["sh"],"env":null}})");
  ASSERT_TRUE(SetEnv(null_env, "A", "").has_value());
  EXPECT_EQ(null_env["process"]["env"], Json({"A="}));
  EXPECT_EQ(null_env["process"]["args"], Json({"sh"}));
}

TEST(SetEnv, WhatItSetsIsWhatConfigEnvAndParseGiveBack) {
  Json c = Json::object();
  ASSERT_TRUE(SetEnv(c, "A", "x=y").has_value());
  const auto env = ConfigEnv(c, "cfg");
  ASSERT_TRUE(env.has_value());
  EXPECT_EQ(*env, std::vector<std::string>{"A=x=y"});
}

std::vector<DeviceNode> TwoDevices() {
  return {DeviceNode{"/tmp/dev/nvidia1", "/dev/nvidia1", 195, 1},
          DeviceNode{"/tmp/dev/nvidiactl", "/dev/nvidiactl", 195, 255}};
}

TEST(AddDevices, AddsCharacterDevicesAndAllowsThemInTheDeviceCgroup) {
  Json c = Json::parse(R"({"linux":{"namespaces":[{"type":"pid"}]}})");
  ASSERT_TRUE(AddDevices(c, TwoDevices()).has_value());
  ASSERT_EQ(c["linux"]["devices"].size(), 2u);
  const Json& d = c["linux"]["devices"][0];
  EXPECT_EQ(d["path"], "/dev/nvidia1") << "the container path, not the host path";
  EXPECT_EQ(d["type"], "c");
  EXPECT_EQ(d["major"], 195);
  EXPECT_EQ(d["minor"], 1);
  EXPECT_EQ(d["fileMode"], 0666);
  EXPECT_EQ(c["linux"]["devices"][1]["path"], "/dev/nvidiactl");
  EXPECT_EQ(c["linux"]["devices"][1]["minor"], 255);
  const Json& allow = c["linux"]["resources"]["devices"];
  ASSERT_EQ(allow.size(), 2u);
  EXPECT_EQ(allow[0], Json::parse(R"({"allow":true,"type":"c","major":195,"minor":1,)"
                                  R"("access":"rwm"})"));
  EXPECT_EQ(c["linux"]["namespaces"], Json::parse(R"([{"type":"pid"}])")) << "kept";
}

TEST(AddDevices, KeepsExistingDevicesAndRulesAndDoesNotRepeatADevice) {
  // The deny-all rule of `runc spec` comes first; the allow rules must come after it.
  Json c =
      Json::parse(R"({"linux":{"devices":[{"path":"/dev/fuse","type":"c","major":10,"minor":229}],)"
                  R"("resources":{"devices":[{"allow":false,"access":"rwm"}]}}})");
  ASSERT_TRUE(AddDevices(c, TwoDevices()).has_value());
  ASSERT_TRUE(AddDevices(c, TwoDevices()).has_value());
  const Json& devices = c["linux"]["devices"];
  ASSERT_EQ(devices.size(), 3u) << devices.dump();
  EXPECT_EQ(devices[0]["path"], "/dev/fuse");
  const Json& allow = c["linux"]["resources"]["devices"];
  EXPECT_EQ(allow[0], Json::parse(R"({"allow":false,"access":"rwm"})"));
  EXPECT_EQ(allow[1]["allow"], true);
}

TEST(AddHook, AppendsAHookWithArgsAndEnvOnce) {
  Json c = Json::parse(R"({"hooks":{"poststop":[{"path":"/other"}]}})");
  ASSERT_TRUE(AddHook(c, "poststop", "/usr/bin/gpumux", {"gpumux", "hook", "poststop"}, {"A=1"})
                  .has_value());
  ASSERT_TRUE(AddHook(c, "poststop", "/usr/bin/gpumux", {"gpumux", "hook", "poststop"}, {"A=1"})
                  .has_value());
  ASSERT_TRUE(
      AddHook(c, "createRuntime", "/usr/bin/gpumux", {"gpumux", "hook", "createRuntime"}, {})
          .has_value());
  const Json& poststop = c["hooks"]["poststop"];
  ASSERT_EQ(poststop.size(), 2u) << poststop.dump();
  EXPECT_EQ(poststop[0]["path"], "/other");
  EXPECT_EQ(poststop[1], Json::parse(R"({"path":"/usr/bin/gpumux",)"
                                     R"("args":["gpumux","hook","poststop"],"env":["A=1"]})"));
  ASSERT_EQ(c["hooks"]["createRuntime"].size(), 1u);
  EXPECT_FALSE(c["hooks"]["createRuntime"][0].contains("env")) << "no env: no env field";
}

TEST(AddHook, AHookWithDifferentEnvIsAnotherHook) {
  Json c = Json::object();
  ASSERT_TRUE(AddHook(c, "poststop", "/g", {"g"}, {"A=1"}).has_value());
  ASSERT_TRUE(AddHook(c, "poststop", "/g", {"g"}, {"A=2"}).has_value());
  EXPECT_EQ(c["hooks"]["poststop"].size(), 2u);
}

struct PodCase {
  const char* name;
  Json annotations;
  PodContainer pod;
};

class PodOfConfig : public ::testing::TestWithParam<PodCase> {};

TEST_P(PodOfConfig, ReadsTheKubeletsAnnotations) {
  Json config = {{"ociVersion", "1.0.2"}};
  if (!GetParam().annotations.is_null()) config["annotations"] = GetParam().annotations;
  const PodContainer p = PodOf(config);
  EXPECT_EQ(p.ns, GetParam().pod.ns);
  EXPECT_EQ(p.pod, GetParam().pod.pod);
  EXPECT_EQ(p.container, GetParam().pod.container);
}

INSTANTIATE_TEST_SUITE_P(
    Table, PodOfConfig,
    ::testing::Values(PodCase{"containerd_cri",
                              {{"io.kubernetes.cri.container-type", "container"},
                               {"io.kubernetes.cri.sandbox-namespace", "render"},
                               {"io.kubernetes.cri.sandbox-name", "blender-7f9c"},
                               {"io.kubernetes.cri.container-name", "worker"}},
                              {"render", "blender-7f9c", "worker"}},
                      PodCase{"dockershim_and_cri_o",
                              {{"io.kubernetes.pod.namespace", "default"},
                               {"io.kubernetes.pod.name", "train"},
                               {"io.kubernetes.container.name", "main"}},
                              {"default", "train", "main"}},
                      PodCase{"cri_wins_over_the_older_names",
                              {{"io.kubernetes.pod.namespace", "old"},
                               {"io.kubernetes.cri.sandbox-namespace", "new"},
                               {"io.kubernetes.cri.sandbox-name", "p"},
                               {"io.kubernetes.container.name", "c"}},
                              {"new", "p", "c"}},
                      PodCase{"a_sandbox_has_no_container_name",
                              {{"io.kubernetes.cri.sandbox-namespace", "default"},
                               {"io.kubernetes.cri.sandbox-name", "p"}},
                              {"default", "p", ""}},
                      PodCase{"no_annotations", nullptr, {}},
                      PodCase{
                          "annotations_that_are_not_strings",
                          {{"io.kubernetes.cri.sandbox-name", 7}, {"io.kubernetes.pod.name", ""}},
                          {}}),
    test::CaseName());

}  // namespace
}  // namespace gpumux::hook
