// Text from outside (a file's line, a value a user typed) made safe to print in a
// message: a control character would otherwise be obeyed by the terminal (an escape
// sequence recolouring it, moving the cursor, clearing the screen) instead of shown.
#pragma once

#include <string>
#include <string_view>

namespace ndt {

// `text` with every control character (below 0x20, and 0x7f) written as \xNN; with
// keep_newlines, '\n' and '\t' stay as they are (a whole message's lines). Bytes of
// 0x80 and above (UTF-8) are kept.
std::string printable_text(std::string_view text, bool keep_newlines = false);

}  // namespace ndt
