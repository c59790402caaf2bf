// Runs the gpumux command line in-process for the CLI tests.
#pragma once

#include <sstream>
#include <string>
#include <vector>

#include "gpumux/cli/cli.h"

namespace gpumux::cli {

struct CliRun {
  int code = -1;
  std::string out;
  std::string err;
};

// gpumux::cli::Main with argv = {"gpumux", args...}; stdout and stderr captured.
inline CliRun Gpumux(const std::vector<std::string>& args) {
  std::vector<const char*> argv{"gpumux"};
  for (const std::string& a : args) argv.push_back(a.c_str());
  std::ostringstream out, err;
  CliRun r;
  r.code = Main(static_cast<int>(argv.size()), argv.data(), out, err);
  r.out = out.str();
  r.err = err.str();
  return r;
}

}  // namespace gpumux::cli
