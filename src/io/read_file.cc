#include "gpumux/io/read_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "gpumux/io/fd.h"

namespace gpumux::io {

namespace {

core::Error PathError(core::ErrorCode code, const std::string& path, const std::string& what) {
  return core::Error{code, path + ": " + what};
}

}  // namespace

core::Result<std::string> ReadInputFile(const std::string& path, std::size_t max_bytes) {
  const std::string too_large = "larger than " + std::to_string(max_bytes) + " bytes";
  // O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused below.
  const int raw = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (raw < 0) {
    const int error = errno;
    if (error == ENOENT) {
      return tl::unexpected(PathError(core::ErrorCode::kNotFound, path, "no such file"));
    }
    return tl::unexpected(PathError(core::ErrorCode::kIo, path, std::strerror(error)));
  }
  const UniqueFd fd(raw);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    return tl::unexpected(PathError(core::ErrorCode::kIo, path, std::strerror(errno)));
  }
  if (S_ISDIR(st.st_mode)) {
    return tl::unexpected(
        PathError(core::ErrorCode::kIo, path, "is a directory (expected a file)"));
  }
  if (!S_ISREG(st.st_mode)) {
    return tl::unexpected(
        PathError(core::ErrorCode::kIo, path, "not a regular file (a device, FIFO or socket)"));
  }
  if (st.st_size < 0 || static_cast<std::size_t>(st.st_size) > max_bytes) {
    return tl::unexpected(PathError(core::ErrorCode::kIo, path, too_large));
  }
  std::string text;
  text.reserve(static_cast<std::size_t>(st.st_size));
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buffer, sizeof buffer);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      return tl::unexpected(PathError(core::ErrorCode::kIo, path, std::strerror(errno)));
    }
    if (static_cast<std::size_t>(n) > max_bytes - text.size()) {
      return tl::unexpected(PathError(core::ErrorCode::kIo, path, too_large));
    }
    text.append(buffer, static_cast<std::size_t>(n));
  }
  return text;
}

}  // namespace gpumux::io
