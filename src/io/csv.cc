#include "gpumux/io/csv.h"

#include <charconv>

#include "gpumux/core/json_text.h"
#include "gpumux/core/shown.h"

namespace gpumux::io {
namespace {

void Split(std::string_view line, std::vector<std::string_view>& out) {
  out.clear();
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = line.find(',', start);
    if (comma == std::string_view::npos) {
      out.push_back(line.substr(start));
      return;
    }
    out.push_back(line.substr(start, comma - start));
    start = comma + 1;
  }
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

}  // namespace

CsvReader::CsvReader(std::istream& in, std::string source) : in_(&in), source_(std::move(source)) {}

core::Error CsvReader::ErrorHere(const std::string& what) const {
  return core::Error{core::ErrorCode::kInvalidArgument,
                     source_ + ":" + std::to_string(line_no_) + ": " + what};
}

core::Result<void> CsvReader::ReadHeader(const std::vector<std::string>& required) {
  while (std::getline(*in_, line_)) {
    ++line_no_;
    if (line_no_ == 1 && line_.rfind("\xEF\xBB\xBF", 0) == 0) line_.erase(0, 3);  // UTF-8 BOM
    if (!Trim(line_).empty()) break;
  }
  if (Trim(line_).empty()) {
    return tl::unexpected(core::Error{core::ErrorCode::kInvalidArgument,
                                      source_ + ": empty file (expected a CSV header)"});
  }
  if (core::LooksBinary(line_)) {
    return tl::unexpected(
        ErrorHere("binary data, not CSV text (it begins '" + core::Shown(line_, 40) + "')"));
  }
  Split(Trim(line_), fields_);
  for (std::size_t i = 0; i < fields_.size(); ++i) {
    header_.emplace_back(Trim(fields_[i]));
    column_[header_.back()] = i;
  }
  for (const std::string& c : required) {
    if (column_.count(c) == 0) {
      std::string have;
      for (const auto& h : header_) have += (have.empty() ? "" : ",") + h;
      return tl::unexpected(
          ErrorHere("missing column '" + c + "' (header is: " + core::Shown(have, 200) + ")"));
    }
  }
  return {};
}

core::Result<bool> CsvReader::Next() {
  while (std::getline(*in_, line_)) {
    ++line_no_;
    const std::string_view row = Trim(line_);
    if (row.empty()) continue;
    if (row.find('"') != std::string_view::npos) {
      return tl::unexpected(ErrorHere("quoted fields are not supported"));
    }
    Split(row, fields_);
    if (fields_.size() != header_.size()) {
      return tl::unexpected(ErrorHere("expected " + std::to_string(header_.size()) +
                                      " fields, found " + std::to_string(fields_.size())));
    }
    for (auto& f : fields_) f = Trim(f);
    return true;
  }
  return false;
}

bool CsvReader::HasColumn(std::string_view column) const {
  return column_.count(std::string(column)) != 0;
}

std::string_view CsvReader::Field(std::string_view column) const {
  return fields_[column_.at(std::string(column))];
}

core::Result<std::int64_t> CsvReader::Int(std::string_view column) const {
  const std::string_view f = Field(column);
  std::int64_t v = 0;
  const auto [ptr, ec] = std::from_chars(f.data(), f.data() + f.size(), v);
  if (f.empty() || ec != std::errc() || ptr != f.data() + f.size()) {
    return tl::unexpected(ErrorHere("column '" + std::string(column) + "': '" + core::Shown(f) +
                                    "' is not an integer"));
  }
  return v;
}

core::Result<std::string_view> CsvReader::Text(std::string_view column) const {
  const std::string_view f = Field(column);
  if (!core::IsUtf8Text(f)) {
    return tl::unexpected(ErrorHere("column '" + std::string(column) + "': not UTF-8 text: '" +
                                    core::Shown(f) + "'"));
  }
  return f;
}

core::Result<double> CsvReader::Double(std::string_view column) const {
  const std::string_view f = Field(column);
  double v = 0;
  const auto [ptr, ec] = std::from_chars(f.data(), f.data() + f.size(), v);
  if (f.empty() || ec != std::errc() || ptr != f.data() + f.size()) {
    return tl::unexpected(ErrorHere("column '" + std::string(column) + "': '" + core::Shown(f) +
                                    "' is not a number"));
  }
  return v;
}

}  // namespace gpumux::io
