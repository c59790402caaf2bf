// JSON string literals written by hand, where a document is assembled as text (log lines, the
// extender's replies that carry kube-scheduler's own items back verbatim).
#pragma once

#include <string>
#include <string_view>

namespace gpumux::core {

// A JSON string's content: `text` with `"`, `\` and control characters (and DEL) escaped as JSON
// requires, and invalid UTF-8 replaced by U+FFFD, so that the result always parses.
std::string JsonEscape(std::string_view text);

// Appends `text` as a JSON string literal (quoted, escaped as JsonEscape does).
void AppendJsonString(std::string& out, std::string_view text);

}  // namespace gpumux::core
