// gpumux_scale: the load and the stand-ins of gpumux's scale rig (bench/scale/README.md).
//
//   gpumux_scale nodes --kubeconfig K --count N     creates N API-only GPU nodes (the trace's
//                                                   node shapes, replicated in order)
//   gpumux_scale run --kubeconfig K --mode M ...    creates the run's pods (at a rate, or all at
//                                                   once), plays every node's device plugin in the
//                                                   grant handshake (gpumux mode), and measures
//                                                   create -> bound per pod; writes one JSON
//
// Times are this process's monotonic clock: a pod's latency runs from just before its create
// request to the watch event that first shows it bound (spec.nodeName set), so it includes the
// create call and the watch's delivery, as a user's client would see them.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "bench/scale/scale_cluster.h"
#include "gpumux/io/atomic_file.h"
#include "gpumux/kube/objects.h"
#include "gpumux/kube/reflector.h"
#include "gpumux/sim/trace.h"

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
namespace scale = gpumux::scale;
namespace kube = gpumux::kube;
namespace core = gpumux::core;

struct Common {
  std::string kubeconfig;
  std::string node_list;  // "" = the embedded trace node list
  int count = 0;          // nodes in the cluster
  std::int64_t unit = 1024;
  int threads = 8;
  std::string handshake = "node-lock";  // or "none": the ablation without the node lock
};

struct RunOptions {
  std::string mode = "gpumux";
  std::string ns = "scale";
  std::string pod_list;
  std::size_t pods = 2000;
  std::size_t offset = 0;
  double rate = 0;  // pods per second; 0 = all at once (a burst)
  double gpu_fraction = 0.8;
  double timeout_s = 900;
  double idle_timeout_s = 60;
  int agent_threads = 4;
  std::string out;
  std::string replay_dir;  // "" = write no replay
};

double Since(Clock::time_point t0, Clock::time_point t) {
  return std::chrono::duration<double>(t - t0).count();
}

std::unique_ptr<scale::CountingApi> Connect(const Common& c) {
  auto config = kube::LoadKubeconfig(c.kubeconfig);
  if (!config) {
    std::cerr << "gpumux_scale: " << config.error().message << "\n";
    std::exit(2);
  }
  config->user_agent = "gpumux-scale";
  config->request_timeout = std::chrono::milliseconds(30000);
  return std::make_unique<scale::CountingApi>(kube::MakeCurlClient(*config));
}

std::vector<core::NodeSpec> Shapes(const Common& c) {
  auto shapes = gpumux::sim::NodeListOrEmbedded(c.node_list);
  if (!shapes || shapes->empty()) {
    std::cerr << "gpumux_scale: "
              << (shapes ? std::string("the node list is empty") : shapes.error().message) << "\n";
    std::exit(2);
  }
  return *shapes;
}

// Node name -> its shape, for the first `count` nodes.
std::map<std::string, core::NodeSpec> ClusterOf(const Common& c) {
  const auto shapes = Shapes(c);
  std::map<std::string, core::NodeSpec> out;
  for (int i = 0; i < c.count; ++i) {
    out[scale::ScaleNodeName(i)] = shapes[static_cast<std::size_t>(i) % shapes.size()];
  }
  return out;
}

// Runs fn(i) for i in [0, n) on `threads` threads.
template <typename Fn>
void Parallel(std::size_t n, int threads, Fn fn) {
  std::atomic<std::size_t> next{0};
  std::vector<std::jthread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (std::size_t i = next++; i < n; i = next++) fn(i);
    });
  }
}

int CreateNodes(const Common& c) {
  auto api = Connect(c);
  const auto cluster = ClusterOf(c);
  std::vector<std::pair<std::string, core::NodeSpec>> nodes(cluster.begin(), cluster.end());
  std::atomic<int> done{0}, failed{0};
  std::mutex err_mu;
  std::string first_error;
  const auto t0 = Clock::now();
  Parallel(nodes.size(), c.threads, [&](std::size_t i) {
    const auto& [name, shape] = nodes[i];
    json node = scale::NodeObject(shape, name, c.unit, c.handshake != "none");
    auto created = api->Post("/api/v1/nodes", node);
    // The API server keeps a created node's status (as a kubelet's registration relies on);
    // should one not, the status subresource sets it.
    if (created && !created->contains("status")) {
      created = api->Patch("/api/v1/nodes/" + name + "/status", {{"status", node["status"]}},
                           kube::PatchType::kMerge);
    }
    // The TaintNodesByCondition admission plugin taints every new node not-ready; with no
    // kubelet and no node lifecycle controller, nothing would ever lift it.
    if (created) {
      created = api->Patch("/api/v1/nodes/" + name, {{"spec", {{"taints", nullptr}}}},
                           kube::PatchType::kMerge);
    }
    if (!created && created.error().http_status != 409) {
      std::lock_guard lock(err_mu);
      if (failed++ == 0) first_error = name + ": " + created.error().ToString();
    }
    if (const int d = ++done; d % 500 == 0)
      std::fprintf(stderr, "nodes: %d/%zu\n", d, nodes.size());
  });
  std::int64_t gpus = 0;
  for (const auto& [name, shape] : nodes) gpus += static_cast<std::int64_t>(shape.gpus.size());
  json summary = {{"nodes", nodes.size()},
                  {"gpus", gpus},
                  {"failed", failed.load()},
                  {"seconds", Since(t0, Clock::now())}};
  std::cout << summary.dump() << "\n";
  if (failed > 0)
    std::cerr << "gpumux_scale nodes: " << failed << " failed, e.g. " << first_error << "\n";
  return failed > 0 ? 1 : 0;
}

// --- run ---

struct PodTimes {
  double created = -1;  // seconds after the run's start (just before the create call)
  double bound = -1;    // the first watch event showing it bound
  std::string node;
  std::string create_error;
  std::string serve_error;  // the device-plugin stand-in's, gpumux mode
  double served = -1;       // when its devices were allocated
  std::string source;       // the trace pod it was made from
  // Its create's answer: the resourceVersion the API server stored it at (etcd's revision:
  // the order kube-scheduler's watch saw the pods in) and the how-manieth answer it was.
  std::uint64_t version = 0;
  std::int64_t answered = -1;  // -1: the create failed
};

class Run {
 public:
  Run(const Common& c, const RunOptions& o, scale::Mode mode)
      : common_(c),
        options_(o),
        mode_(mode),
        api_(Connect(c)),
        plugin_api_(Connect(c)),
        plugin_(*plugin_api_) {}
  int Main();

 private:
  void OnPod(const json& pod);
  void AgentLoop(std::stop_token stop);
  void CreateAll(const std::vector<json>& pods);
  bool WaitForBindings(std::size_t created);
  json Summary(const std::vector<json>& final_pods, const std::vector<std::string>& violations);
  json Failures(const std::vector<json>& final_pods) const;
  json WriteReplay(const std::vector<json>& final_pods,
                   const std::map<std::string, core::NodeSpec>& cluster);

  Common common_;
  RunOptions options_;
  scale::Mode mode_;
  std::unique_ptr<scale::CountingApi> api_;         // the load tool's own requests
  std::unique_ptr<scale::CountingApi> plugin_api_;  // the device plugins' (the stand-in's)
  scale::PluginStandIn plugin_;
  Clock::time_point t0_ = Clock::now();
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, PodTimes> times_;  // by pod name
  std::size_t bound_ = 0;
  std::size_t served_ = 0;
  std::int64_t answered_ = 0;  // creates answered so far
  Clock::time_point last_bound_ = Clock::now();
  std::deque<std::pair<json, std::string>> queue_;  // pods for the stand-in: (pod, node)
};

void Run::OnPod(const json& pod) {
  const json* spec = kube::JsonChild(pod, "spec");
  const std::string node = spec == nullptr ? "" : kube::JsonString(*spec, "nodeName");
  if (node.empty()) return;
  const std::string name = kube::JsonString(pod.at("metadata"), "name");
  std::lock_guard lock(mu_);
  PodTimes& t = times_[name];
  if (t.bound >= 0) return;
  last_bound_ = Clock::now();
  t.bound = Since(t0_, last_bound_);
  t.node = node;
  ++bound_;
  if (mode_ == scale::Mode::kGpumux && common_.handshake != "none") queue_.emplace_back(pod, node);
  cv_.notify_all();
}

void Run::AgentLoop(std::stop_token stop) {
  while (true) {
    std::pair<json, std::string> item;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop.stop_requested() || !queue_.empty(); });
      if (queue_.empty()) return;
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    std::string error = plugin_.Serve(item.first, item.second);
    std::lock_guard lock(mu_);
    PodTimes& t = times_[kube::JsonString(item.first.at("metadata"), "name")];
    t.serve_error = std::move(error);
    t.served = Since(t0_, Clock::now());
    ++served_;
    cv_.notify_all();
  }
}

void Run::CreateAll(const std::vector<json>& pods) {
  const std::string path = "/api/v1/namespaces/" + options_.ns + "/pods";
  const auto start = Clock::now();
  Parallel(pods.size(), common_.threads, [&](std::size_t i) {
    if (options_.rate > 0) {
      std::this_thread::sleep_until(
          start + std::chrono::duration_cast<Clock::duration>(
                      std::chrono::duration<double>(static_cast<double>(i) / options_.rate)));
    }
    const std::string name = kube::JsonString(pods[i].at("metadata"), "name");
    const double at = Since(t0_, Clock::now());
    {
      std::lock_guard lock(mu_);
      times_[name].created = at;
    }
    auto created = api_->Post(path, pods[i]);
    std::uint64_t version = 0;
    if (const json* meta = created ? kube::JsonChild(*created, "metadata") : nullptr) {
      const std::string rv = kube::JsonString(*meta, "resourceVersion");
      std::from_chars(rv.data(), rv.data() + rv.size(), version);
    }
    std::lock_guard lock(mu_);
    PodTimes& t = times_[name];
    if (!created) {
      t.create_error = created.error().ToString();
    } else {
      t.version = version;
      t.answered = answered_++;
    }
    if ((i + 1) % 500 == 0) std::fprintf(stderr, "pods: %zu/%zu created\n", i + 1, pods.size());
  });
}

// True when every created pod was bound (and, gpumux mode, served) before the limits.
bool Run::WaitForBindings(std::size_t created) {
  const auto deadline = t0_ + std::chrono::duration_cast<Clock::duration>(
                                  std::chrono::duration<double>(options_.timeout_s));
  const auto idle = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(options_.idle_timeout_s));
  std::unique_lock lock(mu_);
  auto last_report = Clock::now();
  while (true) {
    const bool all = bound_ >= created && (mode_ != scale::Mode::kGpumux ||
                                           common_.handshake == "none" || served_ >= bound_);
    if (all) return true;
    const auto now = Clock::now();
    if (now >= deadline || now - std::max(last_bound_, t0_) >= idle) return false;
    if (now - last_report >= std::chrono::seconds(5)) {
      std::fprintf(stderr, "pods: %zu/%zu bound, %zu served\n", bound_, created, served_);
      last_report = now;
    }
    cv_.wait_for(lock, std::chrono::milliseconds(200));
  }
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  const auto i = static_cast<std::size_t>(p / 100.0 * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

json Run::Failures(const std::vector<json>& final_pods) const {
  std::map<std::string, int> reasons;
  for (const json& pod : final_pods) {
    const json* spec = kube::JsonChild(pod, "spec");
    if (spec != nullptr && !kube::JsonString(*spec, "nodeName").empty()) continue;
    std::string why = "not bound, no PodScheduled condition";
    const json* status = kube::JsonChild(pod, "status");
    const json* conditions = status == nullptr ? nullptr : kube::JsonChild(*status, "conditions");
    for (const json& c :
         conditions != nullptr && conditions->is_array() ? *conditions : json::array()) {
      if (kube::JsonString(c, "type") == "PodScheduled") {
        why = kube::JsonString(c, "reason") + ": " + kube::JsonString(c, "message").substr(0, 160);
      }
    }
    ++reasons[why];
  }
  json out = json::array();
  for (const auto& [why, n] : reasons) out.push_back({{"reason", why}, {"pods", n}});
  return out;
}

// The phase as the simulator replays it (bench/scale/README.md, placement quality): the cluster's
// nodes in the tool's order (scale-node-00000, ...), ranked in that order, and every created
// pod in the order the API server stored it (resourceVersion, then the order the creates were
// answered), with where the real path bound it. Returns what was written.
json Run::WriteReplay(const std::vector<json>& final_pods,
                      const std::map<std::string, core::NodeSpec>& cluster) {
  std::map<std::string, const json*> listed;
  for (const json& pod : final_pods) listed[kube::JsonString(pod.at("metadata"), "name")] = &pod;
  std::vector<std::tuple<std::uint64_t, std::int64_t, scale::ReplayArrival>> order;
  int unversioned = 0;
  for (const auto& [name, t] : times_) {
    if (t.answered < 0) continue;
    scale::ReplayArrival a{options_.ns + "/" + name, t.source, "", {}};
    if (auto it = listed.find(name); it != listed.end()) {
      if (auto granted = scale::GrantOf(*it->second)) {
        a.node = granted->node;
        a.gpus = granted->gpus;
      }
    }
    if (t.version == 0) ++unversioned;
    order.emplace_back(t.version, t.answered, std::move(a));
  }
  std::sort(order.begin(), order.end(), [](const auto& x, const auto& y) {
    return std::tie(std::get<0>(x), std::get<1>(x)) < std::tie(std::get<0>(y), std::get<1>(y));
  });
  std::vector<scale::ReplayArrival> arrivals;
  std::size_t moved = 0;  // pods stored in another order than their creates were answered
  for (const auto& [version, answered, a] : order) {
    if (static_cast<std::int64_t>(arrivals.size()) != answered) ++moved;
    arrivals.push_back(a);
  }
  std::vector<std::pair<std::string, core::NodeSpec>> nodes(cluster.begin(), cluster.end());
  std::vector<std::string> names;
  for (const auto& [name, shape] : nodes) names.push_back(name);
  std::filesystem::create_directories(options_.replay_dir);
  const std::string dir = options_.replay_dir + "/";
  std::string error;  // the first file that could not be written (the simulator then refuses)
  for (const auto& [file, text] : {std::pair{"node_list.csv", scale::NodeListCsv(nodes)},
                                   std::pair{"nodes.csv", scale::ReplayNodesCsv(names)},
                                   std::pair{"arrival.csv", scale::ArrivalCsv(arrivals)}}) {
    if (auto ok = gpumux::io::WriteFileAtomically(dir + file, text); !ok && error.empty()) {
      error = ok.error().message;
    }
  }
  return {{"dir", options_.replay_dir},
          {"arrivals", arrivals.size()},
          {"without_resource_version", unversioned},
          {"out_of_answer_order", moved},
          {"error", error}};
}

json Run::Summary(const std::vector<json>& final_pods, const std::vector<std::string>& violations) {
  std::vector<double> latency, serve;
  double first_create = -1, last_create = 0, last_bound = 0;
  json per_pod = json::array();
  int create_errors = 0, serve_errors = 0;
  std::string serve_error_example;
  for (const auto& [name, t] : times_) {
    if (!t.create_error.empty()) ++create_errors;
    if (t.created >= 0 && (first_create < 0 || t.created < first_create)) first_create = t.created;
    last_create = std::max(last_create, t.created);
    if (!t.serve_error.empty() && serve_errors++ == 0)
      serve_error_example = name + ": " + t.serve_error;
    if (t.bound < 0 || t.created < 0) continue;
    latency.push_back(t.bound - t.created);
    if (t.served >= 0) serve.push_back(t.served - t.bound);
    last_bound = std::max(last_bound, t.bound);
    per_pod.push_back(json::array({t.created, t.bound - t.created}));
  }
  const double span = last_bound - first_create;
  return {
      {"mode", options_.mode},
      {"nodes", common_.count},
      {"pods", times_.size()},
      {"rate", options_.rate},
      {"bound", latency.size()},
      {"create_errors", create_errors},
      {"create_seconds", last_create - first_create},
      {"bound_seconds", span},
      {"pods_per_second", span > 0 ? static_cast<double>(latency.size()) / span : 0.0},
      {"latency_s",
       {{"p50", Percentile(latency, 50)},
        {"p90", Percentile(latency, 90)},
        {"p99", Percentile(latency, 99)},
        {"max", Percentile(latency, 100)}}},
      {"allocate_after_bind_s", {{"p50", Percentile(serve, 50)}, {"p99", Percentile(serve, 99)}}},
      {"allocate_errors", serve_errors},
      {"allocate_error_example", serve_error_example},
      {"claims", plugin_.claims()},
      {"own_requests", api_->Counts()},
      {"plugin_requests", plugin_api_->Counts()},
      {"failures", Failures(final_pods)},
      {"capacity_violations", violations},
      {"per_pod", per_pod}};
}

int Run::Main() {
  const auto cluster = ClusterOf(common_);
  std::int64_t gpus = 0;
  for (const auto& [name, shape] : cluster) gpus += static_cast<std::int64_t>(shape.gpus.size());
  auto requests = gpumux::sim::PodListOrEmbedded(options_.pod_list);
  if (!requests) {
    std::cerr << "gpumux_scale: " << requests.error().message << "\n";
    return 2;
  }
  std::size_t next_offset = 0;
  const auto take = scale::TakeGpuPods(
      *requests, options_.offset, options_.pods,
      static_cast<std::int64_t>(options_.gpu_fraction * static_cast<double>(gpus)), &next_offset);
  std::int64_t requested_gpus = 0;
  for (const core::Request& q : take) requested_gpus += q.gpu_count;
  std::vector<json> pods;
  for (std::size_t i = 0; i < take.size(); ++i) {
    char name[32];
    std::snprintf(name, sizeof name, "p-%05zu", i);
    times_[name].source = take[i].name;  // no other thread runs yet
    auto pod = scale::PodObject(take[i], options_.ns, name, mode_, common_.unit);
    if (!pod) {
      std::cerr << "gpumux_scale: " << pod.error().message << "\n";
      return 2;
    }
    pods.push_back(std::move(*pod));
  }
  std::fprintf(stderr, "run: %s, %d nodes (%lld GPUs), %zu pods%s\n", options_.mode.c_str(),
               common_.count, static_cast<long long>(gpus), pods.size(),
               pods.size() < options_.pods ? " (fewer: the GPU cap)" : "");
  json ns = {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", options_.ns}}}};
  (void)api_->Post("/api/v1/namespaces", ns);

  kube::ReflectorHandler handler;
  handler.replace = [this](std::vector<json> items) {
    for (const json& pod : items) OnPod(pod);
  };
  handler.event = [this](const kube::WatchEvent& e) {
    if (e.type != "DELETED") OnPod(e.object);
  };
  kube::Reflector reflector(*api_, "/api/v1/namespaces/" + options_.ns + "/pods", handler);
  std::jthread watch([&](std::stop_token stop) { reflector.Run(stop); });
  while (!reflector.synced()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (mode_ == scale::Mode::kGpumux && common_.handshake != "none") plugin_.Watch(options_.ns);
  std::vector<std::jthread> agents;
  for (int i = 0; i < options_.agent_threads; ++i) {
    agents.emplace_back([this](std::stop_token stop) { AgentLoop(stop); });
  }
  {
    std::lock_guard lock(mu_);  // the watch thread reads it
    t0_ = Clock::now();
  }
  CreateAll(pods);
  const bool complete = WaitForBindings(pods.size());
  for (auto& a : agents) a.request_stop();
  cv_.notify_all();
  agents.clear();
  watch.request_stop();
  watch.join();

  auto listed = api_->List("/api/v1/namespaces/" + options_.ns + "/pods", 500);
  std::vector<json> final_pods;
  if (const json* items = listed ? kube::JsonChild(*listed, "items") : nullptr;
      items != nullptr && items->is_array()) {
    final_pods.assign(items->begin(), items->end());
  }
  const auto violations = scale::CapacityViolations(final_pods, cluster, mode_);
  json summary;
  {
    std::lock_guard lock(mu_);
    summary = Summary(final_pods, violations);
    // Placement quality (bench/scale/README.md): what the real path granted, and the replay.
    if (!options_.replay_dir.empty()) summary["replay"] = WriteReplay(final_pods, cluster);
  }
  summary["complete"] = complete;
  summary["granted_gpu_milli"] = scale::GrantedMilli(final_pods);
  summary["gpus"] = gpus;
  summary["requested_gpus"] = requested_gpus;
  summary["next_offset"] = next_offset;
  summary["list_error"] = listed ? "" : listed.error().ToString();
  if (auto written = gpumux::io::WriteFileAtomically(options_.out, summary.dump() + "\n");
      !written) {
    std::cerr << "gpumux_scale: " << written.error().message << "\n";
    return 2;
  }
  summary.erase("per_pod");
  std::cout << summary.dump(1) << "\n";
  return violations.empty() ? 0 : 3;
}

void AddCommon(CLI::App* app, Common& c) {
  app->add_option("--kubeconfig", c.kubeconfig, "kubeconfig of the API server")->required();
  app->add_option("--handshake", c.handshake,
                  "node-lock (the nodes announce the device plugin's handshake, and the stand-in "
                  "serves it) or none (an ablation: no node lock, no stand-in; unsafe on a real "
                  "cluster, where Allocate could not tell two pods apart)")
      ->capture_default_str()
      ->check(CLI::IsMember({"node-lock", "none"}));
  app->add_option("--count", c.count, "Nodes in the cluster (scale-node-00000 ...)")
      ->required()
      ->check(CLI::Range(1, 100000));
  app->add_option("--node-list", c.node_list,
                  "Node shapes (the trace's CSV); replicated in order [default: the embedded "
                  "Alibaba list, 1,213 nodes]");
  app->add_option("--gpu-mem-unit-mib", c.unit, "MiB per gpumux.io/gpu-mem unit")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  app->add_option("--threads", c.threads, "Client threads creating objects")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "gpumux's scale rig: API-only GPU nodes, their device plugins' part of the grant "
      "handshake, and a measured stream of pods (bench/scale/README.md)"};
  app.require_subcommand(1);
  Common common;
  RunOptions run;
  auto* nodes = app.add_subcommand("nodes", "Create the API-only GPU nodes");
  AddCommon(nodes, common);
  auto* r = app.add_subcommand("run", "Create the pods, serve their devices, measure, write JSON");
  AddCommon(r, common);
  r->add_option("--mode", run.mode,
                "gpumux (gpumux-scheduler, gpumux.io resources) or default "
                "(default-scheduler, whole nvidia.com/gpu)")
      ->capture_default_str();
  r->add_option("--namespace", run.ns, "Namespace of the pods")->capture_default_str();
  r->add_option("--pod-list", run.pod_list, "Pods (the trace's CSV) [default: embedded]");
  r->add_option("--pods", run.pods, "GPU pods to create, from --offset in list order")
      ->capture_default_str();
  r->add_option("--offset", run.offset, "First pod of the list to use")->capture_default_str();
  r->add_option("--rate", run.rate, "Pods created per second; 0: all at once (a burst)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e6));
  r->add_option("--gpu-fraction", run.gpu_fraction,
                "Stop taking pods once their GPUs (a share counted whole) would pass this "
                "fraction of the cluster's")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  r->add_option("--timeout", run.timeout_s, "Give up after this many seconds")
      ->capture_default_str();
  r->add_option("--idle-timeout", run.idle_timeout_s,
                "Give up when no pod was bound for this many seconds")
      ->capture_default_str();
  r->add_option("--agent-threads", run.agent_threads, "Device-plugin stand-in workers")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  r->add_option("--out", run.out, "Where to write the run's JSON")->required();
  r->add_option("--replay-dir", run.replay_dir,
                "Also write the run as gpumux simulate --replay reads it: node_list.csv (for "
                "--nodes), nodes.csv and arrival.csv (the created pods in the order the API "
                "server stored them, each with where it was bound)");
  CLI11_PARSE(app, argc, argv);
  if (nodes->parsed()) return CreateNodes(common);
  auto mode = scale::ParseMode(run.mode);
  if (!mode) {
    std::cerr << "gpumux_scale: " << mode.error().message << "\n";
    return 2;
  }
  Run measured(common, run, *mode);
  return measured.Main();
}
