#include "gpumux/core/log.h"

#include "gpumux/core/json_text.h"

namespace gpumux::core {

std::string RenderLogFields(std::span<const LogField> fields) {
  std::string out;
  for (const LogField& f : fields) {
    out += ' ';
    out += f.key;
    out += '=';
    const bool plain = !f.value.empty() && f.value.find_first_of(" \"=\\") == std::string::npos &&
                       JsonEscape(f.value) == f.value;
    if (plain) {
      out += f.value;
    } else {
      out += '"';
      out += JsonEscape(f.value);
      out += '"';
    }
  }
  return out;
}

}  // namespace gpumux::core
