// Runs programs from tests: fork + execve with a chosen environment, stdio sent to files (never
// pipes, so that a detached container that inherits them cannot keep a test waiting), and the
// exit status or the killing signal reported back. Call only from a single-threaded test.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <string>
#include <vector>

namespace gpumux::test {

struct ProcessSpec {
  std::vector<std::string> argv{};     // argv[0] is looked up in PATH when it has no '/'
  std::vector<std::string> set_env{};  // "NAME=value": added to (or replacing in) our environment;
                                       // of a name set twice, the later wins
  std::vector<std::string> unset_env{};  // names removed from the environment
  std::string stdin_path{};              // "" = /dev/null
  std::string stdout_path{};             // "" = /dev/null; the file is truncated
  std::string stderr_path{};             // "" = /dev/null; may equal stdout_path (then shared)
  std::string cwd{};                     // "" = ours
};

struct ProcessExit {
  int code = -1;   // exit status when it exited; -1 otherwise
  int signal = 0;  // the signal that killed it, 0 when it exited
  bool Exited(int status) const { return signal == 0 && code == status; }
};
void PrintTo(const ProcessExit& e, std::ostream* os);

// Starts the process; -1 (and an ADD_FAILURE) when fork fails. A program that cannot be
// executed exits with 127 after writing the reason to its stderr.
pid_t StartProcess(const ProcessSpec& spec);
ProcessExit WaitProcess(pid_t pid);
ProcessExit RunProcess(const ProcessSpec& spec);

// RunProcess with stdout and stderr captured in files under `scratch` (named `tag`.out/.err)
// and `stdin_text` written to `tag`.in.
struct Captured {
  ProcessExit exit;
  std::string out;
  std::string err;
};
Captured RunCaptured(ProcessSpec spec, const std::filesystem::path& scratch, const std::string& tag,
                     const std::string& stdin_text = "");

// The whole file, or "" when it cannot be read.
std::string ReadFileText(const std::filesystem::path& path);

// The environment of this process with `set_env`/`unset_env` applied (what StartProcess passes).
std::vector<std::string> ChildEnvironment(const ProcessSpec& spec);

}  // namespace gpumux::test
