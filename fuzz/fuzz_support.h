// Shared pieces of the in-tree fuzz targets (fuzz/README.md).
//
// Every target defines LLVMFuzzerTestOneInput. Built with GPUMUX_FUZZ=ON (clang,
// -fsanitize=fuzzer,address,undefined) it is a libFuzzer binary; in the normal and sanitizer
// builds it is linked with corpus_main.cc instead and ctest replays its checked-in corpus, so
// that every input that once found a defect stays a regression test with any compiler.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace gpumux::fuzz {

// The input as text.
inline std::string_view AsText(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};  // NOLINT
}

// Inputs made of several files (a replay folder, a bundle and its state) are one text with the
// parts separated by lines "--8<--"; missing parts are empty.
std::vector<std::string> SplitParts(std::string_view text, std::size_t parts);

// A folder of this process (under $TMPDIR or /tmp), created on first use, that targets write
// their input files into; removed at exit.
const std::string& ScratchDir();
// Writes `text` to ScratchDir()/name (a plain write: speed matters more than durability here)
// and returns the full path.
std::string WriteScratch(const std::string& name, std::string_view text);
// Removes ScratchDir()/name (file or folder tree), if present.
void RemoveScratch(const std::string& name);

}  // namespace gpumux::fuzz
