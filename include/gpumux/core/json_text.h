// JSON text by hand: string literals where a document is assembled as text (log lines, the
// extender's replies that carry kube-scheduler's own items back verbatim), and the JSON
// library's errors worded for people.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace gpumux::core {

// A JSON string's content: `text` with `"`, `\` and control characters (and DEL) escaped as JSON
// requires, and invalid UTF-8 replaced by U+FFFD, so that the result always parses.
std::string JsonEscape(std::string_view text);

// Appends `text` as a JSON string literal (quoted, escaped as JsonEscape does).
void AppendJsonString(std::string& out, std::string_view text);

// Whether `text` is valid UTF-8 without control characters (C0, DEL): what a name that ends up
// in JSON, a log line or a terminal may hold (a GPU's UUID or model from a file, an id).
bool IsUtf8Text(std::string_view text);

// The longest start of valid UTF-8 `text` of at most `max_bytes` that does not cut a sequence
// (a JSON library refuses to write half a character). For invalid input it only promises not
// to cut after a lead byte.
std::string_view Utf8Prefix(std::string_view text, std::size_t max_bytes);

// A JSON library's error message for people: nlohmann's "[json.exception.parse_error.101] parse
// error at line 1, column 3: syntax error ..." becomes "line 1, column 3: syntax error ...",
// "[json.exception.type_error.302] type must be string, but is number" becomes "type must be
// string, but is number". Other text is returned as it is.
std::string JsonErrorText(std::string_view what);

}  // namespace gpumux::core
