// main() for a fuzz target outside libFuzzer: runs every file given, or every file in every
// folder given, through LLVMFuzzerTestOneInput once, and says how many. ctest uses it to replay
// the checked-in corpora (fuzz/corpus/<target>/) in the normal and sanitizer builds.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "gpumux/io/read_file.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  for (int i = 1; i < argc; ++i) {
    const fs::path arg(argv[i]);
    if (fs::is_directory(arg)) {
      for (const auto& entry : fs::recursive_directory_iterator(arg)) {
        if (entry.is_regular_file()) files.push_back(entry.path());
      }
    } else {
      files.push_back(arg);
    }
  }
  if (files.empty()) {
    std::cerr << "usage: " << argv[0] << " FILE|FOLDER...: runs each input once\n";
    return 2;
  }
  for (const fs::path& file : files) {
    auto bytes = gpumux::io::ReadInputFile(file.string());
    if (!bytes) {
      std::cerr << bytes.error().message << "\n";
      return 2;
    }
    std::cerr << "running " << file.string() << "\n";
    LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes->data()),  // NOLINT
                           bytes->size());
  }
  std::cout << argv[0] << ": " << files.size() << " inputs ran\n";
  return 0;
}
