// Durable whole-file replacement, for every file gpumux writes (reports, ledgers, bundles).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "gpumux/core/result.h"

namespace gpumux::io {

// Writes `text` to "<path>.tmp", fsyncs it, renames it over `path` and fsyncs the folder: a
// reader sees the old or the new file, never a partial one, also after a crash.
// Errors (kIo) name the file or the folder. A folder that cannot be opened or synced is an
// error although `path` already holds the new text (it may not survive a crash); a file
// system that cannot sync folders at all (fsync answers EINVAL) is not.
// Thread safety: concurrent writes to different paths are safe.
core::Result<void> WriteFileAtomically(const std::string& path, const std::string& text);

// Fault injection, for crash and error-path tests only.
enum class WriteFault : std::uint8_t {
  kNone,
  kKillBeforeRename,   // SIGKILL the process once the temporary file is complete, before the rename
  kFailDirectorySync,  // the folder's fsync fails with EIO
};
// The fault every later write in this process injects; std::nullopt: back to the environment.
void SetWriteFaultForTesting(std::optional<WriteFault> fault);
// Without SetWriteFaultForTesting, the environment decides, read at the first write of each
// process (a forked child reads it again at its own first write), never again after that:
//   GPUMUX_FAULT=kill-before-rename   kKillBeforeRename (for tests that run the gpumux binary)

}  // namespace gpumux::io
