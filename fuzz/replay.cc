// Fuzz target: a replay folder (`simulate --replay DIR`: the study's arrival.csv and nodes.csv),
// read against a 40-node, 200-pod slice of the Alibaba trace (fuzz/data/replay/). Input:
// arrival.csv, a line "--8<--", nodes.csv. A plan that loads is run as one experiment with the
// best-fit policy, checking the ledger's invariants after every arrival.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz/fuzz_support.h"
#include "gpumux/sim/experiment.h"
#include "gpumux/sim/protocol.h"
#include "gpumux/sim/trace.h"

namespace {

using namespace gpumux;

sim::Workload LoadWorkload() {
  const std::string dir = GPUMUX_FUZZ_DATA_DIR "/replay/";
  auto nodes = sim::LoadNodeList(dir + "nodes.csv");
  auto pods = sim::LoadPodList(dir + "pods.csv");
  if (!nodes || !pods) __builtin_trap();
  auto workload = sim::MakeWorkload("replay", std::move(*nodes), std::move(*pods));
  if (!workload) __builtin_trap();
  return std::move(*workload);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const sim::Workload workload = LoadWorkload();
  const std::vector<std::string> parts = fuzz::SplitParts(fuzz::AsText(data, size), 2);
  fuzz::WriteScratch("replay/arrival.csv", parts[0]);
  fuzz::WriteScratch("replay/nodes.csv", parts[1]);
  auto plan = sim::LoadReplay(fuzz::ScratchDir() + "/replay", workload.pods, workload.cluster);
  if (!plan) return 0;
  sim::ExperimentOptions options;
  options.check_invariants = true;
  (void)sim::RunExperiment(workload, *plan, "best-fit", 42, 1.3, options);
  return 0;
}
