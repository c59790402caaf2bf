// gpumux_extender_bench: the scheduler extender's latency as kube-scheduler sees it.
//
// For clusters of --nodes nodes (8 GPUs of 80 GiB each, partly used by bound pods whose grants
// the state rebuilt from their gpumux.io/grant annotations), the real ExtenderServer serves on
// loopback and one keep-alive HTTP client plays kube-scheduler: per iteration it POSTs filter
// (all nodes offered) and then prioritize (the nodes that passed), for a pod asking for a GPU
// share (gpu-mem 8192 + gpu-milli 250) and for a pod asking for one whole GPU. Every pod has a
// new name and uid. Modes: nodeCacheCapable (NodeNames) and, up to --full-max-nodes, the full
// v1.NodeList in the body (nodeCacheCapable: false).
//
// Reported per scenario: p50, p90, p99 and max of each call's round trip (request written to
// reply read, on the client) and of the pair, and pairs per second back to back (wall time of
// the timed iterations, client work included). Warm-up iterations are not timed.
#include <httplib.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_nodes.h"
#include "gpumux/core/cluster.h"
#include "gpumux/extender/extender.h"
#include "gpumux/extender/extender_server.h"
#include "gpumux/kube/grant.h"
#include "gpumux/policy/fragmentation.h"
#include "gpumux/policy/registry.h"
#include "gpumux/sched/cluster_state.h"
#include "gpumux/sim/trace.h"

namespace {

using nlohmann::json;
using SteadyClock = std::chrono::steady_clock;
namespace extender = gpumux::extender;
namespace kube = gpumux::kube;
namespace sched = gpumux::sched;

constexpr std::int64_t kNow = 1'800'000'000;

struct Options {
  std::vector<int> nodes{1000, 5000};
  int gpus_per_node = 8;
  int iterations = 2000;
  int warmup = 100;
  int full_max_nodes = 1000;
  int full_iterations = 200;
  std::vector<std::string> policies{"fgd", "best-fit", "binpack"};
  int threads = 8;
};

using gpumux::bench::GpuInventory;
using gpumux::bench::kGpuMib;
using gpumux::bench::NodeName;

// A node as the API server sends it: the GPU inventory annotation plus the usual bulk
// (conditions, addresses, images, nodeInfo), about 3 KB, so that the full-NodeList mode moves
// realistic bodies.
json NodeObject(int i, int gpus) {
  const std::string name = NodeName(i);
  const json inventory = GpuInventory(name, gpus);
  json conditions = json::array();
  for (const char* type : {"MemoryPressure", "DiskPressure", "PIDPressure", "Ready"}) {
    conditions.push_back({{"type", type},
                          {"status", std::string(type) == "Ready" ? "True" : "False"},
                          {"lastHeartbeatTime", "2026-11-20T23:10:00Z"},
                          {"lastTransitionTime", "2026-11-01T08:00:00Z"},
                          {"reason", std::string("Kubelet") + type},
                          {"message", "kubelet reports its state"}});
  }
  json images = json::array();
  for (const char* image :
       {"registry.k8s.io/kube-proxy:v1.32.13", "nvcr.io/nvidia/pytorch:24.10-py3",
        "docker.io/library/busybox:1.36", "registry.k8s.io/pause:3.10"}) {
    images.push_back(
        {{"names", {std::string(image), std::string(image) + "@sha256:0123456789abcdef"}},
         {"sizeBytes", 123456789}});
  }
  return {{"apiVersion", "v1"},
          {"kind", "Node"},
          {"metadata",
           {{"name", name},
            {"uid", "node-uid-" + std::to_string(i)},
            {"resourceVersion", std::to_string(1000 + i)},
            {"creationTimestamp", "2026-11-01T08:00:00Z"},
            {"labels",
             {{"kubernetes.io/hostname", name},
              {"kubernetes.io/os", "linux"},
              {"kubernetes.io/arch", "amd64"},
              {"node.kubernetes.io/instance-type", "gpu-8x-h100"},
              {"topology.kubernetes.io/zone", "zone-" + std::to_string(i % 3)}}},
            {"annotations",
             {{"gpumux.io/gpus", inventory.dump()},
              {"node.alpha.kubernetes.io/ttl", "0"},
              {"volumes.kubernetes.io/controller-managed-attach-detach", "true"}}}}},
          {"spec", {{"podCIDR", "10.244." + std::to_string(i % 250) + ".0/24"}}},
          {"status",
           {{"capacity",
             {{"cpu", "192"},
              {"memory", "2113459676Ki"},
              {"pods", "110"},
              {"gpumux.io/gpu", std::to_string(gpus)}}},
            {"allocatable",
             {{"cpu", "190"},
              {"memory", "2100000000Ki"},
              {"pods", "110"},
              {"gpumux.io/gpu", std::to_string(gpus)}}},
            {"conditions", conditions},
            {"addresses",
             {{{"type", "InternalIP"},
               {"address", "10.0." + std::to_string(i / 250) + "." + std::to_string(i % 250)}},
              {{"type", "Hostname"}, {"address", name}}}},
            {"nodeInfo",
             {{"machineID", "m" + std::to_string(i)},
              {"kernelVersion", "6.1.0-27-amd64"},
              {"osImage", "Debian GNU/Linux 12 (bookworm)"},
              {"containerRuntimeVersion", "containerd://1.7.24"},
              {"kubeletVersion", "v1.32.13"},
              {"kubeProxyVersion", "v1.32.13"},
              {"operatingSystem", "linux"},
              {"architecture", "amd64"}}},
            {"images", images}}}};
}

// A bound pod holding GPUs of node `node`, with its grant annotation.
json BoundPod(const std::string& pod_name, const std::string& node, std::vector<int> gpus,
              bool exclusive) {
  kube::Grant grant;
  grant.node = node;
  grant.policy = "fgd";
  grant.assumed_at = kNow - 3600;
  kube::ContainerGrant c;
  c.name = "main";
  for (int g : gpus) c.gpus.push_back({g, "GPU-" + node + "-" + std::to_string(g)});
  c.exclusive = exclusive;
  c.gpu_milli = 1000;  // whole GPUs (replaced below for a share)
  json limits = {{"cpu", "4"}, {"memory", "16Gi"}};
  if (exclusive) {
    limits["gpumux.io/gpu"] = std::to_string(gpus.size());
  } else {
    c.gpu_milli = 300;
    c.gpu_mem_mib = 16384;
    c.milli_requested = true;
    limits["gpumux.io/gpu-mem"] = "16384";
    limits["gpumux.io/gpu-milli"] = "300";
  }
  grant.containers.push_back(c);
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata",
           {{"name", pod_name},
            {"namespace", "bench"},
            {"uid", "uid-" + pod_name},
            {"annotations", {{std::string(kube::kAnnotationGrant), kube::EncodeGrant(grant)}}}}},
          {"spec",
           {{"nodeName", node},
            {"containers",
             {{{"name", "main"},
               {"image", "nvcr.io/nvidia/pytorch:24.10-py3"},
               {"resources", {{"limits", limits}, {"requests", limits}}}}}}}},
          {"status", {{"phase", "Running"}}}};
}

// Existing load: node i holds i % 4 shares (16 GiB, 300 milli) on GPUs 0..3, every third node
// an exclusive 2-GPU pod on GPUs 6 and 7, and every tenth node is full (8 whole GPUs): it
// passes no filter.
std::vector<json> ExistingPods(int nodes, int gpus, int& exclusive_full) {
  std::vector<json> pods;
  exclusive_full = 0;
  for (int i = 0; i < nodes; ++i) {
    const std::string node = NodeName(i);
    if (i % 10 == 9) {
      std::vector<int> all(static_cast<std::size_t>(gpus));
      for (int g = 0; g < gpus; ++g) all[static_cast<std::size_t>(g)] = g;
      pods.push_back(BoundPod("full-" + std::to_string(i), node, all, true));
      ++exclusive_full;
      continue;
    }
    for (int k = 0; k < i % 4 && k < gpus; ++k) {
      pods.push_back(
          BoundPod("share-" + std::to_string(i) + "-" + std::to_string(k), node, {k}, false));
    }
    if (i % 3 == 0 && gpus >= 8) {
      pods.push_back(BoundPod("pair-" + std::to_string(i), node, {6, 7}, true));
    }
  }
  return pods;
}

// The pending pod kube-scheduler asks about, shaped like the captured samples (~1.5 KB).
json PendingPod(int iteration, const json& limits) {
  const std::string name = "bench-pod-" + std::to_string(iteration);
  json requests = limits;
  requests["cpu"] = "2";
  requests["memory"] = "8Gi";
  json all_limits = limits;
  all_limits["cpu"] = "2";
  all_limits["memory"] = "8Gi";
  return {{"metadata",
           {{"name", name},
            {"namespace", "default"},
            {"uid", "0b1c2d3e-0000-4000-8000-" + std::to_string(100000000000 + iteration)},
            {"resourceVersion", std::to_string(5000 + iteration)},
            {"creationTimestamp", "2026-11-20T23:12:08Z"},
            {"labels", {{"app", "trainer"}, {"team", "vision"}}},
            {"annotations", {{"gpumux.io/workload-class", "resnet50"}}}}},
          {"spec",
           {{"containers",
             {{{"name", "main"},
               {"image", "nvcr.io/nvidia/pytorch:24.10-py3"},
               {"command", {"python", "train.py", "--epochs", "90"}},
               {"resources", {{"limits", all_limits}, {"requests", requests}}},
               {"terminationMessagePath", "/dev/termination-log"},
               {"terminationMessagePolicy", "File"},
               {"imagePullPolicy", "IfNotPresent"}}}},
            {"restartPolicy", "Never"},
            {"terminationGracePeriodSeconds", 30},
            {"dnsPolicy", "ClusterFirst"},
            {"schedulerName", "default-scheduler"},
            {"tolerations",
             {{{"key", "node.kubernetes.io/not-ready"},
               {"operator", "Exists"},
               {"effect", "NoExecute"},
               {"tolerationSeconds", 300}},
              {{"key", "node.kubernetes.io/unreachable"},
               {"operator", "Exists"},
               {"effect", "NoExecute"},
               {"tolerationSeconds", 300}}}},
            {"priority", 0},
            {"enableServiceLinks", true},
            {"preemptionPolicy", "PreemptLowerPriority"}}},
          {"status", {{"phase", "Pending"}, {"qosClass", "Guaranteed"}}}};
}

// Typical pods for fgd, as `gpumux extender` builds them: the embedded trace's request shapes,
// GPU model constraints dropped.
std::vector<gpumux::policy::TypicalPod> TypicalPods() {
  std::istringstream in{std::string(gpumux::sim::EmbeddedPodList())};
  auto pods = gpumux::sim::ParsePodList(in, "<embedded pod list>");
  if (!pods) return {};
  for (auto& r : *pods) r.gpu_models.clear();
  auto cluster = gpumux::core::Cluster::Build({});
  return gpumux::policy::ComputeTypicalPods(*pods, *cluster);
}

struct Percentiles {
  double p50 = 0, p90 = 0, p99 = 0, max = 0;
};

Percentiles Summarise(std::vector<double> ms) {
  Percentiles p;
  if (ms.empty()) return p;
  std::sort(ms.begin(), ms.end());
  const auto at = [&](double q) {
    // Nearest rank: the smallest value with at least q of the samples at or below it.
    auto rank = static_cast<std::size_t>(q * static_cast<double>(ms.size()) + 0.999999);
    rank = std::clamp<std::size_t>(rank, 1, ms.size());
    return ms[rank - 1];
  };
  p.p50 = at(0.50);
  p.p90 = at(0.90);
  p.p99 = at(0.99);
  p.max = ms.back();
  return p;
}

double Millis(SteadyClock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

enum class Mode : std::uint8_t { kNodeNames, kNodeList };

struct Scenario {
  int nodes = 0;
  Mode mode = Mode::kNodeNames;
  std::string policy;
  std::string pod_kind;
  json limits;
  int iterations = 0;
};

struct Outcome {
  bool ok = false;
  std::string error;
  std::size_t passed = 0;
  std::size_t filter_bytes = 0;
  Percentiles filter, prioritize, pair;
  double pairs_per_second = 0;
};

// The names that passed a filter reply (NodeNames, or the names of Nodes.items).
std::vector<std::string> PassedNames(const json& reply, Mode mode) {
  std::vector<std::string> names;
  if (mode == Mode::kNodeNames) {
    if (reply.contains("NodeNames") && reply["NodeNames"].is_array()) {
      for (const json& n : reply["NodeNames"]) names.push_back(n.get<std::string>());
    }
  } else if (reply.contains("Nodes") && reply["Nodes"].is_object()) {
    for (const json& n : reply["Nodes"]["items"]) names.push_back(n["metadata"]["name"]);
  }
  return names;
}

Outcome RunScenario(httplib::Client& client, const Scenario& s, const std::vector<json>& nodes,
                    const std::vector<std::string>& node_texts, int warmup) {
  Outcome out;
  // The part of each body after the pod: every node offered, then (after a first filter call)
  // the nodes that passed. Built once; each iteration only prepends its own pod.
  const auto args_tail = [&](const std::vector<std::size_t>& which) {
    std::string tail;
    if (s.mode == Mode::kNodeNames) {
      json names = json::array();
      for (std::size_t i : which) names.push_back(nodes[i]["metadata"]["name"]);
      tail = ",\"Nodes\":null,\"NodeNames\":" + names.dump() + "}";
    } else {
      tail =
          ",\"Nodes\":{\"kind\":\"NodeList\",\"apiVersion\":\"v1\",\"metadata\":{"
          "\"resourceVersion\":\"123456\"},\"items\":[";
      for (std::size_t k = 0; k < which.size(); ++k) {
        if (k > 0) tail += ',';
        tail += node_texts[which[k]];
      }
      tail += "]},\"NodeNames\":null}";
    }
    return tail;
  };
  std::vector<std::size_t> all(nodes.size());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
  const std::string filter_tail = args_tail(all);
  const auto body = [](const json& pod, const std::string& tail) {
    return "{\"Pod\":" + pod.dump() + tail;
  };

  // A first, untimed round: learn which nodes pass and check the replies' shapes.
  auto first = client.Post("/gpumux/filter", body(PendingPod(-1, s.limits), filter_tail),
                           "application/json");
  if (!first || first->status != 200) {
    out.error =
        first ? "filter: HTTP " + std::to_string(first->status) + ": " + first->body.substr(0, 300)
              : "filter: " + httplib::to_string(first.error());
    return out;
  }
  const json reply = json::parse(first->body, nullptr, false);
  const std::vector<std::string> passed = PassedNames(reply, s.mode);
  out.passed = passed.size();
  out.filter_bytes = first->body.size();
  if (passed.size() < 2) {
    out.error = "fewer than two nodes passed (prioritize would not be called): " +
                first->body.substr(0, 300);
    return out;
  }
  std::vector<std::size_t> passed_index;
  for (const std::string& name : passed) {
    // Names are gpu-node-NNNNN with NNNNN the index.
    passed_index.push_back(static_cast<std::size_t>(std::stoul(name.substr(9))));
  }
  const std::string prioritize_tail = args_tail(passed_index);
  auto scores = client.Post("/gpumux/prioritize", body(PendingPod(-1, s.limits), prioritize_tail),
                            "application/json");
  if (!scores || scores->status != 200) {
    out.error = scores ? "prioritize: HTTP " + std::to_string(scores->status) + ": " +
                             scores->body.substr(0, 300)
                       : "prioritize: " + httplib::to_string(scores.error());
    return out;
  }
  const json score_list = json::parse(scores->body, nullptr, false);
  if (!score_list.is_array() || score_list.size() != passed.size()) {
    out.error = "prioritize did not score every passing node: " + scores->body.substr(0, 300);
    return out;
  }
  for (const json& e : score_list) {
    const auto v = e.value("Score", std::int64_t{-1});
    if (v < 0 || v > 10) {
      out.error = "score out of 0..10: " + e.dump();
      return out;
    }
  }

  std::vector<double> filter_ms, prioritize_ms, pair_ms;
  filter_ms.reserve(static_cast<std::size_t>(s.iterations));
  prioritize_ms.reserve(static_cast<std::size_t>(s.iterations));
  pair_ms.reserve(static_cast<std::size_t>(s.iterations));
  SteadyClock::time_point timed_start{};
  for (int i = -warmup; i < s.iterations; ++i) {
    if (i == 0) timed_start = SteadyClock::now();
    const json pod = PendingPod(i, s.limits);
    const std::string filter_body = body(pod, filter_tail);
    const std::string prioritize_body = body(pod, prioritize_tail);
    const auto t0 = SteadyClock::now();
    auto f = client.Post("/gpumux/filter", filter_body, "application/json");
    const auto t1 = SteadyClock::now();
    if (!f || f->status != 200 || f->body.size() != out.filter_bytes) {
      out.error = "filter changed its answer or failed at iteration " + std::to_string(i);
      return out;
    }
    const auto t2 = SteadyClock::now();
    auto p = client.Post("/gpumux/prioritize", prioritize_body, "application/json");
    const auto t3 = SteadyClock::now();
    if (!p || p->status != 200) {
      out.error = "prioritize failed at iteration " + std::to_string(i);
      return out;
    }
    if (i < 0) continue;
    filter_ms.push_back(Millis(t1 - t0));
    prioritize_ms.push_back(Millis(t3 - t2));
    pair_ms.push_back(Millis(t1 - t0) + Millis(t3 - t2));
  }
  const double wall_s = std::chrono::duration<double>(SteadyClock::now() - timed_start).count();
  out.filter = Summarise(filter_ms);
  out.prioritize = Summarise(prioritize_ms);
  out.pair = Summarise(pair_ms);
  out.pairs_per_second = wall_s > 0 ? static_cast<double>(s.iterations) / wall_s : 0;
  out.ok = true;
  return out;
}

std::vector<int> ParseInts(const std::string& text) {
  std::vector<int> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) out.push_back(std::stoi(item));
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  std::string nodes_text = "1000,5000";
  std::string policies_text = "fgd,best-fit,binpack";
  CLI::App app{
      "gpumux_extender_bench: filter + prioritize latency of the scheduler extender over "
      "loopback HTTP (one keep-alive client, as kube-scheduler)"};
  app.add_option("--nodes", nodes_text, "Cluster sizes, comma-separated")->capture_default_str();
  app.add_option("--gpus-per-node", o.gpus_per_node, "GPUs per node (80 GiB each)")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  app.add_option("--iterations", o.iterations, "Timed filter+prioritize pairs per scenario")
      ->capture_default_str()
      ->check(CLI::Range(1, 10000000));
  app.add_option("--warmup", o.warmup, "Untimed pairs before each scenario")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000000));
  app.add_option("--full-max-nodes", o.full_max_nodes,
                 "Largest cluster also run with the full v1.NodeList in the body "
                 "(nodeCacheCapable: false); 0: never")
      ->capture_default_str();
  app.add_option("--full-iterations", o.full_iterations,
                 "Timed pairs of the full-NodeList scenarios (MBs per body)")
      ->capture_default_str()
      ->check(CLI::Range(1, 10000000));
  app.add_option("--policies", policies_text,
                 "Policies, comma-separated (names not registered are skipped)")
      ->capture_default_str();
  app.add_option("--threads", o.threads, "Server worker threads")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  o.nodes = ParseInts(nodes_text);
  o.policies.clear();
  {
    std::stringstream in(policies_text);
    std::string p;
    while (std::getline(in, p, ',')) {
      if (p.empty()) continue;
      if (gpumux::policy::BuiltinPolicies().Find(p) == nullptr) {
        std::fprintf(stderr, "policy %s is not registered: skipped\n", p.c_str());
        continue;
      }
      o.policies.push_back(p);
    }
  }

  const std::vector<gpumux::policy::TypicalPod> typical = TypicalPods();
  const std::vector<std::pair<std::string, json>> pod_kinds = {
      {"share 8G+250m", {{"gpumux.io/gpu-mem", "8192"}, {"gpumux.io/gpu-milli", "250"}}},
      {"1 whole GPU", {{"gpumux.io/gpu", "1"}}},
  };

  std::printf(
      "gpumux extender: filter then prioritize over loopback HTTP, one keep-alive client\n");
  std::printf(
      "%d GPUs of 80 GiB per node; bound pods use part of them (every 10th node full); "
      "%u hardware threads; server %d threads\n",
      o.gpus_per_node, std::thread::hardware_concurrency(), o.threads);
  std::printf(
      "latencies in ms (client round trip: request written -> reply read); pair = "
      "filter + prioritize; pairs/s back to back\n\n");
  std::printf("%6s %-6s %-15s %-14s %6s %9s | %-31s | %-31s | %-31s | %8s\n", "nodes", "mode",
              "policy", "pod", "passed", "reply KB", "filter p50/p90/p99/max",
              "prioritize p50/p90/p99/max", "pair p50/p90/p99/max", "pairs/s");
  int failures = 0;
  for (int n : o.nodes) {
    std::vector<json> nodes;
    std::vector<std::string> node_texts;
    nodes.reserve(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) {
      nodes.push_back(NodeObject(i, o.gpus_per_node));
      node_texts.push_back(nodes.back().dump());
    }
    int full_nodes = 0;
    const std::vector<json> pods = ExistingPods(n, o.gpus_per_node, full_nodes);
    for (const std::string& policy : o.policies) {
      sched::ClusterStateOptions options;
      options.policy = policy;
      options.context.typical_pods = typical;
      auto created = sched::ClusterState::Create(std::move(options), [] { return kNow; });
      if (!created) {
        std::fprintf(stderr, "%s: %s\n", policy.c_str(), created.error().message.c_str());
        ++failures;
        continue;
      }
      sched::ClusterState& state = **created;
      const auto build_start = SteadyClock::now();
      state.SetNodes(nodes);
      state.SetPods(pods);
      state.MarkSynced();
      const sched::StateCounters c = state.counters();
      const double build_ms = Millis(SteadyClock::now() - build_start);
      if (c.grants_bound != static_cast<std::int64_t>(pods.size()) || c.grant_conflicts != 0) {
        std::fprintf(stderr, "%d nodes, %s: %lld of %zu grants bound, %lld conflicts\n", n,
                     policy.c_str(), static_cast<long long>(c.grants_bound), pods.size(),
                     static_cast<long long>(c.grant_conflicts));
        const json inspect = sched::StateJson(state.Snapshot());
        if (inspect.contains("grants_not_in_ledger") && !inspect["grants_not_in_ledger"].empty()) {
          std::fprintf(stderr, "  e.g. %s\n",
                       inspect["grants_not_in_ledger"][0].dump().substr(0, 400).c_str());
        }
        ++failures;
      }
      extender::Extender extender(state, nullptr);
      extender::ExtenderServerOptions server_options;
      server_options.threads = o.threads;
      server_options.slow_request = std::chrono::milliseconds(1000000);
      extender::ExtenderServer server(extender, state, server_options);
      if (auto started = server.Start(); !started) {
        std::fprintf(stderr, "server: %s\n", started.error().message.c_str());
        return 1;
      }
      httplib::Client client("127.0.0.1", server.port());
      client.set_keep_alive(true);
      client.set_tcp_nodelay(true);
      client.set_read_timeout(std::chrono::seconds(30));
      client.set_write_timeout(std::chrono::seconds(30));
      for (const Mode mode : {Mode::kNodeNames, Mode::kNodeList}) {
        if (mode == Mode::kNodeList && n > o.full_max_nodes) continue;
        for (const auto& [kind, limits] : pod_kinds) {
          Scenario s{n,    mode,   policy,
                     kind, limits, mode == Mode::kNodeList ? o.full_iterations : o.iterations};
          const Outcome r =
              RunScenario(client, s, nodes, node_texts,
                          mode == Mode::kNodeList ? std::min(o.warmup, 10) : o.warmup);
          const char* mode_name = mode == Mode::kNodeNames ? "names" : "list";
          if (!r.ok) {
            std::printf("%6d %-6s %-15s %-14s FAILED: %s\n", n, mode_name, policy.c_str(),
                        kind.c_str(), r.error.c_str());
            ++failures;
            continue;
          }
          const auto cell = [](const Percentiles& p) {
            char buf[64];
            std::snprintf(buf, sizeof buf, "%6.3f %6.3f %6.3f %7.3f", p.p50, p.p90, p.p99, p.max);
            return std::string(buf);
          };
          std::printf("%6d %-6s %-15s %-14s %6zu %9.1f | %s | %s | %s | %8.0f\n", n, mode_name,
                      policy.c_str(), kind.c_str(), r.passed,
                      static_cast<double>(r.filter_bytes) / 1024.0, cell(r.filter).c_str(),
                      cell(r.prioritize).c_str(), cell(r.pair).c_str(), r.pairs_per_second);
          std::fflush(stdout);
        }
      }
      std::printf("%6s (%d nodes, %s: state built from %zu nodes and %zu bound pods in %.1f ms)\n",
                  "", n, policy.c_str(), nodes.size(), pods.size(), build_ms);
      server.Stop();
    }
  }
  return failures == 0 ? 0 : 1;
}
