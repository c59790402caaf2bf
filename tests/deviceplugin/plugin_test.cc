// The device plugin against a fake kubelet (real gRPC Registration server and plugin clients
// on unix sockets in a temporary folder) and an in-test API server on loopback: registration,
// ListAndWatch updates on health changes, Allocate through the node-lock handshake for one and
// several containers, kubelet restarts, and refusals with clear gRPC errors.
#include "gpumux/deviceplugin/plugin.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <thread>

#include "gpumux/extender/cluster_sync.h"
#include "gpumux/extender/extender.h"
#include "gpumux/kube/node_lock.h"
#include "tests/deviceplugin/handshake_fixtures.h"
#include "tests/testing/fake_apiserver.h"
#include "tests/testing/fake_kubelet.h"
#include "tests/testing/kube_fixtures.h"

namespace gpumux::deviceplugin {
namespace {

using kube::testing::ContainerOf;
using kube::testing::NodeJson;
using kube::testing::PodJson;
using nlohmann::json;
using testing_fixtures::GrantedPod;
using testing_fixtures::HandshakeNode;
using testing_fixtures::Lock;
using testing_fixtures::Locked;
using namespace std::chrono_literals;

constexpr const char* kGpu = "gpumux.io/gpu";
constexpr const char* kMem = "gpumux.io/gpu-mem";
constexpr const char* kMilli = "gpumux.io/gpu-milli";

std::vector<GpuSlot> Slots(const std::string& node = "n1", int gpus = 2) {
  std::vector<GpuSlot> out;
  for (int i = 0; i < gpus; ++i) {
    std::string uuid = "GPU-" + node;
    uuid += '-';
    uuid += std::to_string(i);
    out.push_back(GpuSlot{i, uuid, 40960, i, true});
  }
  return out;
}

std::vector<std::string> FirstN(const std::vector<std::string>& ids, std::size_t n) {
  return {ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(std::min(n, ids.size()))};
}

// A plugin for node n1 talking to `server`, registered with `kubelet`.
struct Rig {
  explicit Rig(test::FakeKubelet& kubelet, const test::FakeApiServer* server,
               std::vector<GpuSlot> gpus = Slots()) {
    if (server != nullptr) {
      kube::ClientConfig config;
      config.server = server->url();
      api = kube::MakeCurlClient(config);
    }
    PluginOptions options;
    options.node_name = "n1";
    options.kubelet_dir = kubelet.dir().string();
    options.kubelet_poll = 20ms;
    auto made = DevicePlugin::Create(options, std::move(gpus), api.get());
    EXPECT_TRUE(made.has_value()) << made.error().message;
    plugin = std::move(*made);
    auto started = plugin->Start();
    EXPECT_TRUE(started.has_value()) << started.error().message;
    EXPECT_TRUE(kubelet.WaitRegistrations(3, 10s));
    for (const char* r : {kGpu, kMem, kMilli}) {
      EXPECT_TRUE(kubelet.WaitDevices(
          r, [](const auto& d) { return !d.empty(); }, 10s))
          << r;
    }
  }
  ~Rig() { plugin->Stop(); }
  std::unique_ptr<kube::KubeApi> api;
  std::unique_ptr<DevicePlugin> plugin;
};

template <typename F>
bool WaitFor(F predicate) {
  for (int i = 0; i < 1000 && !predicate(); ++i) std::this_thread::sleep_for(10ms);
  return predicate();
}

std::string Env(const v1beta1::AllocateResponse& r, int container, const std::string& key) {
  const auto& envs = r.container_responses(container).envs();
  auto it = envs.find(key);
  return it == envs.end() ? "<unset>" : it->second;
}

TEST(DevicePlugin, RegistersEveryResourceAndListsItsDevices) {
  test::FakeKubelet kubelet;
  Rig rig(kubelet, nullptr);
  const auto regs = kubelet.registrations();
  ASSERT_EQ(regs.size(), 3u);
  std::set<std::string> names;
  for (const auto& r : regs) {
    EXPECT_EQ(r.version(), "v1beta1");
    EXPECT_TRUE(r.options().get_preferred_allocation_available());
    EXPECT_FALSE(r.options().pre_start_required());
    names.insert(r.resource_name() + " " + r.endpoint());
  }
  EXPECT_EQ(names, (std::set<std::string>{"gpumux.io/gpu gpumux-gpu.sock",
                                          "gpumux.io/gpu-mem gpumux-gpu-mem.sock",
                                          "gpumux.io/gpu-milli gpumux-gpu-milli.sock"}));
  EXPECT_EQ(kubelet.Devices(kGpu).size(), 2u);
  EXPECT_EQ(kubelet.Devices(kGpu)[1].id, "GPU-n1-1");
  EXPECT_EQ(kubelet.Devices(kMem).size(), 80u);  // 2 x 40 GiB in 1 GiB units
  EXPECT_EQ(kubelet.Devices(kMilli).size(), 2000u);
  EXPECT_TRUE(rig.plugin->registered());
  v1beta1::DevicePluginOptions options;
  ASSERT_TRUE(kubelet.Options(kGpu, &options).ok());
  EXPECT_TRUE(options.get_preferred_allocation_available());
}

TEST(DevicePlugin, ACheckThatFailsBeforeRegisteringStopsItWithTheReason) {
  test::FakeKubelet kubelet;
  PluginOptions options;
  options.node_name = "n1";
  options.kubelet_dir = kubelet.dir().string();
  options.kubelet_poll = 20ms;
  bool sockets_served = false;
  options.before_register = [&]() -> core::Result<void> {
    sockets_served = std::filesystem::exists(kubelet.dir() / "gpumux-gpu.sock") &&
                     std::filesystem::exists(kubelet.dir() / "gpumux-gpu-milli.sock");
    return core::MakeError(core::ErrorCode::kFailedPrecondition, "the node is taken");
  };
  auto plugin = DevicePlugin::Create(options, Slots(), nullptr);
  ASSERT_TRUE(plugin.has_value()) << plugin.error().message;
  const auto started = (*plugin)->Start();
  ASSERT_FALSE(started.has_value());
  EXPECT_EQ(started.error().message, "the node is taken");
  EXPECT_TRUE(sockets_served) << "the check runs once the sockets are served";
  EXPECT_FALSE(std::filesystem::exists(kubelet.dir() / "gpumux-gpu.sock"));
  EXPECT_TRUE(kubelet.registrations().empty());
}

TEST(DevicePlugin, AHealthChangeIsPushedToEveryResourceAndRecovers) {
  test::FakeKubelet kubelet;
  Rig rig(kubelet, nullptr);
  const int before = kubelet.Updates(kMem);
  EXPECT_FALSE(rig.plugin->SetHealth({true, true}));  // no change, nothing sent
  EXPECT_TRUE(rig.plugin->SetHealth({true, false}));
  auto unhealthy = [](const std::vector<test::FakeDevice>& list) {
    return std::count_if(list.begin(), list.end(),
                         [](const auto& d) { return d.health == "Unhealthy"; });
  };
  EXPECT_TRUE(kubelet.WaitDevices(
      kGpu, [&](const auto& d) { return unhealthy(d) == 1; }, 10s));
  EXPECT_EQ(kubelet.Devices(kGpu)[1].health, "Unhealthy");
  EXPECT_TRUE(kubelet.WaitDevices(
      kMem, [&](const auto& d) { return unhealthy(d) == 40; }, 10s));
  EXPECT_TRUE(kubelet.WaitDevices(
      kMilli, [&](const auto& d) { return unhealthy(d) == 1000; }, 10s));
  EXPECT_EQ(kubelet.Updates(kMem), before + 1);
  EXPECT_EQ(kubelet.HealthyIds(kMem).front(), "GPU-n1-0-m0");
  EXPECT_TRUE(rig.plugin->SetHealth({true, true}));
  EXPECT_TRUE(kubelet.WaitDevices(
      kGpu, [&](const auto& d) { return unhealthy(d) == 0; }, 10s));
}

TEST(DevicePlugin, UnknownDeviceIdsAreInvalidArgument) {
  test::FakeKubelet kubelet;
  test::FakeApiServer server;
  server.AddNode(HandshakeNode());
  Rig rig(kubelet, &server);
  v1beta1::AllocateResponse response;
  grpc::Status s = kubelet.Allocate(kGpu, {{"GPU-nope"}}, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("unknown device ID 'GPU-nope' for gpumux.io/gpu on node n1"),
            std::string::npos)
      << s.error_message();
  s = kubelet.Allocate(kMem, {{"GPU-n1-0-m0", "GPU-n1-0-m0"}}, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("appears twice"), std::string::npos);
  s = kubelet.Allocate(kGpu, {}, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // Another resource's device, one device in two containers, an empty container, a huge ID.
  s = kubelet.Allocate(kGpu, {{"GPU-n1-0-c5"}}, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("is a gpumux.io/gpu-milli device, not a gpumux.io/gpu one"),
            std::string::npos)
      << s.error_message();
  s = kubelet.Allocate(kMilli, {{"GPU-n1-0-c5"}, {"GPU-n1-0-c6", "GPU-n1-0-c5"}}, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("appears twice"), std::string::npos);
  s = kubelet.Allocate(kGpu, {{"GPU-n1-0"}, {}}, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  s = kubelet.Allocate(kGpu, {{std::string(1 << 20, 'x')}}, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_LT(s.error_message().size(), 400u);
  EXPECT_EQ(rig.plugin->stats().allocate_failures, 7);
  // The plugin still answers.
  s = kubelet.Allocate(kGpu, {{"GPU-nope"}}, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST(DevicePlugin, StoppingLetsAnAllocateInFlightBeAnsweredBeforeListAndWatchEnds) {
  // The kubelet closes its connection when the ListAndWatch streams end, cancelling an answer
  // still on its way and rejecting that pod (seen on the real cluster, e2e scenario 8).
  test::FakeKubelet kubelet;
  std::mutex mu;
  std::vector<std::string> events;
  kubelet.SetObserver([&](std::string_view event, const std::string&) {
    if (event != "end") return;
    std::lock_guard lock(mu);
    events.emplace_back("stream ended");
  });
  test::FakeApiServer server;
  server.AddNode(HandshakeNode());
  Rig rig(kubelet, &server);
  std::atomic<bool> answering{false};
  rig.plugin->set_allocate_observer([&](Resource, double, bool) {
    answering = true;
    std::this_thread::sleep_for(300ms);  // a slow answer
  });
  std::thread call([&] {
    v1beta1::AllocateResponse response;
    const grpc::Status s = kubelet.Allocate(kGpu, {{"GPU-nope"}}, &response);
    std::lock_guard lock(mu);
    events.push_back("answer " + std::to_string(static_cast<int>(s.error_code())));
  });
  ASSERT_TRUE(WaitFor([&] { return answering.load(); }));
  rig.plugin->Stop();
  call.join();
  std::lock_guard lock(mu);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.front(), "answer " + std::to_string(grpc::StatusCode::INVALID_ARGUMENT))
      << "the answer came before any stream ended";
}

TEST(DevicePlugin, WithoutANodeLockAllocateFailsClosed) {
  test::FakeKubelet kubelet;
  test::FakeApiServer server;
  server.AddNode(HandshakeNode());
  // A pod is bound with a grant, but nobody holds the lock: do not guess it is this pod.
  server.AddPod(GrantedPod("p", {ContainerOf{"main", 1, 0, 0}},
                           {{"main", {{0, "GPU-n1-0"}}, 1000, 0, false, true}}));
  Rig rig(kubelet, &server);
  v1beta1::AllocateResponse response;
  grpc::Status s = kubelet.Allocate(kGpu, {{"GPU-n1-0"}}, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("no pod holds the node lock gpumux.io/allocating on node n1"),
            std::string::npos)
      << s.error_message();
  // And without an API server at all.
  test::FakeKubelet kubelet2;
  Rig offline(kubelet2, nullptr);
  s = kubelet2.Allocate(kGpu, {{"GPU-n1-0"}}, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("without an API server"), std::string::npos);
}

TEST(DevicePlugin, AllocateGivesTheLockHolderItsGrantedGpuAndReleasesTheLock) {
  test::FakeKubelet kubelet;
  test::FakeApiServer server;
  server.AddNode(HandshakeNode());
  const json pod = GrantedPod("train", {ContainerOf{"main", 1, 0, 0}},
                              {{"main", {{1, "GPU-n1-1"}}, 1000, 0, false, true}});
  server.AddPod(pod);
  Lock(server, pod);
  Rig rig(kubelet, &server);
  // GetPreferredAllocation steers the kubelet to the granted GPU.
  std::vector<std::string> chosen;
  ASSERT_TRUE(kubelet.Preferred(kGpu, {"GPU-n1-0", "GPU-n1-1"}, 1, &chosen).ok());
  EXPECT_EQ(chosen, std::vector<std::string>{"GPU-n1-1"});
  // Even if the kubelet picks another device ID, the container gets what was granted.
  v1beta1::AllocateResponse response;
  grpc::Status s = kubelet.Allocate(kGpu, {{"GPU-n1-0"}}, &response);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(response.container_responses_size(), 1);
  EXPECT_EQ(Env(response, 0, "NVIDIA_VISIBLE_DEVICES"), "GPU-n1-1");
  EXPECT_EQ(Env(response, 0, "GPUMUX_POD"), "default/train");
  EXPECT_EQ(Env(response, 0, "GPUMUX_EXCLUSIVE"), "true");
  EXPECT_EQ(Env(response, 0, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), "<unset>");
  EXPECT_FALSE(Locked(server));  // every pair of the pod was served
  EXPECT_EQ(rig.plugin->stats().allocations, 1);
  // A second Allocate has no lock holder any more.
  s = kubelet.Allocate(kGpu, {{"GPU-n1-0"}}, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
}

TEST(DevicePlugin, AMultiContainerPodIsServedContainerByContainerInAnyResourceOrder) {
  test::FakeKubelet kubelet;
  test::FakeApiServer server;
  server.AddNode(HandshakeNode());
  // "a" shares GPU 0 (8 GiB, 250 milli), "sidecar" asks for nothing, "b" shares GPU 1 (4 GiB,
  // compute unguarded).
  const json pod = GrantedPod(
      "two",
      {ContainerOf{"a", 0, 8, 250}, ContainerOf{"sidecar", 0, 0, 0}, ContainerOf{"b", 0, 4, 0}},
      {{"a", {{0, "GPU-n1-0"}}, 250, 8192, true, false},
       {"b", {{1, "GPU-n1-1"}}, 1, 4096, false, false}});
  server.AddPod(pod);
  Lock(server, pod);
  Rig rig(kubelet, &server);
  const auto mem = kubelet.HealthyIds(kMem);
  const auto milli = kubelet.HealthyIds(kMilli);
  v1beta1::AllocateResponse ra_milli, ra_mem, rb_mem;
  // kubelet: container a (its resources in map order: milli first here), then b.
  ASSERT_TRUE(kubelet.Allocate(kMilli, {FirstN(milli, 250)}, &ra_milli).ok());
  EXPECT_TRUE(Locked(server));
  grpc::Status s = kubelet.Allocate(kMem, {FirstN(mem, 8)}, &ra_mem);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(Locked(server));
  s = kubelet.Allocate(kMem, {FirstN(mem, 4)}, &rb_mem);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_FALSE(Locked(server));
  for (const auto* r : {&ra_milli, &ra_mem}) {
    EXPECT_EQ(Env(*r, 0, "GPUMUX_CONTAINER"), "a");
    EXPECT_EQ(Env(*r, 0, "NVIDIA_VISIBLE_DEVICES"), "GPU-n1-0");
    EXPECT_EQ(Env(*r, 0, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), "25");
    EXPECT_EQ(Env(*r, 0, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), "0=8192M");
  }
  EXPECT_EQ(Env(rb_mem, 0, "GPUMUX_CONTAINER"), "b");
  EXPECT_EQ(Env(rb_mem, 0, "NVIDIA_VISIBLE_DEVICES"), "GPU-n1-1");
  EXPECT_EQ(Env(rb_mem, 0, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), "<unset>");
  EXPECT_EQ(Env(rb_mem, 0, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), "0=4096M");
}

TEST(DevicePlugin, CountsThatDoNotMatchTheHolderAreRefusedAndNothingIsRecorded) {
  test::FakeKubelet kubelet;
  test::FakeApiServer server;
  server.AddNode(HandshakeNode());
  const json pod = GrantedPod("p", {ContainerOf{"main", 0, 8, 0}},
                              {{"main", {{0, "GPU-n1-0"}}, 1, 8192, false, false}});
  server.AddPod(pod);
  Lock(server, pod);
  Rig rig(kubelet, &server);
  v1beta1::AllocateResponse response;
  grpc::Status s = kubelet.Allocate(kMem, {FirstN(kubelet.HealthyIds(kMem), 4)}, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("the kubelet asks for 4 gpumux.io/gpu-mem devices, but "
                                   "container main of pod default/p"),
            std::string::npos)
      << s.error_message();
  EXPECT_NE(s.error_message().find("asks for 8"), std::string::npos);
  s = kubelet.Allocate(kGpu, {{"GPU-n1-0"}}, &response);  // p asks for no whole GPU
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("has no container left that asks for gpumux.io/gpu"),
            std::string::npos)
      << s.error_message();
  const json node = *server.GetNode("n1");
  auto lock = kube::DecodeNodeLock(
      node["metadata"]["annotations"][std::string(kube::kAnnotationAllocating)].get<std::string>());
  ASSERT_TRUE(lock.has_value());
  EXPECT_TRUE(lock->served.empty());
}

TEST(DevicePlugin, ARestartedPluginContinuesWhereTheLockSaysItStopped) {
  test::FakeApiServer server;
  server.AddNode(HandshakeNode());
  const json pod = GrantedPod("p", {ContainerOf{"a", 1, 0, 0}, ContainerOf{"b", 1, 0, 0}},
                              {{"a", {{0, "GPU-n1-0"}}, 1000, 0, false, true},
                               {"b", {{1, "GPU-n1-1"}}, 1000, 0, false, true}});
  server.AddPod(pod);
  Lock(server, pod);
  v1beta1::AllocateResponse first, second;
  {
    test::FakeKubelet kubelet;
    Rig rig(kubelet, &server);
    ASSERT_TRUE(kubelet.Allocate(kGpu, {{"GPU-n1-0"}}, &first).ok());
  }
  test::FakeKubelet kubelet;
  Rig rig(kubelet, &server);  // a new process: nothing in memory
  grpc::Status s = kubelet.Allocate(kGpu, {{"GPU-n1-0"}}, &second);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(Env(first, 0, "GPUMUX_CONTAINER"), "a");
  EXPECT_EQ(Env(second, 0, "GPUMUX_CONTAINER"), "b");
  EXPECT_EQ(Env(second, 0, "NVIDIA_VISIBLE_DEVICES"), "GPU-n1-1");
  EXPECT_FALSE(Locked(server));
}

TEST(DevicePlugin, AKubeletRestartIsNoticedAndThePluginRegistersAgain) {
  test::FakeKubelet kubelet;
  Rig rig(kubelet, nullptr);
  const int lists = kubelet.Updates(kGpu);
  kubelet.Restart();  // sockets deleted, a new kubelet.sock
  ASSERT_TRUE(kubelet.WaitRegistrations(6, 10s));
  EXPECT_TRUE(kubelet.WaitUpdatesAbove(kGpu, lists, 10s));
  EXPECT_TRUE(std::filesystem::exists(rig.plugin->SocketPath(Resource::kGpu)));
  EXPECT_TRUE(std::filesystem::exists(rig.plugin->SocketPath(Resource::kGpuMilli)));
  EXPECT_GE(rig.plugin->stats().server_restarts, 3);
  // The kubelet may see the Register call a moment before the plugin counts its answer.
  EXPECT_TRUE(WaitFor([&] { return rig.plugin->stats().registrations == 6; }));
  // The new servers answer.
  v1beta1::AllocateResponse response;
  EXPECT_EQ(kubelet.Allocate(kGpu, {{"GPU-x"}}, &response).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  // A kubelet that is down for a while: the plugin registers once it is back.
  kubelet.Stop();
  std::this_thread::sleep_for(100ms);
  kubelet.Start();
  EXPECT_TRUE(kubelet.WaitRegistrations(9, 10s));
}

// The extender's bind and the device plugin's Allocate together: two pods of the same size,
// pending on one node at once, each get their own grant — never each other's.
TEST(DevicePlugin, TwoSameSizePodsPendingOnOneNodeEachGetTheirOwnGrant) {
  test::FakeApiServer server;
  server.AddNode(HandshakeNode());
  const json a = PodJson("a", {ContainerOf{"main", 0, 8, 250}});
  const json b = PodJson("b", {ContainerOf{"main", 0, 8, 250}});
  server.AddPod(a);
  server.AddPod(b);
  kube::ClientConfig config;
  config.server = server.url();
  auto api = kube::MakeCurlClient(config);
  sched::ClusterStateOptions state_options;
  state_options.policy = "spread";  // puts b on the other GPU: the grants differ
  state_options.gpu_mem_unit_mib = 1024;
  auto state = std::move(*sched::ClusterState::Create(state_options, {}));
  extender::ClusterSync sync(*api, *state, {});
  sync.Start();
  ASSERT_TRUE(sync.WaitSynced(10s));
  extender::Extender extender(*state, api.get());
  auto bind = [&](const json& pod) {
    json body = {{"PodName", pod["metadata"]["name"]},
                 {"PodNamespace", "default"},
                 {"PodUID", pod["metadata"]["uid"]},
                 {"Node", "n1"}};
    return json::parse(extender.Handle(extender::Verb::kBind, body.dump()).body)["Error"]
        .get<std::string>();
  };
  test::FakeKubelet kubelet;
  Rig rig(kubelet, &server);
  EXPECT_EQ(bind(a), "");
  // b is refused while a's devices are not allocated yet: kube-scheduler retries it.
  const std::string busy = bind(b);
  EXPECT_NE(busy.find("default/a"), std::string::npos) << busy;
  const auto mem = kubelet.HealthyIds(kMem);
  const auto milli = kubelet.HealthyIds(kMilli);
  v1beta1::AllocateResponse a_mem, a_milli, b_mem, b_milli;
  ASSERT_TRUE(kubelet.Allocate(kMem, {FirstN(mem, 8)}, &a_mem).ok());
  ASSERT_TRUE(kubelet.Allocate(kMilli, {FirstN(milli, 250)}, &a_milli).ok());
  EXPECT_EQ(bind(b), "");
  // The kubelet hands b the very same device IDs it would have given a: no matter.
  grpc::Status s = kubelet.Allocate(kMilli, {FirstN(milli, 250)}, &b_milli);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_TRUE(kubelet.Allocate(kMem, {FirstN(mem, 8)}, &b_mem).ok());
  auto grant_of = [&](const std::string& name) {
    const json p = *server.GetPod("default", name);
    return *kube::DecodeGrant(
        p["metadata"]["annotations"][std::string(kube::kAnnotationGrant)].get<std::string>());
  };
  const kube::Grant ga = grant_of("a"), gb = grant_of("b");
  EXPECT_NE(ga.containers[0].gpus[0].uuid, gb.containers[0].gpus[0].uuid);
  EXPECT_EQ(Env(a_mem, 0, "GPUMUX_POD"), "default/a");
  EXPECT_EQ(Env(a_milli, 0, "NVIDIA_VISIBLE_DEVICES"), ga.containers[0].gpus[0].uuid);
  EXPECT_EQ(Env(b_mem, 0, "GPUMUX_POD"), "default/b");
  EXPECT_EQ(Env(b_milli, 0, "NVIDIA_VISIBLE_DEVICES"), gb.containers[0].gpus[0].uuid);
  EXPECT_EQ(Env(b_mem, 0, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), "0=8192M");
  EXPECT_FALSE(Locked(server));
  sync.Stop();
}

}  // namespace
}  // namespace gpumux::deviceplugin
