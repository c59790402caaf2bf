// `gpumux inspect` and `kubectl gpumux` against the in-test API server on loopback: the
// kubeconfig is read as kubectl reads it, the tables come out aligned, -o json parses, and bad
// usage or an unreachable API server exits with a clear message.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "gpumux/cli/cli.h"
#include "tests/inspect/inspect_fixtures.h"
#include "tests/testing/fake_apiserver.h"

namespace gpumux::inspect {
namespace {

using nlohmann::json;
using testing::BoundPod;
using testing::ContainerOf;
using testing::GpuOf;
using testing::NodeJson;
using testing::PodJson;

struct Outcome {
  int code;
  std::string out, err;
};

class InspectCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(api_.ok()) << api_.error();
    char pattern[] = "/tmp/gpumux-inspect-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    scratch_ = pattern;
    kubeconfig_ = WriteKubeconfig(api_.url(), "team-a");
    api_.AddNode(NodeJson("gpu-1", 2, GpuOf{"A100", 40960}));
    const std::int64_t now = static_cast<std::int64_t>(std::time(nullptr));
    json a = BoundPod(PodJson("a", {ContainerOf{"main", 0, 8, 500}}), "gpu-1", {0}, 500, 8192,
                      now - 120);
    a["metadata"]["namespace"] = "team-a";
    api_.AddPod(a);
    api_.AddPod(PodJson("p", {ContainerOf{"main", 0, 48, 0}}));
  }
  void TearDown() override { std::filesystem::remove_all(scratch_); }

  std::string WriteKubeconfig(const std::string& server, const std::string& ns) {
    const auto path = scratch_ / ("kubeconfig-" + ns);
    std::ofstream(path) << "apiVersion: v1\nkind: Config\n"
                           "clusters:\n- name: fake\n  cluster:\n    server: "
                        << server
                        << "\nusers:\n- name: tester\n  user:\n    token: t\n"
                           "contexts:\n- name: test\n  context:\n    cluster: fake\n"
                           "    user: tester\n    namespace: "
                        << ns << "\ncurrent-context: test\n";
    return path.string();
  }

  static Outcome Gpumux(std::vector<std::string> args) {
    std::vector<const char*> argv{"gpumux"};
    for (const auto& a : args) argv.push_back(a.c_str());
    std::ostringstream out, err;
    const int code = cli::Main(static_cast<int>(argv.size()), argv.data(), out, err);
    return {code, out.str(), err.str()};
  }

  test::FakeApiServer api_;
  std::filesystem::path scratch_;
  std::string kubeconfig_;
};

TEST_F(InspectCliTest, NodesPrintsOneAlignedRowPerGpu) {
  const Outcome r = Gpumux({"inspect", "nodes", "--kubeconfig", kubeconfig_});
  ASSERT_EQ(r.code, 0) << r.err;
  std::istringstream lines(r.out);
  std::string header, gpu0, gpu1;
  std::getline(lines, header);
  std::getline(lines, gpu0);
  std::getline(lines, gpu1);
  EXPECT_EQ(
      header.rfind("NODE    GPU   MODEL   MEMORY     COMPUTE     HEALTH    ENFORCED   TENANTS", 0),
      0u)
      << r.out;
  EXPECT_EQ(gpu0, "gpu-1   0     A100    8/40 GiB   500/1000m   Healthy   none       team-a/a")
      << r.out;
  // Why: the node's inventory carries no enforcement record (a plugin from before it).
  EXPECT_NE(r.out.find("node gpu-1: not reported by the node's device plugin"), std::string::npos)
      << r.out;
  EXPECT_EQ(gpu1.rfind("gpu-1   1     A100    0/40 GiB   0/1000m", 0), 0u) << r.out;
  EXPECT_EQ(r.out.find('\033'), std::string::npos) << "no colour off a terminal";
}

TEST_F(InspectCliTest, PodsUseTheContextsNamespaceUnlessToldOtherwise) {
  Outcome r = Gpumux({"inspect", "pods", "--kubeconfig", kubeconfig_});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("POD   CONTAINER   NODE    GPUS"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("a     main        gpu-1   0"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find(" p "), std::string::npos) << r.out;
  r = Gpumux({"inspect", "pods", "-A", "--kubeconfig", kubeconfig_, "-o", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["kind"], "gpumux.io/pods");
  ASSERT_EQ(j["items"].size(), 2u);
  EXPECT_EQ(j["items"][0]["pod"], "p");
  EXPECT_EQ(j["items"][1]["uuids"], json::array({"GPU-gpu-1-0"}));
  r = Gpumux({"inspect", "pods", "-n", "nobody", "--kubeconfig", kubeconfig_});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "No pods with gpumux resources found in namespace nobody.\n");
}

TEST_F(InspectCliTest, WhyExplainsAPendingPodAndFailsForAMissingOne) {
  Outcome r = Gpumux({"inspect", "why", "default/p", "--kubeconfig", kubeconfig_});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("gpu-1   never fits"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fits on 0 of 1 node"), std::string::npos) << r.out;
  r = Gpumux({"inspect", "why", "ghost", "--kubeconfig", kubeconfig_});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("gpumux inspect: pod team-a/ghost not found\n"), std::string::npos);
}

// Issue 33: `why` gives the reasons of the policy the cluster runs, not of a default: the
// installed extender's --policy, expanded from its ConfigMap as Kubernetes does.
TEST_F(InspectCliTest, WhyJudgesWithTheInstalledExtendersPolicy) {
  Outcome r = Gpumux({"inspect", "why", "default/p", "--kubeconfig", kubeconfig_});
  EXPECT_NE(r.err.find("the extender's policy is unknown (reading deployment "
                       "gpumux-system/gpumux-scheduler: "),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.out.find("policy fgd"), std::string::npos) << r.out;
  api_.Serve("/apis/apps/v1/namespaces/gpumux-system/deployments/gpumux-scheduler",
             json::parse(R"json({"spec":{"template":{"spec":{"containers":[
               {"name":"kube-scheduler"},
               {"name":"gpumux-extender","args":["--listen","127.0.0.1:12345",
                "--policy","$(PLACEMENT_POLICY)"],
                "env":[{"name":"PLACEMENT_POLICY","valueFrom":{"configMapKeyRef":
                  {"name":"gpumux-config-7h2","key":"policy"}}}]}]}}}})json"));
  api_.Serve("/api/v1/namespaces/gpumux-system/configmaps/gpumux-config-7h2",
             json::parse(R"({"data":{"policy":"best-fit"}})"));
  r = Gpumux({"inspect", "why", "default/p", "--kubeconfig", kubeconfig_});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_NE(r.out.find("policy best-fit"), std::string::npos) << r.out;
  r = Gpumux({"inspect", "why", "default/p", "--policy", "fgd-sat", "--kubeconfig", kubeconfig_});
  EXPECT_NE(r.out.find("policy fgd-sat"), std::string::npos) << r.out;
}

TEST_F(InspectCliTest, AMistypedViewAndAMissingKubeconfigSayWhat) {
  Outcome r = Gpumux({"inspect", "nodse", "--kubeconfig", kubeconfig_});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err.substr(0, r.err.find('\n')),
            "gpumux inspect: unknown command 'nodse' (nodes, pods, why, top); did you mean nodes?");
  r = Gpumux({"inspect"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err.substr(0, r.err.find('\n')), "gpumux inspect: say which: nodes, pods, why, top");
  const std::string missing = scratch_.string() + "/no-such-kubeconfig";
  setenv("KUBECONFIG", missing.c_str(), 1);
  r = Gpumux({"inspect", "nodes"});
  unsetenv("KUBECONFIG");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "gpumux inspect: $KUBECONFIG (" + missing + ") names no file that exists\n");
}

TEST_F(InspectCliTest, ReadsTheFirstKubeconfigOfTheEnvironmentLikeKubectl) {
  const std::string other = WriteKubeconfig(api_.url(), "default");
  setenv("KUBECONFIG", (scratch_.string() + "/missing:" + other).c_str(), 1);
  const Outcome r = Gpumux({"inspect", "pods"});
  unsetenv("KUBECONFIG");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("p     main        -      - (1 wanted)"), std::string::npos) << r.out;
}

TEST_F(InspectCliTest, BadUsageAndAnUnreachableServerSayWhat) {
  struct Case {
    std::vector<std::string> args;
    int code;
    std::string err;
  };
  const std::string dead = WriteKubeconfig("http://127.0.0.1:1", "x");
  for (const Case& c :
       std::vector<Case>{{{"inspect", "pods", "-A", "-n", "x", "--kubeconfig", kubeconfig_},
                          2,
                          "gpumux inspect: give -n NAMESPACE or -A, not both\n"},
                         {{"inspect", "why", "p", "-A", "--kubeconfig", kubeconfig_},
                          2,
                          "gpumux inspect: why takes one pod"},
                         {{"inspect", "nodes", "--kubeconfig", scratch_.string() + "/none"},
                          2,
                          "gpumux inspect: "},
                         {{"inspect", "nodes", "--policy", "nope", "--kubeconfig", kubeconfig_},
                          2,
                          "gpumux inspect: --policy: "},
                         {{"inspect", "nodes", "--kubeconfig", dead},
                          1,
                          "gpumux inspect: listing nodes at http://127.0.0.1:1: "}}) {
    const Outcome r = Gpumux(c.args);
    EXPECT_EQ(r.code, c.code) << c.args[1] << ": " << r.err;
    EXPECT_EQ(r.err.rfind(c.err, 0), 0u) << r.err;
  }
}

// kubectl runs `kubectl gpumux ARGS` as `kubectl-gpumux ARGS`: the symlink the build puts next
// to the binary is `gpumux inspect`.
TEST_F(InspectCliTest, TheKubectlPluginSymlinkIsGpumuxInspect) {
  const std::filesystem::path plugin =
      std::filesystem::path(GPUMUX_BINARY).parent_path() / "kubectl-gpumux";
  ASSERT_TRUE(std::filesystem::is_symlink(plugin)) << plugin;
  const std::string command = plugin.string() + " nodes --kubeconfig " + kubeconfig_ + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string out;
  std::array<char, 4096> buf{};
  while (std::size_t n = std::fread(buf.data(), 1, buf.size(), pipe)) out.append(buf.data(), n);
  EXPECT_EQ(pclose(pipe), 0) << out;
  EXPECT_NE(out.find("8/40 GiB   500/1000m"), std::string::npos) << out;
  const std::string help = plugin.string() + " 2>&1";
  pipe = popen(help.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  out.clear();
  while (std::size_t n = std::fread(buf.data(), 1, buf.size(), pipe)) out.append(buf.data(), n);
  EXPECT_EQ(pclose(pipe), 0) << out;
  EXPECT_NE(out.find("kubectl gpumux why"), std::string::npos) << out;
  EXPECT_NE(out.find("Usage: kubectl gpumux [OPTIONS]"), std::string::npos) << out;
  EXPECT_EQ(out.find("gpumux inspect"), std::string::npos) << out;
  pipe = popen((plugin.string() + " nodse 2>&1").c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  out.clear();
  while (std::size_t n = std::fread(buf.data(), 1, buf.size(), pipe)) out.append(buf.data(), n);
  EXPECT_NE(pclose(pipe), 0);
  EXPECT_NE(out.find("kubectl gpumux: unknown command 'nodse'"), std::string::npos) << out;
}

}  // namespace
}  // namespace gpumux::inspect
