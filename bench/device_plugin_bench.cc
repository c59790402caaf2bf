// Device plugin Allocate latency: the kubelet's call over gRPC on a unix socket, through the
// node-lock handshake against an in-test API server on loopback (GET node, GET pod, a
// conditional PATCH of the node), with the fake GPU backend's inventory. Prints percentiles
// per kind of call; a plain program (not Google Benchmark) so that it reports tails.
//
//   gpumux_device_plugin_bench [--iterations 2000] [--gpus 8] [--api-latency-ms 0] [--settle-ms 5]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "gpumux/deviceplugin/plugin.h"
#include "gpumux/kube/grant.h"
#include "gpumux/kube/node_lock.h"
#include "tests/testing/fake_apiserver.h"
#include "tests/testing/fake_kubelet.h"

namespace {

using nlohmann::json;
using namespace gpumux;
using Clock = std::chrono::steady_clock;

json Node(int gpus) {
  json list = json::array();
  for (int i = 0; i < gpus; ++i) {
    std::string uuid = "GPU-bench-";
    uuid += std::to_string(i);
    list.push_back({{"index", i},
                    {"uuid", uuid},
                    {"model", "H100"},
                    {"memory_mib", 81920},
                    {"health", "Healthy"}});
  }
  return {{"apiVersion", "v1"},
          {"kind", "Node"},
          {"metadata",
           {{"name", "n1"},
            {"annotations",
             {{"gpumux.io/gpus", list.dump()},
              {std::string(kube::kAnnotationHandshake), std::string(kube::kHandshakeNodeLock)}}}}},
          {"status", {{"allocatable", {{"gpumux.io/gpu", std::to_string(gpus)}}}}}};
}

// A pod bound to n1 whose one container was granted GPU `gpu`: whole, or 8 units + 250 milli.
json Pod(const std::string& name, int gpu, bool shared) {
  json limits = shared ? json{{"gpumux.io/gpu-mem", "8"}, {"gpumux.io/gpu-milli", "250"}}
                       : json{{"gpumux.io/gpu", "1"}};
  kube::Grant grant;
  grant.node = "n1";
  grant.policy = "fgd";
  grant.assumed_at = 1'700'000'000;
  std::string uuid = "GPU-bench-";
  uuid += std::to_string(gpu);
  grant.containers.push_back(kube::ContainerGrant{
      "main", {{gpu, uuid}}, shared ? 250 : 1000, shared ? 8192 : 0, shared, !shared});
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata",
           {{"name", name},
            {"namespace", "default"},
            {"uid", "uid-" + name},
            {"annotations", {{std::string(kube::kAnnotationGrant), kube::EncodeGrant(grant)}}}}},
          {"spec",
           {{"nodeName", "n1"},
            {"containers",
             json::array({{{"name", "main"},
                           {"resources", {{"limits", limits}, {"requests", limits}}}}})}}},
          {"status", {{"phase", "Pending"}}}};
}

void TakeLock(test::FakeApiServer& server, const json& pod) {
  kube::NodeLock lock;
  lock.ns = "default";
  lock.name = pod["metadata"]["name"].get<std::string>();
  lock.uid = pod["metadata"]["uid"].get<std::string>();
  lock.since = 1'700'000'000;
  json node = *server.GetNode("n1");
  node["metadata"]["annotations"][std::string(kube::kAnnotationAllocating)] =
      kube::EncodeNodeLock(lock);
  server.UpdateNode(node);
}

void Report(const char* what, std::vector<double> ms) {
  if (ms.empty()) return;
  std::sort(ms.begin(), ms.end());
  auto at = [&](double q) {
    const auto i = static_cast<std::size_t>(q * static_cast<double>(ms.size() - 1));
    return ms[i];
  };
  std::printf("%-44s %7zu %8.3f %8.3f %8.3f %8.3f\n", what, ms.size(), at(0.5), at(0.9), at(0.99),
              ms.back());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gpumux device plugin: Allocate latency through the node-lock handshake"};
  int iterations = 2000, gpus = 8, api_latency_ms = 0, settle_ms = 5;
  app.add_option("--iterations", iterations, "Pods per kind")->capture_default_str();
  app.add_option("--gpus", gpus, "GPUs on the node")->capture_default_str();
  app.add_option("--api-latency-ms", api_latency_ms, "Added to every API server answer")
      ->capture_default_str();
  app.add_option("--settle-ms", settle_ms,
                 "Wait between the extender's lock and the kubelet's Allocate (the kubelet "
                 "learns of the bound pod through its own watch; 0 = at once, every read misses "
                 "the plugin's watch cache)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (iterations < 1 || gpus < 1 || gpus > 64) {
    std::fprintf(stderr, "--iterations must be >= 1 and --gpus 1..64\n");
    return 2;
  }

  test::FakeApiServer server;
  if (!server.ok()) {
    std::fprintf(stderr, "in-test API server: %s\n", server.error().c_str());
    return 1;
  }
  server.AddNode(Node(gpus));
  if (api_latency_ms > 0) server.SetLatency(std::chrono::milliseconds(api_latency_ms));
  kube::ClientConfig config;
  config.server = server.url();
  auto api = kube::MakeCurlClient(config);
  test::FakeKubelet kubelet;
  deviceplugin::PluginOptions options;
  options.node_name = "n1";
  options.kubelet_dir = kubelet.dir().string();
  options.kubelet_poll = std::chrono::milliseconds(50);
  std::vector<deviceplugin::GpuSlot> slots;
  for (int i = 0; i < gpus; ++i) {
    std::string uuid = "GPU-bench-";
    uuid += std::to_string(i);
    slots.push_back(deviceplugin::GpuSlot{i, uuid, 81920, i, true});
  }
  auto plugin = deviceplugin::DevicePlugin::Create(options, slots, api.get());
  if (!plugin || !(*plugin)->Start()) {
    std::fprintf(stderr, "cannot start the device plugin\n");
    return 1;
  }
  if (!kubelet.WaitRegistrations(3, std::chrono::seconds(10)) ||
      !kubelet.WaitDevices(
          "gpumux.io/gpu-milli", [](const auto& d) { return !d.empty(); },
          std::chrono::seconds(10))) {
    std::fprintf(stderr, "the plugin did not register with the fake kubelet\n");
    return 1;
  }
  const auto gpu_ids = kubelet.HealthyIds("gpumux.io/gpu");
  const auto mem_ids = kubelet.HealthyIds("gpumux.io/gpu-mem");
  const auto milli_ids = kubelet.HealthyIds("gpumux.io/gpu-milli");
  const std::vector<std::string> mem8(mem_ids.begin(), mem_ids.begin() + 8);
  const std::vector<std::string> milli250(milli_ids.begin(), milli_ids.begin() + 250);

  std::vector<double> whole, shared_first, shared_last, all;
  int failures = 0;
  auto timed = [&](const std::string& resource, const std::vector<std::string>& ids,
                   std::vector<double>& into) {
    v1beta1::AllocateResponse response;
    const auto start = Clock::now();
    const grpc::Status s = kubelet.Allocate(resource, {ids}, &response);
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    if (!s.ok()) {
      if (++failures <= 3) std::fprintf(stderr, "Allocate failed: %s\n", s.error_message().c_str());
      return;
    }
    into.push_back(ms);
    all.push_back(ms);
  };
  for (int i = 0; i < iterations; ++i) {
    std::string name = "whole-";
    name += std::to_string(i);
    const json pod = Pod(name, i % gpus, false);
    server.AddPod(pod);
    TakeLock(server, pod);
    std::this_thread::sleep_for(std::chrono::milliseconds(settle_ms));
    timed("gpumux.io/gpu", {gpu_ids[static_cast<std::size_t>(i % gpus)]}, whole);
    server.DeletePod("default", name);
  }
  for (int i = 0; i < iterations; ++i) {
    std::string name = "shared-";
    name += std::to_string(i);
    const json pod = Pod(name, i % gpus, true);
    server.AddPod(pod);
    TakeLock(server, pod);
    std::this_thread::sleep_for(std::chrono::milliseconds(settle_ms));
    timed("gpumux.io/gpu-mem", mem8, shared_first);
    timed("gpumux.io/gpu-milli", milli250, shared_last);
    server.DeletePod("default", name);
  }
  std::printf(
      "Allocate through gRPC (unix socket) + node lock (in-test API server on loopback, "
      "+%d ms per answer, %d ms from lock to Allocate); %d GPUs; ms\n",
      api_latency_ms, settle_ms, gpus);
  std::printf("%-44s %7s %8s %8s %8s %8s\n", "call", "n", "p50", "p90", "p99", "max");
  Report("whole GPU (claim + release lock)", whole);
  Report("shared, 1st resource (claim + record)", shared_first);
  Report("shared, 2nd resource (claim + release)", shared_last);
  Report("all Allocate calls", all);
  std::printf("failures: %d\n", failures);
  (*plugin)->Stop();
  return failures == 0 ? 0 : 1;
}
