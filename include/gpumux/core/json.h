// The one way into external JSON. Every reader of JSON that gpumux did not write itself in this
// process (a request body, an object from the API server, a stored record, a file) parses with
// ParseJson and reads fields with JsonFields:
//  - ParseJson refuses text nested deeper than a limit before the JSON library sees it, so no
//    value that reaches the rest of the code can make a recursive walk (the library's dump(),
//    its copy constructor, a translation) overflow the stack;
//  - JsonFields reads one object's fields typed and range-checked, in the value's own JSON type
//    (a large positive number is unsigned, and get<int> would wrap it), and names the field's
//    path in its errors ("spec.containers[2].gpu_milli: not an integer in 1..1000, got -1");
//  - JsonSummary describes a bad value for a message in bounded, non-recursive work.
// A handler that copies or dumps its input is therefore safe by construction: the depth of what
// it walks was bounded when the text was parsed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "gpumux/core/result.h"

namespace gpumux::core {

// How deep external JSON may nest: serde_json's default (128). A Pod, a Node, an AdmissionReview
// or an extender verb nest under 25 levels (managedFields included); a walk 128 levels deep
// costs a few tens of KiB of stack on any thread.
inline constexpr int kMaxJsonDepth = 128;

struct JsonLimits {
  std::size_t max_bytes = std::numeric_limits<std::size_t>::max();  // the caller's own bound
  int max_depth = kMaxJsonDepth;
};

// The offset of the first `[` or `{` of `text` that opens level max_depth + 1, outside strings;
// nullopt when the text nests no deeper. Linear and without recursion; text that is not JSON is
// scanned the same way (the parser then refuses it).
std::optional<std::size_t> JsonTooDeepAt(std::string_view text, int max_depth);

// "<what>: not JSON (line 1, column 3: ...)", "<what>: nested deeper than 128 levels (at byte
// 4096)" or "<what>: larger than N bytes", as kInvalidArgument; without the "<what>: " when
// `what` is empty.
Error JsonParseError(std::string_view what, std::string_view problem);

// `text` as one JSON value within `limits`; `callback` is nlohmann's parser callback (e.g. one
// that refuses repeated keys), run during the parse. Never throws.
template <typename Json = nlohmann::json>
Result<Json> ParseJson(std::string_view text, std::string_view what, JsonLimits limits = {},
                       typename Json::parser_callback_t callback = nullptr) {
  if (text.size() > limits.max_bytes) {
    return tl::unexpected(
        JsonParseError(what, "larger than " + std::to_string(limits.max_bytes) + " bytes"));
  }
  if (const auto at = JsonTooDeepAt(text, limits.max_depth)) {
    return tl::unexpected(
        JsonParseError(what, "nested deeper than " + std::to_string(limits.max_depth) +
                                 " levels (at byte " + std::to_string(*at) + ")"));
  }
  try {
    return Json::parse(text.begin(), text.end(), std::move(callback), /*allow_exceptions=*/true);
  } catch (const std::exception& e) {
    return tl::unexpected(JsonParseError(what, e.what()));
  }
}

// A bounded description of `v` for a message, at most about `max_bytes` long: a scalar as JSON
// (a long string cut, with "..."), an array or object by its size ("an array of 3 values", "an
// object of 2 fields"). Never walks into a container.
template <typename Json>
std::string JsonSummary(const Json& v, std::size_t max_bytes = 64);

// A JSON integer in [lo, hi], compared in its own JSON type; nullopt for another type or range.
template <typename Json>
std::optional<std::int64_t> JsonIntIn(const Json& v, std::int64_t lo, std::int64_t hi) {
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

// "a.b" + "c" -> "a.b.c"; "" + "c" -> "c"; "a" + "[3]" -> "a[3]".
std::string JsonPath(std::string_view path, std::string_view field);

// Typed, checked reads of one JSON object's fields. Errors are kInvalidArgument and say the
// field's path, what was wanted and (summarized) what was there. A field that is absent or null
// is "missing" for the required readers and nullopt for the Optional ones. The reader keeps a
// reference: the object must outlive it.
template <typename Json = nlohmann::json>
class JsonFields {
 public:
  using Int = std::int64_t;

  // Err when `value` is not an object.
  static Result<JsonFields> Of(const Json& value, std::string path);

  Result<Int> Integer(std::string_view key, Int lo, Int hi) const;
  Result<std::optional<Int>> OptionalInteger(std::string_view key, Int lo, Int hi) const;
  // The whole non-negative range of uint64.
  Result<std::optional<std::uint64_t>> OptionalUnsigned(std::string_view key) const;
  Result<double> Number(std::string_view key, double lo, double hi) const;
  Result<std::optional<double>> OptionalNumber(std::string_view key, double lo, double hi) const;
  Result<std::string> String(std::string_view key, std::size_t max_bytes = kMaxString) const;
  Result<std::optional<std::string>> OptionalString(std::string_view key,
                                                    std::size_t max_bytes = kMaxString) const;
  Result<bool> Bool(std::string_view key) const;
  Result<std::optional<bool>> OptionalBool(std::string_view key) const;
  // The field's value when present and of the type; errors otherwise.
  Result<const Json*> Object(std::string_view key) const;
  Result<const Json*> Array(std::string_view key, std::size_t max_items) const;
  Result<const Json*> OptionalObject(std::string_view key) const;  // nullptr when absent
  Result<const Json*> OptionalArray(std::string_view key, std::size_t max_items) const;

  // The field or nullptr (absent or null), unchecked.
  const Json* Find(std::string_view key) const;
  std::string PathOf(std::string_view key) const { return JsonPath(path_, key); }
  const std::string& path() const { return path_; }
  const Json& object() const { return *object_; }
  // "<path.key>: <what>, got <summary>" (or "missing") as an Error.
  Error Wrong(std::string_view key, std::string_view what) const;

  static constexpr std::size_t kMaxString = 1 << 20;

 private:
  JsonFields(const Json& object, std::string path) : object_(&object), path_(std::move(path)) {}
  const Json* object_;
  std::string path_;
};

extern template class JsonFields<nlohmann::json>;
extern template class JsonFields<nlohmann::ordered_json>;
extern template std::string JsonSummary(const nlohmann::json&, std::size_t);
extern template std::string JsonSummary(const nlohmann::ordered_json&, std::size_t);

}  // namespace gpumux::core
