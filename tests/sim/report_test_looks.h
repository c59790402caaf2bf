// Test helper for the report pages: reads back which look (stroke colour and dash pattern) a
// page gives each policy in its charts, legends and table keys, so that tests can assert the
// properties of the palette (one look per policy, the same everywhere, distinct between
// policies) rather than pixels or byte offsets.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "src/sim/report_palette.h"

namespace gpumux::sim::testing_looks {

struct SeenLook {
  std::string policy;
  std::string colour;
  std::string dash;   // "" for a solid line
  std::string place;  // "curve", "legend" or "key"
};

// Every policy look the page shows:
//   curve   a chart's <path ... stroke=...><title>policy</title>
//   legend  a legend sample <line .../> followed by its <text>policy...</text>
//   key     a table's or list's <svg class="key"> sample followed by the policy's name.
// The study's published-mean paths (class "study", titled "policy: ...") are not policy curves.
inline std::vector<SeenLook> SeenLooks(const std::string& html) {
  static const std::string kLook =
      R"re(stroke="(#[0-9A-Fa-f]{6})"(?: stroke-dasharray="([^"]*)")?)re";
  static const std::vector<std::pair<std::string, std::regex>> kPlaces = {
      {"curve", std::regex("<path d=\"[^\"]*\" " + kLook + "><title>([^<:]+)</title>")},
      {"legend", std::regex(kLook + R"re(/>\n<text x="[^"]*" y="[^"]*">([^< ]+))re")},
      {"key", std::regex(kLook + R"re(/></svg>(?:<b>)?([^< ]+))re")},
  };
  std::vector<SeenLook> seen;
  for (const auto& [place, re] : kPlaces) {
    for (auto it = std::sregex_iterator(html.begin(), html.end(), re); it != std::sregex_iterator();
         ++it) {
      seen.push_back({(*it)[3].str(), (*it)[1].str(), (*it)[2].str(), place});
    }
  }
  return seen;
}

// The places in which each policy was seen.
inline std::map<std::string, std::set<std::string>> PlacesByPolicy(
    const std::vector<SeenLook>& seen) {
  std::map<std::string, std::set<std::string>> out;
  for (const auto& s : seen) out[s.policy].insert(s.place);
  return out;
}

// "colour dash" of a palette look, in the form SeenLooks reads.
inline std::string Text(const report_palette::LineLook& look) {
  return std::string(look.colour) + " " + std::string(look.dash.pattern);
}
inline std::string Text(const SeenLook& s) { return s.colour + " " + s.dash; }

// Expects `html` to draw each of `policies` as a curve, a legend entry and a key, every time in
// report_palette::PolicyLook(policy), and no two policies in one look.
inline void ExpectOneLookPerPolicy(const std::string& html,
                                   const std::vector<std::string>& policies) {
  const auto seen = SeenLooks(html);
  const auto places = PlacesByPolicy(seen);
  for (const auto& p : policies) {
    EXPECT_EQ(places.count(p) ? places.at(p) : std::set<std::string>{},
              (std::set<std::string>{"curve", "key", "legend"}))
        << p;
  }
  std::map<std::string, std::string> owner;  // look -> policy
  for (const auto& s : seen) {
    EXPECT_EQ(Text(s), Text(report_palette::PolicyLook(s.policy))) << s.policy << " " << s.place;
    const auto [it, fresh] = owner.emplace(Text(s), s.policy);
    EXPECT_EQ(it->second, s.policy) << "two policies in one look: " << it->first;
  }
  EXPECT_EQ(owner.size(), policies.size());
}

}  // namespace gpumux::sim::testing_looks
