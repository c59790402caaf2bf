#include "fuzz/fuzz_support.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace gpumux::fuzz {

namespace fs = std::filesystem;

std::vector<std::string> SplitParts(std::string_view text, std::size_t parts) {
  static constexpr std::string_view kSeparator = "\n--8<--\n";
  std::vector<std::string> out;
  while (out.size() + 1 < parts) {
    const std::size_t at = text.find(kSeparator);
    if (at == std::string_view::npos) break;
    out.emplace_back(text.substr(0, at));
    text.remove_prefix(at + kSeparator.size());
  }
  out.emplace_back(text);
  out.resize(parts);
  return out;
}

namespace {

struct Scratch {
  std::string path;
  Scratch() {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern =
        std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/gpumux-fuzz-XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) std::abort();
    path = pattern;
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

}  // namespace

const std::string& ScratchDir() {
  static const Scratch scratch;
  return scratch.path;
}

std::string WriteScratch(const std::string& name, std::string_view text) {
  const std::string path = ScratchDir() + "/" + name;
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(text.data(), static_cast<std::streamsize>(text.size()));
  return path;
}

void RemoveScratch(const std::string& name) {
  std::error_code ec;
  fs::remove_all(ScratchDir() + "/" + name, ec);
}

}  // namespace gpumux::fuzz
