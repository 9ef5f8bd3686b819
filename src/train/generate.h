// Autoregressive sampling with temperature and top-k, reproducible from a seed.
#pragma once

#include "model/transformer.h"

#include <cstdint>
#include <string>
#include <vector>

namespace ndt {

struct SampleOptions {
  int tokens = 100;
  float temperature = 0.8f;  // 0: greedy
  int top_k = 40;            // 0: no cut
  uint64_t seed = 0;
};

// Continues `prompt` (at least one token) by options.tokens tokens; returns only the
// new tokens. The context is cropped to the model's max_seq_len.
std::vector<int32_t> generate(Transformer& model, const std::vector<int32_t>& prompt,
                              const SampleOptions& options);

// Picks a token from logits (modified in place) with the given options; u in [0, 1).
int32_t sample_token(float* logits, int vocab, float temperature, int top_k, float u);

// Byte-level helpers: text <-> tokens (vocab 256).
std::vector<int32_t> bytes_to_tokens(const std::string& text);
std::string tokens_to_bytes(const std::vector<int32_t>& tokens);

}  // namespace ndt
