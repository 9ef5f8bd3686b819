// Lists a user types in one value ("2,2", "2, 2", "gpipe, 1f1b", "40: 2"): items split at
// a separator with the spaces and tabs around each trimmed, so a space after a comma is
// never what makes a value wrong. Shared by every parser of such a value.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ndt {

// `text` split at `separator`, each item trimmed of spaces and tabs; empty items are
// kept (the caller's check names them). "" gives one empty item.
std::vector<std::string> split_trimmed(std::string_view text, char separator = ',');

// A TOML list of non-empty strings (["wq", "wv"]) as a config file gives it; throws
// ndt::Error naming `key` and the text. string_list_text writes one back.
std::vector<std::string> parse_string_list(std::string_view key, const std::string& text);
std::string string_list_text(const std::vector<std::string>& items);

}  // namespace ndt
