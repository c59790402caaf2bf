// Kubernetes manifests as text, as kubectl reads and writes them: multi-document YAML, one JSON
// object, or a JSON List ({"kind":"List","items":[...]}), read into JSON objects and written back
// as YAML or as a List. Pure functions over strings and streams; no I/O of their own.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "gpumux/core/result.h"

namespace gpumux::runs {

// The most objects one manifest text may hold (kubectl has no limit; this bounds memory).
inline constexpr std::size_t kMaxManifestObjects = 1'000'000;

// The objects of `text`, in order. JSON when the text is one JSON value (an object, a List or an
// array of objects), else YAML documents separated by lines "---" as kubectl splits them (empty
// documents are skipped; each document is read alone, which also avoids yaml-cpp 0.7's LoadAll
// looping forever on a document of ","). Text that is not UTF-8 is refused by line. A
// List (any kind ending in "List" with an "items" array) is replaced by its items. YAML follows
// the 1.2 core schema (plain true/false/null and numbers are typed, quoted scalars are strings;
// yes/no stay strings); a key repeated in one mapping is an error, as in Kubernetes' strict
// decoding, and so is a key over 1000 bytes as written (quoted and escaped: YAML cannot write a
// longer implicit key; no Kubernetes key comes near). Every object must be a mapping. Errors name
// `source`, and for YAML the line:
//   "jobs.yaml:12:3: document 2: ..." or "jobs.yaml: document 3 is a list, not an object".
core::Result<std::vector<nlohmann::json>> ParseManifests(std::string_view text,
                                                         const std::string& source);

// One object as a YAML block mapping (no "---"): keys in the object's order, strings quoted
// whenever a plain scalar would read back as something else (a number, a bool, null, a date) or
// needs escaping, e.g. `gpumux.io/gpu-mem: "8"`. ToYaml(ParseManifests(y)) reads back equal.
std::string ToYaml(const nlohmann::json& object);
// Every object as a YAML document, each starting with "---".
void WriteYaml(std::ostream& out, const std::vector<nlohmann::json>& objects);
// {"apiVersion":"v1","kind":"List","items":[...]}, indented by 2, ending with a newline.
void WriteJsonList(std::ostream& out, const std::vector<nlohmann::json>& objects);

}  // namespace gpumux::runs
