// The latency benches' table: one row per kind of call, mean and percentiles in ms.
#pragma once

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

namespace gpumux::bench {

// "<what> n mean p50 p90 p99 max", `what` padded to `width`; nothing for no samples.
inline void PrintLatencies(const std::string& what, std::vector<double> ms, int width = 28) {
  if (ms.empty()) return;
  std::sort(ms.begin(), ms.end());
  auto at = [&](double q) {
    return ms[static_cast<std::size_t>(q * static_cast<double>(ms.size() - 1))];
  };
  double sum = 0;
  for (const double v : ms) sum += v;
  std::printf("%-*s %7zu %8.3f %8.3f %8.3f %8.3f %8.3f\n", width, what.c_str(), ms.size(),
              sum / static_cast<double>(ms.size()), at(0.5), at(0.9), at(0.99), ms.back());
}

// The table's head, its first column `width` wide.
inline void PrintLatencyHead(const char* first, int width = 28) {
  std::printf("%-*s %7s %8s %8s %8s %8s %8s\n", width, first, "n", "mean", "p50", "p90", "p99",
              "max");
}

}  // namespace gpumux::bench
