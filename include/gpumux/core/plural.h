// Counts in messages: "1 GPU", "2 GPUs", "1 policy", "0 policies". Every message built from a
// count goes through Plural, so that no output says "1 experiments".
#pragma once

#include <concepts>
#include <string>
#include <string_view>

namespace gpumux::core {

// "<n> <singular>" when n is 1, else "<n> <plural>"; `plural` defaults to singular + "s".
//   Plural(1, "pod") == "1 pod"; Plural(3, "pod") == "3 pods";
//   Plural(2, "policy", "policies") == "2 policies".
template <std::integral N>
std::string Plural(N n, std::string_view singular, std::string_view plural = {}) {
  std::string out = std::to_string(n);
  out += ' ';
  if (n == 1) {
    out += singular;
  } else if (plural.empty()) {
    out += singular;
    out += 's';
  } else {
    out += plural;
  }
  return out;
}

// The noun alone, for counts printed elsewhere: Noun(1, "GPU") == "GPU", Noun(2, "GPU") == "GPUs".
template <std::integral N>
std::string Noun(N n, std::string_view singular, std::string_view plural = {}) {
  if (n == 1) return std::string(singular);
  return plural.empty() ? std::string(singular) + "s" : std::string(plural);
}

}  // namespace gpumux::core
