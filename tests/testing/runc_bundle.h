// Real-runtime pieces for the hook tests: whether runc can run containers here at all, and OCI
// bundles made of a busybox-static rootfs and the config.json that `runc spec` writes.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace gpumux::test {

inline constexpr const char* kBusybox = "/bin/busybox";

// "" when this process (root) can run a trivial busybox container with runc; else the reason,
// for GTEST_SKIP. Probed once per process; the probe uses its own runc root and removes it.
const std::string& RuncUnavailableReason();

// The config.json of `runc spec` (probed once; valid when RuncUnavailableReason() is "").
const nlohmann::json& RuncSpecTemplate();

// Makes `bundle`/rootfs with `busybox` (hard-linked, or copied when it cannot be) and the
// applets sh, ls, cat, echo, sleep, env, and `bundle`/config.json: the runc spec template with
// process.terminal false, process.args `args` and `env` appended to process.env.
// Returns "" or why not.
std::string MakeBusyboxBundle(const std::filesystem::path& bundle,
                              const std::filesystem::path& busybox,
                              const std::vector<std::string>& args,
                              const std::vector<std::string>& env);

}  // namespace gpumux::test
