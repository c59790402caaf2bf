// Typed readers of the coordinator's JSON (the job protocol's bodies, the jobs it keeps in its
// store): a missing field is left as it is unless required, a wrong type or an integer outside
// its C++ type is an error naming the field, never an exception. Private to the coordinator's
// sources (server.cc reads requests with them, coordinator.cc its store).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#include "gpumux/coordinator/coordinator.h"
#include "gpumux/core/json.h"

namespace gpumux::coordinator {

constexpr bool kRequired = true;
constexpr bool kOptional = false;
constexpr std::size_t kMaxRegisteredGpus = 64;

// std::nullopt, or why the field is refused ("batch_size: must be an integer").
std::optional<std::string> ReadString(const nlohmann::json& body, const char* field,
                                      std::string* out, bool required);
std::optional<std::string> ReadNumber(const nlohmann::json& body, const char* field, double* out);

// `v` as a signed integer type Int; why not (named `field`) when it is not an integer in Int's
// range.
template <typename Int>
std::optional<std::string> ReadIntegerValue(const nlohmann::json& v, std::string_view field,
                                            Int* out) {
  static_assert(std::is_signed_v<Int>, "the range check below is for signed types");
  if (!v.is_number_integer()) return std::string(field) + ": must be an integer";
  // Compared in the value's own JSON type (core::JsonIntIn): get<int64_t> would wrap a value
  // above INT64_MAX to a negative one.
  const auto n =
      core::JsonIntIn(v, std::numeric_limits<Int>::min(), std::numeric_limits<Int>::max());
  if (!n) return std::string(field) + ": out of range";
  *out = static_cast<Int>(*n);
  return std::nullopt;
}

template <typename Int>
std::optional<std::string> ReadInteger(const nlohmann::json& body, const char* field, Int* out,
                                       bool required) {
  auto it = body.find(field);
  if (it == body.end() || it->is_null()) {
    if (required) return std::string(field) + ": required";
    return std::nullopt;
  }
  return ReadIntegerValue(*it, field, out);
}

// A registration's fields (/v1/register's body; a stored job has the same ones), typed; their
// values are checked by Coordinator::CheckIds and CheckFields.
std::optional<std::string> ReadRegistration(const nlohmann::json& body, Registration* r);

}  // namespace gpumux::coordinator
