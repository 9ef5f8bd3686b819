// `ndtrain convert`: moves a whole model between the formats ndtrain reads and writes,
// told apart by the path: *.safetensors (Hugging Face names, interchange/hf_names.h),
// *.bin (an llm.c GPT-2 checkpoint, interchange/llmc.h), or else a checkpoint
// directory (train/model_checkpoint.h; as a source also a folder of step-* checkpoints
// or a run folder, resolved to the latest; as a destination a model-only checkpoint).
// One process; the destination must not exist.
#include "apps/ndtrain/commands.h"
#include "core/error.h"
#include "core/timing.h"
#include "interchange/hf_names.h"
#include "interchange/llmc.h"
#include "train/model_checkpoint.h"
#include "train/model_source.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>

namespace ndt {

namespace {

namespace fs = std::filesystem;

void write_model(const ModelState& state, const std::string& path, ModelFormat format) {
  switch (format) {
    case ModelFormat::safetensors: return save_safetensors_hf(state, path);
    case ModelFormat::llmc: return save_llmc(state, path);
    case ModelFormat::checkpoint: return write_model_checkpoint(state, path);
  }
}

}  // namespace

int run_convert(const ConvertOptions& o) {
  NDT_CHECK(!launched_by_mpi(), "convert runs in one process: start it without mpirun");
  NDT_CHECK(o.n_head >= 0, "--n-head {} must be positive", o.n_head);
  NDT_CHECK(!fs::exists(o.to), "--to {} already exists: convert does not overwrite", o.to);
  const ModelFormat from = model_format_of(o.from), to = model_format_of(o.to);

  const auto t0 = std::chrono::steady_clock::now();
  const ModelState state = read_model_file(o.from, o.n_head);
  const double read_s = seconds_since(t0);
  const auto t1 = std::chrono::steady_clock::now();
  write_model(state, o.to, to);
  const double write_s = seconds_since(t1);

  int64_t params = 0;
  for (const auto& [name, values] : state.tensors) params += static_cast<int64_t>(values.size());
  const double mb = static_cast<double>(params) * sizeof(float) / 1e6;
  const ModelConfig& c = state.config;
  fmt::print("converted {} ({}) -> {} ({})\n", o.from, model_format_name(from), o.to, model_format_name(to));
  fmt::print("model: {}, {} layers, d_model {}, {} heads ({} kv), d_ff {}, vocab {}, max_seq_len {}\n",
             arch_name(c.arch), c.n_layer, c.d_model, c.n_head, c.kv_heads(), c.d_ff, c.vocab_size,
             c.max_seq_len);
  fmt::print("{} tensors, {} parameters, {:.1f} MB as f32; read {:.3f} s ({:.0f} MB/s), write {:.3f} s "
             "({:.0f} MB/s)\n",
             state.tensors.size(), params, mb, read_s, mb / std::max(read_s, 1e-9), write_s,
             mb / std::max(write_s, 1e-9));
  return 0;
}

}  // namespace ndt
