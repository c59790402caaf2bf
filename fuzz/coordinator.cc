// Fuzz target: the node coordinator's two inputs from others. Its store (a file another program
// or an older gpumux wrote, in the file store's format) is opened and restored, then the job
// protocol's requests are answered as the unix socket's and TCP's callers send them. Input:
// the store file, a line "--8<--", then one request per line: "C METHOD PATH BODY", C the
// caller (n the node's administrator, t a TCP peer, a/b two host uids, p/q two pods' processes).
// The clock advances one second per request and the coordinator ticks, so windows close, jobs
// time out and the tuner runs; /v1/state is rendered at the end for each kind of caller.
#include "gpumux/coordinator/coordinator.h"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "fuzz/fuzz_support.h"
#include "gpumux/coordinator/caller.h"
#include "gpumux/coordinator/server.h"
#include "gpumux/sim/dl_workload.h"
#include "gpumux/store/store.h"

namespace {

using namespace gpumux;

coordinator::Caller HostProcess(std::int64_t uid, std::string pod_uid = "") {
  coordinator::Caller c;
  c.kind = coordinator::Caller::Kind::kProcess;
  c.pid = 4000 + uid;
  c.uid = uid;
  c.cgroup.read = true;
  c.cgroup.pod_uid = std::move(pod_uid);
  return c;
}

coordinator::Caller CallerFor(char c) {
  switch (c) {
    case 't':
      return coordinator::Caller::Tcp("127.0.0.1");
    case 'a':
      return HostProcess(1000);
    case 'b':
      return HostProcess(1001);
    case 'p':
      return HostProcess(0, "0d6b1c5e-2f4a-4c1e-9a6e-5f0c7e1d2b3a");
    case 'q':
      return HostProcess(0, "7c0f9e8d-1b2a-4c3d-8e9f-a0b1c2d3e4f5");
    default:
      return coordinator::Caller::Node();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto parts = fuzz::SplitParts(fuzz::AsText(data, size), 2);
  const std::string path = fuzz::WriteScratch("store.json", parts[0]);
  auto store = store::OpenStore("file://" + path);
  coordinator::CoordinatorOptions options;
  options.node = "n1";
  options.window_steps = 2;
  options.warmup_steps = 0;
  options.node_gpus = {"GPU-a", "GPU-b"};
  options.unix_now = [] { return std::int64_t{1'800'000'000}; };
  auto now = coordinator::Clock::time_point{};
  coordinator::Coordinator c(
      options, sim::DefaultProfile(), nullptr, [&now] { return now; }, core::Logger());
  if (store) {
    auto nodes = (*store)->List("/gpumux/nodes/n1/");
    auto observations = (*store)->List("/gpumux/observations/");
    std::vector<std::pair<std::string, std::string>> stored;
    for (auto* listed : {&nodes, &observations}) {
      if (!*listed) continue;
      for (auto& kv : **listed) stored.emplace_back(std::move(kv.key), std::move(kv.value));
    }
    c.Restore(stored);
  }
  std::istringstream requests(parts[1]);
  std::string line;
  int lines = 0;
  while (std::getline(requests, line) && ++lines <= 200) {
    std::istringstream fields(line);
    std::string who, method, target;
    fields >> who >> method >> target;
    if (who.empty()) continue;
    std::string body;
    std::getline(fields, body);
    (void)coordinator::Handle(c, method, target, body, CallerFor(who[0]));
    now += std::chrono::seconds(1);
    c.Tick();
  }
  for (char who : {'n', 't', 'a', 'p'}) {
    (void)coordinator::Handle(c, "GET", "/v1/state", "", CallerFor(who));
  }
  return 0;
}
