#include "tests/testing/fake_gpu_host.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace gpumux::test {

bool IsRoot() { return ::geteuid() == 0; }

std::string MakeCharDevice(const std::filesystem::path& dir, const std::string& name,
                           unsigned major_number, unsigned minor_number) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return dir.string() + ": " + ec.message();
  const std::string path = (dir / name).string();
  if (::mknod(path.c_str(), S_IFCHR | 0666, makedev(major_number, minor_number)) != 0) {
    return "mknod " + path + ": " + std::strerror(errno);
  }
  ::chmod(path.c_str(), 0666);
  return "";
}

std::string MakeFakeDevDir(const std::filesystem::path& dir, int gpus) {
  for (int i = 0; i < gpus; ++i) {
    const std::string error =
        MakeCharDevice(dir, "nvidia" + std::to_string(i), kNvidiaMajor, static_cast<unsigned>(i));
    if (!error.empty()) return error;
  }
  std::string error = MakeCharDevice(dir, "nvidiactl", kNvidiaMajor, kNvidiaCtlMinor);
  if (error.empty()) error = MakeCharDevice(dir, "nvidia-uvm", kNvidiaUvmMajor, 0);
  return error;
}

}  // namespace gpumux::test
