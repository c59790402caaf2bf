// Fuzz target: the simulator's node and pod list CSVs (the Alibaba openb trace format).
// Input: one byte choosing node list (even) or pod list (odd), then the CSV. A node list that
// parses must build a cluster.
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "fuzz/fuzz_support.h"
#include "gpumux/core/cluster.h"
#include "gpumux/sim/trace.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace gpumux;
  if (size < 1) return 0;
  std::istringstream in{std::string(fuzz::AsText(data + 1, size - 1))};
  if (data[0] % 2 == 0) {
    if (auto nodes = sim::ParseNodeList(in, "nodes.csv")) {
      (void)core::Cluster::Build(*nodes);
    }
  } else {
    (void)sim::ParsePodList(in, "pods.csv");
  }
  return 0;
}
