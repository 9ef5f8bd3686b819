#include "core/printable.h"

#include <fmt/format.h>

namespace ndt {

std::string printable_text(std::string_view text, bool keep_newlines) {
  std::string out;
  out.reserve(text.size());
  for (const char ch : text) {
    const auto byte = static_cast<unsigned char>(ch);
    const bool control = byte < 0x20 || byte == 0x7f;
    if (control && !(keep_newlines && (ch == '\n' || ch == '\t'))) {
      out += fmt::format("\\x{:02x}", byte);
    } else {
      out += ch;
    }
  }
  return out;
}

}  // namespace ndt
