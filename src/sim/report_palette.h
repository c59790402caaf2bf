// The looks of the report pages (internal to sim): one line look (colour plus dash pattern) per
// policy, fixed by the policy's registry entry (its colour, and its family's dash) so that a
// policy looks the same in every report whichever policies ran with it, and a fill palette of its
// own for the DL report's workload classes.
//
// Policy lines: colour alone cannot keep 12 or more policies apart for every reader, so each look
// is a pair, and the pairs are distinct. The colours are Okabe-Ito's (Okabe & Ito 2008, safe for
// the common colour-vision deficiencies) plus two dark ones from Paul Tol's "muted" scheme; the
// dash pattern says the family:
//   solid      the FGD study's six policies, each its own colour;
//   dashed     the other packing policies (exclusive, binpack, spread, fgd-sat, fgd-sat-reserve,
//              fgd-sat-pair, fgd-sat-keep), colours of their own (fgd-sat's olive and
//              fgd-sat-reserve's magenta are Tol's, fgd-sat-pair's green ColorBrewer's,
//              fgd-sat-keep's a mid grey, all outside the hash palette below), so that the default
//              `gpumux simulate` (twelve of these, fgd-sat-keep not among them) needs no two
//              lines of one colour;
//   dash-dot   the co-location policies of the DL report (first-fit, iadeep, gpumux); with
//              exclusive they take four well-separated colours (black, bluish green, blue,
//              vermillion) that they share with study policies only across families.
//   dotted     any other name: a colour chosen by a hash of the name (stable across reports).
// Workload classes fill the DL timelines' bars with colours of their own (ColorBrewer's "Paired"
// tints, Tol's muted green and purple, sienna, a ColorBrewer lavender), none lighter than L* 85
// so that a thin bar still shows on the white lanes, and picked to differ from every policy
// colour and from each other by at least 20 CIE76 ΔE (at least 15 from the policy colours under
// simulated deuteranopia).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "gpumux/policy/registry.h"

namespace gpumux::sim::report_palette {

// An SVG stroke-dasharray and its name; an empty pattern is a solid line.
struct Dash {
  std::string_view name;
  std::string_view pattern;
  friend bool operator==(const Dash&, const Dash&) = default;
};
inline constexpr Dash kSolid{"solid", ""};
inline constexpr Dash kDashed{"dashed", "8 4"};
inline constexpr Dash kDashDot{"dash-dot", "10 3 2.5 3"};
inline constexpr Dash kDotted{"dotted", "2 3"};

struct LineLook {
  std::string_view colour;  // "#RRGGBB"
  Dash dash;
  friend bool operator==(const LineLook&, const LineLook&) = default;
};

// Okabe-Ito without its yellow (too light for a line on white), then Tol's wine and indigo.
inline constexpr std::array<std::string_view, 9> kPolicyColours = {"#0072B2", "#D55E00", "#009E73",
                                                                   "#CC79A7", "#E69F00", "#56B4E9",
                                                                   "#000000", "#882255", "#332288"};

// The dash of a policy family's lines.
inline Dash FamilyDash(policy::Family family) {
  switch (family) {
    case policy::Family::kFgdStudy:
      return kSolid;
    case policy::Family::kPacking:
      return kDashed;
    case policy::Family::kColocation:
      return kDashDot;
  }
  return kDotted;
}

struct NamedLook {
  std::string_view policy;
  LineLook look;
};
// Every built-in policy's look: its registry entry's colour (policy::PolicyEntry::colour) and
// its family's dash, in registry order.
inline std::vector<NamedLook> BuiltinLooks() {
  std::vector<NamedLook> looks;
  for (const policy::PolicyEntry& e : policy::BuiltinPolicies().entries()) {
    looks.push_back({e.name, {e.colour, FamilyDash(e.family)}});
  }
  return looks;
}

// FNV-1a: a hash that is the same on every platform and run (std::hash is not).
inline std::uint64_t NameHash(std::string_view s) {
  std::uint64_t h = 14695981039346656037ULL;
  for (char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ULL;
  }
  return h;
}

// The look of `policy` in every report: its registry entry's, else dotted in a colour picked by
// the name's hash.
inline LineLook PolicyLook(std::string_view policy) {
  if (const policy::PolicyEntry* e = policy::BuiltinPolicies().Find(policy)) {
    return {e->colour, FamilyDash(e->family)};
  }
  return {kPolicyColours[NameHash(policy) % kPolicyColours.size()], kDotted};
}

// The looks of one report's policies, in the order given (names given twice share one look).
// Each is PolicyLook(name), except that a name outside the registry whose hashed look an earlier
// name of the list already has moves on to the next colour not yet taken: no two policies of one
// report ever share a look (up to kPolicyColours.size() such names).
inline std::vector<LineLook> PolicyLooks(const std::vector<std::string>& policies) {
  std::vector<LineLook> looks;
  looks.reserve(policies.size());
  for (std::size_t i = 0; i < policies.size(); ++i) {
    LineLook look = PolicyLook(policies[i]);
    bool repeated_name = false;
    for (std::size_t j = 0; j < i; ++j) {
      if (policies[j] == policies[i]) {
        look = looks[j];
        repeated_name = true;
        break;
      }
    }
    if (!repeated_name && look.dash == kDotted) {
      const std::size_t first = NameHash(policies[i]) % kPolicyColours.size();
      for (std::size_t k = 0; k < kPolicyColours.size(); ++k) {
        const LineLook candidate{kPolicyColours[(first + k) % kPolicyColours.size()], kDotted};
        bool taken = false;
        for (const LineLook& l : looks) taken = taken || l == candidate;
        if (!taken) {
          look = candidate;
          break;
        }
      }
    }
    looks.push_back(look);
  }
  return looks;
}

// PolicyLooks as a lookup by name (heterogeneous: find() takes a string_view).
using LookMap = std::map<std::string, LineLook, std::less<>>;
inline LookMap PolicyLookMap(const std::vector<std::string>& policies) {
  const std::vector<LineLook> looks = PolicyLooks(policies);
  LookMap map;
  for (std::size_t i = 0; i < policies.size(); ++i) map.emplace(policies[i], looks[i]);
  return map;
}
// The look of `policy` in `map`, or PolicyLook(policy) for a name the map lacks.
inline LineLook LookOf(const LookMap& map, std::string_view policy) {
  const auto it = map.find(policy);
  return it == map.end() ? PolicyLook(policy) : it->second;
}

// Workload-class fills, for the classes in name order: one each for the eight classes IADeep
// measured (the default profile); past the eighth they repeat (the bar's tooltip still names its
// class).
inline constexpr std::array<std::string_view, 8> kClassColours = {
    "#FDBF6F", "#117733", "#A6CEE3", "#AA4499", "#FB9A99", "#A0522D", "#9E9AC8", "#BBCC33"};

inline std::string_view ClassColour(std::size_t i) {
  return kClassColours[i % kClassColours.size()];
}

// ` stroke="#RRGGBB"` and, for a dashed look, ` stroke-dasharray="..."`: the attributes of a line
// or path drawn in `look`.
inline std::string StrokeAttributes(const LineLook& look) {
  std::string s = " stroke=\"";
  s += look.colour;
  s += '"';
  if (!look.dash.pattern.empty()) {
    s += " stroke-dasharray=\"";
    s += look.dash.pattern;
    s += '"';
  }
  return s;
}

// A short sample of the line (inline SVG, 30 x 12 px) to key a policy in tables and lists.
inline std::string LineKey(const LineLook& look) {
  std::string s =
      "<svg class=\"key\" width=\"30\" height=\"12\" viewBox=\"0 0 30 12\" aria-hidden=\"true\">"
      "<line x1=\"1\" y1=\"6\" x2=\"29\" y2=\"6\" stroke-width=\"2.5\"";
  s += StrokeAttributes(look);
  s += "/></svg>";
  return s;
}

}  // namespace gpumux::sim::report_palette
