// What this process holds now, for soak tests: threads, open descriptors, memory maps and
// resident memory (from /proc/self).
#pragma once

#include <filesystem>
#include <fstream>
#include <string>

namespace gpumux::test {

struct ProcessUsage {
  long threads = 0, fds = 0, maps = 0, rss_kb = 0;
  static ProcessUsage Now() {
    ProcessUsage u;
    std::ifstream status("/proc/self/status");
    for (std::string line; std::getline(status, line);) {
      if (line.rfind("Threads:", 0) == 0) u.threads = std::stol(line.substr(8));
      if (line.rfind("VmRSS:", 0) == 0) u.rss_kb = std::stol(line.substr(6));
    }
    for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
      (void)e;
      ++u.fds;
    }
    std::ifstream maps("/proc/self/maps");
    for (std::string line; std::getline(maps, line);) ++u.maps;
    return u;
  }
};

}  // namespace gpumux::test
