#include "gpumux/kube/grant.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>

namespace gpumux::kube {
namespace {}  // namespace
}  // namespace gpumux::kube
