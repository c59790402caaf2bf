// GLPK (Debian's libglpk, the LP solver of share_pairing.h and of sim's packing bound) keeps an
// environment per thread, made on first use and never freed by itself: every thread that solves
// an LP would leak it when it ends (LeakSanitizer reports it). Declare one of these before the
// problems of a solve, so that the environment is freed after them, when the scope ends.
// glp_free_env frees every GLPK object of the thread, so no other GLPK problem may be alive in
// the thread when the scope ends (the solves here are self-contained functions).
#pragma once

namespace gpumux::policy {

class LpEnvironmentRelease {
 public:
  LpEnvironmentRelease() = default;
  LpEnvironmentRelease(const LpEnvironmentRelease&) = delete;
  LpEnvironmentRelease& operator=(const LpEnvironmentRelease&) = delete;
  ~LpEnvironmentRelease();
};

}  // namespace gpumux::policy
