#include "gpumux/runs/manifests.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>
#include <regex>
#include <set>

#include "gpumux/core/json.h"
#include "gpumux/core/json_text.h"

namespace gpumux::runs {
namespace {

using core::ErrorCode;
using core::MakeError;
using nlohmann::json;

std::string Lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// --- reading ---------------------------------------------------------------------------------

// The 1-based line of the first byte of `text` that is not valid UTF-8; 0 when it all is.
// (JSON, and so the API server, takes UTF-8 only; a YAML reader passes other bytes through.)
std::size_t FirstBadUtf8Line(std::string_view text) {
  std::size_t line = 1;
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '\n') ++line;
    std::size_t n = 0;
    std::uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      n = 1;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3;
      cp = c & 0x07;
    } else {
      return line;
    }
    if (i + n >= text.size()) return line;  // cut off inside the sequence
    for (std::size_t k = 1; k <= n; ++k) {
      const auto d = static_cast<unsigned char>(text[i + k]);
      if ((d & 0xC0) != 0x80) return line;
      cp = (cp << 6) | (d & 0x3F);
    }
    // Overlong forms, surrogates and code points past U+10FFFF are not UTF-8.
    if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) ||
        (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) {
      return line;
    }
    i += n + 1;
  }
  return 0;
}

// Where a document's text came from: its source and the line of the source it starts on.
struct Origin {
  const std::string& source;
  int first_line = 0;  // 0-based line of the source where the document's text begins
};

// "file:12:3" for a node (yaml-cpp counts from 0, within the document's text).
std::string Where(const Origin& origin, const YAML::Mark& mark) {
  if (mark.is_null()) return origin.source;
  return origin.source + ":" + std::to_string(origin.first_line + mark.line + 1) + ":" +
         std::to_string(mark.column + 1);
}

// A plain scalar by the YAML 1.2 core schema: null, bool, int, float, else a string. Error text
// for floats JSON cannot hold (.inf, .nan).
core::Result<json> PlainScalar(const std::string& text) {
  static const std::regex kInt("[-+]?[0-9]+");
  static const std::regex kOctal("0o[0-7]+");
  static const std::regex kHex("0x[0-9a-fA-F]+");
  static const std::regex kFloat("[-+]?(\\.[0-9]+|[0-9]+(\\.[0-9]*)?)([eE][-+]?[0-9]+)?");
  if (text.empty() || text == "~" || text == "null" || text == "Null" || text == "NULL") {
    return json(nullptr);
  }
  if (text == "true" || text == "True" || text == "TRUE") return json(true);
  if (text == "false" || text == "False" || text == "FALSE") return json(false);
  const char* first = text.data();
  const char* last = text.data() + text.size();
  if (std::regex_match(text, kInt)) {
    const char* begin = text[0] == '+' ? first + 1 : first;
    std::int64_t v = 0;
    if (auto [end, ec] = std::from_chars(begin, last, v); ec == std::errc() && end == last) {
      return json(v);
    }
    std::uint64_t u = 0;
    if (auto [end, ec] = std::from_chars(begin, last, u); ec == std::errc() && end == last) {
      return json(u);
    }
    return json(std::strtod(text.c_str(), nullptr));
  }
  if (std::regex_match(text, kOctal) || std::regex_match(text, kHex)) {
    std::uint64_t u = 0;
    const int base = text[1] == 'o' ? 8 : 16;
    if (auto [end, ec] = std::from_chars(first + 2, last, u, base);
        ec == std::errc() && end == last) {
      if (u <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
        return json(static_cast<std::int64_t>(u));
      }
      return json(u);
    }
    return MakeError(ErrorCode::kInvalidArgument, "the number " + text + " is too large");
  }
  if (std::regex_match(text, kFloat)) {
    const double v = std::strtod(text.c_str(), nullptr);
    if (!std::isfinite(v)) {
      return MakeError(ErrorCode::kInvalidArgument, "the number " + text + " is too large");
    }
    return json(v);
  }
  const std::string lower = Lower(text);
  if (lower == ".inf" || lower == "+.inf" || lower == "-.inf" || lower == ".nan") {
    return MakeError(ErrorCode::kInvalidArgument,
                     "the number " + text + " cannot be written in JSON (quote it for a string)");
  }
  return json(text);
}

// The most values a document of `bytes` bytes may expand to. Written out, a value takes at
// least two bytes ("a,"); only aliases (*a), which repeat what their anchor holds every time,
// make more. 9 levels of 9 aliases in 591 bytes expand to 387 million strings (a "billion
// laughs" document; kubectl refuses them too, CVE-2019-11253).
std::size_t ValueBudget(std::size_t bytes) { return 10'000 + 20 * bytes; }

// `budget`: values left to expand in this document (ValueBudget).
core::Result<json> ToJson(const YAML::Node& node, const Origin& source, int depth,
                          std::size_t& budget) {
  if (depth > 100) {
    return MakeError(ErrorCode::kInvalidArgument,
                     Where(source, node.Mark()) + ": nested more than 100 levels deep");
  }
  if (budget == 0) {
    return MakeError(ErrorCode::kInvalidArgument,
                     Where(source, node.Mark()) +
                         ": the document expands to too many values for its size (YAML aliases "
                         "repeated over and over, as in a \"billion laughs\" document?)");
  }
  --budget;
  switch (node.Type()) {
    case YAML::NodeType::Undefined:
    case YAML::NodeType::Null:
      return json(nullptr);
    case YAML::NodeType::Scalar: {
      const std::string& tag = node.Tag();
      const std::string& text = node.Scalar();
      // An escape such as "\xA0" can make bytes that are not UTF-8 out of ASCII text.
      if (FirstBadUtf8Line(text) != 0) {
        return MakeError(ErrorCode::kInvalidArgument,
                         Where(source, node.Mark()) + ": a string that is not UTF-8");
      }
      if (tag == "!" || tag == "tag:yaml.org,2002:str") return json(text);
      if (tag == "?" || tag.empty() || tag.rfind("tag:yaml.org,2002:", 0) == 0) {
        auto v = PlainScalar(text);
        if (!v) {
          return MakeError(ErrorCode::kInvalidArgument,
                           Where(source, node.Mark()) + ": " + v.error().message);
        }
        if (tag == "tag:yaml.org,2002:int" && !v->is_number_integer()) {
          return MakeError(ErrorCode::kInvalidArgument,
                           Where(source, node.Mark()) + ": !!int '" + text + "' is not an integer");
        }
        return *v;
      }
      return MakeError(ErrorCode::kInvalidArgument,
                       Where(source, node.Mark()) + ": unknown tag " + tag);
    }
    case YAML::NodeType::Sequence: {
      json out = json::array();
      for (const YAML::Node& item : node) {
        auto v = ToJson(item, source, depth + 1, budget);
        if (!v) return v;
        out.push_back(std::move(*v));
      }
      return out;
    }
    case YAML::NodeType::Map: {
      json out = json::object();
      for (const auto& entry : node) {
        if (!entry.first.IsScalar()) {
          return MakeError(ErrorCode::kInvalidArgument,
                           Where(source, entry.first.Mark()) + ": a key that is not a string");
        }
        const std::string key = entry.first.Scalar();
        if (FirstBadUtf8Line(key) != 0) {
          return MakeError(ErrorCode::kInvalidArgument,
                           Where(source, entry.first.Mark()) + ": a key that is not UTF-8");
        }
        if (out.contains(key)) {
          return MakeError(ErrorCode::kInvalidArgument,
                           Where(source, entry.first.Mark()) + ": key \"" + key + "\" repeated");
        }
        auto v = ToJson(entry.second, source, depth + 1, budget);
        if (!v) return v;
        out[key] = std::move(*v);
      }
      return out;
    }
  }
  return json(nullptr);
}

bool IsList(const json& object) {
  const std::string kind =
      object.is_object() && object.contains("kind") && object["kind"].is_string()
          ? object["kind"].get<std::string>()
          : std::string();
  return kind.size() >= 4 && kind.compare(kind.size() - 4, 4, "List") == 0 &&
         object.contains("items");
}

// The longest key a mapping may have, as written quoted: YAML's limit on an implicit key is
// 1024 characters, far above any Kubernetes field, label or annotation key (at most 253 + 1 + 63).
constexpr std::size_t kMaxKeyBytes = 1000;

// The first key longer than kMaxKeyBytes (quoted) in `value`, as `a.b."<its start>..."`; "".
std::string LongKey(const json& value, int depth = 0) {
  if (depth > 200) return {};
  if (value.is_object()) {
    for (const auto& [key, item] : value.items()) {
      // Its length as written: a quoted key with control characters escaped is longer.
      if (json(key).dump().size() > kMaxKeyBytes) {
        return json(std::string(core::Utf8Prefix(key, 30))).dump() + "...";
      }
      if (std::string inner = LongKey(item, depth + 1); !inner.empty()) return key + "." + inner;
    }
  } else if (value.is_array()) {
    for (const json& item : value) {
      if (std::string inner = LongKey(item, depth + 1); !inner.empty()) return inner;
    }
  }
  return {};
}

// Appends `value` (an object, or a List of objects) to `out`. `what` names it in errors.
core::Result<void> Collect(json value, const std::string& what, std::vector<json>& out,
                           int depth = 0) {
  if (value.is_null()) return {};
  if (!value.is_object()) {
    return MakeError(
        ErrorCode::kInvalidArgument,
        what + " is " + (value.is_array() ? "a list" : "a scalar") + ", not an object");
  }
  if (IsList(value)) {
    json& items = value["items"];
    if (!items.is_array()) {
      return MakeError(ErrorCode::kInvalidArgument, what + ": \"items\" is not an array");
    }
    if (depth > 8) return MakeError(ErrorCode::kInvalidArgument, what + ": Lists nested too deep");
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (auto ok =
              Collect(std::move(items[i]), what + " item " + std::to_string(i + 1), out, depth + 1);
          !ok) {
        return ok;
      }
    }
    return {};
  }
  if (const std::string key = LongKey(value); !key.empty()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     what + ": a key longer than " + std::to_string(kMaxKeyBytes) + " bytes (" +
                         key + "): no Kubernetes field or annotation has one");
  }
  if (out.size() == kMaxManifestObjects) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "more than " + std::to_string(kMaxManifestObjects) + " objects");
  }
  out.push_back(std::move(value));
  return {};
}

// --- writing ---------------------------------------------------------------------------------

// Whether `text` can be written as a plain scalar that YAML 1.1 and 1.2 readers (kubectl's
// go-yaml, PyYAML, yaml-cpp) all read back as this very string.
bool PlainSafe(const std::string& text) {
  if (text.empty()) return false;
  for (char c : text) {
    const bool ok = std::isalnum(static_cast<unsigned char>(c)) != 0 || c == ' ' || c == '_' ||
                    c == '.' || c == '/' || c == ':' || c == '=' || c == '+' || c == '-';
    if (!ok) return false;
  }
  const char first = text[0];
  const bool first_ok =
      std::isalpha(static_cast<unsigned char>(first)) != 0 || first == '/' || first == '_' ||
      (first == '-' && text.size() > 1 &&
       (text[1] == '-' || std::isalpha(static_cast<unsigned char>(text[1])) != 0));
  if (!first_ok) return false;
  if (text.back() == ' ' || text.back() == ':') return false;
  if (text.find(": ") != std::string::npos) return false;
  static const std::set<std::string> kWords = {"true", "false", "yes", "no",   "on",
                                               "off",  "y",     "n",   "null", "~"};
  return kWords.count(Lower(text)) == 0;
}

std::string Scalar(const json& value) {
  if (value.is_string()) {
    const std::string& s = value.get_ref<const std::string&>();
    return PlainSafe(s) ? s : value.dump();  // JSON escapes are YAML double-quoted escapes
  }
  if (value.is_object()) return "{}";
  if (value.is_array()) return "[]";
  return value.dump();  // null, true, false, numbers
}

bool Nested(const json& value) { return (value.is_object() || value.is_array()) && !value.empty(); }

void Emit(std::string& out, const json& value, int indent) {
  const std::string pad(static_cast<std::size_t>(indent), ' ');
  if (value.is_object()) {
    for (const auto& [key, item] : value.items()) {
      out += pad;
      out += Scalar(json(key));
      out += ':';
      if (Nested(item)) {
        out += '\n';
        Emit(out, item, indent + 2);
      } else {
        out += ' ';
        out += Scalar(item);
        out += '\n';
      }
    }
    return;
  }
  for (const json& item : value) {
    if (!Nested(item)) {
      out += pad + "- " + Scalar(item) + "\n";
      continue;
    }
    std::string inner;
    Emit(inner, item, indent + 2);
    // The item's first line starts with indent + 2 spaces: put the dash in the last two.
    inner.replace(static_cast<std::size_t>(indent), 2, "- ");
    out += inner;
  }
}

}  // namespace

core::Result<std::vector<json>> ParseManifests(std::string_view text, const std::string& source) {
  std::vector<json> out;
  const std::size_t start = text.find_first_not_of(" \t\r\n");
  if (start == std::string_view::npos) return out;
  if (text[start] == '{' || text[start] == '[') {
    auto parsed = core::ParseJson(text, source);
    if (!parsed && core::JsonTooDeepAt(text, core::kMaxJsonDepth)) {
      return tl::unexpected(parsed.error());  // YAML would nest as deep
    }
    if (parsed) {
      json& doc = *parsed;
      if (doc.is_array()) {
        for (std::size_t i = 0; i < doc.size(); ++i) {
          if (auto ok =
                  Collect(std::move(doc[i]), source + ": element " + std::to_string(i + 1), out);
              !ok) {
            return tl::unexpected(ok.error());
          }
        }
      } else if (auto ok = Collect(std::move(doc), source + ": the JSON value", out); !ok) {
        return tl::unexpected(ok.error());
      }
      return out;
    }
    // Not one JSON value: maybe YAML in flow style, or several documents. YAML decides.
  }
  if (const std::size_t bad = FirstBadUtf8Line(text); bad != 0) {
    return MakeError(ErrorCode::kInvalidArgument,
                     source + ":" + std::to_string(bad) + ": not UTF-8 text");
  }
  // Documents split as kubectl splits them (a line "---" and nothing else), each read with
  // YAML::Load: yaml-cpp 0.7's LoadAll never returns on some inputs (a document of just ",").
  std::size_t line_no = 0;
  std::size_t doc_start = 0, doc_first_line = 0;
  int doc_index = 0;
  auto flush = [&](std::size_t end) -> core::Result<void> {
    const std::string chunk(text.substr(doc_start, end - doc_start));
    const Origin origin{source, static_cast<int>(doc_first_line)};
    YAML::Node doc;
    try {
      doc = YAML::Load(chunk);
    } catch (const YAML::Exception& e) {
      return MakeError(ErrorCode::kInvalidArgument, Where(origin, e.mark) + ": " + e.msg);
    }
    if (doc.IsNull() || !doc.IsDefined()) return {};  // empty, or comments only
    ++doc_index;
    std::size_t budget = ValueBudget(chunk.size());
    auto value = ToJson(doc, origin, 0, budget);
    if (!value) {
      return MakeError(ErrorCode::kInvalidArgument,
                       value.error().message + " (document " + std::to_string(doc_index) + ")");
    }
    const std::string what = Where(origin, doc.Mark()) + ": document " + std::to_string(doc_index);
    return Collect(std::move(*value), what, out);
  };
  std::size_t pos = 0;
  while (pos <= text.size()) {
    std::size_t newline = text.find('\n', pos);
    if (newline == std::string_view::npos) newline = text.size();
    std::string_view line = text.substr(pos, newline - pos);
    while (!line.empty() && (line.back() == ' ' || line.back() == '\t' || line.back() == '\r')) {
      line.remove_suffix(1);
    }
    if (line == "---") {
      if (auto ok = flush(pos); !ok) return tl::unexpected(ok.error());
      doc_start = std::min(newline + 1, text.size());
      doc_first_line = line_no + 1;
    }
    ++line_no;
    if (newline == text.size()) break;
    pos = newline + 1;
  }
  if (auto ok = flush(text.size()); !ok) return tl::unexpected(ok.error());
  return out;
}

std::string ToYaml(const json& object) {
  std::string out;
  if (!Nested(object)) return Scalar(object) + "\n";
  Emit(out, object, 0);
  return out;
}

void WriteYaml(std::ostream& out, const std::vector<json>& objects) {
  for (const json& object : objects) out << "---\n" << ToYaml(object);
}

void WriteJsonList(std::ostream& out, const std::vector<json>& objects) {
  json list = {{"apiVersion", "v1"}, {"kind", "List"}, {"items", objects}};
  out << list.dump(2) << "\n";
}

}  // namespace gpumux::runs
