// `ndtrain generate`: samples a continuation of a prompt from the model of a checkpoint
// or a Hugging Face model folder (train/generate.h), in one process. Text goes through the
// run's tokenizer (--tokenizer, else the one recorded beside the run's training shards or
// the folder's tokenizer.json, else bytes: vocab_size 256);
// with --raw-tokens the prompt and the output are comma-separated token ids. A run trained
// with data.document_boundaries generates with them: a separator starts a new document.
#include "apps/ndtrain/commands.h"
#include "core/error.h"
#include "core/text_list.h"
#include "data/run_data.h"
#include "interchange/hf_folder.h"
#include "interchange/hf_slice_reader.h"
#include "train/model_checkpoint.h"
#include "train/run_tokenizer.h"

#include <nlohmann/json.hpp>


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

// The token documents started at in training (data.document_boundaries), which generation
// applies too; nullopt when the run had none.
std::optional<int32_t> run_document_separator(const nlohmann::json& data) {
  if (!data.is_object() || !data.contains("document_separator") || !data["document_separator"].is_number_integer()) {
    return std::nullopt;
  }
  const int32_t separator = data["document_separator"].get<int32_t>();
  return separator >= 0 ? std::optional<int32_t>(separator) : std::nullopt;
}

// The run's text codec: --tokenizer, else the record beside the training shards the
// checkpoint's state names (when they are still there), else bytes.
TextCodec run_codec(const GenerateOptions& o, const nlohmann::json& data) {
  if (!o.tokenizer.empty()) return TextCodec(o.tokenizer);
  const std::filesystem::path folder_tokenizer = std::filesystem::path(o.checkpoint) / "tokenizer.json";
  if (is_hf_folder(o.checkpoint) && std::filesystem::exists(folder_tokenizer)) return TextCodec(folder_tokenizer.string());
  if (const std::optional<std::string> file = recorded_run_tokenizer(data)) return TextCodec(*file);
  return TextCodec();
}

}  // namespace

int run_generate(const GenerateOptions& o) {
  NDT_CHECK(!launched_by_mpi(), "generate runs in one process: start it without mpirun");
  NDT_CHECK(!o.prompt.empty(), "--prompt must not be empty");
  NDT_CHECK(o.sample.tokens >= 0, "--tokens {} must not be negative", o.sample.tokens);
  NDT_CHECK(std::isfinite(o.sample.temperature) && o.sample.temperature >= 0,
            "--temperature {} must be 0 (greedy) or positive", o.sample.temperature);
  NDT_CHECK(o.sample.top_k >= 0, "--top-k {} must be 0 (no cut) or positive", o.sample.top_k);
  const bool folder = is_hf_folder(o.checkpoint);
  const std::filesystem::path dir = folder ? std::filesystem::path(o.checkpoint) : resolve_checkpoint(o.checkpoint);
  const ModelState state = folder ? read_hf_folder_model(open_hf_folder(o.checkpoint)) : read_model_checkpoint(dir);
  // ndtrain never saves a non-finite state, but a checkpoint from elsewhere (or from an
  // earlier ndtrain) may hold one: its text would be noise, so say so instead.
  for (const auto& [name, values] : state.tensors) {
    const auto bad = std::find_if(values.begin(), values.end(), [](float v) { return !std::isfinite(v); });
    NDT_CHECK(bad == values.end(), "checkpoint {}: tensor {} holds {} at element {}: a model with non-finite weights "
              "cannot generate text", dir.string(), name, *bad, bad - values.begin());
  }
  const int vocab = state.config.vocab_size;
  const nlohmann::json data = folder ? nlohmann::json() : checkpoint_data_state(dir);
  const TextCodec codec = o.raw_tokens ? TextCodec() : run_codec(o, data);
  NDT_CHECK(o.raw_tokens || codec.tokenizer() != nullptr || vocab == 256,
            "checkpoint {} has vocab_size {}, but no tokenizer is recorded beside its training shards: pass "
            "--tokenizer FILE, or --raw-tokens to give the prompt and get the output as token ids",
            dir.string(), vocab);
  NDT_CHECK(o.raw_tokens || codec.vocab_size() <= vocab,
            "checkpoint {} has vocab_size {}, smaller than the tokenizer's vocabulary {} ({})", dir.string(), vocab,
            codec.vocab_size(), codec.describe());

  const std::vector<int32_t> prompt = o.raw_tokens ? parse_token_ids(o.prompt, vocab) : codec.encode(o.prompt);
  Transformer model(state.config, 0);
  load_into(model, state);
  model.set_document_separator(run_document_separator(data));
  const std::vector<int32_t> continuation = generate(model, prompt, o.sample);
  if (o.raw_tokens) {
    std::vector<int32_t> all = prompt;
    all.insert(all.end(), continuation.begin(), continuation.end());
    fmt::print("{}\n", fmt::join(all, ","));
  } else {
    fmt::print("{}{}\n", o.prompt, codec.decode(continuation));
  }
  return 0;
}

}  // namespace ndt
