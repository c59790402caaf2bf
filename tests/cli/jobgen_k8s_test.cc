// `gpumux jobgen --format k8s|k8s-json`, through gpumux::cli::Main: the same jobs as the CSV, the
// commands of the training examples, the trace pods of --pods, and options that do not apply.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "gpumux/runs/manifests.h"
#include "gpumux/sim/dl_workload.h"
#include "tests/cli/cli_fixtures.h"

namespace gpumux::cli {
namespace {

using nlohmann::json;

std::vector<json> Objects(const CliRun& r) {
  auto objects = runs::ParseManifests(r.out, "stdout");
  EXPECT_TRUE(objects) << (objects ? "" : objects.error().message);
  return objects ? *objects : std::vector<json>{};
}

TEST(JobGenK8s, WritesTheSameJobsAsTheCsvAsPodsWithArrivalClassAndMemory) {
  const CliRun csv = Gpumux({"jobgen", "--count", "6", "--seed", "5"});
  ASSERT_EQ(csv.code, 0) << csv.err;
  std::istringstream in(csv.out);
  auto jobs = sim::ReadJobs(in, "csv", sim::DefaultProfile());
  ASSERT_TRUE(jobs) << jobs.error().message;
  const CliRun yaml = Gpumux({"jobgen", "--count", "6", "--seed", "5", "--format", "k8s"});
  ASSERT_EQ(yaml.code, 0) << yaml.err;
  const std::vector<json> pods = Objects(yaml);
  ASSERT_EQ(pods.size(), 6u);
  for (std::size_t i = 0; i < pods.size(); ++i) {
    const sim::JobSpec& j = (*jobs)[i];
    const json& pod = pods[i];
    SCOPED_TRACE(j.id);
    EXPECT_EQ(pod["kind"], "Pod");
    EXPECT_EQ(pod["metadata"]["name"], j.id);
    EXPECT_EQ(pod["metadata"]["annotations"]["gpumux.io/job"], j.id);
    EXPECT_EQ(pod["metadata"]["annotations"]["gpumux.io/workload-class"], j.cls);
    auto at = sim::ParseSeconds(
        pod["metadata"]["annotations"]["gpumux.io/submit-at-s"].get<std::string>());
    ASSERT_TRUE(at);
    EXPECT_EQ(*at, j.submit_us);
    EXPECT_EQ(pod["spec"]["containers"][0]["resources"]["limits"]["gpumux.io/gpu-mem"],
              std::to_string((j.gpu_mib + 1023) / 1024));
    const json& command = pod["spec"]["containers"][0]["command"];
    EXPECT_EQ(command[0], "python3");
    EXPECT_EQ(command[3], j.cls);  // --class
  }
}

TEST(JobGenK8s, TrainingCommandsTakeTheClassBatchAndStepsFromItsWork) {
  // cpu-example has the examples' own classes: resnet (batch 32, 10 epochs of 50,000 samples).
  const CliRun r = Gpumux({"jobgen", "--format", "k8s", "--profile", "cpu-example", "--mix",
                           "resnet=1", "--count", "1", "--work-scale", "0.01", "--examples-dir",
                           "/x", "--image", "my/train:1", "--coordinator-dir", "none"});
  ASSERT_EQ(r.code, 0) << r.err;
  const std::vector<json> pods = Objects(r);
  ASSERT_EQ(pods.size(), 1u);
  const json& c = pods[0]["spec"]["containers"][0];
  EXPECT_EQ(c["command"], json({"python3", "/x/resnet.py", "--class", "resnet", "--batch-size",
                                "32", "--steps", "157"}));  // ceil(0.01 x 500000 / 32)
  EXPECT_EQ(c["image"], "my/train:1");
  EXPECT_FALSE(pods[0]["spec"].contains("volumes"));
}

TEST(JobGenK8s, ClassesWithoutAnExampleOfTheirOwnRunAStandInOrTheOneGiven) {
  const CliRun r = Gpumux({"jobgen", "--format", "k8s", "--mix", "vgg16=1,adgcl=1", "--count", "8",
                           "--example", "adgcl=lstm.py"});
  ASSERT_EQ(r.code, 0) << r.err;
  for (const json& pod : Objects(r)) {
    const json& c = pod["spec"]["containers"][0];
    const std::string cls = pod["metadata"]["annotations"]["gpumux.io/workload-class"];
    EXPECT_EQ(c["command"][1], cls == "vgg16" ? "/opt/gpumux/python/examples/resnet.py"
                                              : "/opt/gpumux/python/examples/lstm.py");
    EXPECT_EQ(c["image"], "gpumux-train:latest");
    // Pod Security "baseline": no host folder (the device plugin mounts the coordinator's
    // socket), and requests, so not BestEffort.
    EXPECT_FALSE(pod["spec"].contains("volumes"));
    EXPECT_EQ(c["resources"]["requests"], (json{{"cpu", "2000m"}, {"memory", "8192Mi"}}));
  }
}

TEST(JobGenK8s, AHostFolderAndOtherRequestsAreTheUsersChoice) {
  const CliRun r = Gpumux({"jobgen", "--format", "k8s", "--count", "1", "--coordinator-dir",
                           "/run/gpumux", "--job-cpu-milli", "500", "--job-memory-mib", "0"});
  ASSERT_EQ(r.code, 0) << r.err;
  const json pod = Objects(r).at(0);
  EXPECT_EQ(pod["spec"]["volumes"][0]["hostPath"]["path"], "/run/gpumux");
  EXPECT_EQ(pod["spec"]["containers"][0]["resources"]["requests"], (json{{"cpu", "500m"}}));
  const CliRun pods = Gpumux(
      {"jobgen", "--format", "k8s", "--pods", "default", "--count", "1", "--job-cpu-milli", "1"});
  EXPECT_EQ(pods.code, 2);
  EXPECT_NE(pods.err.find("--job-cpu-milli is for training jobs"), std::string::npos) << pods.err;
}

TEST(JobGenK8s, AJobListBecomesJobsAsAJsonList) {
  const std::string path =
      (std::filesystem::temp_directory_path() / "gpumux-jobgen-k8s-list.csv").string();
  {
    std::ofstream out(path);
    out << "job,class,submit_s,gpu_mib\nA_1,vgg16,0,6144\nb2,neumf,12.5,8704\n";
  }
  const CliRun r = Gpumux({"jobgen", "--format", "k8s-json", "--jobs", path, "--kind", "job",
                           "--run", "r7", "--name-prefix", "exp-", "--scheduler-name", "other"});
  std::filesystem::remove(path);
  ASSERT_EQ(r.code, 0) << r.err;
  const json list = json::parse(r.out);
  EXPECT_EQ(list["kind"], "List");
  ASSERT_EQ(list["items"].size(), 2u);
  const json& a = list["items"][0];
  EXPECT_EQ(a["apiVersion"], "batch/v1");
  EXPECT_EQ(a["metadata"]["name"], "exp-a-1");
  EXPECT_EQ(a["metadata"]["labels"]["gpumux.io/run"], "r7");
  EXPECT_EQ(a["spec"]["template"]["metadata"]["annotations"]["gpumux.io/job"], "A_1");
  EXPECT_EQ(a["spec"]["template"]["spec"]["schedulerName"], "other");
  const json& b = list["items"][1];
  EXPECT_EQ(b["metadata"]["annotations"]["gpumux.io/submit-at-s"], "12.5");
  EXPECT_EQ(
      b["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["gpumux.io/gpu-mem"],
      "9");  // 8704 MiB in 1024 MiB units, rounded up
}

TEST(JobGenK8s, TracePodsArriveAtTheirCreationAndSleepAsLongAsTheyRan) {
  const CliRun r = Gpumux(
      {"jobgen", "--format", "k8s", "--pods", "default", "--start-s", "9000000", "--count", "40"});
  ASSERT_EQ(r.code, 0) << r.err;
  const std::vector<json> pods = Objects(r);
  ASSERT_EQ(pods.size(), 40u);
  EXPECT_EQ(pods[0]["metadata"]["annotations"]["gpumux.io/submit-at-s"], "0");
  double last = 0;
  bool whole = false, share = false, cpu_only = false;
  for (const json& pod : pods) {
    const json& a = pod["metadata"]["annotations"];
    const double at = std::stod(a["gpumux.io/submit-at-s"].get<std::string>());
    EXPECT_GE(at, last);
    last = at;
    EXPECT_TRUE(a.contains("gpumux.io/duration-s"));
    EXPECT_FALSE(a.contains("gpumux.io/workload-class"));
    const json& c = pod["spec"]["containers"][0];
    EXPECT_EQ(c["image"], "busybox:1.36");
    EXPECT_EQ(c["command"][2], "exec sleep \"$GPUMUX_DURATION_S\"");
    const json limits = c["resources"].value("limits", json::object());
    whole = whole || limits.contains("gpumux.io/gpu");
    share = share || limits.contains("gpumux.io/gpu-milli");
    cpu_only = cpu_only || limits.empty();
    EXPECT_TRUE(c["resources"]["requests"].contains("cpu"));
  }
  EXPECT_TRUE(whole && share && cpu_only) << "the slice holds every kind of request";
  const CliRun none = Gpumux({"jobgen", "--format", "k8s", "--pods", "default", "--count", "2",
                              "--host-resources", "none"});
  ASSERT_EQ(none.code, 0) << none.err;
  for (const json& pod : Objects(none)) {
    EXPECT_FALSE(pod["spec"]["containers"][0]["resources"].contains("requests"));
  }
}

struct UsageCase {
  std::string name;
  std::vector<std::string> args;
  std::string message;
};

class JobGenK8sUsage : public ::testing::TestWithParam<UsageCase> {};

TEST_P(JobGenK8sUsage, ExitsTwoNamingTheOption) {
  std::vector<std::string> args = {"jobgen"};
  args.insert(args.end(), GetParam().args.begin(), GetParam().args.end());
  const CliRun r = Gpumux(args);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.err.find(GetParam().message), std::string::npos) << r.err;
}

INSTANTIATE_TEST_SUITE_P(
    JobGen, JobGenK8sUsage,
    ::testing::Values(UsageCase{"AManifestOptionWithTheCsvFormat",
                                {"--kind", "job"},
                                "--kind belongs to --format k8s"},
                      UsageCase{"GeneratingOptionsWithPods",
                                {"--format", "k8s", "--pods", "default", "--mix", "uniform"},
                                "--mix generates jobs: it does not apply with --pods"},
                      UsageCase{"JobsAndPodsTogether",
                                {"--format", "k8s", "--pods", "default", "--jobs", "x"},
                                "give --jobs or --pods, not both"},
                      UsageCase{"CountWithAJobList",
                                {"--format", "k8s", "--jobs", "x", "--count", "3"},
                                "--count does not apply with --jobs"},
                      UsageCase{"StartWithoutPods",
                                {"--format", "k8s", "--start-s", "5"},
                                "--start-s belongs to --pods"},
                      UsageCase{"TrainingOptionsWithPods",
                                {"--format", "k8s", "--pods", "default", "--work-scale", "0.1"},
                                "--work-scale is for training jobs"},
                      UsageCase{"AStartAfterTheLastPod",
                                {"--format", "k8s", "--pods", "default", "--start-s", "99999999"},
                                "no pod is created at or after --start-s 99999999"},
                      UsageCase{"AMissingPodList",
                                {"--format", "k8s", "--pods", "/no/such.csv"},
                                "--pods: /no/such.csv: cannot open"},
                      UsageCase{"AClassWithoutExample",
                                {"--format", "k8s", "--profile", "iadeep5-assumed", "--mix",
                                 "iadeep", "--example", "lstm"},
                                "--example 'lstm' is not CLASS=SCRIPT"},
                      UsageCase{"ABadRunLabel",
                                {"--format", "k8s", "--run", "has space"},
                                "is not a label value"},
                      UsageCase{"AnUnknownFormat", {"--format", "helm"}, "--format"}),
    [](const auto& test_case) { return test_case.param.name; });

}  // namespace
}  // namespace gpumux::cli
