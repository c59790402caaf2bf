#include "gpumux/core/shown.h"

#include <cstdio>

namespace gpumux::core {

std::string Shown(std::string_view text, std::size_t max) {
  std::string out;
  std::size_t shown = 0;
  for (const char c : text) {
    if (shown >= max) return out + "...";
    const auto u = static_cast<unsigned char>(c);
    if (c == '\\') {
      out += "\\\\";
    } else if (u < 0x20 || u >= 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", static_cast<unsigned>(u));
      out += hex;
    } else {
      out += c;
    }
    ++shown;
  }
  return out;
}

bool LooksBinary(std::string_view text) {
  std::size_t control = 0;
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u == 0) return true;
    if (u < 0x20 && c != '\t' && c != '\r' && c != '\n') ++control;
  }
  return control * 10 > text.size();
}

}  // namespace gpumux::core
