// Bytes from an input shown to people in a message: a binary file or a stray control character
// must not reach the terminal as it is (it can clear the screen or forge a log line).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace gpumux::core {

// `text` with control characters, DEL and bytes outside ASCII written as \xNN (a backslash as
// \\), cut after `max` characters with "..." when longer. Printable ASCII is kept as it is.
std::string Shown(std::string_view text, std::size_t max = 120);

// Whether `text` looks like binary data rather than text: a NUL byte, or more than a tenth of
// its bytes control characters other than tab, CR and LF.
bool LooksBinary(std::string_view text);

}  // namespace gpumux::core
