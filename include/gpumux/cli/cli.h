// The `gpumux` command line: one binary, a subcommand per role.
#pragma once

#include <ostream>

namespace gpumux::cli {

// Parses argv and runs the subcommand. Returns the process exit code: 0 success, 2 bad usage or
// bad input (with a message on `err`), 1 an internal failure.
int Main(int argc, const char* const* argv, std::ostream& out, std::ostream& err);

}  // namespace gpumux::cli
