// Reading a whole input file that someone else wrote (node lists, configs, ledgers, bundles'
// config.json, GPU files, traces). One reader so that every input says the same thing about a
// path that is a folder, a FIFO, missing, unreadable or too large, instead of each caller's
// std::ifstream answering "empty file" or throwing std::ios_base::failure.
#pragma once

#include <cstddef>
#include <string>

#include "gpumux/core/result.h"

namespace gpumux::io {

// The largest input file gpumux reads whole by default: 1 GiB (the largest real input, a
// 5,000-node NodeList or a 10^6-pod trace, is a few hundred MB).
inline constexpr std::size_t kMaxInputFileBytes = std::size_t{1} << 30;

// The bytes of the regular file at `path` (symlinks followed). Errors name the path:
//   kNotFound "<path>: no such file"; kIo "<path>: is a directory (expected a file)",
//   "<path>: not a regular file", "<path>: <strerror>", "<path>: larger than <max_bytes>
//   bytes". The size is checked both before and while reading (a growing file cannot
//   exceed it). Thread-safe.
core::Result<std::string> ReadInputFile(const std::string& path,
                                        std::size_t max_bytes = kMaxInputFileBytes);

}  // namespace gpumux::io
