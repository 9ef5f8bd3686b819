// `ndtrain generate`: samples a continuation of a prompt from the model of a checkpoint
// (train/generate.h), in one process. Text goes through the byte-level tokenizer, so
// the model must have vocab_size 256; with --raw-tokens the prompt and the output are
// comma-separated token ids, for any vocabulary.
#include "apps/ndtrain/commands.h"
#include "core/error.h"
#include "core/text_list.h"
#include "train/model_checkpoint.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <charconv>
#include <algorithm>
#include <cmath>

namespace ndt {

namespace {

// "1, 2,3" -> {1, 2, 3}; every id must lie in [0, vocab).
std::vector<int32_t> parse_token_ids(const std::string& text, int vocab) {
  std::vector<int32_t> ids;
  for (const std::string& item : split_trimmed(text)) {
    int32_t id = -1;
    auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), id);
    NDT_CHECK(ec == std::errc() && ptr == item.data() + item.size() && id >= 0 && id < vocab,
              "--prompt item '{}' is not a token id in [0, {})", item, vocab);
    ids.push_back(id);
  }
  return ids;
}

}  // namespace

int run_generate(const GenerateOptions& o) {
  NDT_CHECK(!launched_by_mpi(), "generate runs in one process: start it without mpirun");
  NDT_CHECK(!o.prompt.empty(), "--prompt must not be empty");
  NDT_CHECK(o.sample.tokens >= 0, "--tokens {} must not be negative", o.sample.tokens);
  NDT_CHECK(std::isfinite(o.sample.temperature) && o.sample.temperature >= 0,
            "--temperature {} must be 0 (greedy) or positive", o.sample.temperature);
  NDT_CHECK(o.sample.top_k >= 0, "--top-k {} must be 0 (no cut) or positive", o.sample.top_k);
  const std::filesystem::path dir = resolve_checkpoint(o.checkpoint);
  const ModelState state = read_model_checkpoint(dir);
  // ndtrain never saves a non-finite state, but a checkpoint from elsewhere (or from an
  // earlier ndtrain) may hold one: its text would be noise, so say so instead.
  for (const auto& [name, values] : state.tensors) {
    const auto bad = std::find_if(values.begin(), values.end(), [](float v) { return !std::isfinite(v); });
    NDT_CHECK(bad == values.end(), "checkpoint {}: tensor {} holds {} at element {}: a model with non-finite weights "
              "cannot generate text", dir.string(), name, *bad, bad - values.begin());
  }
  const int vocab = state.config.vocab_size;
  NDT_CHECK(o.raw_tokens || vocab == 256,
            "checkpoint {} has vocab_size {}, but generate's tokenizer is byte-level (vocab 256): pass "
            "--raw-tokens to give the prompt and get the output as token ids",
            dir.string(), vocab);

  const std::vector<int32_t> prompt = o.raw_tokens ? parse_token_ids(o.prompt, vocab) : bytes_to_tokens(o.prompt);
  Transformer model(state.config, 0);
  load_into(model, state);
  const std::vector<int32_t> continuation = generate(model, prompt, o.sample);
  if (o.raw_tokens) {
    std::vector<int32_t> all = prompt;
    all.insert(all.end(), continuation.begin(), continuation.end());
    fmt::print("{}\n", fmt::join(all, ","));
  } else {
    fmt::print("{}{}\n", o.prompt, tokens_to_bytes(continuation));
  }
  return 0;
}

}  // namespace ndt
