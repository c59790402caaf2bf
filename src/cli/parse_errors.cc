#include "src/cli/parse_errors.h"

#include <algorithm>
#include <cstddef>
#include <string_view>
#include <vector>

namespace gpumux::cli {
namespace {

std::size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// The subcommand the arguments reached (gpumux, gpumux simulate, gpumux inspect nodes, ...).
const CLI::App* Deepest(const CLI::App& app) {
  const CLI::App* at = &app;
  while (true) {
    const auto subs = at->get_subcommands();
    if (subs.empty()) return at;
    at = subs.front();
  }
}

std::string CommandName(const CLI::App* at) {
  std::string name;
  for (; at != nullptr; at = at->get_parent()) {
    name = at->get_name() + (name.empty() ? "" : " " + name);
  }
  return name;
}

// Whether `flag` ("--name" or "-n") is an option of `at` or of a command above it.
bool Known(const CLI::App* at, const std::string& flag) {
  for (; at != nullptr; at = at->get_parent()) {
    if (at->get_option_no_throw(flag) != nullptr) return true;
  }
  return false;
}

// The long option of `at` (or of a command above it) closest to `name` (without dashes), if
// close enough to be a typo.
std::string Closest(const CLI::App* at, const std::string& name) {
  std::string best;
  std::size_t best_d = std::max<std::size_t>(2, name.size() / 3) + 1;
  for (; at != nullptr; at = at->get_parent()) {
    for (const CLI::Option* o : at->get_options()) {
      for (const std::string& long_name : o->get_lnames()) {
        const std::size_t d = EditDistance(name, long_name);
        if (d < best_d) {
          best_d = d;
          best = "--" + long_name;
        }
      }
    }
  }
  return best;
}

// For a command made of commands (`gpumux inspect`) whose arguments named none of them: which
// were given, and the closest; "" when that is not the problem.
std::string MissingSubcommand(const CLI::App* at, int argc, const char* const* argv) {
  const auto subs = at->get_subcommands([](const CLI::App*) { return true; });
  if (subs.empty()) return "";
  std::string names, near;
  std::size_t near_d = 3;
  std::string given;
  bool after = at->get_parent() == nullptr;
  for (int k = 1; k < argc; ++k) {
    const std::string arg = argv[k];
    if (!after) {
      after = arg == at->get_name();
      continue;
    }
    if (arg.empty() || arg[0] == '-') continue;
    given = arg;
    break;
  }
  for (const CLI::App* sub : subs) {
    names += (names.empty() ? "" : ", ") + sub->get_name();
    if (const std::size_t d = EditDistance(given, sub->get_name()); !given.empty() && d < near_d) {
      near_d = d;
      near = sub->get_name();
    }
  }
  const std::string command = CommandName(at);
  if (given.empty()) return command + ": say which: " + names;
  return command + ": unknown command '" + given + "' (" + names + ")" +
         (near.empty() ? "" : "; did you mean " + near + "?");
}

}  // namespace

std::string ExplainParseError(const CLI::App& app, const CLI::ParseError& e, int argc,
                              const char* const* argv) {
  const CLI::App* at = Deepest(app);
  const std::string command = CommandName(at);
  const std::string help = "Run '" + command + " --help' for its options.";
  if (std::string missing = MissingSubcommand(at, argc, argv); !missing.empty()) {
    return missing + "\n" + help;
  }
  if (dynamic_cast<const CLI::ExtrasError*>(&e) == nullptr) {
    return command + ": " + e.what() + "\n" + help;
  }
  std::string lines;
  for (int k = 1; k < argc; ++k) {
    const std::string arg = argv[k];
    if (arg == "--") break;
    if (arg.size() < 2 || arg[0] != '-') continue;
    const std::string flag = arg.substr(0, arg.find('='));
    if (Known(at, flag)) continue;
    lines += command + ": unknown option " + flag;
    if (flag.rfind("--", 0) == 0) {
      if (const std::string near = Closest(at, flag.substr(2)); !near.empty()) {
        lines += " (did you mean " + near + "?)";
      }
    }
    lines += "\n";
  }
  if (lines.empty()) lines = command + ": " + e.what() + "\n";  // extra positional arguments
  return lines + help;
}

}  // namespace gpumux::cli
