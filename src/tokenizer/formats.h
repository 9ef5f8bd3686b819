// Readers of the tokenizer files other than tokenizer.json (hf_tokenizer_json.h):
// GPT-2's original encoder.json (token -> id, in the byte-level alphabet) with vocab.bpe
// (merges, one "a b" per line after a "#version" line), and tiktoken rank files (one
// "base64-bytes rank" per line; the pattern and special tokens from known_patterns.h).
#pragma once

#include "tokenizer/tokenizer.h"

#include <nlohmann/json.hpp>

#include <string>

namespace ndt::tok {

TokenizerSpec read_gpt2_files(const nlohmann::json& encoder, const std::string& encoder_path,
                              const std::string& vocab_bpe_path);
TokenizerSpec read_tiktoken_file(const std::string& path);

}  // namespace ndt::tok
