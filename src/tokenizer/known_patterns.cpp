#include "tokenizer/known_patterns.h"

#include "core/error.h"

#include <fmt/format.h>

namespace ndt::tok {

const char* const kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

namespace {

const char* const kCl100kPattern =
    R"('(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s)";
const char* const kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Llama 3's 256 special tokens after its 128,000 ranks (Meta's tokenizer.py order).
std::vector<AddedToken> llama3_specials() {
  std::vector<std::string> names = {"<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                                    "<|reserved_special_token_1|>", "<|reserved_special_token_2|>",
                                    "<|reserved_special_token_3|>", "<|start_header_id|>", "<|end_header_id|>",
                                    "<|reserved_special_token_4|>", "<|eot_id|>"};
  for (int i = 5; i < 251; ++i) names.push_back(fmt::format("<|reserved_special_token_{}|>", i));
  std::vector<AddedToken> out;
  for (size_t i = 0; i < names.size(); ++i) out.push_back({names[i], static_cast<int32_t>(128000 + i), true});
  return out;
}

}  // namespace

KnownEncoding known_encoding_for_ranks(size_t ranks, const std::string& path) {
  if (ranks == 50256) return {"r50k_base (GPT-2)", kGpt2Pattern, {{"<|endoftext|>", 50256, true}}, "<|endoftext|>", ""};
  if (ranks == 100256) {
    return {"cl100k_base",
            kCl100kPattern,
            {{"<|endoftext|>", 100257, true},
             {"<|fim_prefix|>", 100258, true},
             {"<|fim_middle|>", 100259, true},
             {"<|fim_suffix|>", 100260, true},
             {"<|endofprompt|>", 100276, true}},
            "<|endoftext|>",
            ""};
  }
  if (ranks == 128000) return {"Llama 3", kLlama3Pattern, llama3_specials(), "<|end_of_text|>", "<|begin_of_text|>"};
  fail("tiktoken file {} holds {} ranks, which is none of the encodings whose split pattern and special tokens "
       "ndtrain knows (r50k/GPT-2: 50256, cl100k: 100256, Llama 3: 128000); a tiktoken file does not carry them, so "
       "use the model's tokenizer.json instead",
       path, ranks);
}

}  // namespace ndt::tok
