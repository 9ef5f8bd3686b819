// Docs that stay true: docs/config.md is what `ndtrain config` prints, and every
// ndtrain command the README shows names a subcommand, flags and config keys the binary
// accepts. A renamed flag or key fails here instead of in a user's terminal.
#include "../common/command.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace ndt {
namespace {

const std::string kNdtrain = std::string(NDT_BINARY_DIR) + "/ndtrain";

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::vector<std::string> words_of(const std::string& line) {
  std::vector<std::string> words;
  std::istringstream in(line);
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

// Catches: a key added, renamed or re-documented without regenerating docs/config.md.
TEST(DocsStayTrue, ConfigMdIsWhatNdtrainConfigPrints) {
  const testing::CommandResult r = testing::run_command(kNdtrain + " config");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<std::string> printed = lines_of(r.output);
  const std::vector<std::string> documented = lines_of(read_file(std::filesystem::path(NDT_SOURCE_DIR) / "docs/config.md"));
  for (size_t i = 0; i < std::max(printed.size(), documented.size()); ++i) {
    const std::string p = i < printed.size() ? printed[i] : "(nothing)", d = i < documented.size() ? documented[i] : "(nothing)";
    ASSERT_EQ(d, p) << "docs/config.md line " << i + 1
                    << " differs from `ndtrain config`; regenerate it: ./build/ndtrain config > docs/config.md";
  }
}

// Every line of a README code block that runs ndtrain, without its comment.
std::vector<std::string> readme_commands() {
  std::vector<std::string> commands;
  bool in_code = false;
  for (std::string line : lines_of(read_file(std::filesystem::path(NDT_SOURCE_DIR) / "README.md"))) {
    if (line.starts_with("```")) {
      in_code = !in_code;
      continue;
    }
    if (!in_code) continue;
    if (const size_t hash = line.find(" #"); hash != std::string::npos) line = line.substr(0, hash);
    if (line.find("ndtrain ") != std::string::npos && line.find("bash ") == std::string::npos) commands.push_back(line);
  }
  return commands;
}

// The subcommand a command names (the longest run of words after "ndtrain" that
// `ndtrain ... --help` knows), and the help text of it.
std::pair<std::string, std::string> subcommand_of(const std::vector<std::string>& words, size_t at) {
  std::string sub, help;
  for (size_t i = at + 1; i < words.size() && !words[i].starts_with("-") && !words[i].starts_with("["); ++i) {
    const std::string candidate = sub.empty() ? words[i] : sub + " " + words[i];
    const testing::CommandResult r = testing::run_command(kNdtrain + " " + candidate + " --help");
    if (r.exit_code != 0 || r.output.find("Usage: ") == std::string::npos ||
        r.output.find(candidate + " [OPTIONS]") == std::string::npos) {
      break;
    }
    sub = candidate, help = r.output;
  }
  return {sub, help};
}

// Catches: the README naming a subcommand, flag or --set key the binary refuses.
TEST(DocsStayTrue, EveryReadmeCommandIsAccepted) {
  const std::string keys = testing::run_command(kNdtrain + " config").output;
  const std::regex flag(R"(^\[?(--[a-z][a-z0-9-]*)[\]=]?)");
  int checked = 0;
  for (const std::string& command : readme_commands()) {
    const std::vector<std::string> words = words_of(command);
    size_t at = 0;
    while (at < words.size() && words[at] != "ndtrain" && !words[at].ends_with("/ndtrain")) ++at;
    if (at == words.size()) continue;
    const auto [sub, help] = subcommand_of(words, at);
    ASSERT_FALSE(sub.empty()) << "README: `" << command << "` names no subcommand ndtrain knows";
    for (size_t i = at + 1; i < words.size(); ++i) {
      std::smatch m;
      if (!std::regex_search(words[i], m, flag)) continue;
      EXPECT_NE(help.find(m[1].str() + " "), std::string::npos)
          << "README: `" << command << "`: ndtrain " << sub << " has no option " << m[1];
      if (m[1] == "--set" && i + 1 < words.size() && words[i + 1].find('=') != std::string::npos) {
        const std::string key = words[i + 1].substr(0, words[i + 1].find('='));
        if (key == "section.key") continue;  // the syntax line's placeholder
        EXPECT_NE(keys.find("| `" + key + "` |"), std::string::npos)
            << "README: `" << command << "` sets " << key << ", which is not a config key";
      }
    }
    ++checked;
  }
  EXPECT_GT(checked, 20) << "the README's commands were found";
}

}  // namespace
}  // namespace ndt
