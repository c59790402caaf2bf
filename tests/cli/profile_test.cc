// gpumux profile: the arithmetic from runs to a profile (hand-computed), and the command end to
// end with a fake example script (fast; no PyTorch needed).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "gpumux/sim/dl_workload.h"
#include "src/cli/profile_builder.h"
#include "tests/testing/process.h"

namespace gpumux::cli {
namespace {

namespace fs = std::filesystem;

ExampleRun MakeRun(std::string cls, int batch, std::vector<double> steps,
                   std::vector<double> data = {}, std::vector<double> t_end = {}) {
  ExampleRun r;
  r.cls = std::move(cls);
  r.batch = batch;
  r.step_s = std::move(steps);
  r.data_s = data.empty() ? std::vector<double>(r.step_s.size(), 0.0) : std::move(data);
  r.t_end = std::move(t_end);
  r.memory_mib = 100.2;
  return r;
}

ProfileInputs TwoClasses() {
  ProfileInputs in;
  in.name = "test";
  in.device_name = "CPU";
  in.device_memory_mib = 8192;
  in.classes = {"resnet", "lstm"};
  in.defaults = {{32, 64, 50000, 10, "assumed"}, {16, 32, 50000, 10, "assumed"}};
  // resnet alone at 32: repeat medians 0.020 and 0.022 -> 0.021; data phase 25 % -> busy 0.75.
  in.solo.push_back({"resnet",
                     32,
                     {MakeRun("resnet", 32, {0.020, 0.019, 0.021}, {0.005, 0.005, 0.005}),
                      MakeRun("resnet", 32, {0.022, 0.022, 0.023}, {0.0055, 0.0055, 0.00575})}});
  in.solo.push_back({"lstm", 16, {MakeRun("lstm", 16, {0.040, 0.040, 0.040})}});
  return in;
}

TEST(BuildProfileFrom, SoloRunsGiveTheMedianOfMediansTheBusyFractionAndTheLargestMemory) {
  auto built = BuildProfile(TwoClasses());
  ASSERT_TRUE(built.has_value()) << built.error().message;
  const policy::ClassProfile* r = built->profile.Find("resnet");
  ASSERT_NE(r, nullptr);
  ASSERT_EQ(r->solo.size(), 1u);
  EXPECT_DOUBLE_EQ(r->solo[0].step_s, 0.021);
  EXPECT_NEAR(r->solo[0].gpu_busy, 0.75, 0.002);
  EXPECT_EQ(r->solo[0].memory_mib, 101);
  EXPECT_EQ(r->default_batch, 32);
}

TEST(BuildProfileFrom, ACoLocatedSetKeepsOnlyTheStepsWhileEveryMemberRan) {
  ProfileInputs in = TwoClasses();
  // resnet's steps run [0, 0.1], [0.1685, 0.2], [0.2185, 0.25], [0.4685, 0.5]; lstm's from 0.11
  // to 0.34. Overlap: [0.11, 0.34], so resnet keeps its 2nd and 3rd steps (0.0315 each: 1.5 x its
  // solo 0.021) and lstm all four (0.06: 1.5 x its solo 0.040).
  SetMeasurement set;
  set.repeats.push_back(
      {MakeRun("resnet", 32, {0.1, 0.0315, 0.0315, 0.0315}, {}, {0.1, 0.2, 0.25, 0.5}),
       MakeRun("lstm", 16, {0.06, 0.06, 0.06, 0.06}, {}, {0.17, 0.22, 0.28, 0.34})});
  in.sets.push_back(set);
  auto built = BuildProfile(in);
  ASSERT_TRUE(built.has_value()) << built.error().message;
  ASSERT_EQ(built->profile.measured.size(), 1u);
  const auto& m = built->profile.measured[0];
  EXPECT_EQ(m.classes, (std::vector<std::string>{"resnet", "lstm"}));
  EXPECT_NEAR(m.slowdown[0], 1.5, 1e-9);
  EXPECT_NEAR(m.slowdown[1], 1.5, 1e-9);
  EXPECT_EQ(built->discarded_steps, 2);
}

TEST(BuildProfileFrom, ASlowdownBelowOneIsClampedAndCounted) {
  ProfileInputs in = TwoClasses();
  SetMeasurement set;
  set.repeats.push_back({MakeRun("resnet", 32, {0.018}), MakeRun("lstm", 16, {0.05})});
  in.sets.push_back(set);
  auto built = BuildProfile(in);
  ASSERT_TRUE(built.has_value()) << built.error().message;
  EXPECT_DOUBLE_EQ(built->profile.measured[0].slowdown[0], 1.0);
  EXPECT_EQ(built->clamped_slowdowns, 1);
}

TEST(BuildProfileFrom, AClassWithoutASoloRunIsAnError) {
  ProfileInputs in = TwoClasses();
  in.solo.pop_back();
  auto built = BuildProfile(in);
  ASSERT_FALSE(built.has_value());
  EXPECT_NE(built.error().message.find("lstm"), std::string::npos);
}

TEST(ParseExampleRunOf, ALineThatIsNotTheSummaryNamesTheRun) {
  auto r = ParseExampleRun("Traceback (most recent call last):", "resnet alone at batch 32");
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("resnet alone at batch 32"), std::string::npos);
  EXPECT_FALSE(ParseExampleRun(R"({"class":"a","batch_size":1,"step_s":[]})", "x").has_value());
  EXPECT_FALSE(ParseExampleRun(R"({"class":"a","batch_size":1,"step_s":[-1]})", "x").has_value());
}

// What an example prints is a program's output: numbers no cast may take are refused by name
// (nlohmann casts 1e300 to int, out of range: UB).
TEST(ParseExampleRunOf, NumbersOutOfRangeAreRefusedByName) {
  for (const auto& [line, why] : std::vector<std::pair<std::string, std::string>>{
           {R"({"class":"a","batch_size":1e300,"step_s":[0.1]})", "batch_size is not an integer"},
           {R"({"class":"a","batch_size":4294967297,"step_s":[0.1]})", "batch_size 4294967297"},
           {R"({"class":"a","batch_size":0,"step_s":[0.1]})", "batch_size 0 is outside"},
           {R"({"class":"a","batch_size":8,"step_s":[0.1],"memory_mib":1e300})", "memory_mib"},
           {R"({"class":"a","batch_size":8,"step_s":[0.1],"device_memory_mib":-1})",
            "device_memory_mib"}}) {
    auto r = ParseExampleRun(line, "x");
    ASSERT_FALSE(r.has_value()) << line;
    EXPECT_NE(r.error().message.find(why), std::string::npos) << r.error().message;
  }
  EXPECT_TRUE(
      ParseExampleRun(R"({"class":"a","batch_size":8,"step_s":[0.1],"memory_mib":900})", "x")
          .has_value());
}

// The whole command with a fake example: numbers that depend on the batch size and on how many
// fake examples run at once (they count each other through lock files).
TEST(ProfileCommand, WritesAProfileTheSimulatorLoads) {
  const fs::path dir =
      fs::temp_directory_path() / ("gpumux-profile-test-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "examples");
  for (const char* name : {"alpha", "beta"}) {
    std::ofstream f(dir / "examples" / (std::string(name) + ".py"));
    f << "import argparse, json, os, time\n"
         "p = argparse.ArgumentParser()\n"
         "for o in ('--device', '--threads', '--steps', '--warmup', '--batch-size'):\n"
         "    p.add_argument(o, default=None)\n"
         "p.add_argument('--json', action='store_true'); p.add_argument('--no-sdk', "
         "action='store_true')\n"
         "a = p.parse_args()\n"
         "b = int(a.batch_size or 20)\n"
         "steps = int(a.steps)\n"
         "t0 = time.time()\n"
         "print(json.dumps({'class': '"
      << name
      << "', 'batch_size': b, 'device': 'cpu',\n"
         "  'device_name': 'fake', 'device_memory_mib': 4096, 'torch': 'none', 'python': '3',\n"
         "  'step_s': [0.001 * b] * steps, 'data_s': [0.0002 * b] * steps,\n"
         "  't_end': [t0 + k for k in range(steps)], 'memory_mib': 10 + b}))\n";
  }
  test::ProcessSpec spec;
  spec.argv = {GPUMUX_BINARY, "profile",
               "--examples",  (dir / "examples").string(),
               "--classes",   "alpha,beta",
               "--batches",   "0.5,1",
               "--sets",      "alpha+beta",
               "--steps",     "4",
               "--warmup",    "0",
               "--repeats",   "1",
               "--device",    "cpu",
               "--python",    "python3",
               "--out",       (dir / "p.json").string()};
  auto run = test::RunCaptured(spec, dir, "profile");
  ASSERT_TRUE(run.exit.Exited(0)) << run.err;
  EXPECT_NE(run.err.find("run 1/5"), std::string::npos) << run.err;
  auto profile = sim::ProfileByNameOrPath((dir / "p.json").string());
  ASSERT_TRUE(profile.has_value()) << profile.error().message;
  ASSERT_NE(profile->Find("alpha"), nullptr);
  EXPECT_EQ(profile->Find("alpha")->solo.size(), 2u);  // batches 10 and 20
  EXPECT_DOUBLE_EQ(profile->Find("alpha")->StepSeconds(10), 0.010);
  EXPECT_NEAR(profile->Find("alpha")->GpuBusy(20), 0.8, 1e-9);
  ASSERT_EQ(profile->measured.size(), 1u);
  EXPECT_EQ(profile->measured[0].slowdown, (std::vector<double>{1.0, 1.0}));
  const std::string text = test::ReadFileText(dir / "p.json");
  EXPECT_NE(text.find("\"command\""), std::string::npos);
  EXPECT_NE(text.find("ASSUMED"), std::string::npos);
  fs::remove_all(dir);
}

TEST(ProfileCommand, AnUnknownExampleIsAUsageError) {
  test::ProcessSpec spec;
  spec.argv = {GPUMUX_BINARY, "profile", "--classes", "nosuch", "--examples", "/nonexistent"};
  auto run = test::RunCaptured(spec, fs::temp_directory_path(), "gpumux-profile-bad");
  EXPECT_TRUE(run.exit.Exited(2)) << run.err;
  EXPECT_NE(run.err.find("no example /nonexistent/nosuch.py"), std::string::npos) << run.err;
}

}  // namespace
}  // namespace gpumux::cli
