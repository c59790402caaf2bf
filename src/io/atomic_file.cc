#include "gpumux/io/atomic_file.h"
#include "gpumux/io/fd.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>

namespace gpumux::io {

core::Error ErrnoError(const std::string& what) {
  return core::Error{core::ErrorCode::kIo, what + ": " + std::strerror(errno)};
}

core::Result<void> WriteFileAtomically(const std::string& path, const std::string& text) {
  const std::string dir = std::filesystem::path(path).parent_path().string();
  const std::string tmp = path + ".tmp";
  {
    UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (fd.get() < 0) return tl::unexpected(ErrnoError(tmp));
    std::size_t done = 0;
    while (done < text.size()) {
      const ssize_t n = ::write(fd.get(), text.data() + done, text.size() - done);
      if (n < 0) {
        if (errno == EINTR) continue;
        return tl::unexpected(ErrnoError(tmp));
      }
      done += static_cast<std::size_t>(n);
    }
    if (::fsync(fd.get()) != 0) return tl::unexpected(ErrnoError(tmp));
  }
  // Fault injection for the crash test: die between the complete temporary file and the rename.
  if (const char* fault = std::getenv("GPUMUX_FAULT");
      fault != nullptr && std::strcmp(fault, "kill-before-rename") == 0) {
    ::raise(SIGKILL);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const core::Error e = ErrnoError(path);
    ::unlink(tmp.c_str());
    return tl::unexpected(e);
  }
  UniqueFd dfd(::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dfd.get() >= 0) ::fsync(dfd.get());
  return {};
}

}  // namespace gpumux::io
