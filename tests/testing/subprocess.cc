#include "tests/testing/subprocess.h"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>

namespace gpumux::test {

bool FinishesInChild(const std::function<void()>& fn, unsigned seconds, long max_mib) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) return false;
  if (pid == 0) {
#if !defined(__SANITIZE_ADDRESS__)
    rlimit limit{};
    limit.rlim_cur = limit.rlim_max = static_cast<rlim_t>(max_mib) * 1024 * 1024;
    ::setrlimit(RLIMIT_AS, &limit);
#else
    (void)max_mib;
#endif
    ::alarm(seconds);
    fn();
    ::_exit(0);
  }
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return false;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

}  // namespace gpumux::test
