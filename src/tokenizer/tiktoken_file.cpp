#include "core/error.h"
#include "core/input_file.h"
#include "tokenizer/formats.h"
#include "tokenizer/known_patterns.h"

#include <fstream>

namespace ndt::tok {

namespace {

int base64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+' || c == '-') return 62;
  if (c == '/' || c == '_') return 63;
  return -1;
}

std::optional<std::string> base64_decode(std::string_view text) {
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : text) {
    if (c == '=') break;
    const int v = base64_value(c);
    if (v < 0) return std::nullopt;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xFF);
    }
  }
  return out;
}

}  // namespace

TokenizerSpec read_tiktoken_file(const std::string& path) {
  const std::string problem = input_file_problem(path);
  NDT_CHECK(problem.empty(), "tokenizer file {} {}", path, problem);
  TokenizerSpec spec;
  spec.kind = "tiktoken";
  spec.files = {path};
  std::ifstream in(path, std::ios::binary);
  std::string line;
  for (size_t line_no = 1; std::getline(in, line); ++line_no) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    const size_t space = line.find(' ');
    const std::optional<std::string> bytes = space == std::string::npos ? std::nullopt : base64_decode(line.substr(0, space));
    int64_t rank = -1;
    try {
      size_t used = 0;
      if (space != std::string::npos) rank = std::stoll(line.substr(space + 1), &used);
      if (used != line.size() - space - 1) rank = -1;
    } catch (const std::exception&) {
      rank = -1;
    }
    NDT_CHECK(bytes && !bytes->empty() && rank >= 0 && rank < (1 << 24),
              "tokenizer file {} line {}: \"{}\" is not \"<base64 token> <rank>\"", path, line_no,
              line.substr(0, 80));
    if (static_cast<size_t>(rank) >= spec.tokens.size()) spec.tokens.resize(static_cast<size_t>(rank) + 1);
    NDT_CHECK(spec.tokens[static_cast<size_t>(rank)].empty(), "tokenizer file {} line {}: rank {} given twice", path,
              line_no, rank);
    spec.tokens[static_cast<size_t>(rank)] = *bytes;
  }
  NDT_CHECK(!spec.tokens.empty(), "tokenizer file {} holds no ranks", path);
  const KnownEncoding known = known_encoding_for_ranks(spec.tokens.size(), path);
  spec.kind = "tiktoken " + known.name;
  spec.rank_merges = true;
  spec.ignore_merges = true;
  spec.stages.push_back({"Split", false, std::make_shared<Regex>(known.pattern, path)});
  spec.added = known.specials;
  spec.eos = known.eos;
  spec.bos = known.bos;
  return spec;
}

}  // namespace ndt::tok
