#include "core/error.h"
#include "core/input_file.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/formats.h"
#include "tokenizer/known_patterns.h"

#include <fstream>
#include <unordered_map>

namespace ndt::tok {

TokenizerSpec read_gpt2_files(const nlohmann::json& encoder, const std::string& encoder_path,
                              const std::string& vocab_bpe_path) {
  TokenizerSpec spec;
  spec.kind = "gpt2 encoder.json + vocab.bpe";
  spec.files = {encoder_path, vocab_bpe_path};
  NDT_CHECK(encoder.is_object() && !encoder.empty(), "tokenizer file {} is not an object of token -> id", encoder_path);
  int32_t max_id = -1;
  for (const auto& [text, id] : encoder.items()) {
    NDT_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < INT32_MAX,
              "tokenizer file {}: token \"{}\" has id {}, not a non-negative integer", encoder_path, text, id.dump());
    max_id = std::max(max_id, id.get<int32_t>());
  }
  spec.tokens.assign(static_cast<size_t>(max_id + 1), std::string());
  std::unordered_map<std::string, int32_t> ids;
  for (const auto& [text, id] : encoder.items()) {
    if (text == "<|endoftext|>") {
      spec.added.push_back({text, id.get<int32_t>(), true});
      continue;
    }
    std::optional<std::string> bytes = byte_level_decode(text);
    NDT_CHECK(bytes.has_value(), "tokenizer file {}: token \"{}\" is not in the byte-level alphabet", encoder_path, text);
    ids.emplace(*bytes, id.get<int32_t>());
    spec.tokens[static_cast<size_t>(id.get<int32_t>())] = std::move(*bytes);
  }
  const std::string problem = input_file_problem(vocab_bpe_path);
  NDT_CHECK(problem.empty(), "tokenizer file {} (the merges beside {}) {}", vocab_bpe_path, encoder_path, problem);
  std::ifstream in(vocab_bpe_path, std::ios::binary);
  std::string line;
  for (size_t line_no = 1; std::getline(in, line); ++line_no) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (line_no == 1 && line.rfind("#version", 0) == 0)) continue;
    const size_t space = line.find(' ', 1);
    NDT_CHECK(space != std::string::npos, "tokenizer file {} line {}: \"{}\" is not two tokens separated by a space",
              vocab_bpe_path, line_no, line);
    int32_t found[3];
    const std::string parts[3] = {line.substr(0, space), line.substr(space + 1),
                                  line.substr(0, space) + line.substr(space + 1)};
    for (int k = 0; k < 3; ++k) {
      const std::optional<std::string> bytes = byte_level_decode(parts[k]);
      const auto it = bytes ? ids.find(*bytes) : ids.end();
      NDT_CHECK(it != ids.end(), "tokenizer file {} line {}: merge \"{}\" names token \"{}\", which {} does not hold",
                vocab_bpe_path, line_no, line, parts[k], encoder_path);
      found[k] = it->second;
    }
    spec.merges.emplace_back(found[0], found[1]);
  }
  spec.stages.push_back({"ByteLevel", false, std::make_shared<Regex>(kGpt2Pattern, encoder_path)});
  if (!spec.added.empty()) spec.eos = "<|endoftext|>";
  return spec;
}

}  // namespace ndt::tok
