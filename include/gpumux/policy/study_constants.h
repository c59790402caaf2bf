// Normalisation constants of the FGD study's score plugins: fixed, not per node.
#pragma once

#include "gpumux/core/quantity.h"

namespace gpumux::policy {
inline constexpr core::MilliCpu kStudyCpuMax = 128000;  // 128 cores
inline constexpr core::MilliGpu kStudyGpuMax = 8000;    // 8 GPUs
}  // namespace gpumux::policy
