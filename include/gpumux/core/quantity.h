// Integer quantities. No floating point in state (scores may be floating point).
#pragma once

#include <cstdint>

namespace gpumux::core {

using MilliGpu = std::int64_t;  // thousandths of one GPU's compute; 1000 = a whole GPU
using MilliCpu = std::int64_t;  // thousandths of a CPU core
using MiB = std::int64_t;       // mebibytes (host or GPU memory)
using Micros = std::int64_t;    // simulated time in microseconds

inline constexpr MilliGpu kMilliPerGpu = 1000;

}  // namespace gpumux::core
