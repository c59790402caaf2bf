// JSON text by hand: string literals where a document is assembled as text (log lines, the
// extender's replies that carry kube-scheduler's own items back verbatim), and the JSON
// library's errors worded for people.
#pragma once

#include <string>
#include <string_view>

namespace gpumux::core {

// A JSON string's content: `text` with `"`, `\` and control characters (and DEL) escaped as JSON
// requires, and invalid UTF-8 replaced by U+FFFD, so that the result always parses.
std::string JsonEscape(std::string_view text);

// Appends `text` as a JSON string literal (quoted, escaped as JsonEscape does).
void AppendJsonString(std::string& out, std::string_view text);

// A JSON library's error message for people: nlohmann's "[json.exception.parse_error.101] parse
// error at line 1, column 3: syntax error ..." becomes "line 1, column 3: syntax error ...",
// "[json.exception.type_error.302] type must be string, but is number" becomes "type must be
// string, but is number". Other text is returned as it is.
std::string JsonErrorText(std::string_view what);

}  // namespace gpumux::core
