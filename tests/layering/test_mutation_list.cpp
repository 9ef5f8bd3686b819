// scripts/mutations.txt (the mutation study of scripts/mutate.sh) stays applicable: every
// mutation's text occurs exactly once in its file, so a refactor that moves or rewrites
// the code a mutation targets fails here rather than leaving a study that silently
// reports "the list is wrong" for it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

std::string read(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<std::string> split(const std::string& line, const std::string& separator) {
  std::vector<std::string> fields;
  size_t begin = 0;
  for (size_t at; (at = line.find(separator, begin)) != std::string::npos; begin = at + separator.size()) {
    fields.push_back(line.substr(begin, at - begin));
  }
  fields.push_back(line.substr(begin));
  return fields;
}

// "\n" in the list stands for a newline.
std::string unescape(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    const bool newline = text.compare(i, 2, "\\n") == 0;
    out += newline ? '\n' : text[i];
    i += newline;
  }
  return out;
}

size_t occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(MutationList, EveryMutationsTextOccursOnceInItsFile) {
  const fs::path root(NDT_SOURCE_DIR);
  std::istringstream list(read(root / "scripts/mutations.txt"));
  int checked = 0;
  for (std::string line; std::getline(list, line);) {
    if (line.empty() || line.starts_with("#")) continue;
    const std::vector<std::string> f = split(line, " @@ ");
    ASSERT_EQ(f.size(), 5u) << "not name @@ file @@ text @@ replacement @@ tests: " << line;
    ASSERT_TRUE(fs::exists(root / f[1])) << f[0] << ": " << f[1] << " does not exist";
    EXPECT_EQ(occurrences(read(root / f[1]), unescape(f[2])), 1u)
        << f[0] << ": its text must occur exactly once in " << f[1] << ": " << f[2];
    ++checked;
  }
  EXPECT_GT(checked, 50);
}

}  // namespace
