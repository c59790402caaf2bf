#include "gpumux/core/json_text.h"

#include <algorithm>
#include <cstdint>

namespace gpumux::core {
namespace {

// The length of the valid UTF-8 sequence at the start of `s`, or 0.
std::size_t Utf8Length(std::string_view s) {
  const auto byte = [&s](std::size_t i) { return static_cast<std::uint8_t>(s[i]); };
  const std::uint8_t c = byte(0);
  std::size_t n = 0;
  std::uint32_t min = 0;
  std::uint32_t cp = 0;
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) {
    n = 2, min = 0x80, cp = c & 0x1Fu;
  } else if ((c & 0xF0) == 0xE0) {
    n = 3, min = 0x800, cp = c & 0x0Fu;
  } else if ((c & 0xF8) == 0xF0) {
    n = 4, min = 0x10000, cp = c & 0x07u;
  } else {
    return 0;
  }
  if (s.size() < n) return 0;
  for (std::size_t i = 1; i < n; ++i) {
    if ((byte(i) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i) & 0x3Fu);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

}  // namespace

bool IsUtf8Text(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size()) {
    const auto u = static_cast<std::uint8_t>(text[i]);
    if (u < 0x20 || u == 0x7F) return false;
    const std::size_t n = u < 0x80 ? 1 : Utf8Length(text.substr(i));
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string_view Utf8Prefix(std::string_view text, std::size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  std::size_t end = max_bytes;
  // Back off the continuation bytes (10xxxxxx) of a sequence the cut would split.
  while (end > 0 && (static_cast<std::uint8_t>(text[end]) & 0xC0) == 0x80) --end;
  return text.substr(0, end);
}

std::string JsonEscape(std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size() + 8);
  std::size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    const auto u = static_cast<std::uint8_t>(c);
    if (u >= 0x80) {
      const std::size_t n = Utf8Length(text.substr(i));
      if (n == 0) {
        out += "\xEF\xBF\xBD";  // U+FFFD: the line stays valid JSON
        ++i;
      } else {
        out.append(text.substr(i, n));
        i += n;
      }
      continue;
    }
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (u < 0x20 || u == 0x7F) {
          out += "\\u00";
          out += kHex[u >> 4];
          out += kHex[u & 0xF];
        } else {
          out += c;
        }
    }
    ++i;
  }
  return out;
}

void AppendJsonString(std::string& out, std::string_view text) {
  out += '"';
  const bool plain = std::none_of(text.begin(), text.end(), [](char c) {
    const auto u = static_cast<std::uint8_t>(c);
    return c == '"' || c == '\\' || u < 0x20 || u >= 0x7F;
  });
  if (plain) {  // node names (DNS labels) always are
    out += text;
  } else {
    out += JsonEscape(text);
  }
  out += '"';
}

std::string JsonErrorText(std::string_view what) {
  if (what.rfind("[json.exception.", 0) == 0) {
    const auto tag_end = what.find("] ");
    if (tag_end != std::string_view::npos) what.remove_prefix(tag_end + 2);
  }
  for (std::string_view prefix : {"parse error at ", "parse error: "}) {
    if (what.rfind(prefix, 0) == 0) {
      what.remove_prefix(prefix.size());
      break;
    }
  }
  return std::string(what);
}

}  // namespace gpumux::core
