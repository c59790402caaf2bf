// Pieces every gpumux subcommand shares for its options (internal to the cli module): strict
// number validators whose messages name the flag and the range, the record of which options a
// command line gave (to refuse combinations that cannot apply), and the help formatter that
// wraps every line to kHelpWidth columns.
#pragma once

#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>

namespace gpumux::cli {

// No line of any `--help` is wider than this (tests/cli/cli_test.cc checks every subcommand).
inline constexpr std::size_t kHelpWidth = 100;

// ---------------------------------------------------------------------------------------------
// Number validators. CLI11 prefixes the message with the flag: "--threads: 'abc' is not an
// integer in 0..1024". They run before CLI11 converts the text, so a value that passes always
// converts (no "Could not convert"), and NaN, infinities, overflow and trailing garbage are
// refused by name.

namespace detail {

// Integer text of type T: "" when it is one within lo..hi, else why not (`range` "" leaves the
// range out of the message: the type's whole range).
template <typename T>
std::string CheckInteger(const std::string& text, T lo, T hi, const std::string& range) {
  static_assert(std::is_integral_v<T>);
  const bool digits =
      !text.empty() && text != "-" &&
      text.find_first_not_of("0123456789", text[0] == '-' ? 1 : 0) == std::string::npos;
  if (!digits) return "'" + text + "' is not an integer" + (range.empty() ? "" : " in " + range);
  T v{};
  const char* last = text.data() + text.size();
  const auto [end, ec] = std::from_chars(text.data(), last, v);
  if (ec != std::errc() || end != last || v < lo || v > hi) {
    // "-1" for an unsigned T, or past the type: out of range, not garbage.
    return text + (range.empty() ? " is out of range" : " is outside " + range);
  }
  return {};
}

}  // namespace detail

// A decimal integer of type T in lo..hi ("-1" for an unsigned T is out of range, not garbage).
template <typename T>
CLI::Validator IntegerIn(T lo, T hi) {
  const std::string range = std::to_string(lo) + ".." + std::to_string(hi);
  return CLI::Validator(
      [lo, hi, range](std::string& text) { return detail::CheckInteger(text, lo, hi, range); },
      "INT in " + range);
}

// Any integer of type T: garbage and overflow are refused; the command checks the range (for
// options a settings file may also set, whose range check is shared).
template <typename T>
CLI::Validator AnyInteger() {
  return CLI::Validator(
      [](std::string& text) {
        return detail::CheckInteger(text, std::numeric_limits<T>::min(),
                                    std::numeric_limits<T>::max(), "");
      },
      "");
}

// Whether a number range includes its lower end: [lo, hi] or (lo, hi].
enum class LowerBound { kClosed, kOpen };

// A finite number in [lo, hi] or (lo, hi] (CLI::Range lets NaN through and takes "1.5abc").
inline CLI::Validator NumberIn(double lo, double hi, LowerBound lower = LowerBound::kClosed) {
  std::ostringstream r;
  r << (lower == LowerBound::kOpen ? "(" : "[") << lo << ", " << hi << "]";
  const std::string range = r.str();
  return CLI::Validator(
      [lo, hi, lower, range](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (text.empty() || end != text.c_str() + text.size() ||
            std::isspace(static_cast<unsigned char>(text[0])) != 0) {
          return "'" + text + "' is not a number in " + range;
        }
        if (!std::isfinite(v)) return text + " is not a finite number in " + range;
        const bool below = lower == LowerBound::kOpen ? !(v > lo) : v < lo;
        if (below || v > hi) return text + " is outside " + range;
        return {};
      },
      "FLOAT in " + range);
}

// 1.5 -> "1.5", 2.0 -> "2", 0.0005 -> "0.001": seconds (or any number) with at most three
// decimals and no trailing zeros, for messages that echo an option's value.
inline std::string SecondsText(double s) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3f", s);
  std::string out = text;
  while (out.back() == '0') out.pop_back();
  if (out.back() == '.') out.pop_back();
  return out;
}

// ---------------------------------------------------------------------------------------------
// Options given on the command line.

// After `cmd` is parsed, `given` holds the long name (without dashes) of every option the
// command line gave it, e.g. {"workload", "load"}: defaults and options left out are not in it.
inline void RecordGivenOptions(CLI::App& cmd, std::set<std::string>& given) {
  cmd.callback([&cmd, &given] {
    for (const CLI::Option* opt : cmd.get_options()) {
      if (opt->count() > 0 && !opt->get_lnames().empty()) given.insert(opt->get_lnames().front());
    }
  });
}

inline bool Given(const std::set<std::string>& given, std::string_view name) {
  return given.count(std::string(name)) > 0;
}

// ---------------------------------------------------------------------------------------------
// Help text wrapped to kHelpWidth columns.

// Wraps every line of `text` longer than `width` at spaces. Continuation lines keep the line's
// indentation, plus 2 when it is indented (a sub-item), so that lists stay readable. A word
// longer than the width stays whole (the help tests would show it).
inline std::string WrapLines(std::string_view text, std::size_t width) {
  constexpr std::size_t npos = std::string_view::npos;
  std::string out;
  std::size_t start = 0;
  while (true) {
    const std::size_t newline = text.find('\n', start);
    std::string_view line = text.substr(start, newline == npos ? npos : newline - start);
    const std::size_t lead = std::min(line.find_first_not_of(' '), line.size());
    const std::size_t hang = lead == 0 ? 0 : lead + 2;
    std::size_t indent = 0;      // spaces already written before `line` on this output line
    std::size_t min_cut = lead;  // no cut inside the line's own indentation
    while (indent + line.size() > width) {
      const std::size_t limit = width - indent;
      std::size_t cut = line.rfind(' ', limit);
      if (cut == npos || cut < min_cut) cut = line.find(' ', limit);  // a long word: after it
      if (cut == npos) break;
      out += line.substr(0, cut);
      out += '\n';
      out.append(hang, ' ');
      indent = hang;
      min_cut = 0;
      const std::size_t next = line.find_first_not_of(' ', cut);
      line = next == npos ? std::string_view() : line.substr(next);
    }
    out += line;
    if (newline == npos) break;
    out += '\n';
    start = newline + 1;
  }
  return out;
}

// CLI11's formatter with every description, footer and option text wrapped to kHelpWidth. The
// list of subcommands shows the first line of each description (its summary); a command's own
// help shows the whole description.
class WrappingFormatter : public CLI::Formatter {
 public:
  std::string make_description(const CLI::App* app) const override {
    return WrapLines(CLI::Formatter::make_description(app), kHelpWidth);
  }
  std::string make_footer(const CLI::App* app) const override {
    return WrapLines(CLI::Formatter::make_footer(app), kHelpWidth);
  }
  std::string make_option_desc(const CLI::Option* opt) const override {
    return WrapLines(CLI::Formatter::make_option_desc(opt), kHelpWidth - column_width_);
  }
  std::string make_subcommand(const CLI::App* sub) const override {
    const std::string& desc = sub->get_description();
    std::ostringstream out;
    CLI::detail::format_help(out, sub->get_display_name(true),
                             WrapLines(desc.substr(0, desc.find('\n')), kHelpWidth - column_width_),
                             column_width_);
    return out.str();
  }
};

}  // namespace gpumux::cli
