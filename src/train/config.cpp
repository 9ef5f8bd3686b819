#include "train/config.h"

#include "train/config_keys.h"

#include "parallel/pipeline/schedule.h"
#include "parallel/pipeline/stages.h"
#include "parallel/expert/expert_parallel.h"
#include "parallel/tensor/tensor_parallel.h"
#include "parallel/context/head_all_to_all.h"
#include "parallel/context/usp_attention.h"

#include "core/error.h"
#include "core/input_file.h"
#include "core/text_list.h"
#include "data/dataset_spec.h"
#include "interchange/hf_config.h"
#include "interchange/hf_folder.h"
#include "model/moe.h"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <sstream>
#include <thread>

namespace ndt {

namespace {

// parallel.bucket_mb bounds: one float, and 1 TiB (a size that still fits a size_t in bytes).
constexpr double kSmallestBucketMib = sizeof(float) / (1024.0 * 1024.0);
constexpr double kLargestBucketMib = 1024.0 * 1024.0;

std::string toml_value_text(const std::string& key, const toml::node& node) {
  if (auto s = node.as_string()) return s->get();
  if (auto i = node.as_integer()) return std::to_string(i->get());
  if (auto d = node.as_floating_point()) return fmt::format("{}", d->get());
  if (auto b = node.as_boolean()) return b->get() ? "true" : "false";
  if (auto a = node.as_array()) {  // data.train lists, data.mix: kept as TOML text (data/dataset_spec.h)
    std::ostringstream text;
    text << toml::toml_formatter(*a, toml::format_flags::none);
    return text.str();
  }
  fail("{} has an unsupported value type (use a string, number or boolean)", key);
}

// Flattens [section] key = value into "section.key" -> text, in file order.
void flatten(const toml::table& table, const std::string& prefix,
             std::vector<std::pair<std::string, std::string>>& out) {
  for (const auto& [k, node] : table) {
    std::string key = prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
    if (const toml::table* sub = node.as_table()) {
      flatten(*sub, key, out);
    } else {
      out.emplace_back(key, toml_value_text(key, node));
    }
  }
}

}  // namespace

std::string_view layout_mode_name(LayoutMode mode) { return mode == LayoutMode::automatic ? "auto" : "manual"; }

LayoutMode layout_mode_from_name(std::string_view name) {
  for (LayoutMode mode : {LayoutMode::manual, LayoutMode::automatic}) {
    if (name == layout_mode_name(mode)) return mode;
  }
  fail("parallel.layout = \"{}\" is not a layout mode: manual (the config's settings) or auto (searched by the "
       "planner at start-up)", name);
}

namespace {

// The file's keys in file order, then the overrides', each "section.key" -> its text;
// unknown keys are errors.
std::vector<std::pair<std::string, std::string>> config_entries(const std::string& path,
                                                                 const std::vector<std::string>& overrides) {
  std::vector<std::pair<std::string, std::string>> entries;
  if (!path.empty()) {
    const std::string problem = input_file_problem(path);
    NDT_CHECK(problem.empty(), "config file \"{}\" {}", path, problem);
    toml::table table;
    try {
      table = toml::parse_file(path);
    } catch (const toml::parse_error& e) {
      fail("config file \"{}\": {} (line {})", path, e.description(), e.source().begin.line);
    }
    flatten(table, "", entries);
  }
  for (const std::string& o : overrides) {
    const size_t eq = o.find('=');
    NDT_CHECK(eq != std::string::npos && eq > 0, "--set \"{}\" is not of the form section.key=value", o);
    entries.emplace_back(o.substr(0, eq), o.substr(eq + 1));
  }
  for (const auto& [key, value] : entries) {
    NDT_CHECK(find_config_key(key) != nullptr, "unknown config key \"{}\" (value \"{}\"); see `ndtrain config`",
              key, value);
  }
  return entries;
}

}  // namespace

std::vector<std::string> given_config_keys(const std::string& path, const std::vector<std::string>& overrides) {
  std::vector<std::string> keys;
  for (const auto& entry : config_entries(path, overrides)) keys.push_back(entry.first);
  return keys;
}

RunConfig read_run_config(const std::string& path, const std::vector<std::string>& overrides) {
  const std::vector<std::pair<std::string, std::string>> entries = config_entries(path, overrides);
  RunConfig config;
  // train.init_from naming a Hugging Face folder: its config.json is where the model
  // starts, as a preset would be, so a run needs no model.* keys; explicit ones override
  // it, and init_from then names each difference from the folder.
  for (const auto& [key, value] : entries) {
    if (key == "train.init_from" && is_hf_folder(value)) {
      config.model = read_hf_config((std::filesystem::path(value) / "config.json").string());
    }
  }
  // The preset first, then the family (each the file's, then the last --set), so the
  // family's defaults apply whatever the order and explicit model.* keys override both.
  const std::vector<std::string> applied_first = {"model.preset", "model.arch"};
  for (const std::string& first : applied_first) {
    const std::string* value = nullptr;
    for (const auto& [key, v] : entries) {
      if (key == first) value = &v;
    }
    if (value != nullptr) find_config_key(first)->set(config, *value);
  }
  for (const auto& [key, value] : entries) {
    if (std::find(applied_first.begin(), applied_first.end(), key) == applied_first.end()) {
      find_config_key(key)->set(config, value);
    }
  }
  return config;
}

RunConfig load_run_config(const std::string& path, const std::vector<std::string>& overrides) {
  RunConfig config = read_run_config(path, overrides);
  config.validate();
  return config;
}

bool RunConfig::scales_loss() const {
  return loss_scaling == LossScaling::dynamic ||
         (loss_scaling == LossScaling::automatic && precision.compute == DType::f16);
}

namespace {

// The checks of validate() beyond the layout, by section.

void check_stability(const RunConfig& c) {
  c.spike.validate();
  NDT_CHECK(c.max_rollbacks >= 0, "stability.max_rollbacks = {} must not be negative", c.max_rollbacks);
  NDT_CHECK(c.rollback_window >= 1, "stability.rollback_window = {} must be at least 1", c.rollback_window);
  NDT_CHECK(std::isfinite(c.rollback_lr_factor) && c.rollback_lr_factor > 0 && c.rollback_lr_factor <= 1,
            "stability.rollback_lr_factor = {} must lie in (0, 1]", c.rollback_lr_factor);
  NDT_CHECK(c.rollback_lr_steps >= 0, "stability.rollback_lr_steps = {} must not be negative", c.rollback_lr_steps);
  NDT_CHECK(c.rollback_extra_batches >= 0, "stability.rollback_extra_batches = {} must not be negative",
            c.rollback_extra_batches);
  NDT_CHECK(!c.rolls_back() || (c.checkpoint_every > 0 && (!c.checkpoint_dir.empty() || !c.out_dir.empty())),
            "a rollback (stability.on_spike or stability.on_nonfinite = \"rollback\") reloads the newest checkpoint: "
            "set checkpoint.every > 0 (now {}) and a checkpoint folder (checkpoint.dir or runtime.out_dir)",
            c.checkpoint_every);
}

void check_optimizer(const RunConfig& c) {
  c.schedule.validate();
  NDT_CHECK(c.adamw.beta1 >= 0 && c.adamw.beta1 < 1, "optim.beta1 = {} must be in [0, 1)", c.adamw.beta1);
  NDT_CHECK(c.adamw.beta2 >= 0 && c.adamw.beta2 < 1, "optim.beta2 = {} must be in [0, 1)", c.adamw.beta2);
  NDT_CHECK(c.adamw.eps > 0, "optim.eps = {} must be positive", c.adamw.eps);
  NDT_CHECK(c.adamw.weight_decay >= 0, "optim.weight_decay = {} must not be negative", c.adamw.weight_decay);
  NDT_CHECK(c.grad_clip >= 0, "optim.grad_clip = {} must not be negative", c.grad_clip);
}

void check_data_and_sample(const RunConfig& c) {
  NDT_CHECK(c.init_from.empty() || c.resume.empty(),
            "train.init_from = \"{}\" and checkpoint.resume = \"{}\" are both set: a resumed run continues "
            "from its checkpoint; init_from starts a new one",
            c.init_from, c.resume);
  NDT_CHECK(!c.train_data.empty() || !c.data_mix.empty(),
            "data.train is not set: give a token shard (see `ndtrain prepare`)");
  NDT_CHECK(c.train_data.empty() || c.data_mix.empty(),
            "data.train and data.mix are both set: a blend names its training sets itself (data.train = \"{}\")",
            c.train_data);
  for (const auto& [key, path] : {std::pair{"data.train", &c.train_data}, {"data.val", &c.val_data}}) {
    if (!path->empty()) resolve_shards(key, *path);
  }
  for (const MixSpec& m : c.data_mix.empty() ? std::vector<MixSpec>{} : parse_mix(c.data_mix)) {
    resolve_shards("data.mix path", m.path);
  }
  if (!c.tokenizer.empty()) {
    const std::string problem = input_file_problem(c.tokenizer);
    NDT_CHECK(problem.empty(), "data.tokenizer = \"{}\" {}", c.tokenizer, problem);
  }
  NDT_CHECK(c.document_separator >= -1 && c.document_separator < c.model.vocab_size,
            "data.document_separator = {} is not a token id in [0, {}) (model.vocab_size), nor -1 (the separator "
            "recorded beside the shards)",
            c.document_separator, c.model.vocab_size);
  NDT_CHECK(c.sample_tokens >= 0, "sample.tokens = {} must not be negative", c.sample_tokens);
  NDT_CHECK(c.sample_tokens == 0 || !c.sample_prompt.empty(),
            "sample.tokens = {} needs a sample.prompt to continue, which is empty (sample.tokens = 0: no sample)",
            c.sample_tokens);
  for (size_t i = 0; i < c.sample_prompt.size(); ++i) {
    const int byte = static_cast<unsigned char>(c.sample_prompt[i]);
    NDT_CHECK(byte < c.model.vocab_size,
              "sample.prompt byte {} (at {}) is outside the vocabulary: prompt tokens are the prompt's bytes, "
              "and model.vocab_size = {}",
              byte, i, c.model.vocab_size);
  }
  NDT_CHECK(c.temperature >= 0, "sample.temperature = {} must not be negative", c.temperature);
  NDT_CHECK(c.top_k >= 0, "sample.top_k = {} must not be negative", c.top_k);
}

void check_offload_folder(const RunConfig& c) {
  if (!c.offloads()) return;
  NDT_CHECK(!c.offload_folder().empty(),
            "offload.optimizer = \"disk\" needs a folder for its swap files: set offload.dir (or runtime.out_dir, "
            "whose offload/ it then uses)");
}

void check_runtime_and_checkpoints(const RunConfig& c) {
  NDT_CHECK(c.threads >= 0, "runtime.threads = {} must not be negative (0: automatic)", c.threads);
  NDT_CHECK(c.comm_timeout_s > 0, "runtime.comm_timeout_s = {} must be positive", c.comm_timeout_s);
  NDT_CHECK(c.checkpoint_every >= 0, "checkpoint.every = {} must not be negative", c.checkpoint_every);
  NDT_CHECK(c.checkpoint_every == 0 || !c.checkpoint_dir.empty() || !c.out_dir.empty(),
            "checkpoint.every = {} saves checkpoints, but there is no folder for them: checkpoint.dir and "
            "runtime.out_dir are both empty",
            c.checkpoint_every);
  NDT_CHECK(c.keep_last >= 1, "checkpoint.keep_last = {} must be at least 1", c.keep_last);
  NDT_CHECK(c.peak_gflops >= 0, "runtime.peak_gflops = {} must not be negative", c.peak_gflops);
}

}  // namespace

void RunConfig::validate() const {
  validate_layout();
  NDT_CHECK(nonfinite_gradient_step >= 0, "debug.nonfinite_gradient_step = {} must not be negative (0: never)",
            nonfinite_gradient_step);
  NDT_CHECK(nonfinite_gradient_rank >= 0, "debug.nonfinite_gradient_rank = {} must not be negative",
            nonfinite_gradient_rank);
  parse_batch_window(corrupt_batches);
  zclip.validate();
  NDT_CHECK(std::isfinite(z_loss) && z_loss >= 0, "optim.z_loss = {} must be finite and non-negative (0: no z-loss)",
            z_loss);
  check_stability(*this);
  NDT_CHECK(steps >= 0, "train.steps = {} must not be negative (0: write the initial state and stop)", steps);
  NDT_CHECK(layout_check_steps >= 1, "parallel.layout_check_steps = {} must be at least 1", layout_check_steps);
  NDT_CHECK(layout_expert_load >= 1,
            "parallel.layout_expert_load = {} must be at least 1 (1: balanced routing; a run records its own as "
            "moe.expert_load in metrics.jsonl)",
            layout_expert_load);
  check_optimizer(*this);
  check_data_and_sample(*this);
  check_runtime_and_checkpoints(*this);
  check_offload_folder(*this);
}

std::string RunConfig::offload_folder() const {
  if (!offload_dir.empty()) return offload_dir;
  return out_dir.empty() ? std::string() : out_dir + "/offload";
}

namespace {

// The checks of validate_layout(), by concern.

void check_low_precision(const RunConfig& c) {
  // Checked even when off, so a bad value is reported before it is ever used.
  c.loss_scale.validate();
  c.precision.fp8_scaling.validate();
  if (!c.precision.fp8) return;
  NDT_CHECK(c.precision.compute == DType::bf16,
            "precision.fp8 = true computes the fp8 products in the bf16 GEMM: it needs precision.compute = \"bf16\", "
            "not \"{}\"",
            compute_dtype_config_name(c.precision.compute));
  // fp8 GEMM kernels work on tiles of 16: every width a linear layer has on a rank.
  const ModelConfig& m = c.model;
  const int tp = c.mesh.tp;
  for (const auto& [key, width] : {std::pair<const char*, int64_t>{"model.d_model", m.d_model},
                                   {"model.d_ff", m.d_ff},
                                   {"model.d_model / parallel.tp", m.d_model / tp},
                                   {"model.d_ff / parallel.tp", m.d_ff / tp},
                                   {"n_kv_head x head_dim / parallel.tp", int64_t{m.kv_heads()} * m.head_dim() / tp}}) {
    NDT_CHECK(width % 16 == 0, "precision.fp8 = true needs linear-layer widths divisible by 16, but {} = {}", key,
              width);
  }
}

void check_batch_and_recompute(const RunConfig& c) {
  NDT_CHECK(c.batch_size > 0, "train.batch_size = {} must be positive", c.batch_size);
  NDT_CHECK(c.micro_batch_size >= 0, "train.micro_batch_size = {} must not be negative (0: automatic)",
            c.micro_batch_size);
  NDT_CHECK(c.micro_batch_size == 0 || c.batch_size % c.micro_batch_size == 0,
            "train.micro_batch_size = {} does not divide train.batch_size = {}", c.micro_batch_size, c.batch_size);
  NDT_CHECK(c.seq_len > 0, "train.seq_len = {} must be positive", c.seq_len);
  NDT_CHECK(c.seq_len <= c.model.max_seq_len, "train.seq_len = {} exceeds model.max_seq_len = {}", c.seq_len,
            c.model.max_seq_len);
  NDT_CHECK(c.eval_every >= 0, "train.eval_every = {} must not be negative", c.eval_every);
  NDT_CHECK(c.eval_batches > 0, "train.eval_batches = {} must be positive", c.eval_batches);
  NDT_CHECK(c.loss_chunk_rows > 0, "train.loss_chunk_rows = {} must be positive", c.loss_chunk_rows);
  NDT_CHECK(c.log_every > 0, "train.log_every = {} must be positive", c.log_every);
  const ActivationCheckpointing& ac = c.activation_checkpointing;
  NDT_CHECK(ac.every >= 1, "train.activation_checkpointing_every = {} must be at least 1", ac.every);
  NDT_CHECK(ac.every == 1 || ac.mode == CheckpointMode::full,
            "train.activation_checkpointing_every = {} applies to full recompute, but train.activation_checkpointing "
            "= \"{}\"",
            ac.every, checkpoint_mode_name(ac.mode));
}

void check_data_and_expert_parallel(const RunConfig& c) {
  const MeshShape& mesh = c.mesh;
  NDT_CHECK(c.bucket_mb > 0, "parallel.bucket_mb = {} must be positive", c.bucket_mb);
  NDT_CHECK(c.bucket_mb >= kSmallestBucketMib,
            "parallel.bucket_mb = {} is smaller than one float (4 bytes): the smallest bucket is {} MiB", c.bucket_mb,
            kSmallestBucketMib);
  NDT_CHECK(c.bucket_mb <= kLargestBucketMib,
            "parallel.bucket_mb = {} exceeds {} MiB (1 TiB); any size above the model's gradients is one bucket",
            c.bucket_mb, kLargestBucketMib);
  NDT_CHECK(mesh.dp_replicate >= 0, "parallel.dp_replicate = {} must not be negative (0: automatic)",
            mesh.dp_replicate);
  NDT_CHECK(mesh.dp_shard >= 0, "parallel.dp_shard = {} must not be negative (0: automatic)", mesh.dp_shard);
  NDT_CHECK(c.zero_stage >= 0 && c.zero_stage <= 3, "parallel.zero_stage = {} must be 0, 1, 2 or 3", c.zero_stage);
  NDT_CHECK(mesh.dp_shard <= 1 || c.zero_stage > 0 || mesh.ep > 1,
            "parallel.dp_shard = {} shards with ZeRO: set parallel.zero_stage to 1, 2 or 3 (or, for expert "
            "parallelism under DDP, parallel.ep > 1)",
            mesh.dp_shard);
  NDT_CHECK(mesh.ep >= 1, "parallel.ep = {} must be at least 1", mesh.ep);
  if (mesh.ep > 1) validate_expert_parallel(c.model, mesh.ep);  // ep dividing dp_shard x cp: MeshShape::validate
  NDT_CHECK(c.model.moe_capacity_factor == 0 || mesh.cp == 1,
            "model.moe_capacity_factor = {} with parallel.cp = {} is not supported: capacity admits a sequence's "
            "tokens in position order, which a split sequence does not have on one rank (use 0: dropless)",
            c.model.moe_capacity_factor, mesh.cp);
  check_moe_precision(c.model, c.precision);
}

// Seq1F1B: what its sequence chunks do not support yet, each refused by name.
void check_sequence_chunks(const RunConfig& c) {
  const int k = c.pp_seq_chunks;
  NDT_CHECK(k >= 2 && c.seq_len % k == 0,
            "parallel.pp_schedule = \"seq1f1b\" needs parallel.pp_seq_chunks >= 2 dividing train.seq_len = {}, got {}",
            c.seq_len, k);
  auto refuse = [&](bool refused, const std::string& what) {
    NDT_CHECK(!refused, "parallel.pp_schedule = \"seq1f1b\" (parallel.pp_seq_chunks = {}) is not supported with {}", k,
              what);
  };
  refuse(c.mesh.cp > 1, fmt::format("parallel.cp = {} (sequence chunks of a context-parallel split)", c.mesh.cp));
  refuse(c.document_boundaries, "data.document_boundaries = true");
  refuse(c.model.is_moe(), fmt::format("model.n_experts = {} (routing statistics span whole sequences)", c.model.n_experts));
  refuse(c.activation_checkpointing.mode != CheckpointMode::none,
         fmt::format("train.activation_checkpointing = \"{}\" (an earlier chunk's keys and values must stay saved)",
                     checkpoint_mode_name(c.activation_checkpointing.mode)));
  refuse(c.precision.low(), fmt::format("precision.compute = \"{}\" (an earlier chunk's keys and values are kept "
                                        "packed)",
                                        compute_dtype_config_name(c.precision.compute)));
}

void check_context_and_pipeline(const RunConfig& c) {
  const MeshShape& mesh = c.mesh;
  NDT_CHECK(mesh.pp >= 1, "parallel.pp = {} must be at least 1", mesh.pp);
  NDT_CHECK(mesh.cp >= 1, "parallel.cp = {} must be at least 1", mesh.cp);
  const CpLayout cp{mesh.cp, c.cp_mode, c.cp_chunks, mesh.cp_ulysses};
  if (cp.active()) {
    validate_cp_ulysses(mesh.cp, c.cp_mode, mesh.cp_ulysses);
    cp.check_sequence(c.seq_len);
    const bool heads_split_over_tp = mesh.tp >= 1 && c.model.n_head % mesh.tp == 0 && c.model.kv_heads() % mesh.tp == 0;
    if (cp.mode != CpMode::ring && heads_split_over_tp) {
      validate_head_split(c.model.n_head / mesh.tp, c.model.kv_heads() / mesh.tp, cp.mode,
                          cp.mode == CpMode::usp ? mesh.cp_ulysses : mesh.cp);
    }
  }
  NDT_CHECK(c.pp_virtual_stages >= 1, "parallel.pp_virtual_stages = {} must be at least 1", c.pp_virtual_stages);
  parse_pipeline_layers(c.pp_layers);
  NDT_CHECK(mesh.pp > 1 || (c.pp_virtual_stages == 1 && c.pp_layers.empty() && c.pp_seq_chunks == 1),
            "parallel.pp_virtual_stages, parallel.pp_seq_chunks and parallel.pp_layers apply with parallel.pp > 1 "
            "(parallel.pp = {})",
            mesh.pp);
  if (mesh.pp == 1) return;
  check_pipeline_partition(c.model, mesh.pp * c.pp_virtual_stages, parse_pipeline_layers(c.pp_layers));
  if (c.pp_schedule == PipelineSchedule::seq1f1b) {
    check_sequence_chunks(c);
  } else {
    NDT_CHECK(c.pp_seq_chunks == 1,
              "parallel.pp_seq_chunks = {} cuts micro-batches into sequence chunks, which only parallel.pp_schedule = "
              "\"seq1f1b\" runs (parallel.pp_schedule = \"{}\")",
              c.pp_seq_chunks, pipeline_schedule_name(c.pp_schedule));
  }
}

void check_tensor_and_sequence_parallel(const RunConfig& c) {
  const MeshShape& mesh = c.mesh;
  if (mesh.cp == 1) {
    validate_tensor_parallel(c.model, mesh.tp, c.sequence_parallel, c.seq_len);
  } else {
    validate_tensor_parallel(c.model, mesh.tp, false, c.seq_len);
    NDT_CHECK(!c.sequence_parallel || (c.seq_len / mesh.cp) % mesh.tp == 0,
              "sequence parallel splits tokens over tp: each context-parallel rank's train.seq_len / parallel.cp = {} "
              "tokens are not divisible by parallel.tp = {}",
              c.seq_len / mesh.cp, mesh.tp);
  }
  NDT_CHECK(!c.sequence_parallel || mesh.tp > 1,
            "parallel.sequence_parallel = true needs parallel.tp > 1 (it splits tokens over the tp ranks)");
}

// offload.*: what each tier needs of the layout, and the chunk and read-ahead sizes.
void check_offload(const RunConfig& c) {
  constexpr double kSmallestChunkMib = 4096.0 / (1024.0 * 1024.0);
  NDT_CHECK(c.offload_chunk_mb >= kSmallestChunkMib && c.offload_chunk_mb <= 1024,
            "offload.chunk_mb = {} must lie in [{}, 1024] (4 KiB to 1 GiB)", c.offload_chunk_mb, kSmallestChunkMib);
  const double bytes = c.offload_chunk_mb * 1024 * 1024;
  NDT_CHECK(std::fmod(bytes, 4096.0) == 0,
            "offload.chunk_mb = {} is not a whole number of 4 KiB pages ({} bytes): direct I/O moves whole pages",
            c.offload_chunk_mb, bytes);
  NDT_CHECK(c.offload_prefetch >= 0 && c.offload_prefetch <= 64, "offload.prefetch = {} must lie in [0, 64]",
            c.offload_prefetch);
  NDT_CHECK(!c.offload_params || c.offload_optimizer,
            "offload.params = \"disk\" needs offload.optimizer = \"disk\" too (the step streams the moments beside "
            "the parameter shards)");
  NDT_CHECK(!c.offload_optimizer || c.zero_stage >= 1,
            "offload.optimizer = \"disk\" needs parallel.zero_stage >= 1, not {}: each rank offloads its ZeRO shard of "
            "the optimizer state (on one rank ZeRO-1 shards nothing and trains as DDP does)",
            c.zero_stage);
  NDT_CHECK(!c.offload_params || c.zero_stage == 3,
            "offload.params = \"disk\" needs parallel.zero_stage = 3 (FSDP: parameters sharded and gathered per "
            "block), not {}",
            c.zero_stage);
  NDT_CHECK(!c.offload_params || c.mesh.dp_replicate <= 1,
            "offload.params = \"disk\" with parallel.dp_replicate = {} (HSDP) is not supported: the gradient shards on "
            "disk would have to be all-reduced over the replicas",
            c.mesh.dp_replicate);
}

// Threads when runtime.threads = 0: the CPUs Slurm gave each task (SLURM_CPUS_PER_TASK),
// else this node's cores divided among the ranks on it.
int automatic_threads(int ranks_on_this_node) {
  if (const char* cpus = std::getenv("SLURM_CPUS_PER_TASK"); cpus && std::atoi(cpus) > 0) return std::atoi(cpus);
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / std::max(1, ranks_on_this_node));
}

}  // namespace

// What a layout must satisfy, without the run's files: `ndtrain plan` checks every
// candidate with it.
void RunConfig::validate_layout() const {
  model.validate();
  check_low_precision(*this);
  check_batch_and_recompute(*this);
  check_data_and_expert_parallel(*this);
  check_context_and_pipeline(*this);
  check_tensor_and_sequence_parallel(*this);
  check_offload(*this);
}

namespace {

// parallel.dp_shard = 0: nothing to shard under DDP; with ZeRO, HSDP's default: the
// data-parallel ranks of one node (shard inside a node, replicate across nodes) when they
// split the data-parallel ranks evenly, else (and with offload.params = "disk") every
// data-parallel rank (on one node: FSDP).
int automatic_dp_shard(const RunConfig& c, const MeshShape& m, int world_size, int ranks_per_node) {
  if (c.zero_stage == 0) return 1;
  const int64_t inner = int64_t{m.cp} * m.tp, others = inner * m.pp;
  NDT_CHECK(world_size % others == 0, "the world size {} is not a multiple of parallel.pp x cp x tp = {}", world_size,
            others);
  const int64_t dp = world_size / others;
  if (m.dp_replicate > 0) {
    NDT_CHECK(dp % m.dp_replicate == 0, "parallel.dp_replicate = {} does not divide the {} data-parallel ranks",
              m.dp_replicate, dp);
    return static_cast<int>(dp / m.dp_replicate);
  }
  if (c.offload_params) return static_cast<int>(dp);  // disk-offloaded shards cannot be replicated (HSDP)
  const int64_t per_node = ranks_per_node % inner == 0 ? ranks_per_node / inner : 0;
  return per_node >= 1 && dp % per_node == 0 ? static_cast<int>(per_node) : static_cast<int>(dp);
}

}  // namespace

MeshShape RunConfig::resolve_mesh(int world_size) const { return resolve_mesh(world_size, world_size); }

MeshShape RunConfig::resolve_mesh(int world_size, int ranks_per_node) const {
  MeshShape m = mesh;
  if (m.dp_shard == 0) m.dp_shard = automatic_dp_shard(*this, m, world_size, ranks_per_node);
  if (m.dp_replicate == 0) {
    const int64_t others = int64_t{m.pp} * m.dp_shard * m.cp * m.tp;
    NDT_CHECK(world_size % others == 0,
              "the world size {} is not a multiple of parallel.pp x dp_shard x cp x tp = {}", world_size,
              others);
    m.dp_replicate = static_cast<int>(world_size / others);
  }
  m.validate(world_size);
  NDT_CHECK(!offload_params || m.dp_replicate == 1,
            "offload.params = \"disk\" with {} data-parallel replicas (parallel.dp_replicate, HSDP) is not supported: "
            "set parallel.dp_shard to the ranks left by pp x cp x tp",
            m.dp_replicate);
  const int dp = m.size(Axis::dp);
  NDT_CHECK(batch_size % dp == 0, "train.batch_size = {} does not split over the data-parallel size {}",
            batch_size, dp);
  NDT_CHECK(micro_batch_size == 0 || batch_size % (micro_batch_size * dp) == 0,
            "train.batch_size = {} is not a multiple of train.micro_batch_size = {} x data-parallel size {}",
            batch_size, micro_batch_size, dp);
  if (m.pp > 1) {
    const int micro_batches = micro_batch_size == 0 ? 1 : batch_size / (micro_batch_size * dp);
    check_pipeline_shape(pp_schedule, pipeline_shape(pp_schedule, m.pp, pp_virtual_stages, micro_batches, pp_seq_chunks));
  }
  return m;
}

RunConfig RunConfig::resolved(int world_size) const { return resolved({world_size, world_size, world_size}); }

RunConfig RunConfig::resolved(const JobShape& job) const {
  RunConfig r = *this;
  r.mesh = resolve_mesh(job.world_size, job.ranks_per_node);
  if (r.micro_batch_size == 0) r.micro_batch_size = r.rows_per_rank();
  if (r.threads == 0) r.threads = automatic_threads(job.ranks_on_this_node);
  if (r.schedule.decay_steps == 0) r.schedule.decay_steps = std::max<int64_t>(r.steps, 1);
  return r;
}

std::optional<std::pair<int64_t, int64_t>> parse_batch_window(const std::string& text) {
  if (text.empty()) return std::nullopt;
  const std::vector<std::string> parts = split_trimmed(text, ':');  // "40:2" or "40: 2"
  int64_t first = -1, count = -1;
  auto whole = [](const std::string& item, int64_t& value) {
    const auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), value);
    return ec == std::errc() && ptr == item.data() + item.size();
  };
  const bool parsed = parts.size() == 2 && whole(parts[0], first) && whole(parts[1], count);
  // first + count (the window's end) must not leave 64 bits either.
  NDT_CHECK(parsed && first >= 0 && count >= 1 && first <= INT64_MAX - count,
            "debug.corrupt_batches = \"{}\" is not FIRST:COUNT with FIRST >= 0, COUNT >= 1 and FIRST + COUNT below 2^63 "
            "(e.g. \"40:2\")", text);
  return std::pair{first, count};
}

std::vector<ConfigFieldDoc> config_field_docs() {
  RunConfig defaults;
  std::vector<ConfigFieldDoc> docs;
  for (const ConfigKey& f : config_keys()) docs.push_back({f.key, f.get(defaults), f.doc});
  return docs;
}

std::vector<std::pair<std::string, std::string>> run_config_values(const RunConfig& config) {
  std::vector<std::pair<std::string, std::string>> values;
  for (const ConfigKey& f : config_keys()) {
    if (f.key != "model.preset") values.emplace_back(f.key, f.get(config));
  }
  return values;
}

std::string describe_run_config(const RunConfig& config) {
  std::string out;
  for (const auto& [key, value] : run_config_values(config)) out += fmt::format("  {} = {}\n", key, value);
  return out;
}

}  // namespace ndt
