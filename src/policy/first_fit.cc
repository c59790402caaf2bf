#include "gpumux/policy/first_fit.h"
