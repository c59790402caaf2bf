#include "gpumux/policy/lp_environment.h"

#include <glpk.h>

namespace gpumux::policy {

LpEnvironmentRelease::~LpEnvironmentRelease() { glp_free_env(); }

}  // namespace gpumux::policy
