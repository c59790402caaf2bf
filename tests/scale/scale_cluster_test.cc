// The scale rig's objects and checks (bench/scale/scale_cluster.h): what the API-only nodes
// announce, the pods of both modes, the pod cap, request counting, the capacity check, and the
// placement-quality pieces (what a grant holds, the replay files the simulator reads back).
#include "bench/scale/scale_cluster.h"

#include <gtest/gtest.h>

#include "gpumux/kube/grant.h"
#include "gpumux/kube/node_lock.h"
#include "gpumux/kube/objects.h"

namespace gpumux::scale {
namespace {

using nlohmann::json;

core::NodeSpec Shape(int gpus, core::MiB memory = 16384) {
  core::NodeSpec n;
  n.name = "shape";
  n.cpu_milli = 64000;
  n.memory_mib = 262144;
  for (int g = 0; g < gpus; ++g) n.gpus.push_back({g, "", "V100M16", memory});
  return n;
}

core::Request Share(int milli, core::MiB mib) {
  core::Request r;
  r.cpu_milli = 4000;
  r.memory_mib = 8192;
  r.gpu_count = 1;
  r.gpu_milli = milli;
  r.gpu_mib = mib;
  return r;
}

TEST(ScaleNode, AnnouncesWhatTheDevicePluginAnnounces) {
  const json node = NodeObject(Shape(2), ScaleNodeName(7), 1024);
  EXPECT_EQ(node["metadata"]["name"], "scale-node-00007");
  auto decoded = kube::DecodeNode(node, kube::NodeDefaults{});
  ASSERT_TRUE(decoded) << decoded.error().message;
  EXPECT_TRUE(decoded->gpus_from_annotation);
  EXPECT_EQ(decoded->spec.gpus.size(), 2U);
  EXPECT_EQ(decoded->spec.gpus[1].memory_mib, 16384);
  EXPECT_EQ(decoded->gpu_mem_unit_mib, 1024);
  const kube::NodeLockView lock = kube::ReadNodeLock(node);
  EXPECT_TRUE(lock.handshake);
  EXPECT_EQ(lock.plugin_state, "ready");
  const json& allocatable = node["status"]["allocatable"];
  EXPECT_EQ(allocatable["gpumux.io/gpu"], "2");
  EXPECT_EQ(allocatable["gpumux.io/gpu-mem"], "32");  // 2 x 16 GiB in 1 GiB units
  EXPECT_EQ(allocatable["gpumux.io/gpu-milli"], "2000");
  EXPECT_EQ(allocatable["nvidia.com/gpu"], "2");
  EXPECT_EQ(node["status"]["conditions"][0]["type"], "Ready");
}

TEST(ScalePod, GpumuxAsksForASharesResourcesDefaultForAWholeGpu) {
  auto gpumux = PodObject(Share(250, 4096), "scale", "p-00001", Mode::kGpumux, 1024);
  ASSERT_TRUE(gpumux) << gpumux.error().message;
  EXPECT_EQ((*gpumux)["spec"]["schedulerName"], "gpumux-scheduler");
  EXPECT_EQ((*gpumux)["metadata"]["namespace"], "scale");
  const json& limits = (*gpumux)["spec"]["containers"][0]["resources"]["limits"];
  EXPECT_EQ(limits["gpumux.io/gpu-milli"], "250");
  EXPECT_EQ(limits["gpumux.io/gpu-mem"], "4");

  auto whole = PodObject(Share(250, 4096), "scale", "p-00001", Mode::kDefault, 1024);
  ASSERT_TRUE(whole);
  EXPECT_EQ((*whole)["spec"]["schedulerName"], "default-scheduler");
  const json& resources = (*whole)["spec"]["containers"][0]["resources"];
  EXPECT_EQ(resources["limits"], json({{"nvidia.com/gpu", "1"}}));
  EXPECT_EQ(resources["requests"]["cpu"],
            (*gpumux)["spec"]["containers"][0]["resources"]["requests"]["cpu"]);
  EXPECT_TRUE(ParseMode("gpumux") && ParseMode("default"));
  EXPECT_FALSE(ParseMode("kai"));
}

TEST(ScalePods, TakesGpuPodsInOrderUpToTheCapAndSaysWhereToGoOn) {
  core::Request cpu;
  cpu.cpu_milli = 1000;
  core::Request eight = Share(1000, 0);
  eight.gpu_count = 8;
  const std::vector<core::Request> list{Share(500, 0), cpu, Share(500, 0), eight, Share(500, 0)};
  std::size_t next = 0;
  auto taken = TakeGpuPods(list, 0, 10, 9, &next);
  EXPECT_EQ(taken.size(), 2U);  // the 8-GPU pod would pass 9 GPUs
  EXPECT_EQ(next, 3U);
  taken = TakeGpuPods(list, 1, 1, 100, &next);
  EXPECT_EQ(taken.size(), 1U);
  EXPECT_EQ(next, 3U);
}

TEST(ScaleRequests, ResourceOfAPathIsTheApiServersResourceAndSubresource) {
  EXPECT_EQ(ResourceOfPath("/api/v1/namespaces/s/pods/p-1/binding"), "pods/binding");
  EXPECT_EQ(ResourceOfPath("/api/v1/namespaces/s/pods?watch=1"), "pods");
  EXPECT_EQ(ResourceOfPath("/api/v1/nodes/n1/status"), "nodes/status");
  EXPECT_EQ(ResourceOfPath("/api/v1/nodes"), "nodes");
  EXPECT_EQ(ResourceOfPath("/apis/coordination.k8s.io/v1/namespaces/x/leases/l"), "leases");
}

json BoundPod(const std::string& name, const std::string& node, const kube::Grant* grant) {
  json pod = {
      {"metadata", {{"namespace", "scale"}, {"name", name}, {"annotations", json::object()}}},
      {"spec", {{"nodeName", node}}}};
  if (grant != nullptr)
    pod["metadata"]["annotations"]["gpumux.io/grant"] = kube::EncodeGrant(*grant);
  return pod;
}

kube::Grant ShareGrant(const std::string& node, int gpu, core::MilliGpu milli, core::MiB mib) {
  kube::Grant g;
  g.node = node;
  g.policy = "fgd";
  kube::ContainerGrant c;
  c.name = "main";
  c.gpus.push_back({gpu, "GPU-x"});
  c.gpu_milli = milli;
  c.gpu_mem_mib = mib;
  c.milli_requested = true;
  g.containers.push_back(c);
  return g;
}

TEST(ScaleCapacity, FindsAnOvercommittedGpuAGrantForAnotherNodeAndAPodWithoutOne) {
  const std::map<std::string, core::NodeSpec> nodes{{"n0", Shape(1)}, {"n1", Shape(1)}};
  const kube::Grant a = ShareGrant("n0", 0, 600, 8192), b = ShareGrant("n0", 0, 300, 8192);
  EXPECT_TRUE(
      CapacityViolations({BoundPod("a", "n0", &a), BoundPod("b", "n0", &b)}, nodes, Mode::kGpumux)
          .empty());
  const kube::Grant c = ShareGrant("n0", 0, 200, 1024);
  auto found = CapacityViolations(
      {BoundPod("a", "n0", &a), BoundPod("b", "n0", &b), BoundPod("c", "n0", &c)}, nodes,
      Mode::kGpumux);
  ASSERT_EQ(found.size(), 2U);  // 1100 milli and 17408 MiB of 16384
  EXPECT_NE(found[0].find("MiB granted"), std::string::npos) << found[0];
  found = CapacityViolations({BoundPod("d", "n1", &a), BoundPod("e", "n1", nullptr)}, nodes,
                             Mode::kGpumux);
  ASSERT_EQ(found.size(), 2U);
  EXPECT_NE(found[0].find("granted on n0, bound n1"), std::string::npos) << found[0];
  EXPECT_NE(found[1].find("without a grant"), std::string::npos) << found[1];
}

TEST(ScaleCapacity, DefaultModeCountsWholeGpusPerNode) {
  const std::map<std::string, core::NodeSpec> nodes{{"n0", Shape(1)}};
  json pod = BoundPod("a", "n0", nullptr);
  pod["spec"]["containers"] =
      json::array({{{"resources", {{"limits", {{"nvidia.com/gpu", "1"}}}}}}});
  EXPECT_TRUE(CapacityViolations({pod}, nodes, Mode::kDefault).empty());
  auto found = CapacityViolations({pod, pod}, nodes, Mode::kDefault);
  ASSERT_EQ(found.size(), 1U);
  EXPECT_EQ(found[0], "n0: 2 GPUs of 1");
}

TEST(ScalePlacement, AGrantHoldsItsMilliPerGpuAWholeOrExclusiveGpuAThousand) {
  const kube::Grant share = ShareGrant("n0", 1, 300, 4096);
  kube::Grant two = ShareGrant("n1", 0, 1000, 0);
  two.containers[0].gpus.push_back({3, "GPU-y"});
  kube::Grant exclusive = ShareGrant("n2", 2, 200, 0);  // alone on its GPU: holds all of it
  exclusive.containers[0].exclusive = true;
  const std::vector<json> pods{BoundPod("a", "n0", &share), BoundPod("b", "n1", &two),
                               BoundPod("c", "n2", &exclusive), BoundPod("d", "n3", nullptr),
                               BoundPod("e", "", nullptr)};
  auto a = GrantOf(pods[0]);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->node, "n0");
  EXPECT_EQ(a->gpus, std::vector<int>({1}));
  EXPECT_EQ(a->milli, 300);
  auto b = GrantOf(pods[1]);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->gpus, std::vector<int>({0, 3}));
  EXPECT_EQ(b->milli, 2000);
  auto c = GrantOf(pods[2]);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->milli, 1000);
  EXPECT_FALSE(GrantOf(pods[3]));  // bound without a grant: not counted
  EXPECT_FALSE(GrantOf(pods[4]));  // not bound
  EXPECT_EQ(GrantedMilli(pods), 3300);
}

// The simulator reading these files back (gpumux simulate --nodes node_list.csv --replay DIR)
// is what scale.SmallRunOnARealControlPlane runs; here, their exact text.
TEST(ScalePlacement, TheReplayFilesAreTheSimulatorsFormats) {
  core::NodeSpec t4 = Shape(2, 15360);
  for (auto& g : t4.gpus) g.model = "T4";
  const std::vector<std::pair<std::string, core::NodeSpec>> nodes{{ScaleNodeName(0), Shape(1)},
                                                                  {ScaleNodeName(1), t4}};
  EXPECT_EQ(NodeListCsv(nodes),
            "sn,cpu_milli,memory_mib,gpu,model\n"
            "scale-node-00000,64000,262144,1,V100M16\n"
            "scale-node-00001,64000,262144,2,T4\n");
  EXPECT_EQ(ReplayNodesCsv({ScaleNodeName(0), ScaleNodeName(1)}),
            "node_prefixed,node,prefix\n"
            "scale-node-00000,scale-node-00000,0\n"
            "scale-node-00001,scale-node-00001,1\n");
  const std::vector<ReplayArrival> arrivals{{"burst/p-00001", "trace-b", ScaleNodeName(1), {1, 0}},
                                            {"burst/p-00000", "trace-a", "", {}},
                                            {"steady/p-00000", "trace-a", ScaleNodeName(0), {0}}};
  EXPECT_EQ(ArrivalCsv(arrivals),
            "seq,pod,source_pod,node,gpu_index\n"
            "0,burst/p-00001,trace-b,scale-node-00001,1-0\n"
            "1,burst/p-00000,trace-a,,\n"
            "2,steady/p-00000,trace-a,scale-node-00000,0\n");
}
}  // namespace
}  // namespace gpumux::scale
