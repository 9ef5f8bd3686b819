#include "core/error.h"
#include "core/input_file.h"
#include "tokenizer/formats.h"
#include "tokenizer/hf_tokenizer_json.h"

#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;

namespace ndt::tok {

namespace {

bool starts_with_brace(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char c = 0;
  while (in.get(c)) {
    if (!std::isspace(static_cast<unsigned char>(c))) return c == '{';
  }
  return false;
}

Tokenizer load_file(const std::string& path) {
  const std::string problem = input_file_problem(path);
  NDT_CHECK(problem.empty(), "tokenizer file {} {}", path, problem);
  if (!starts_with_brace(path)) return Tokenizer(read_tiktoken_file(path));
  const nlohmann::json root = read_json_file(path);
  if (root.is_object() && root.contains("model") && root["model"].is_object()) return Tokenizer(read_hf_tokenizer_json(root, path));
  // A flat token -> id object: GPT-2's encoder.json, whose merges are in vocab.bpe beside it.
  const std::string merges = (fs::path(path).parent_path() / "vocab.bpe").string();
  NDT_CHECK(fs::exists(merges), "tokenizer file {} has no \"model\" (so it is not a tokenizer.json), and there is no "
            "vocab.bpe beside it (so it is not GPT-2's encoder.json either)", path);
  return Tokenizer(read_gpt2_files(root, path, merges));
}

}  // namespace

Tokenizer load_tokenizer(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    for (const char* name : {"tokenizer.json", "encoder.json"}) {
      const fs::path file = fs::path(path) / name;
      if (fs::exists(file)) return load_file(file.string());
    }
    fail("tokenizer folder {} holds neither a tokenizer.json nor an encoder.json", path);
  }
  NDT_CHECK(fs::exists(path, ec), "tokenizer file {} does not exist", path);
  return load_file(path);
}

}  // namespace ndt::tok
