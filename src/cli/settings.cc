#include "src/cli/settings.h"

#include <yaml-cpp/yaml.h>

#include <cctype>
#include <filesystem>

#include "gpumux/io/read_file.h"

namespace gpumux::cli::settings_detail {
namespace {

// A settings file is a few hundred bytes; anything near this is not one.
constexpr std::size_t kMaxSettingsFileBytes = std::size_t{1} << 20;

const char* KindText(Kind kind) {
  switch (kind) {
    case Kind::kBool:
      return "true or false";
    case Kind::kInteger:
      return "an integer";
    case Kind::kNumber:
      return "a number";
    case Kind::kStrings:
      return "a list of strings";
    case Kind::kString:
    case Kind::kPath:
      return "a string";
  }
  return "a value";
}

// Runs the option's validators on `text`; the first complaint, if any. (CLI11 2.1 has no count
// of validators: get_validator(i) throws past the last.)
std::optional<std::string> Validate(CLI::Option& option, const std::string& text) {
  for (int i = 0;; ++i) {
    CLI::Validator* v = nullptr;
    try {
      v = option.get_validator(i);
    } catch (const CLI::OptionNotFound&) {
      return std::nullopt;
    }
    if (v == nullptr) return std::nullopt;
    std::string copy = text;
    if (std::string bad = (*v)(copy); !bad.empty()) return bad;
  }
}

}  // namespace

std::string CamelCase(std::string_view flag) {
  std::string key;
  bool upper = false;
  for (char c : flag) {
    if (c == '-') {
      upper = true;
      continue;
    }
    key += upper ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c;
    upper = false;
  }
  return key;
}

std::string ResolveAgainst(const std::string& path, const std::string& file) {
  if (path.empty() || std::filesystem::path(path).is_absolute()) return path;
  return (std::filesystem::path(file).parent_path() / path).lexically_normal().string();
}

void Read(const YAML::Node& node, std::string* out) { *out = node.as<std::string>(); }
void Read(const YAML::Node& node, bool* out) { *out = node.as<bool>(); }
void Read(const YAML::Node& node, int* out) { *out = node.as<int>(); }
void Read(const YAML::Node& node, std::int64_t* out) { *out = node.as<std::int64_t>(); }
void Read(const YAML::Node& node, double* out) { *out = node.as<double>(); }
void Read(const YAML::Node& node, std::vector<std::string>* out) {
  *out = node.as<std::vector<std::string>>();
}

std::string Keys(const std::vector<Entry>& entries) {
  std::string keys;
  for (const Entry& e : entries) keys += (keys.empty() ? "" : ", ") + e.key;
  return keys;
}

std::optional<std::string> ApplyFile(const std::vector<Entry>& entries, const std::string& file,
                                     const std::set<std::string>& given, void* options) {
  auto text = io::ReadInputFile(file, kMaxSettingsFileBytes);
  if (!text) return "--config " + text.error().message;
  YAML::Node root;
  try {
    root = YAML::Load(*text);
  } catch (const YAML::Exception& e) {
    return "--config " + file + ": not valid YAML: " + e.what();
  }
  if (root.IsNull()) return std::nullopt;  // an empty file
  if (!root.IsMap()) return "--config " + file + ": expected a map of settings";
  for (const auto& item : root) {
    std::string key;
    try {
      key = item.first.as<std::string>();
    } catch (const YAML::Exception&) {
      return file + ": a key is not a string";
    }
    const Entry* entry = nullptr;
    for (const Entry& e : entries) {
      if (e.key == key) entry = &e;
    }
    if (entry == nullptr)
      return file + ": unknown key '" + key + "' (known: " + Keys(entries) + ")";
    if (given.count(entry->flag) > 0) continue;  // the command line wins
    if (entry->option != nullptr && item.second.IsScalar()) {
      // The flag's validators (ranges, choices) judge the file's value as they would the flag's.
      if (auto bad = Validate(*entry->option, item.second.Scalar())) {
        return file + ": key '" + key + "': " + *bad;
      }
    }
    try {
      if (auto bad = entry->read(item.second, file, options)) {
        return file + ": key '" + key + "': " + *bad;
      }
    } catch (const YAML::Exception&) {
      return file + ": key '" + key + "' must be " + KindText(entry->kind);
    }
  }
  return std::nullopt;
}

}  // namespace gpumux::cli::settings_detail
