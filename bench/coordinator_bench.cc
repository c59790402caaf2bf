// The node coordinator's decision latency and per-report cost, in process through the same
// handler the HTTP server calls (JSON in, JSON out; no sockets), on a node of 8 GPUs x 3 jobs
// with the embedded default profile (iadeep-fitted) and the joint tuner.
//  BM_CoordinatorDecision: a third job joins a GPU whose two jobs are tuned; timed from its
//    registration (the session starts and picks the batch sizes) until the GPU is tuned: the
//    coordinator's own compute for one re-tuning, without the jobs' training time. The joint
//    tuner remembers what it learned, so after the first iteration the set is decided without
//    a measurement window; gpumux_coordinator_http_bench measures decisions with windows,
//    through the socket and the store.
//  BM_CoordinatorReport: one job's report of 20 steps on the full node (the steady state).
#include <benchmark/benchmark.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gpumux/coordinator/coordinator.h"
#include "gpumux/coordinator/server.h"
#include "gpumux/sim/dl_workload.h"

namespace {

using namespace gpumux;
using Json = nlohmann::json;

constexpr int kGpus = 8;
const char* const kClasses[] = {"vgg16", "alexnet", "neumf"};

std::string Job(int gpu, int k) {
  return "ns/pod-" + std::to_string(gpu) + "-" + std::to_string(k) + "/c";
}
std::string Gpu(int gpu) { return "GPU-" + std::to_string(gpu); }

std::string Register(int gpu, int k, int batch) {
  return Json{
      {"job", Job(gpu, k)}, {"class", kClasses[k]}, {"batch_size", batch}, {"gpus", {Gpu(gpu)}}}
      .dump();
}

std::string Report(int gpu, int k, int batch, int steps) {
  Json s = Json::array();
  for (int i = 0; i < steps; ++i) s.push_back({batch, 0.1});
  return Json{{"job", Job(gpu, k)}, {"steps", s}}.dump();
}

int BatchOf(const coordinator::HttpReply& r) {
  return Json::parse(r.body)["batch_size"].get<int>();
}

// Runs the jobs of `gpu` at their targets until the GPU is no longer measuring.
void Settle(coordinator::Coordinator& c, int gpu, int jobs) {
  std::vector<int> batch(static_cast<std::size_t>(jobs), 0);
  for (int k = 0; k < jobs; ++k) {
    batch[static_cast<std::size_t>(k)] =
        BatchOf(coordinator::Handle(c, "POST", "/v1/report", Report(gpu, k, 1, 0)));
  }
  for (int round = 0; round < 20; ++round) {
    bool measuring = false;
    for (int k = 0; k < jobs; ++k) {
      auto r = coordinator::Handle(c, "POST", "/v1/report",
                                   Report(gpu, k, batch[static_cast<std::size_t>(k)], 12));
      const Json v = Json::parse(r.body);
      batch[static_cast<std::size_t>(k)] = v["batch_size"].get<int>();
      measuring = measuring || v["state"] == "measuring";
    }
    if (!measuring) return;
  }
}

std::unique_ptr<coordinator::Coordinator> Node(int jobs_per_gpu) {
  coordinator::CoordinatorOptions o;
  o.window_steps = 10;
  auto c = std::make_unique<coordinator::Coordinator>(o, sim::DefaultProfile(), nullptr, nullptr,
                                                      nullptr);
  const auto& profile = sim::DefaultProfile();
  for (int g = 0; g < kGpus; ++g) {
    for (int k = 0; k < jobs_per_gpu; ++k) {
      coordinator::Handle(*c, "POST", "/v1/register",
                          Register(g, k, profile.Find(kClasses[k])->default_batch));
      Settle(*c, g, k + 1);
    }
  }
  return c;
}

void BM_CoordinatorDecision(benchmark::State& state) {
  auto c = Node(2);
  const int batch = sim::DefaultProfile().Find(kClasses[2])->default_batch;
  for (auto _ : state) {
    coordinator::Handle(*c, "POST", "/v1/register", Register(0, 2, batch));
    Settle(*c, 0, 3);
    state.PauseTiming();
    coordinator::Handle(*c, "POST", "/v1/leave", Json{{"job", Job(0, 2)}}.dump());
    Settle(*c, 0, 2);
    state.ResumeTiming();
  }
  state.counters["sessions"] = static_cast<double>(c->sessions_started());
}
BENCHMARK(BM_CoordinatorDecision)->Unit(benchmark::kMicrosecond);

void BM_CoordinatorReport(benchmark::State& state) {
  auto c = Node(3);
  int batch = 0;
  for (const auto& g : c->State()) {
    for (const auto& j : g.jobs) {
      if (j.job == Job(3, 1)) batch = j.target_batch;
    }
  }
  const std::string body = Report(3, 1, batch, 20);
  for (auto _ : state) {
    benchmark::DoNotOptimize(coordinator::Handle(*c, "POST", "/v1/report", body));
  }
}
BENCHMARK(BM_CoordinatorReport)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
