// Checked reads of JSON numbers for the hook's parsers (container state, ledger): a value
// outside the range, or of another type, is "no value", never an exception or a conversion
// that wraps. Private to src/hook.
#pragma once

#include <cstdint>
#include <optional>

namespace gpumux::hook::detail {

// `v` as an integer when it is one and lies in [lo, hi], compared in its own JSON type (a
// large positive number is number_unsigned, a negative one number_integer); else nullopt.
// Works for nlohmann::json and nlohmann::ordered_json.
template <typename Json>
std::optional<std::int64_t> IntInRange(const Json& v, std::int64_t lo, std::int64_t hi) {
  if (v.is_number_unsigned()) {
    const auto u = v.template get<std::uint64_t>();
    if (hi < 0 || u > static_cast<std::uint64_t>(hi)) return std::nullopt;
    const auto i = static_cast<std::int64_t>(u);
    return i >= lo ? std::optional<std::int64_t>(i) : std::nullopt;
  }
  if (v.is_number_integer()) {
    const auto i = v.template get<std::int64_t>();
    return i >= lo && i <= hi ? std::optional<std::int64_t>(i) : std::nullopt;
  }
  return std::nullopt;
}

}  // namespace gpumux::hook::detail
