// Runs the gpumux command line in-process for the CLI tests.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <ostream>
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

// A command line that is bad usage: exit 2, every string of `message` on stderr, nothing on
// stdout. Table-driven tests list them (TEST_P bodies call ExpectUsageError).
struct UsageCase {
  const char* name;
  std::vector<std::string> args;
  std::vector<std::string> message;  // every one appears on stderr
};
inline void PrintTo(const UsageCase& c, std::ostream* os) { *os << c.name; }

inline void ExpectUsageError(const UsageCase& c) {
  const CliRun r = Gpumux(c.args);
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_FALSE(r.err.empty());
  for (const std::string& m : c.message) {
    EXPECT_NE(r.err.find(m), std::string::npos) << "'" << m << "' not in: " << r.err;
  }
  EXPECT_EQ(r.out, "") << "nothing on stdout for a usage error";
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
