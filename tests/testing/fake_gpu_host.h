// A fake GPU host for the runtime hook's tests: a folder standing for /dev holding character
// devices with NVIDIA's numbers (nvidia<N>: c 195 N, nvidiactl: c 195 255, nvidia-uvm: c 511 0),
// made with mknod, which needs root (CAP_MKNOD). Opening them gives ENXIO (no driver), which
// tells a test "the device cgroup let me through" apart from EPERM.
#pragma once

#include <filesystem>
#include <string>

namespace gpumux::test {

inline constexpr unsigned kNvidiaMajor = 195;
inline constexpr unsigned kNvidiaCtlMinor = 255;
inline constexpr unsigned kNvidiaUvmMajor = 511;

bool IsRoot();

// Creates `dir` (if needed) with nvidia0..nvidia<gpus-1>, nvidiactl and nvidia-uvm. Returns ""
// on success, else why not (e.g. "mknod .../nvidia0: Operation not permitted").
std::string MakeFakeDevDir(const std::filesystem::path& dir, int gpus);

// One character device `name` (major, minor) in `dir`; "" or why not.
std::string MakeCharDevice(const std::filesystem::path& dir, const std::string& name,
                           unsigned major_number, unsigned minor_number);

}  // namespace gpumux::test
