// Always-on invariant checks. A failed check is a bug in gpumux, never bad input:
// external input is validated and reported through Result<T> instead.
#pragma once

#include <cstdio>
#include <cstdlib>

namespace gpumux::core::detail {
[[noreturn]] inline void CheckFailed(const char* expr, const char* file, int line,
                                     const char* msg) {
  std::fprintf(stderr, "gpumux: internal invariant violated at %s:%d: %s%s%s\n", file, line, expr,
               msg[0] != '\0' ? " — " : "", msg);
  std::abort();
}
}  // namespace gpumux::core::detail

#define GPUMUX_CHECK(cond, msg)                                                       \
  do {                                                                                \
    if (!(cond)) ::gpumux::core::detail::CheckFailed(#cond, __FILE__, __LINE__, msg); \
  } while (0)
