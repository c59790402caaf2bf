#include "tests/testing/process.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

extern char** environ;

namespace gpumux::test {
namespace {

std::string NameOf(const std::string& entry) { return entry.substr(0, entry.find('=')); }

// Opens `path` (or /dev/null) onto `target_fd` in the child; false on failure.
bool Redirect(const std::string& path, int target_fd, int flags) {
  const int fd = ::open(path.empty() ? "/dev/null" : path.c_str(), flags | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  if (::dup2(fd, target_fd) < 0) return false;
  ::close(fd);
  return true;
}

}  // namespace

void PrintTo(const ProcessExit& e, std::ostream* os) {
  if (e.signal != 0) {
    *os << "killed by signal " << e.signal;
  } else {
    *os << "exit " << e.code;
  }
}

std::vector<std::string> ChildEnvironment(const ProcessSpec& spec) {
  std::vector<std::string> env;
  auto overridden = [&](const std::string& name) {
    for (const std::string& u : spec.unset_env) {
      if (u == name) return true;
    }
    for (const std::string& s : spec.set_env) {
      if (NameOf(s) == name) return true;
    }
    return false;
  };
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    if (!overridden(NameOf(entry))) env.push_back(entry);
  }
  // A name set twice: the later value wins (as with repeated `export`).
  for (std::size_t i = 0; i < spec.set_env.size(); ++i) {
    bool later = false;
    for (std::size_t j = i + 1; j < spec.set_env.size(); ++j) {
      later = later || NameOf(spec.set_env[j]) == NameOf(spec.set_env[i]);
    }
    if (!later) env.push_back(spec.set_env[i]);
  }
  return env;
}

pid_t StartProcess(const ProcessSpec& spec) {
  if (spec.argv.empty()) {
    ADD_FAILURE() << "StartProcess: empty argv";
    return -1;
  }
  // Everything the child needs is built before fork: the child only calls async-signal-safe
  // functions.
  std::vector<std::string> env_store = ChildEnvironment(spec);
  std::vector<char*> envp;
  for (std::string& e : env_store) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_store = spec.argv;
  std::vector<char*> argv;
  for (std::string& a : argv_store) argv.push_back(a.data());
  argv.push_back(nullptr);
  const bool shared_output = !spec.stdout_path.empty() && spec.stdout_path == spec.stderr_path;
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    ADD_FAILURE() << "fork: " << std::strerror(errno);
    return -1;
  }
  if (pid > 0) return pid;
  // Child.
  const int out_flags = O_WRONLY | O_CREAT | O_TRUNC;
  bool ok = Redirect(spec.stdin_path, 0, O_RDONLY) && Redirect(spec.stdout_path, 1, out_flags);
  if (ok) ok = shared_output ? ::dup2(1, 2) == 2 : Redirect(spec.stderr_path, 2, out_flags);
  if (ok && !spec.cwd.empty()) ok = ::chdir(spec.cwd.c_str()) == 0;
  if (ok) ::execvpe(argv[0], argv.data(), envp.data());
  const char* what = std::strerror(errno);
  const char* prefix = "test::StartProcess: cannot run ";
  (void)!::write(2, prefix, std::strlen(prefix));
  (void)!::write(2, argv[0], std::strlen(argv[0]));
  (void)!::write(2, ": ", 2);
  (void)!::write(2, what, std::strlen(what));
  (void)!::write(2, "\n", 1);
  ::_exit(127);
}

ProcessExit WaitProcess(pid_t pid) {
  ProcessExit e;
  if (pid <= 0) return e;
  int status = 0;
  pid_t r;
  do {
    r = ::waitpid(pid, &status, 0);
  } while (r < 0 && errno == EINTR);
  if (r != pid) {
    ADD_FAILURE() << "waitpid(" << pid << "): " << std::strerror(errno);
    return e;
  }
  if (WIFEXITED(status)) e.code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) e.signal = WTERMSIG(status);
  return e;
}

ProcessExit RunProcess(const ProcessSpec& spec) { return WaitProcess(StartProcess(spec)); }

Captured RunCaptured(ProcessSpec spec, const std::filesystem::path& scratch, const std::string& tag,
                     const std::string& stdin_text) {
  const std::filesystem::path in = scratch / (tag + ".in");
  spec.stdout_path = (scratch / (tag + ".out")).string();
  spec.stderr_path = (scratch / (tag + ".err")).string();
  { std::ofstream(in, std::ios::binary) << stdin_text; }
  spec.stdin_path = in.string();
  Captured c;
  c.exit = RunProcess(spec);
  c.out = ReadFileText(spec.stdout_path);
  c.err = ReadFileText(spec.stderr_path);
  return c;
}

std::string ReadFileText(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace gpumux::test
