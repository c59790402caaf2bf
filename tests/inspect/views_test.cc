#include "gpumux/inspect/views.h"

#include <gtest/gtest.h>

#include <regex>
#include <sstream>

#include "gpumux/core/time.h"
#include "gpumux/kube/coordinator_status.h"
#include "tests/inspect/inspect_fixtures.h"

namespace gpumux::inspect {
namespace {

using nlohmann::json;
using testing::BoundPod;
using testing::ContainerOf;
using testing::GpuOf;
using testing::InNamespace;
using testing::NodeJson;
using testing::PodJson;

constexpr std::int64_t kNow = 1'790'000'000;

ViewOptions Options(std::string ns = "default") {
  ViewOptions o;
  o.ns = std::move(ns);
  o.state.gpu_mem_unit_mib = 1024;
  return o;
}

// The cell of `column` (by key) in each row.
std::vector<std::string> ColumnText(const Table& t, const std::string& key) {
  std::vector<std::string> out;
  for (std::size_t c = 0; c < t.columns.size(); ++c) {
    if (t.columns[c].key != key) continue;
    for (const auto& row : t.rows) out.push_back(row[c].text);
  }
  return out;
}

std::string Notes(const Table& t) {
  std::string all;
  for (const auto& n : t.notes) all += n + "\n";
  return all;
}

// One node, two 40 GiB A100s; default/a holds half of GPU 0 with 8 GiB; team-b/b holds GPU 1
// whole; default/p waits for 1 GPU with 12 GiB.
Snapshot TwoTenants() {
  Snapshot s;
  s.now = kNow;
  s.nodes.push_back(NodeJson("gpu-1", 2, GpuOf{"A100", 40960}));
  s.pods.push_back(BoundPod(PodJson("a", {ContainerOf{"main", 0, 8, 500}}), "gpu-1", {0}, 500, 8192,
                            kNow - 300));
  s.pods.push_back(InNamespace(
      BoundPod(PodJson("b", {ContainerOf{"main", 1, 0, 0}}), "gpu-1", {1}, 1000, 0, kNow - 7200,
               /*exclusive=*/true),
      "team-b"));
  s.pods.push_back(PodJson("p", {ContainerOf{"main", 0, 12, 0}}));
  return s;
}

TEST(NodesViewTest, ShowsEveryGpuWithItsGrantedMemoryComputeHealthAndTenants) {
  auto t = NodesView(TwoTenants(), Options(""));
  ASSERT_TRUE(t) << t.error().message;
  EXPECT_EQ(ColumnText(*t, "node"), (std::vector<std::string>{"gpu-1", "gpu-1"}));
  EXPECT_EQ(ColumnText(*t, "gpu"), (std::vector<std::string>{"0", "1"}));
  EXPECT_EQ(ColumnText(*t, "model"), (std::vector<std::string>{"A100", "A100"}));
  EXPECT_EQ(ColumnText(*t, "memory"), (std::vector<std::string>{"8/40 GiB", "40/40 GiB"}));
  EXPECT_EQ(ColumnText(*t, "compute"), (std::vector<std::string>{"500/1000m", "1000/1000m"}));
  EXPECT_EQ(ColumnText(*t, "health"), (std::vector<std::string>{"Healthy", "Healthy"}));
  EXPECT_EQ(ColumnText(*t, "tenants"), (std::vector<std::string>{"default/a", "team-b/b (whole)"}));
  EXPECT_EQ(t->notes.at(0),
            "1 node, 2 GPUs: memory 48 of 80 GiB granted (60 %), compute 1.50 of 2 GPUs (75 %)");
}

TEST(NodesViewTest, ShowsTenantsOfEveryNamespaceAndNamesUnusableNodesAndUnhealthyGpus) {
  Snapshot s = TwoTenants();
  s.nodes.push_back(NodeJson("gpu-2", 1, GpuOf{"H100", 81920, "Unhealthy"}));
  json broken = NodeJson("gpu-3", 1);
  broken["status"]["allocatable"]["cpu"] = "lots";
  s.nodes.push_back(broken);
  auto t = NodesView(s, Options("default"));
  ASSERT_TRUE(t) << t.error().message;
  EXPECT_EQ(ColumnText(*t, "tenants"),
            (std::vector<std::string>{"default/a", "team-b/b (whole)", "-"}));
  EXPECT_EQ(ColumnText(*t, "health").back(), "Unhealthy");
  EXPECT_EQ(t->rows.back()[5].style, Style::kBad);
  EXPECT_NE(Notes(*t).find("node gpu-3: not usable by gpumux: "), std::string::npos) << Notes(*t);
}

TEST(NodesViewTest, AnUnknownPolicyIsAnError) {
  ViewOptions o = Options();
  o.state.policy = "no-such-policy";
  EXPECT_FALSE(NodesView(TwoTenants(), o));
}

TEST(PodsViewTest, ShowsWhichContainerHoldsWhichGpusAndSinceWhen) {
  auto t = PodsView(TwoTenants(), Options(""));
  ASSERT_EQ(t.columns.front().key, "namespace");
  EXPECT_EQ(ColumnText(t, "pod"), (std::vector<std::string>{"a", "p", "b"}));
  EXPECT_EQ(ColumnText(t, "node"), (std::vector<std::string>{"gpu-1", "-", "gpu-1"}));
  EXPECT_EQ(ColumnText(t, "gpus"), (std::vector<std::string>{"0", "- (1 wanted)", "1"}));
  EXPECT_EQ(ColumnText(t, "gpu_milli"), (std::vector<std::string>{"500m", "shared", "whole"}));
  EXPECT_EQ(ColumnText(t, "gpu_mem_mib"), (std::vector<std::string>{"8 GiB", "12 GiB", "all"}));
  EXPECT_EQ(ColumnText(t, "phase"), (std::vector<std::string>{"Running", "Pending", "Running"}));
  EXPECT_EQ(ColumnText(t, "since"), (std::vector<std::string>{"5m", "-", "120m"}));
  EXPECT_EQ(ColumnText(t, "uuids"), (std::vector<std::string>{"GPU-gpu-1-0", "-", "GPU-gpu-1-1"}));
  const json j = RenderJson(t);
  EXPECT_EQ(j["items"][0]["gpus"], json::array({0}));
  EXPECT_EQ(j["items"][0]["gpu_mem_mib"], 8192);
  EXPECT_EQ(j["items"][0]["since"], core::FormatRfc3339(kNow - 300));
}

TEST(PodsViewTest, ShowsOneNamespaceWithoutTheNamespaceColumnAndSkipsFinishedPods) {
  Snapshot s = TwoTenants();
  json done = BoundPod(PodJson("done", {ContainerOf{"main", 1, 0, 0}}), "gpu-1", {1}, 1000, 0,
                       kNow - 60, true);
  done["status"]["phase"] = "Succeeded";
  s.pods.push_back(done);
  auto t = PodsView(s, Options("default"));
  EXPECT_EQ(t.columns.front().key, "pod");
  EXPECT_EQ(ColumnText(t, "pod"), (std::vector<std::string>{"a", "p"}));
}

TEST(WhyViewTest, ExplainsNodeByNodeWithTheExtendersReasonsFitsFirst) {
  Snapshot s = TwoTenants();
  s.nodes.push_back(NodeJson("gpu-0", 1, GpuOf{"T4", 16384}));
  s.nodes.push_back(NodeJson("gpu-big", 1, GpuOf{"H100", 81920}));
  s.pods.push_back(PodJson("q", {ContainerOf{"main", 0, 36, 0}}));
  auto t = WhyView(s, Options(), "q");
  ASSERT_TRUE(t) << t.error().message;
  EXPECT_EQ(ColumnText(*t, "node"), (std::vector<std::string>{"gpu-big", "gpu-1", "gpu-0"}));
  EXPECT_EQ(ColumnText(*t, "result"),
            (std::vector<std::string>{"fits", "does not fit", "never fits"}));
  const auto reasons = ColumnText(*t, "reason");
  EXPECT_EQ(reasons[0], "-");
  // The extender's words: the closest GPU and what it lacks.
  EXPECT_NE(reasons[1].find("closest is GPU 0"), std::string::npos) << reasons[1];
  EXPECT_NE(reasons[1].find("short"), std::string::npos) << reasons[1];
  EXPECT_NE(Notes(*t).find("pod default/q (main: 1 GPU, 36 GiB), policy fgd: fits on 1 of 3 "
                           "nodes"),
            std::string::npos)
      << Notes(*t);
}

TEST(WhyViewTest, SaysWhenThereIsNothingToExplain) {
  const Snapshot s = TwoTenants();
  auto bound = WhyView(s, Options(), "default/a");
  ASSERT_TRUE(bound);
  EXPECT_TRUE(bound->rows.empty());
  EXPECT_NE(Notes(*bound).find("is bound to node gpu-1; main holds GPU 0: nothing to explain"),
            std::string::npos)
      << Notes(*bound);
  Snapshot cpu = s;
  cpu.pods.push_back(PodJson("cpu-only", {ContainerOf{"main", 0, 0, 0}}));
  auto none = WhyView(cpu, Options(), "cpu-only");
  ASSERT_TRUE(none);
  EXPECT_NE(Notes(*none).find("asks for no gpumux resources"), std::string::npos);
  auto missing = WhyView(s, Options(), "team-b/nope");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, core::ErrorCode::kNotFound);
  EXPECT_EQ(missing.error().message, "pod team-b/nope not found");
}

json CoordinatorNode(const std::string& name, std::int64_t updated) {
  json node = NodeJson(name, 2, GpuOf{"A100", 40960});
  kube::GpuView g{"GPU-" + name + "-0", "tuned", {}, 1, 3};
  g.jobs.push_back({"default/a/main", "resnet", g.uuid, 64, 64, 0.081, 790.1, 1.31, 0.062, 1200});
  g.jobs.push_back({"team-b/c/main", "lstm", g.uuid, 32, 16, 0.05, 640, 0, 0, 10});
  std::vector<kube::GpuView> gpus{g};
  json state = kube::StateJson(name, "joint", gpus);
  state["updated"] = core::FormatRfc3339(updated);
  node["metadata"]["annotations"][std::string(kube::kAnnotationCoordinator)] = state.dump();
  return node;
}

TEST(TopViewTest, ShowsWhatTheCoordinatorsMeasureAndTheGrantsOfJobsWithoutAReport) {
  Snapshot s = TwoTenants();
  s.nodes[0] = CoordinatorNode("gpu-1", kNow - 20);
  s.nodes.push_back(NodeJson("gpu-2", 1));
  s.pods.push_back(
      BoundPod(PodJson("d", {ContainerOf{"main", 0, 4, 0}}), "gpu-2", {0}, 1000, 4096, kNow - 10));
  auto t = TopView(s, Options(""));
  EXPECT_EQ(ColumnText(t, "job"), (std::vector<std::string>{"default/a/main", "team-b/c/main",
                                                            "team-b/b/main", "default/d/main"}));
  EXPECT_EQ(ColumnText(t, "gpu"), (std::vector<std::string>{"0", "0", "1", "0"}));
  EXPECT_EQ(ColumnText(t, "state"),
            (std::vector<std::string>{"tuned", "tuned", "unreported", "no coordinator"}));
  EXPECT_EQ(ColumnText(t, "batch_size"), (std::vector<std::string>{"64", "32->16", "-", "-"}));
  EXPECT_EQ(ColumnText(t, "step_s"), (std::vector<std::string>{"81ms", "50ms", "-", "-"}));
  EXPECT_EQ(ColumnText(t, "slowdown"), (std::vector<std::string>{"1.31x", "-", "-", "-"}));
  EXPECT_EQ(ColumnText(t, "updated")[0], "20s ago");
  EXPECT_NE(Notes(t).find("1 node reports from a coordinator"), std::string::npos) << Notes(t);
  auto one = TopView(s, Options("team-b"));
  EXPECT_EQ(ColumnText(one, "job"), (std::vector<std::string>{"team-b/c/main", "team-b/b/main"}));
}

TEST(TopViewTest, ShowsJobsOnNoSingleGpuWithoutAGpu) {
  Snapshot s;
  s.now = kNow;
  json node = NodeJson("gpu-1", 1);
  kube::GpuView loose{"", "untuned", {}, 0, 0};
  loose.jobs.push_back({"default/multi/main", "lstm", "", 16, 16, 0.2, 80, 0, 0, 5});
  std::vector<kube::GpuView> gpus{loose};
  node["metadata"]["annotations"]["gpumux.io/coordinator"] =
      kube::StateJson("gpu-1", "joint", gpus).dump();
  s.nodes.push_back(node);
  auto t = TopView(s, Options(""));
  EXPECT_EQ(ColumnText(t, "gpu"), (std::vector<std::string>{"-"}));
  EXPECT_EQ(ColumnText(t, "state"), (std::vector<std::string>{"untuned"}));
  EXPECT_EQ(ColumnText(t, "uuid"), (std::vector<std::string>{"-"}));
}

TEST(TopViewTest, NamesStaleAndUnreadableReports) {
  Snapshot s = TwoTenants();
  s.nodes[0] = CoordinatorNode("gpu-1", kNow - 3600);
  s.nodes.push_back(NodeJson("gpu-2", 1));
  s.nodes.back()["metadata"]["annotations"]["gpumux.io/coordinator"] = "{\"gpus\": 3}";
  auto t = TopView(s, Options(""));
  EXPECT_NE(Notes(t).find("node gpu-1: the coordinator's report is 60m old"), std::string::npos)
      << Notes(t);
  EXPECT_NE(Notes(t).find("node gpu-2: gpumux.io/coordinator: gpus is not a list"),
            std::string::npos)
      << Notes(t);
}

TEST(RenderTest, AlignsColumnsLikeKubectlAndShowsWideColumnsOnlyWhenAsked) {
  Table t;
  t.kind = "x";
  t.columns = {{"NAME", "name"}, {"LONGER HEADER", "h"}, {"EXTRA", "e", Width::kWideOnly}};
  t.rows = {{Cell{"a", "a"}, Cell{"1", 1}, Cell{"x", "x"}},
            {Cell{"bbbbbb", "bbbbbb", Style::kGood}, Cell{"22", 22}, Cell{"y", "y"}}};
  t.notes = {"a note"};
  EXPECT_EQ(RenderText(t, Layout::kNormal, Colour::kOff),
            "NAME     LONGER HEADER\n"
            "a        1\n"
            "bbbbbb   22\n"
            "a note\n");
  EXPECT_EQ(RenderText(t, Layout::kWide, Colour::kOff),
            "NAME     LONGER HEADER   EXTRA\n"
            "a        1               x\n"
            "bbbbbb   22              y\n"
            "a note\n");
  // Colour codes wrap the text; the padding still counts the visible text only.
  EXPECT_EQ(RenderText(t, Layout::kNormal, Colour::kOn),
            "NAME     LONGER HEADER\n"
            "a        1\n"
            "\033[32mbbbbbb\033[0m   22\n"
            "a note\n");
  const json j = RenderJson(t);
  EXPECT_EQ(j["kind"], "gpumux.io/x");
  EXPECT_EQ(j["items"][1], (json{{"name", "bbbbbb"}, {"h", 22}, {"e", "y"}}));
  EXPECT_EQ(j["notes"], json::array({"a note"}));
}

TEST(AgeTest, PrintsAgesAsKubectlDoes) {
  struct Case {
    std::int64_t seconds;
    const char* want;
  };
  for (const Case& c : {Case{0, "-"}, Case{-5, "-"}, Case{45, "45s"}, Case{119, "119s"},
                        Case{125, "2m5s"}, Case{600, "10m"}, Case{3 * 3600 + 60, "3h1m"},
                        Case{9 * 3600, "9h"}, Case{50 * 3600, "2d2h"}, Case{10 * 86400, "10d"}}) {
    EXPECT_EQ(Age(c.seconds), c.want) << c.seconds;
  }
}

}  // namespace
}  // namespace gpumux::inspect
