// Durable whole-file replacement, for every file gpumux writes (reports, ledgers, bundles).
#pragma once

#include <string>

#include "gpumux/core/result.h"

namespace gpumux::io {

// Writes `text` to "<path>.tmp", fsyncs it, renames it over `path` and fsyncs the folder: a
// reader sees the old or the new file, never a partial one, also after a crash.
// Fault injection for tests: GPUMUX_FAULT=kill-before-rename makes the process SIGKILL itself
// after the temporary file is complete and before the rename.
core::Result<void> WriteFileAtomically(const std::string& path, const std::string& text);

}  // namespace gpumux::io
