#include "gpumux/core/json.h"

#include <cmath>

#include "gpumux/core/json_text.h"

namespace gpumux::core {

std::optional<std::size_t> JsonTooDeepAt(std::string_view text, int max_depth) {
  long depth = 0;
  bool in_string = false;
  bool escaped = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    switch (c) {
      case '"':
        in_string = true;
        break;
      case '[':
      case '{':
        if (++depth > max_depth) return i;
        break;
      case ']':
      case '}':
        --depth;
        break;
      default:
        break;
    }
  }
  return std::nullopt;
}

Error JsonParseError(std::string_view what, std::string_view problem) {
  const std::string text = JsonErrorText(problem);
  // The library's own errors are syntax errors; ours (depth, size) are said as they are.
  const bool syntax = problem.rfind("[json.exception.", 0) == 0;
  std::string message = syntax ? "not JSON (" + text + ")" : text;
  if (!what.empty()) message = std::string(what) + ": " + message;
  return Error{ErrorCode::kInvalidArgument, std::move(message)};
}

std::string JsonPath(std::string_view path, std::string_view field) {
  if (path.empty()) return std::string(field);
  if (!field.empty() && field.front() == '[') return std::string(path) + std::string(field);
  return std::string(path) + "." + std::string(field);
}

template <typename Json>
std::string JsonSummary(const Json& v, std::size_t max_bytes) {
  const auto count = [](std::size_t n, const char* one, const char* many) {
    return std::to_string(n) + " " + (n == 1 ? one : many);
  };
  switch (v.type()) {
    case Json::value_t::array:
      return "an array of " + count(v.size(), "value", "values");
    case Json::value_t::object:
      return "an object of " + count(v.size(), "field", "fields");
    case Json::value_t::string: {
      const auto& s = v.template get_ref<const typename Json::string_t&>();
      if (s.size() <= max_bytes)
        return Json(s).dump(-1, ' ', false, Json::error_handler_t::replace);
      const std::string cut(Utf8Prefix(s, max_bytes));
      std::string out = Json(cut).dump(-1, ' ', false, Json::error_handler_t::replace);
      out.insert(out.size() - 1, "...");
      return out + " (" + std::to_string(s.size()) + " bytes)";
    }
    case Json::value_t::discarded:
      return "nothing";
    default:
      return v.dump();  // a number, a boolean or null: short
  }
}

template std::string JsonSummary(const nlohmann::json&, std::size_t);
template std::string JsonSummary(const nlohmann::ordered_json&, std::size_t);

template <typename Json>
Result<JsonFields<Json>> JsonFields<Json>::Of(const Json& value, std::string path) {
  if (!value.is_object()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     (path.empty() ? std::string("the document") : path) + ": not an object, got " +
                         JsonSummary(value));
  }
  return JsonFields(value, std::move(path));
}

template <typename Json>
const Json* JsonFields<Json>::Find(std::string_view key) const {
  const auto it = object_->find(key);
  if (it == object_->end() || it->is_null()) return nullptr;
  return &*it;
}

template <typename Json>
Error JsonFields<Json>::Wrong(std::string_view key, std::string_view what) const {
  const Json* v = Find(key);
  return Error{ErrorCode::kInvalidArgument,
               PathOf(key) + ": " + std::string(what) +
                   (v != nullptr ? ", got " + JsonSummary(*v) : std::string(", missing"))};
}

namespace {
std::string IntRange(std::int64_t lo, std::int64_t hi) {
  return "not an integer in " + std::to_string(lo) + ".." + std::to_string(hi);
}
}  // namespace

template <typename Json>
Result<std::optional<std::int64_t>> JsonFields<Json>::OptionalInteger(std::string_view key, Int lo,
                                                                      Int hi) const {
  const Json* v = Find(key);
  if (v == nullptr) return std::optional<Int>();
  if (const auto n = JsonIntIn(*v, lo, hi)) return n;
  return tl::unexpected(Wrong(key, IntRange(lo, hi)));
}

template <typename Json>
Result<std::int64_t> JsonFields<Json>::Integer(std::string_view key, Int lo, Int hi) const {
  auto n = OptionalInteger(key, lo, hi);
  if (!n) return tl::unexpected(n.error());
  if (!*n) return tl::unexpected(Wrong(key, IntRange(lo, hi)));
  return **n;
}

template <typename Json>
Result<std::optional<std::uint64_t>> JsonFields<Json>::OptionalUnsigned(
    std::string_view key) const {
  const Json* v = Find(key);
  if (v == nullptr) return std::optional<std::uint64_t>();
  if (v->is_number_unsigned()) return v->template get<std::uint64_t>();
  return tl::unexpected(Wrong(key, "not a non-negative integer"));
}

template <typename Json>
Result<std::optional<double>> JsonFields<Json>::OptionalNumber(std::string_view key, double lo,
                                                               double hi) const {
  const Json* v = Find(key);
  if (v == nullptr) return std::optional<double>();
  if (v->is_number()) {
    const auto d = v->template get<double>();
    if (std::isfinite(d) && d >= lo && d <= hi) return d;
  }
  std::string range = JsonSummary(Json(lo)) + ".." + JsonSummary(Json(hi));
  return tl::unexpected(Wrong(key, "not a number in " + range));
}

template <typename Json>
Result<double> JsonFields<Json>::Number(std::string_view key, double lo, double hi) const {
  auto d = OptionalNumber(key, lo, hi);
  if (!d) return tl::unexpected(d.error());
  if (!*d) return tl::unexpected(Wrong(key, "not a number"));
  return **d;
}

template <typename Json>
Result<std::optional<std::string>> JsonFields<Json>::OptionalString(std::string_view key,
                                                                    std::size_t max_bytes) const {
  const Json* v = Find(key);
  if (v == nullptr) return std::optional<std::string>();
  if (!v->is_string()) return tl::unexpected(Wrong(key, "not a string"));
  const auto& s = v->template get_ref<const typename Json::string_t&>();
  if (s.size() > max_bytes) {
    return tl::unexpected(Wrong(key, "longer than " + std::to_string(max_bytes) + " bytes"));
  }
  return std::optional<std::string>(s);
}

template <typename Json>
Result<std::string> JsonFields<Json>::String(std::string_view key, std::size_t max_bytes) const {
  auto s = OptionalString(key, max_bytes);
  if (!s) return tl::unexpected(s.error());
  if (!*s) return tl::unexpected(Wrong(key, "not a string"));
  return std::move(**s);
}

template <typename Json>
Result<std::optional<bool>> JsonFields<Json>::OptionalBool(std::string_view key) const {
  const Json* v = Find(key);
  if (v == nullptr) return std::optional<bool>();
  if (!v->is_boolean()) return tl::unexpected(Wrong(key, "not true or false"));
  return std::optional<bool>(v->template get<bool>());
}

template <typename Json>
Result<bool> JsonFields<Json>::Bool(std::string_view key) const {
  auto b = OptionalBool(key);
  if (!b) return tl::unexpected(b.error());
  if (!*b) return tl::unexpected(Wrong(key, "not true or false"));
  return **b;
}

template <typename Json>
Result<const Json*> JsonFields<Json>::OptionalObject(std::string_view key) const {
  const Json* v = Find(key);
  if (v == nullptr || v->is_object()) return v;
  return tl::unexpected(Wrong(key, "not an object"));
}

template <typename Json>
Result<const Json*> JsonFields<Json>::Object(std::string_view key) const {
  auto v = OptionalObject(key);
  if (v && *v == nullptr) return tl::unexpected(Wrong(key, "not an object"));
  return v;
}

template <typename Json>
Result<const Json*> JsonFields<Json>::OptionalArray(std::string_view key,
                                                    std::size_t max_items) const {
  const Json* v = Find(key);
  if (v == nullptr) return v;
  if (!v->is_array()) return tl::unexpected(Wrong(key, "not an array"));
  if (v->size() > max_items) {
    return tl::unexpected(Wrong(
        key, "more than " + std::to_string(max_items) + (max_items == 1 ? " value" : " values")));
  }
  return v;
}

template <typename Json>
Result<const Json*> JsonFields<Json>::Array(std::string_view key, std::size_t max_items) const {
  auto v = OptionalArray(key, max_items);
  if (v && *v == nullptr) return tl::unexpected(Wrong(key, "not an array"));
  return v;
}

template class JsonFields<nlohmann::json>;
template class JsonFields<nlohmann::ordered_json>;

}  // namespace gpumux::core
