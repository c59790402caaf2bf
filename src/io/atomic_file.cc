#include "gpumux/io/atomic_file.h"

#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "gpumux/io/fd.h"

namespace gpumux::io {

core::Error ErrnoError(const std::string& what) {
  return core::Error{core::ErrorCode::kIo, what + ": " + std::strerror(errno)};
}

namespace {

// A WriteFault as an int, or kUnset.
constexpr int kUnset = -1;
std::atomic<int> test_fault{kUnset};         // SetWriteFaultForTesting
std::atomic<int> environment_fault{kUnset};  // GPUMUX_FAULT, once read

// The child of a fork is a new process: it reads GPUMUX_FAULT afresh (tests fork, then set it).
void ForgetTheEnvironmentInTheChild() { environment_fault.store(kUnset); }

WriteFault FaultFromTheEnvironment() {
  int fault = environment_fault.load();
  if (fault == kUnset) {
    static const bool registered =
        ::pthread_atfork(nullptr, nullptr, &ForgetTheEnvironmentInTheChild) == 0;
    (void)registered;
    const char* text = std::getenv("GPUMUX_FAULT");
    fault = static_cast<int>(text != nullptr && std::strcmp(text, "kill-before-rename") == 0
                                 ? WriteFault::kKillBeforeRename
                                 : WriteFault::kNone);
    environment_fault.store(fault);
  }
  return static_cast<WriteFault>(fault);
}

WriteFault ActiveFault() {
  const int fault = test_fault.load();
  return fault != kUnset ? static_cast<WriteFault>(fault) : FaultFromTheEnvironment();
}

}  // namespace

void SetWriteFaultForTesting(std::optional<WriteFault> fault) {
  test_fault.store(fault ? static_cast<int>(*fault) : kUnset);
}

core::Result<void> WriteFileAtomically(const std::string& path, const std::string& text) {
  const std::string dir = std::filesystem::path(path).parent_path().string();
  const std::string tmp = path + ".tmp";
  {
    UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (fd.get() < 0) {
      // Named as the user named it: the temporary file beside it is ours, not theirs.
      const int e = errno;
      std::error_code ignored;
      if (e == ENOENT && !dir.empty() && !std::filesystem::is_directory(dir, ignored)) {
        return tl::unexpected(
            core::Error{core::ErrorCode::kIo, path + ": cannot write: no folder " + dir});
      }
      errno = e;
      return tl::unexpected(ErrnoError(path + ": cannot write"));
    }
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
  const WriteFault fault = ActiveFault();
  // For the crash tests: die between the complete temporary file and the rename.
  if (fault == WriteFault::kKillBeforeRename) ::raise(SIGKILL);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const core::Error e = ErrnoError(path);
    ::unlink(tmp.c_str());
    return tl::unexpected(e);
  }
  // The rename is durable only once the folder's entry is on disk.
  const std::string folder = dir.empty() ? "." : dir;
  const std::string what = folder + ": syncing the folder after replacing " + path;
  UniqueFd dfd(::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dfd.get() < 0) return tl::unexpected(ErrnoError(what));
  int synced = 0;
  if (fault == WriteFault::kFailDirectorySync) {
    errno = EIO;
    synced = -1;
  } else {
    synced = ::fsync(dfd.get());
  }
  // EINVAL: this file system cannot sync a folder at all; there is nothing more to do.
  if (synced != 0 && errno != EINVAL) return tl::unexpected(ErrnoError(what));
  return {};
}

}  // namespace gpumux::io
