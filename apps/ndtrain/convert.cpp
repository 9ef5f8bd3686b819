// `ndtrain convert`: moves a whole model between the formats ndtrain reads and writes,
// told apart by the path: *.safetensors (Hugging Face names, interchange/hf_names.h),
// *.bin (an llm.c GPT-2 checkpoint, interchange/llmc.h), or else a checkpoint
// directory (train/model_checkpoint.h; as a source also a folder of step-* checkpoints
// or a run folder, resolved to the latest; as a destination a model-only checkpoint).
// A Hugging Face model folder (config.json + safetensors + tokenizer, interchange/
// hf_folder.h) is a source by its config.json and a destination with --to-hf DIR, which
// also copies the source folder's tokenizer files, a run checkpoint's recorded
// tokenizer.json (data/tokenizer_record.h), or --tokenizer FILE.
// --dtype stores the destination's parameters as f32, bf16 or f16 (safetensors and
// folders; llm.c: f32 or bf16; checkpoints: f32). One process; the destination must not exist.
// A model with LoRA adapters (docs/fine_tuning.md): --merge-lora writes the merged
// weights in any of these formats, --peft the adapters alone as a PEFT folder.
#include "apps/ndtrain/commands.h"
#include "core/error.h"
#include "core/timing.h"
#include "interchange/hf_folder.h"
#include "interchange/hf_folder_writer.h"
#include "interchange/hf_names.h"
#include "interchange/llmc.h"
#include "interchange/lora_export.h"
#include "interchange/stored_values.h"
#include "train/model_checkpoint.h"
#include "train/model_source.h"
#include "train/run_tokenizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <optional>

namespace ndt {

namespace {

namespace fs = std::filesystem;

// The --dtype value; throws naming the option, the value and the accepted ones.
DType dtype_option(const std::string& value) {
  for (DType d : kStoredDTypes) {
    if (value == dtype_name(d)) return d;
  }
  fail("--dtype {} is not supported (accepted: {})", value, stored_dtype_names());
}

// Throws naming --dtype and what the destination's format can hold, before anything is read.
void check_dtype_for(ModelFormat format, DType dtype) {
  if (format == ModelFormat::llmc) {
    try {
      llmc_version(dtype);
    } catch (const Error& e) {
      fail("--dtype {}: {}", dtype_name(dtype), e.what());
    }
  }
  NDT_CHECK(format != ModelFormat::checkpoint || dtype == DType::f32,
            "--dtype {}: ndtrain checkpoints hold f32 parameters; write *.safetensors or *.bin (llm.c) instead",
            dtype_name(dtype));
}

void write_model(const ModelState& state, const std::string& path, ModelFormat format, DType dtype) {
  switch (format) {
    case ModelFormat::safetensors: return save_safetensors_hf(state, path, dtype);
    case ModelFormat::llmc: return save_llmc(state, path, /*padded_vocab=*/0, dtype);
    case ModelFormat::checkpoint: return write_model_checkpoint(state, path);
    case ModelFormat::hf_folder: fail("{}: a Hugging Face folder is written with --to-hf", path);
  }
}

// The tokenizer files a Hugging Face folder carries beside its weights.
std::vector<std::string> tokenizer_files(const ConvertOptions& o) {
  std::vector<std::string> files;
  if (!o.tokenizer.empty()) {
    NDT_CHECK(fs::is_regular_file(o.tokenizer), "--tokenizer {}: no such file", o.tokenizer);
    files.push_back(o.tokenizer);
  }
  if (model_format_of(o.from) == ModelFormat::checkpoint && o.tokenizer.empty()) {
    // A run's checkpoint: the tokenizer.json its training shards were prepared with.
    const std::optional<std::string> recorded =
        recorded_run_tokenizer(checkpoint_data_state(resolve_checkpoint(o.from)));
    if (recorded && fs::path(*recorded).filename() == "tokenizer.json") files.push_back(*recorded);
  }
  if (!is_hf_folder(o.from)) return files;
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "generation_config.json",
                           "special_tokens_map.json"}) {
    const fs::path file = fs::path(o.from) / name;
    const bool given = !o.tokenizer.empty() && fs::path(o.tokenizer).filename() == name;
    if (fs::is_regular_file(file) && !given) files.push_back(file.string());
  }
  return files;
}

}  // namespace

int run_convert(const ConvertOptions& o) {
  NDT_CHECK(!launched_by_mpi(), "convert runs in one process: start it without mpirun");
  NDT_CHECK(o.n_head >= 0, "--n-head {} must be positive", o.n_head);
  NDT_CHECK(!o.to.empty() || !o.to_hf.empty(), "convert needs a destination: --to PATH or --to-hf DIR");
  const std::string destination = o.to_hf.empty() ? o.to : o.to_hf;
  NDT_CHECK(!fs::exists(destination), "{} {} already exists: convert does not overwrite",
            o.to_hf.empty() ? "--to" : "--to-hf", destination);
  const DType dtype = dtype_option(o.dtype);
  NDT_CHECK(!(o.merge_lora && o.peft), "--merge-lora and --peft write different things: give one");
  NDT_CHECK(!(o.peft && !o.to_hf.empty()), "--peft writes a PEFT folder at --to DIR, not --to-hf");
  const ModelFormat from = model_format_of(o.from);
  const ModelFormat to = o.peft ? ModelFormat::checkpoint
                         : o.to_hf.empty() ? model_format_of(o.to)
                                           : ModelFormat::hf_folder;
  if (!o.peft) check_dtype_for(to, dtype);
  const std::vector<std::string> side_files = o.to_hf.empty() ? std::vector<std::string>{} : tokenizer_files(o);

  const auto t0 = std::chrono::steady_clock::now();
  std::optional<ModelConfig> hint;  // for safetensors without ndtrain metadata
  if (o.n_head > 0) {
    hint.emplace();
    hint->n_head = hint->n_kv_head = o.n_head;
  }
  ModelState state = read_model_file(o.from, hint);
  // An option that does nothing is refused, never ignored.
  NDT_CHECK(o.n_head == 0 || !state.assumed.empty(),
            "--n-head {} completes a safetensors file without ndtrain metadata, but {} ({}) describes its model "
            "(n_head = {}): leave --n-head out",
            o.n_head, o.from, model_format_name(from), state.config.n_head);
  NDT_CHECK(o.merge_lora || o.peft || !state.config.lora.enabled() || to == ModelFormat::checkpoint,
            "{} has LoRA adapters, which {} files do not hold: add --merge-lora (merged weights) or --peft (the "
            "adapters alone, as a PEFT folder)",
            o.from, model_format_name(to));
  if (o.merge_lora) state = merge_lora(state);
  const double read_s = seconds_since(t0);
  const auto t1 = std::chrono::steady_clock::now();
  if (o.peft) {
    save_peft_adapter(state, o.to);
    fmt::print("wrote the LoRA adapters of {} as a PEFT folder {}\n", o.from, o.to);
    return 0;
  }
  if (to == ModelFormat::hf_folder) {
    write_hf_folder(state, o.to_hf, dtype, o.max_shard_size, side_files);
  } else {
    write_model(state, o.to, to, dtype);
  }
  const double write_s = seconds_since(t1);

  int64_t params = 0;
  for (const auto& [name, values] : state.tensors) params += static_cast<int64_t>(values.size());
  const double mb = static_cast<double>(params) * sizeof(float) / 1e6;
  const ModelConfig& c = state.config;
  fmt::print("converted {} ({}) -> {} ({}, {})\n", o.from, model_format_name(from), destination, model_format_name(to),
             dtype_name(dtype));
  fmt::print("model: {}, {} layers, d_model {}, {} heads ({} kv), {}vocab {}, max_seq_len {}{}\n",
             arch_name(c.arch), c.n_layer, c.d_model, c.n_head, c.kv_heads(),
             c.has_dense_block() ? fmt::format("d_ff {}, ", c.d_ff) : "", c.vocab_size, c.max_seq_len,
             c.is_moe() ? fmt::format("; {} experts of width {}, top-{}, every {} block{}", c.n_experts, c.expert_d_ff(),
                                      c.moe_top_k, c.moe_every, c.moe_every == 1 ? "" : "s")
                        : "");
  if (!state.assumed.empty()) {
    std::string assumed;
    for (const std::string& key : state.assumed) {
      assumed += fmt::format("{}model.{} = {}", assumed.empty() ? "" : ", ", key, config_fields(c).count(key) ? config_fields(c).at(key) : "-");
    }
    fmt::print("note: {} does not say {}: written as {} (--n-head and ModelConfig defaults)\n", o.from,
               state.assumed.size() == 1 ? "this field" : "these fields", assumed);
  }
  fmt::print("{} tensors, {} parameters, {:.1f} MB as f32; read {:.3f} s ({:.0f} MB/s), write {:.3f} s "
             "({:.0f} MB/s)\n",
             state.tensors.size(), params, mb, read_s, mb / std::max(read_s, 1e-9), write_s,
             mb / std::max(write_s, 1e-9));
  return 0;
}

}  // namespace ndt
