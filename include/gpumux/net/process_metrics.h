// What every gpumux daemon's /metrics page carries besides its own metrics, in the names
// Prometheus's client libraries use: process_* (CPU, memory, descriptors, start time) read from
// /proc/self, and gpumux_build_info{component, version} = 1.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace gpumux::net {

// Prometheus text format 0.0.4, HELP and TYPE lines included; `component` is the daemon
// ("extender", "device-plugin", "coordinator"). Metrics that cannot be read are left out.
std::string ProcessMetricsText(std::string_view component);

// When process `pid` started: field 22 of /proc/<pid>/stat (clock ticks after boot), read after
// the command's last parenthesis (a command may hold spaces and parentheses). A pid is given to
// another process only after its owner exits, and the new one starts later: the pair (pid,
// start time) names one process. nullopt when there is no such process (or no /proc).
std::optional<std::uint64_t> ProcessStartTime(std::int64_t pid);

}  // namespace gpumux::net
