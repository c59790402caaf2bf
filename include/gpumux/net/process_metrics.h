// What every gpumux daemon's /metrics page carries besides its own metrics, in the names
// Prometheus's client libraries use: process_* (CPU, memory, descriptors, start time) read from
// /proc/self, and gpumux_build_info{component, version} = 1.
#pragma once

#include <string>
#include <string_view>

namespace gpumux::net {

// Prometheus text format 0.0.4, HELP and TYPE lines included; `component` is the daemon
// ("extender", "device-plugin", "coordinator"). Metrics that cannot be read are left out.
std::string ProcessMetricsText(std::string_view component);

}  // namespace gpumux::net
