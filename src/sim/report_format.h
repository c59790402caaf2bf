// Number and label formatting shared by the terminal, CSV and HTML reports (internal to sim).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <ostream>
#include <string>
#include <string_view>
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

// ---- HTML and SVG pieces shared by the report pages.
// Text with & < > " ' escaped for HTML content and attributes.
std::string HtmlEscape(std::string_view s);
// An SVG coordinate: one decimal.
inline std::string SvgCoord(double v) { return Fixed(v, 1); }
// A tick step from 1, 2, 5 x 10^k giving at most max_ticks intervals over range (> 0).
double TickStep(double range, int max_ticks);
// Linear map from data [lo, hi] to pixels [px_lo, px_hi].
struct Scale {
  double lo, hi;
  double px_lo, px_hi;
  double operator()(double v) const { return px_lo + (v - lo) / (hi - lo) * (px_hi - px_lo); }
};

}  // namespace gpumux::sim::report_format
