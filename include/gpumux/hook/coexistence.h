// The two ways gpumux hands GPUs to containers on a node keep separate ledgers: the OCI runtime
// path (`gpumux oci-runtime` / `gpumux hook`) its reservation file, the device plugin the
// extender's grants through the kubelet. On one node they would grant the same GPU twice, so
// each side refuses while the other is active:
//   - a reservation is refused while a gpumux device plugin serves the node: one of its unix
//     sockets (<device-plugin folder>/gpumux*.sock, see deviceplugin/plugin.h) accepts a
//     connection. The check runs under the ledger's lock.
//   - the device plugin does not register while the ledger holds a live reservation (one whose
//     holder runs, or cannot be checked from the plugin's pid namespace). It checks after its
//     sockets are served and under the ledger's shared lock, so whichever of the two comes
//     second sees the first.
// Shared GPUs (HOUDINI_GPU_ENABLED, NVIDIA_VISIBLE_DEVICES) are not reserved and not checked.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "gpumux/core/result.h"

namespace gpumux::hook {

// Where the hook keeps its ledger and hook.log.
inline constexpr std::string_view kStateDirEnv = "GPUMUX_STATE_DIR";
inline constexpr std::string_view kDefaultStateDir = "/var/lib/gpumux";
// Where the kubelet's device plugins serve their sockets (fixed in kubelet 1.32).
inline constexpr std::string_view kDevicePluginDirEnv = "GPUMUX_DEVICE_PLUGIN_DIR";
inline constexpr std::string_view kDefaultDevicePluginDir = "/var/lib/kubelet/device-plugins";

// The sockets named gpumux*.sock in `dir` that accept a connection, sorted. A socket left
// behind by a killed plugin refuses connections and is skipped; a missing folder has none.
// Cost: one connect() per matching socket.
std::vector<std::string> ServingDevicePluginSockets(const std::string& dir);

// kFailedPrecondition naming the socket when a gpumux device plugin serves `dir`:
// "a gpumux device plugin serves this node (<socket>); the OCI runtime path keeps its own GPU
// ledger and would grant GPUs twice; use one of the two".
core::Result<void> CheckNoDevicePlugin(const std::string& dir);

// kFailedPrecondition naming the reservations when the ledger in `state_dir` holds live ones
// (HolderLiveness not kGone), read under the ledger's shared lock. Ok when the folder or the
// ledger does not exist; an unreadable ledger is an error naming it.
core::Result<void> CheckNoActiveReservations(const std::string& state_dir);

}  // namespace gpumux::hook
