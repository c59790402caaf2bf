#include "tests/testing/subprocess.h"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>

// ASan reserves terabytes of address space: no RLIMIT_AS under it (GCC and clang spell it apart).
#if defined(__SANITIZE_ADDRESS__)
#define GPUMUX_TESTING_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GPUMUX_TESTING_ASAN 1
#endif
#endif
#ifndef GPUMUX_TESTING_ASAN
#define GPUMUX_TESTING_ASAN 0
#endif

namespace gpumux::test {

bool AddressSanitized() { return GPUMUX_TESTING_ASAN != 0; }

bool FinishesInChild(const std::function<void()>& fn, unsigned seconds, long max_mib) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) return false;
  if (pid == 0) {
#if !GPUMUX_TESTING_ASAN
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
