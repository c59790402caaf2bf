// One settings table per daemon (internal to the cli module): every setting is written once, as
// a command-line flag and, unless it is flag-only, a key of the daemon's settings file (--config
// FILE, a YAML map). The table adds the flags to the command, applies the file's keys to the same
// fields of a copy of the options (a flag given on the command line wins), lists its keys for
// --config's help and for the unknown-key error, and names the key and the type expected when a
// value does not read.
//
// Keys are the flag in lowerCamelCase ("metrics-address" -> "metricsAddress") unless the setting
// names its own. Ranges are the command's to check after both sources are in, so that a value
// from the file and one from the command line get the same message.
#pragma once

#include <CLI/CLI.hpp>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "src/cli/daemon_log.h"
#include "src/cli/options.h"

namespace YAML {
class Node;
}

namespace gpumux::cli {

namespace settings_detail {

// What a key's value must be (for the type error).
enum class Kind : std::uint8_t { kString, kPath, kBool, kInteger, kNumber, kStrings };

// A key's reader: the value as the file gives it -> error text or nothing; a YAML type mismatch
// throws (the table turns it into "must be <kind>").
using Reader = std::function<std::optional<std::string>(const YAML::Node&, const std::string& file,
                                                        void* options)>;
struct Entry {
  std::string flag, key;
  Kind kind;
  Reader read;
  // The flag's option, when the table added it: a value from the file passes its validators
  // (ranges, choices) as the flag's would.
  CLI::Option* option = nullptr;
};

std::string CamelCase(std::string_view flag);
std::string ResolveAgainst(const std::string& path, const std::string& file);
// Reads the value of a YAML node into a string, bool, int, int64 or double (throws on mismatch).
void Read(const YAML::Node& node, std::string* out);
void Read(const YAML::Node& node, bool* out);
void Read(const YAML::Node& node, int* out);
void Read(const YAML::Node& node, std::int64_t* out);
void Read(const YAML::Node& node, double* out);
void Read(const YAML::Node& node, std::vector<std::string>* out);
// Reads `file` and applies each key not given on the command line. Error naming file and key.
std::optional<std::string> ApplyFile(const std::vector<Entry>& entries, const std::string& file,
                                     const std::set<std::string>& given, void* options);
std::string Keys(const std::vector<Entry>& entries);

}  // namespace settings_detail

template <typename Options>
class SettingsTable {
 public:
  using Kind = settings_detail::Kind;

  // Flags are bound to `bound` (the options the command line fills).
  SettingsTable(CLI::App& cmd, Options& bound) : cmd_(cmd), bound_(bound) {}

  // --flag bound to `member`, and its key ("" derives it from the flag; "-": flag-only). The
  // returned option can be refined (check, capture_default_str, group).
  template <typename T>
  CLI::Option* Add(const std::string& flag, T Options::*member, const std::string& help,
                   std::string key = "") {
    CLI::Option* opt = nullptr;
    if constexpr (std::is_same_v<T, bool>) {
      opt = cmd_.add_flag("--" + flag, bound_.*member, help);
    } else {
      opt = cmd_.add_option("--" + flag, bound_.*member, help);
    }
    if constexpr (std::is_same_v<T, int> || std::is_same_v<T, std::int64_t>) {
      opt->check(AnyInteger<T>());
    }
    if (key != "-") {
      constexpr Kind kind = std::is_same_v<T, bool>                       ? Kind::kBool
                            : std::is_same_v<T, double>                   ? Kind::kNumber
                            : std::is_integral_v<T>                       ? Kind::kInteger
                            : std::is_same_v<T, std::vector<std::string>> ? Kind::kStrings
                                                                          : Kind::kString;
      Key(flag, std::move(key), kind,
          [member](const YAML::Node& value, const std::string&, Options& o) {
            settings_detail::Read(value, &(o.*member));
            return std::optional<std::string>();
          });
      entries_.back().option = opt;
    }
    return opt;
  }
  // A file name: a relative one in the settings file is relative to the file's folder.
  CLI::Option* AddPath(const std::string& flag, std::string Options::*member,
                       const std::string& help, std::string key = "") {
    CLI::Option* opt = cmd_.add_option("--" + flag, bound_.*member, help);
    Key(flag, std::move(key), Kind::kPath,
        [member](const YAML::Node& value, const std::string& file, Options& o) {
          settings_detail::Read(value, &(o.*member));
          o.*member = settings_detail::ResolveAgainst(o.*member, file);
          return std::optional<std::string>();
        });
    entries_.back().option = opt;
    return opt;
  }
  // A key with a reader of its own, for a setting whose flag the command adds itself (log
  // format, the policies' knobs).
  void Key(const std::string& flag, std::string key, Kind kind,
           std::function<std::optional<std::string>(const YAML::Node&, const std::string& file,
                                                    Options&)>
               read) {
    entries_.push_back(
        {flag, key.empty() ? settings_detail::CamelCase(flag) : std::move(key), kind,
         [read = std::move(read)](const YAML::Node& v, const std::string& file, void* o) {
           return read(v, file, *static_cast<Options*>(o));
         },
         nullptr});
  }

  // --config FILE, listing every key added so far (add it last).
  CLI::Option* AddConfigOption(std::string Options::*member) {
    return cmd_.add_option("--config", bound_.*member,
                           "YAML file of settings with the keys " + Keys() +
                               "; flags given on the command line win; relative paths are "
                               "relative to the file");
  }

  // Applies `file` to `options` for every key whose flag is not in `given`.
  std::optional<std::string> ApplyFile(const std::string& file, const std::set<std::string>& given,
                                       Options& options) const {
    return settings_detail::ApplyFile(entries_, file, given, &options);
  }
  std::string Keys() const { return settings_detail::Keys(entries_); }

 private:
  CLI::App& cmd_;
  Options& bound_;
  std::vector<settings_detail::Entry> entries_;
};

// --log-format and --log-level, with their keys logFormat and logLevel.
template <typename Options>
void AddLogSettings(CLI::App& cmd, SettingsTable<Options>& table, Options& bound,
                    LogOptions Options::*member) {
  AddLogOptions(cmd, bound.*member);
  table.Key("log-format", "logFormat", settings_detail::Kind::kString,
            [member](const YAML::Node& value, const std::string&, Options& o) {
              std::string text;
              settings_detail::Read(value, &text);
              auto format = ParseLogFormat(text);
              if (!format) return std::optional<std::string>(format.error().message);
              (o.*member).format = *format;
              return std::optional<std::string>();
            });
  table.Key("log-level", "logLevel", settings_detail::Kind::kString,
            [member](const YAML::Node& value, const std::string&, Options& o) {
              std::string text;
              settings_detail::Read(value, &text);
              auto level = ParseLogLevel(text);
              if (!level) return std::optional<std::string>(level.error().message);
              (o.*member).level = *level;
              return std::optional<std::string>();
            });
}

}  // namespace gpumux::cli
