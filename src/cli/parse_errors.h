// CLI11's parse errors worded for people: an unknown option names the command and the closest
// option it has ("gpumux simulate: unknown option --polcy (did you mean --policy?)").
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace gpumux::cli {

// The message for `e`, thrown by app.parse(argc, argv); one or more lines, no trailing newline.
std::string ExplainParseError(const CLI::App& app, const CLI::ParseError& e, int argc,
                              const char* const* argv);

}  // namespace gpumux::cli
