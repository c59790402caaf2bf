// The node coordinator as jobs meet it: every request a new connection to its unix socket (as
// the SDK makes them), through the HTTP server, the coordinator's lock and its state machine,
// with the file store written in the background (every change reaches the fsync'd file). The
// embedded default profile (iadeep-fitted) and the joint tuner. Prints percentiles in ms.
//
//   register / report: with N jobs on the node (16 to a GPU, the default limit), each job's
//     registration (it joins its GPU: a tuning session starts) and then rounds of one report
//     of one step per job (the steady state, no window closing).
//   decision: a third job joins a GPU whose two jobs are tuned, and the three report at their
//     targets until the GPU is tuned again: "register" is the request that starts a session,
//     "window" a report that closes a measurement window (the tuner observes it and decides
//     the next step or the end). The tuner runs on the coordinator's tuning thread, so each is
//     timed twice: the request alone (what the job waits), and until the decision is applied
//     (the request, the tuning thread's computation and the apply under the lock: what the
//     job's next report sees). The tuner's memory is cleared each time by a fresh coordinator
//     for that GPU, so that every iteration measures at least one window.
//
//   crowded: N jobs join one GPU one after another (the per-GPU limit raised to N; each join
//     restarts its session, whose start costs more the more jobs share the GPU) while, from
//     another thread, a job alone on another GPU reports back to back: how long a report
//     waits while the tuner is busy.
//
//   gpumux_coordinator_http_bench [--jobs 100,1000] [--rounds 5] [--decisions 30]
//                                 [--crowded 150]
#include <stdlib.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "bench/latency_table.h"
#include "gpumux/coordinator/coordinator.h"
#include "gpumux/coordinator/server.h"
#include "gpumux/net/http_client.h"
#include "gpumux/sim/dl_workload.h"
#include "gpumux/store/store.h"

namespace {

using namespace gpumux;
using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr int kPerGpu = 16;
const char* const kClasses[] = {"vgg16", "alexnet", "neumf", "squeezenet", "googlenet"};

void Report(const std::string& what, std::vector<double> ms) {
  bench::PrintLatencies(what, std::move(ms), 34);
}

// A coordinator serving a unix socket in `dir`, its state in a file store there.
struct Node {
  std::unique_ptr<store::Store> store;
  std::unique_ptr<coordinator::Server> server;
  net::Endpoint socket;

  static Node Start(const std::string& dir, int max_jobs, int max_per_gpu = kPerGpu) {
    Node n;
    auto opened = store::OpenStore("file://" + dir + "/store.json");
    if (!opened) {
      std::fprintf(stderr, "store: %s\n", opened.error().message.c_str());
      std::exit(1);
    }
    n.store = std::move(*opened);
    coordinator::CoordinatorOptions o;
    o.window_steps = 4;
    o.max_jobs = max_jobs;
    o.max_jobs_per_gpu = max_per_gpu;
    o.job_timeout = std::chrono::minutes(10);
    coordinator::ServerOptions s;
    s.port = 0;
    s.socket_path = dir + "/c.sock";
    auto c = std::make_unique<coordinator::Coordinator>(o, sim::DefaultProfile(), nullptr, nullptr,
                                                        nullptr);
    auto started = coordinator::Server::Start(s, std::move(c), n.store.get(), nullptr);
    if (!started) {
      std::fprintf(stderr, "coordinator: %s\n", started.error().message.c_str());
      std::exit(1);
    }
    n.server = std::move(*started);
    n.socket = net::Endpoint::Unix(s.socket_path, 0);
    return n;
  }
  void Stop() {
    server.reset();
    store.reset();
  }

  // One request on a new connection: the reply's JSON, and its round trip in ms into `into`.
  Json Post(const std::string& path, const Json& body, std::vector<double>* into) {
    const auto start = Clock::now();
    auto r = net::Call(socket, "POST", path, body.dump());
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    if (!r || r->status != 200) {
      std::fprintf(stderr, "%s: %s\n", path.c_str(),
                   r ? r->body.c_str() : r.error().message.c_str());
      std::exit(1);
    }
    if (into != nullptr) into->push_back(ms);
    return Json::parse(r->body);
  }
};

std::string JobId(int i) { return "ns/pod-" + std::to_string(i) + "/c"; }
std::string GpuOf(int i) { return "GPU-" + std::to_string(i / kPerGpu); }
const char* ClassOf(int i) { return kClasses[i % 5]; }

Json Registration(int i) {
  return {{"job", JobId(i)},
          {"class", ClassOf(i)},
          {"batch_size", sim::DefaultProfile().Find(ClassOf(i))->default_batch},
          {"gpus", {GpuOf(i)}}};
}

void Load(const std::string& dir, int jobs, int rounds) {
  Node n = Node::Start(dir, jobs);
  std::vector<double> reg, rep;
  std::vector<int> batch(static_cast<std::size_t>(jobs));
  for (int i = 0; i < jobs; ++i) {
    batch[static_cast<std::size_t>(i)] =
        n.Post("/v1/register", Registration(i), &reg)["batch_size"].get<int>();
  }
  for (int r = 0; r < rounds; ++r) {
    for (int i = 0; i < jobs; ++i) {
      const Json body{{"job", JobId(i)},
                      {"steps", Json::array({{batch[static_cast<std::size_t>(i)], 0.1}})}};
      batch[static_cast<std::size_t>(i)] = n.Post("/v1/report", body, &rep)["batch_size"];
    }
  }
  Report(std::to_string(jobs) + " jobs: register", reg);
  Report(std::to_string(jobs) + " jobs: report (1 step)", rep);
  const auto drain = Clock::now();
  n.server->WaitForTuning();
  std::printf("%-34s tuning thread idle %.1f ms after the last reply\n", "",
              std::chrono::duration<double, std::milli>(Clock::now() - drain).count());
  while (n.server->store_pending() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::printf("%-34s store drained %.1f ms after the last reply\n", "",
              std::chrono::duration<double, std::milli>(Clock::now() - drain).count());
  n.Stop();
}

void Crowded(const std::string& dir, int jobs) {
  Node n = Node::Start(dir, jobs + 1, jobs);
  Json alone = Registration(0);
  alone["job"] = "ns/alone/c";
  alone["gpus"] = {"GPU-alone"};
  const int b = n.Post("/v1/register", alone, nullptr)["batch_size"];
  std::vector<double> reg, rep;
  std::atomic<bool> done{false};
  std::thread reporter([&] {
    while (!done.load()) {
      n.Post("/v1/report", {{"job", "ns/alone/c"}, {"steps", Json::array({{b, 0.1}})}}, &rep);
    }
  });
  for (int i = 0; i < jobs; ++i) {
    Json r = Registration(i);
    r["gpus"] = {"GPU-0"};
    n.Post("/v1/register", r, &reg);
  }
  done = true;
  reporter.join();
  const std::string what = std::to_string(jobs) + " on one GPU: ";
  Report(what + "register", reg);
  Report(what + "report, other GPU", rep);
  const auto drain = Clock::now();
  n.server->WaitForTuning();
  std::printf("%-34s tuning thread idle %.1f ms after the last reply\n", "",
              std::chrono::duration<double, std::milli>(Clock::now() - drain).count());
  n.Stop();
}

// Windows closed on GPU-0 so far (GET /v1/state; not timed).
std::int64_t WindowsClosed(Node& n) {
  auto r = net::Call(n.socket, "GET", "/v1/state", "");
  if (!r) return 0;
  const Json state = Json::parse(r->body);  // kept: a range-for over a temporary's member dangles
  for (const auto& g : state["gpus"]) {
    if (g["uuid"] == "GPU-0") return g.value("measurement_windows", std::int64_t{0});
  }
  return 0;
}

// Milliseconds from `start` until the tuning thread is idle (the decision applied).
double UntilApplied(Node& n, Clock::time_point start) {
  n.server->WaitForTuning();
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

void Decisions(const std::string& dir, int iterations) {
  std::vector<double> decide, decided, window, window_decided, plain;
  for (int it = 0; it < iterations; ++it) {
    std::filesystem::remove(dir + "/store.json");  // a fresh tuner: no learned corrections
    Node n = Node::Start(dir, 16);
    std::vector<int> batch(3);
    for (int k = 0; k < 3; ++k) {
      const auto start = Clock::now();
      batch[static_cast<std::size_t>(k)] =
          n.Post("/v1/register", Registration(k), k == 2 ? &decide : nullptr)["batch_size"];
      const double applied = UntilApplied(n, start);
      if (k == 2) decided.push_back(applied);
      for (int round = 0; round < 30; ++round) {  // settle: report at the targets
        bool measuring = false;
        for (int j = 0; j <= k; ++j) {
          const int b = batch[static_cast<std::size_t>(j)];
          const Json body{
              {"job", JobId(j)},
              {"steps", Json::array({{b, 0.1}, {b, 0.1}, {b, 0.1}, {b, 0.1}, {b, 0.1}})}};
          const std::int64_t windows = k == 2 ? WindowsClosed(n) : 0;
          std::vector<double> one;
          const auto sent = Clock::now();
          const Json reply = n.Post("/v1/report", body, &one);
          const double until = UntilApplied(n, sent);
          if (k == 2 && WindowsClosed(n) > windows) {
            window.push_back(one.front());
            window_decided.push_back(until);
          } else if (k == 2) {
            plain.push_back(one.front());
          }
          batch[static_cast<std::size_t>(j)] = reply["batch_size"];
          measuring = measuring || reply["state"] == "measuring";
        }
        if (!measuring) break;
      }
    }
    n.Stop();
  }
  Report("decision: register (session starts)", decide);
  Report("  ... until its decision is applied", decided);
  Report("decision: report closing a window", window);
  Report("  ... until its decision is applied", window_decided);
  Report("decision: report, no window closed", plain);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gpumux coordinator over its unix socket: register, report, decision latency"};
  std::vector<int> jobs{100, 1000};
  int rounds = 5, decisions = 30, crowded = 150;
  app.add_option("--jobs", jobs, "Jobs on the node, one load per value")->delimiter(',');
  app.add_option("--rounds", rounds, "Reports per job in the steady state")->capture_default_str();
  app.add_option("--decisions", decisions, "Third jobs joining a tuned pair")
      ->capture_default_str();
  app.add_option("--crowded", crowded, "Jobs joining one GPU (0: skip)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  std::string dir =
      (std::filesystem::temp_directory_path() / "gpumux-coordinator-bench-XXXXXX").string();
  if (::mkdtemp(dir.data()) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  std::printf("coordinator over its unix socket, a new connection per request (ms)\n");
  bench::PrintLatencyHead("request", 34);
  for (int n : jobs) {
    std::filesystem::remove(dir + "/store.json");
    Load(dir, n, rounds);
  }
  Decisions(dir, decisions);
  if (crowded > 0) {
    std::filesystem::remove(dir + "/store.json");
    Crowded(dir, crowded);
  }
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  return 0;
}
