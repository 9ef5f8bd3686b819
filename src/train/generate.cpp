#include "train/generate.h"

#include "core/error.h"
#include "core/rng.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace ndt {

int32_t sample_token(float* logits, int vocab, float temperature, int top_k, float u) {
  if (temperature <= 0) return static_cast<int32_t>(std::max_element(logits, logits + vocab) - logits);
  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  const int k = top_k > 0 ? std::min(top_k, vocab) : vocab;
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  const float max_logit = logits[order[0]];
  std::vector<double> probs(k);
  double total = 0;
  for (int i = 0; i < k; ++i) total += probs[i] = std::exp((logits[order[i]] - max_logit) / temperature);
  double target = u * total, cumulative = 0;
  for (int i = 0; i < k; ++i) {
    cumulative += probs[i];
    if (target < cumulative) return order[i];
  }
  return order[k - 1];
}

std::vector<int32_t> generate(Transformer& model, const std::vector<int32_t>& prompt,
                              const SampleOptions& options) {
  NDT_CHECK(!prompt.empty(), "sample.prompt must not be empty");
  const int vocab = model.config().vocab_size;
  const int max_t = model.config().max_seq_len;
  std::vector<int32_t> context = prompt, out;
  std::vector<float> logits(vocab);
  const uint64_t stream = hash_name("sample");
  for (int i = 0; i < options.tokens; ++i) {
    const int t = std::min<int>(static_cast<int>(context.size()), max_t);
    model.next_token_logits(context.data() + context.size() - t, t, logits.data());
    int32_t next = sample_token(logits.data(), vocab, options.temperature, options.top_k,
                                uniform_at(options.seed, stream, i));
    context.push_back(next);
    out.push_back(next);
  }
  return out;
}

std::vector<int32_t> bytes_to_tokens(const std::string& text) {
  std::vector<int32_t> tokens;
  for (unsigned char ch : text) tokens.push_back(ch);
  return tokens;
}

std::string tokens_to_bytes(const std::vector<int32_t>& tokens) {
  std::string text;
  for (int32_t t : tokens) text.push_back(static_cast<char>(t & 0xFF));
  return text;
}

}  // namespace ndt
