// Number and label formatting shared by the terminal, CSV and HTML reports (internal to sim).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "gpumux/core/result.h"

namespace gpumux::sim::report_format {

// Fixed decimals in the C locale; never "-0.00"; "-" for NaN or infinity.
std::string Fixed(double v, int decimals);
// The shortest decimal that reads back as `load` ("1.3", the study's "tune" column).
std::string LoadString(double load);
// {42..51} -> "42-51"; {42, 45} -> "42,45".
std::string JoinSeeds(const std::vector<std::uint64_t>& seeds);

// Writes what `write` produces to `path` with io::WriteFileAtomically (temporary file, fsync,
// rename): `path` is either the old file or the complete new one, never half written.
core::Result<void> WriteAtomically(const std::filesystem::path& path,
                                   const std::function<void(std::ostream&)>& write);

}  // namespace gpumux::sim::report_format
