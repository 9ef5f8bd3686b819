// The split patterns and special tokens of the published encodings whose files do not
// carry them: GPT-2's pattern (which a ByteLevel pre-tokenizer with use_regex applies,
// and encoder.json + vocab.bpe imply), and what a tiktoken rank file of a known size
// (GPT-2's r50k, cl100k, Llama 3's 128,000 ranks) is used with.
#pragma once

#include "tokenizer/tokenizer.h"

#include <string>
#include <vector>

namespace ndt::tok {

extern const char* const kGpt2Pattern;

struct KnownEncoding {
  std::string name;
  std::string pattern;
  std::vector<AddedToken> specials;
  std::string eos, bos;
};

// The encoding a tiktoken file of `ranks` ranks is; throws naming `path` and the count
// for a size none is known for.
KnownEncoding known_encoding_for_ranks(size_t ranks, const std::string& path);

}  // namespace ndt::tok
