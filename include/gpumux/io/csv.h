// A small reader for the plain CSV files of the traces: a header row naming the columns,
// comma-separated fields, no quoting. Errors name the source and line: "file:line: what".
#pragma once

#include <cstdint>
#include <istream>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gpumux/core/result.h"

namespace gpumux::io {

class CsvReader {
 public:
  // `source` names the input in errors (a path, or "<embedded ...>").
  CsvReader(std::istream& in, std::string source);

  // Reads the header; error if one of `required` columns is missing or the input is empty.
  core::Result<void> ReadHeader(const std::vector<std::string>& required);
  // Next data row; false at end of input. Blank lines are skipped. Error if the row's field
  // count differs from the header's, or it contains a quote character.
  core::Result<bool> Next();

  std::string_view Field(std::string_view column) const;  // column must be in the header
  bool HasColumn(std::string_view column) const;
  // Parses a column as a decimal integer; error "file:line: column 'x': 'abc' is not an integer".
  core::Result<std::int64_t> Int(std::string_view column) const;
  core::Result<double> Double(std::string_view column) const;
  // The field when it is UTF-8 text without control characters (core::IsUtf8Text): names that
  // end up in JSON and logs; error "file:line: column 'x': not UTF-8 text: 'T\xff'".
  core::Result<std::string_view> Text(std::string_view column) const;
  // "file:line: " + what
  core::Error ErrorHere(const std::string& what) const;
  int line() const { return line_no_; }
  const std::string& source() const { return source_; }

 private:
  std::istream* in_;
  std::string source_;
  int line_no_ = 0;
  std::string line_;
  std::vector<std::string> header_;
  std::unordered_map<std::string, std::size_t> column_;
  std::vector<std::string_view> fields_;
};

}  // namespace gpumux::io
