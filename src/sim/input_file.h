// Reading the simulator's input files (internal to sim): every file goes through
// io::ReadInputFile (folders, FIFOs, missing and over-size files refused by name), with the
// simulator's wording "<path>: cannot open: <why>", and is parsed from its bytes through a
// stream that does not copy them (a pod list may be hundreds of MB).
#pragma once

#include <cstddef>
#include <istream>
#include <streambuf>
#include <string>
#include <string_view>

#include "gpumux/core/result.h"
#include "gpumux/io/read_file.h"

namespace gpumux::sim {

// The bytes of the file at `path`, at most `max_bytes`. Errors are kIo and read
// "<path>: cannot open: no such file", "<path>: cannot open: is a directory (expected a
// file)", "<path>: cannot open: larger than N bytes", ...
inline core::Result<std::string> ReadSimInput(const std::string& path,
                                              std::size_t max_bytes = io::kMaxInputFileBytes) {
  auto text = io::ReadInputFile(path, max_bytes);
  if (text) return text;
  std::string why = text.error().message;
  if (why.rfind(path + ": ", 0) == 0) why.erase(0, path.size() + 2);
  return core::MakeError(core::ErrorCode::kIo, path + ": cannot open: " + why);
}

// An input stream over bytes it does not own; they must outlive the stream.
class ViewStream : public std::istream {
 public:
  explicit ViewStream(std::string_view bytes) : std::istream(nullptr), buf_(bytes) { rdbuf(&buf_); }

 private:
  class Buf : public std::streambuf {
   public:
    explicit Buf(std::string_view s) {
      // The get area is only read: streambuf's interface wants char*, nothing writes through it.
      char* p = const_cast<char*>(s.data());
      setg(p, p, p + s.size());
    }
  };
  Buf buf_;
};

}  // namespace gpumux::sim
