// Runs the gpumux command line in-process for the CLI tests.
#pragma once

#include <filesystem>
#include <fstream>
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

// The lines of `text`, without their newlines.
inline std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The whole file ("" when it cannot be read).
inline std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace gpumux::cli
