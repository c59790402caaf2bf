// Small helpers shared by the gpu module's tests.
#pragma once

#include <filesystem>
#include <string>

#include "tests/testing/builders.h"

namespace gpumux::test {

inline bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Replaces dir/name as a writer of a file that others poll should: a new file renamed over
// the old one, so that no reader sees half of it. Returns the path.
inline std::string ReplaceFile(const ScratchDir& dir, const std::string& name,
                               const std::string& content) {
  const std::string tmp = dir.Write(name + ".tmp", content);
  const std::filesystem::path path = dir.path() / name;
  std::filesystem::rename(tmp, path);
  return path.string();
}

}  // namespace gpumux::test
