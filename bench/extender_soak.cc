// gpumux_extender_soak: does the extender's memory level off under a long, varied stream of pods?
//
// A ClusterState of --nodes nodes (--gpus-per-node GPUs of 80 GiB each) and the real Extender
// serve kube-scheduler's verbs in-process (no HTTP: this measures the state, not the server).
// One cycle is one pending pod, with a new name and uid:
//   filter (every node offered, NodeNames) -> prioritize (the nodes that passed) -> bind,
//   emulated as the extender's bind does it once its API calls succeed (ClusterState::Assume,
//   BeginBinding, ConfirmBound, then the watch's UpsertPod of the bound pod with its grant), and,
//   every
//   --preempt-every cycles, a preempt call naming the oldest bound pod as the victim.
// Once more than --live pods are bound, the oldest is deleted (RemovePod), so the cluster's
// load stays steady and any growth is a leak or an unbounded cache.
// Pod shapes rotate through: two containers (GPU shares), one share, one whole GPU, three
// containers; the shares' gpu-mem takes --shapes distinct sizes, so the policy engine sees many
// distinct request shapes.
// What to expect: the heap grows while caches fill - the Extender remembers the last 4,096
// pods it filtered (bind carries only a pod's name), the engine's score memo up to 16 MiB of
// shapes - and is flat after that, so run more than ~4,100 cycles to see it level off.
// (Bind is emulated instead of run against tests/testing's FakeApiServer: that server keeps
// every change in a history for watch replay, which would itself grow without bound.)
//
// Prints every --report-every cycles: cycles, RSS in MiB (VmRSS of /proc/self/status), the heap
// in use in MiB (glibc's mallinfo2: a leak grows it, allocator fragmentation only grows RSS),
// seconds so far. Exit status 1 when a verb fails.
#include <malloc.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_nodes.h"
#include "gpumux/core/cluster.h"
#include "gpumux/extender/extender.h"
#include "gpumux/kube/grant.h"
#include "gpumux/kube/objects.h"
#include "gpumux/policy/fragmentation.h"
#include "gpumux/policy/registry.h"
#include "gpumux/sched/cluster_state.h"
#include "gpumux/sim/trace.h"

namespace {

using nlohmann::json;
namespace extender = gpumux::extender;
namespace kube = gpumux::kube;
namespace sched = gpumux::sched;

constexpr std::int64_t kNow = 1'800'000'000;

struct Options {
  int nodes = 1000;
  int gpus_per_node = 8;
  int cycles = 6000;
  int report_every = 500;
  int live = 300;
  int shapes = 1000;
  int preempt_every = 10;
  std::string policy = "fgd";
};

using gpumux::bench::NodeName;

json Container(const std::string& name, const json& limits) {
  json all = limits;
  all["cpu"] = "2";
  all["memory"] = "8Gi";
  return {{"name", name},
          {"image", "nvcr.io/nvidia/pytorch:24.10-py3"},
          {"resources", {{"limits", all}, {"requests", all}}}};
}

json Share(std::int64_t mem_mib, int milli) {
  return {{"gpumux.io/gpu-mem", std::to_string(mem_mib)},
          {"gpumux.io/gpu-milli", std::to_string(milli)}};
}

// Pending pod number `cycle`: its shape rotates over four kinds; shares use one of `shapes`
// distinct gpu-mem sizes (1 GiB + k x 16 MiB).
json PendingPod(int cycle, int shapes) {
  const std::string name = "soak-pod-" + std::to_string(cycle);
  const std::int64_t mem = 1024 + 16 * static_cast<std::int64_t>(cycle % shapes);
  json containers = json::array();
  switch (cycle % 4) {
    case 0:
      containers.push_back(Container("trainer", Share(mem, 250)));
      containers.push_back(Container("sidecar", Share(2048, 100)));
      break;
    case 1:
      containers.push_back(Container("main", Share(mem, 300)));
      break;
    case 2:
      containers.push_back(Container("main", {{"gpumux.io/gpu", "1"}}));
      break;
    default:
      containers.push_back(Container("a", Share(mem, 200)));
      containers.push_back(Container("b", Share(mem / 2, 100)));
      containers.push_back(Container("c", Share(4096, 50)));
      break;
  }
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata",
           {{"name", name},
            {"namespace", "soak"},
            {"uid", "uid-" + name},
            {"annotations", {{"gpumux.io/workload-class", "resnet50"}}}}},
          {"spec", {{"schedulerName", "default-scheduler"}, {"containers", containers}}},
          {"status", {{"phase", "Pending"}}}};
}

double RssMib() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  }
  return -1;
}

double HeapMib() {
  const struct mallinfo2 m = ::mallinfo2();
  return static_cast<double>(m.uordblks + m.hblkhd) / (1024.0 * 1024.0);
}

std::vector<gpumux::policy::TypicalPod> TypicalPods() {
  std::istringstream in{std::string(gpumux::sim::EmbeddedPodList())};
  auto pods = gpumux::sim::ParsePodList(in, "<embedded pod list>");
  if (!pods) return {};
  for (auto& r : *pods) r.gpu_models.clear();
  auto cluster = gpumux::core::Cluster::Build({});
  return gpumux::policy::ComputeTypicalPods(*pods, *cluster);
}

// The JSON array of node names, as a body fragment.
std::string NamesTail(const std::vector<std::string>& names) {
  json list = json::array();
  for (const std::string& n : names) list.push_back(n);
  return ",\"Nodes\":null,\"NodeNames\":" + list.dump() + "}";
}

struct Bound {
  json pod;
  std::string uid, node;
};

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{
      "gpumux_extender_soak: RSS of the extender's state over repeated "
      "filter/prioritize/bind/delete cycles"};
  app.add_option("--nodes", o.nodes, "Nodes in the cluster")
      ->capture_default_str()
      ->check(CLI::Range(2, 100000));
  app.add_option("--gpus-per-node", o.gpus_per_node, "GPUs per node (80 GiB each)")
      ->capture_default_str()
      ->check(CLI::Range(1, gpumux::core::kMaxGpusPerNode));
  app.add_option("--cycles", o.cycles, "Pods to schedule (one filter/prioritize/bind each)")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000000));
  app.add_option("--report-every", o.report_every, "Print RSS every N cycles")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000000));
  app.add_option("--live", o.live, "Bound pods kept; the oldest is deleted beyond this")
      ->capture_default_str()
      ->check(CLI::Range(1, 10000000));
  app.add_option("--shapes", o.shapes, "Distinct gpu-mem sizes of the shares")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  app.add_option("--preempt-every", o.preempt_every, "A preempt call every N cycles; 0: none")
      ->capture_default_str()
      ->check(CLI::Range(0, 100000000));
  app.add_option("--policy", o.policy, "Placement policy")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  sched::ClusterStateOptions options;
  options.policy = o.policy;
  options.context.typical_pods = TypicalPods();
  auto created = sched::ClusterState::Create(std::move(options), [] { return kNow; });
  if (!created) {
    std::fprintf(stderr, "%s\n", created.error().message.c_str());
    return 1;
  }
  sched::ClusterState& state = **created;
  std::vector<std::string> names;
  {
    std::vector<json> nodes;
    for (int i = 0; i < o.nodes; ++i) {
      nodes.push_back(gpumux::bench::CompactNodeObject(i, o.gpus_per_node));
      names.push_back(NodeName(i));
    }
    state.SetNodes(nodes);
  }
  state.SetPods({});
  state.MarkSynced();
  extender::Extender extender(state, nullptr);
  const std::string filter_tail = NamesTail(names);

  std::printf(
      "# gpumux_extender_soak: %d nodes x %d GPUs, policy %s, %d cycles, %d live pods, "
      "%d gpu-mem sizes, preempt every %d\n",
      o.nodes, o.gpus_per_node, o.policy.c_str(), o.cycles, o.live, o.shapes, o.preempt_every);
  std::printf("%8s %9s %9s %8s\n", "cycles", "rss_mib", "heap_mib", "seconds");
  const auto start = std::chrono::steady_clock::now();
  const auto report = [&](int cycles) {
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("%8d %9.1f %9.1f %8.1f\n", cycles, RssMib(), HeapMib(), s);
    std::fflush(stdout);
  };
  report(0);

  std::deque<Bound> live;
  int unplaced = 0;
  for (int cycle = 0; cycle < o.cycles; ++cycle) {
    const json pod = PendingPod(cycle, o.shapes);
    const std::string pod_text = pod.dump();
    const extender::VerbReply filtered =
        extender.Handle(extender::Verb::kFilter, "{\"Pod\":" + pod_text + filter_tail);
    const json fr = json::parse(filtered.body, nullptr, false);
    if (filtered.http_status != 200 || !fr.is_object()) {
      std::fprintf(stderr, "cycle %d: filter: HTTP %d %s\n", cycle, filtered.http_status,
                   filtered.body.substr(0, 300).c_str());
      return 1;
    }
    std::vector<std::string> passed;
    if (fr.contains("NodeNames") && fr["NodeNames"].is_array()) {
      for (const json& n : fr["NodeNames"]) passed.push_back(n.get<std::string>());
    }
    std::string chosen;
    if (!passed.empty()) {
      const extender::VerbReply scored =
          extender.Handle(extender::Verb::kPrioritize, "{\"Pod\":" + pod_text + NamesTail(passed));
      const json sr = json::parse(scored.body, nullptr, false);
      if (scored.http_status != 200 || !sr.is_array() || sr.size() != passed.size()) {
        std::fprintf(stderr, "cycle %d: prioritize: HTTP %d %s\n", cycle, scored.http_status,
                     scored.body.substr(0, 300).c_str());
        return 1;
      }
      std::int64_t best = -1;
      for (const json& e : sr) {
        const auto score = e.value("Score", std::int64_t{-1});
        const auto host = e.find("Host");
        if (score > best && host != e.end() && host->is_string()) {
          best = score;
          chosen = host->get<std::string>();
        }
      }
    }
    if (chosen.empty()) {
      ++unplaced;
    } else {
      auto info = kube::DecodePod(pod);
      if (!info) {
        std::fprintf(stderr, "cycle %d: %s\n", cycle, info.error().message.c_str());
        return 1;
      }
      auto grant = state.Assume(*info, chosen);
      if (!grant) {
        std::fprintf(stderr, "cycle %d: assume on %s: %s\n", cycle, chosen.c_str(),
                     grant.error().message.c_str());
        return 1;
      }
      state.BeginBinding(info->uid, *grant);
      state.ConfirmBound(info->uid, *grant);
      json bound = pod;
      bound["metadata"]["annotations"][std::string(kube::kAnnotationGrant)] =
          kube::EncodeGrant(*grant);
      bound["spec"]["nodeName"] = chosen;
      bound["status"]["phase"] = "Running";
      state.UpsertPod(bound);
      live.push_back({std::move(bound), info->uid, chosen});
    }
    if (o.preempt_every > 0 && cycle % o.preempt_every == 0 && !live.empty()) {
      const Bound& victim = live.front();
      const json args = {
          {"Pod", pod},
          {"NodeNameToMetaVictims",
           {{victim.node, {{"Pods", {{{"UID", victim.uid}}}}, {"NumPDBViolations", 0}}}}}};
      const extender::VerbReply preempted = extender.Handle(extender::Verb::kPreempt, args.dump());
      if (preempted.http_status != 200) {
        std::fprintf(stderr, "cycle %d: preempt: HTTP %d %s\n", cycle, preempted.http_status,
                     preempted.body.substr(0, 300).c_str());
        return 1;
      }
    }
    while (static_cast<int>(live.size()) > o.live) {
      json gone = live.front().pod;
      gone["status"]["phase"] = "Succeeded";
      state.RemovePod(gone);
      live.pop_front();
    }
    if ((cycle + 1) % o.report_every == 0) report(cycle + 1);
  }
  if (o.cycles % o.report_every != 0) report(o.cycles);
  const sched::StateCounters c = state.counters();
  std::printf(
      "# %d pods fitted nowhere; at the end %lld grants bound, %lld assumed, %lld "
      "conflicts, %lld ledger rebuilds\n",
      unplaced, static_cast<long long>(c.grants_bound), static_cast<long long>(c.grants_assumed),
      static_cast<long long>(c.grant_conflicts), static_cast<long long>(c.rebuilds));
  return 0;
}
