// Small POSIX helpers shared by the modules that do file I/O.
#pragma once

#include <unistd.h>

#include <string>

#include "gpumux/core/result.h"

namespace gpumux::io {

// Owns a file descriptor and closes it on scope exit (also on error paths).
class UniqueFd {
 public:
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// kIo error "<what>: <strerror(errno)>", for the errno of the call that just failed.
core::Error ErrnoError(const std::string& what);

}  // namespace gpumux::io
