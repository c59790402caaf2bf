// Shared inputs of the simulator tests: the embedded default trace as a Workload, and where the
// FGD study's replay folder lives when ../shared is checked out beside the repository.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <optional>
#include <sstream>
#include <string>

#include "gpumux/sim/experiment.h"
#include "gpumux/sim/report.h"
#include "gpumux/sim/trace.h"

namespace gpumux::sim::testing_fixtures {

// The embedded node and pod lists as a Workload, parsed once per test process.
inline const Workload& EmbeddedWorkload() {
  static const Workload workload = [] {
    std::istringstream nodes_in{std::string(EmbeddedNodeList())};
    std::istringstream pods_in{std::string(EmbeddedPodList())};
    auto nodes = ParseNodeList(nodes_in, "<embedded nodes>");
    auto pods = ParsePodList(pods_in, "<embedded pods>");
    if (!nodes || !pods) std::abort();
    auto w = MakeWorkload(std::string(kEmbeddedPodListName), std::move(*nodes), std::move(*pods));
    if (!w) std::abort();
    return std::move(*w);
  }();
  return workload;
}

inline const ExpectedTable& EmbeddedExpected() {
  static const ExpectedTable table = [] {
    std::istringstream in{std::string(EmbeddedExpectedAlloc())};
    auto t = ParseExpected(in, "<embedded expected>");
    if (!t) std::abort();
    return std::move(*t);
  }();
  return table;
}

// ${GPUMUX_SOURCE_DIR}/../shared/traces/alibaba-gpu-v2023/replay-fgd-default-seed42, if present.
inline std::optional<std::string> StudyReplayDir() {
  const std::filesystem::path dir = std::filesystem::path(GPUMUX_SOURCE_DIR) / ".." / "shared" /
                                    "traces" / "alibaba-gpu-v2023" / "replay-fgd-default-seed42";
  std::error_code ec;
  if (!std::filesystem::is_regular_file(dir / "arrival.csv", ec) ||
      !std::filesystem::is_regular_file(dir / "nodes.csv", ec)) {
    return std::nullopt;
  }
  return dir.lexically_normal().string();
}

inline constexpr const char* kNoReplayReason =
    "the FGD study's replay folder ../shared/traces/alibaba-gpu-v2023/replay-fgd-default-seed42 "
    "is not checked out beside the repository";

}  // namespace gpumux::sim::testing_fixtures
