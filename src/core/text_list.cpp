#include "core/text_list.h"

#include "core/error.h"

#include <toml++/toml.h>

namespace ndt {

std::vector<std::string> split_trimmed(std::string_view text, char separator) {
  std::vector<std::string> items;
  size_t begin = 0;
  while (true) {
    const size_t end = std::min(text.find(separator, begin), text.size());
    std::string_view item = text.substr(begin, end - begin);
    const size_t first = item.find_first_not_of(" \t");
    item = first == std::string_view::npos ? std::string_view() : item.substr(first, item.find_last_not_of(" \t") - first + 1);
    items.emplace_back(item);
    if (end == text.size()) return items;
    begin = end + 1;
  }
}

std::vector<std::string> parse_string_list(std::string_view key, const std::string& text) {
  toml::table table;
  try {
    table = toml::parse("v = " + text);
  } catch (const toml::parse_error& e) {
    fail("{} = {} is not a TOML list of strings: {}", key, text, e.description());
  }
  const toml::array* list = table["v"].as_array();
  NDT_CHECK(list != nullptr, "{} = {} is not a list (e.g. [\"a\", \"b\"])", key, text);
  std::vector<std::string> items;
  for (const toml::node& node : *list) {
    const auto* s = node.as_string();
    NDT_CHECK(s != nullptr && !s->get().empty(), "{} = {}: each item is a non-empty string", key, text);
    items.push_back(s->get());
  }
  return items;
}

std::string string_list_text(const std::vector<std::string>& items) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) {
    out += i ? ", \"" : "\"";
    for (char ch : items[i]) out += ch == '"' || ch == '\\' ? std::string("\\") + ch : std::string(1, ch);
    out += '"';
  }
  return out + "]";
}

}  // namespace ndt
