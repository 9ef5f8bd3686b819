// Reading a Hugging Face tokenizer.json into a TokenizerSpec. Built: model BPE (merges
// as "a b" strings or [a, b] pairs, ignore_merges), no normalizer, pre-tokenizers
// ByteLevel (add_prefix_space, use_regex: GPT-2's pattern), Split with a Regex or
// String pattern and behavior Isolated, and Sequence of these; decoder ByteLevel;
// post-processor ByteLevel, TemplateProcessing (single = special tokens around $A) or a
// Sequence of them; added tokens without lstrip / rstrip / single_word. Everything else
// is refused by its type name and the file.
#pragma once

#include "tokenizer/tokenizer.h"

#include <nlohmann/json.hpp>

#include <string>

namespace ndt::tok {

TokenizerSpec read_hf_tokenizer_json(const nlohmann::json& root, const std::string& path);

// The JSON in a file; throws naming the file, the byte and the reason when it is not JSON.
nlohmann::json read_json_file(const std::string& path);

}  // namespace ndt::tok
