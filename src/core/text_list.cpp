#include "core/text_list.h"

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

}  // namespace ndt
