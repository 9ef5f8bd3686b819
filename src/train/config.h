// Run configuration: a TOML file of sections [model], [train], [optim], [data],
// [sample], [parallel], [precision], [stability], [checkpoint], [offload], [runtime], [debug],
// overridden by `--set section.key=value`. Every key is declared once in a table
// (train/config_keys.h: key, meaning, default) that drives parsing, printing and
// docs/config.md; unknown keys and bad values are errors naming the key and value.
// Settings with a fixed set of values are enums, parsed once when read. Values that
// default from others (the mesh's dp_replicate, the micro-batch, the threads, the
// decay length) are filled in by resolved(), once, for a job's world size: whoever
// needs them (the trainer, the planner, the benchmarks) reads the resolved config.
#pragma once

#include "comm/device_mesh.h"
#include "model/activations.h"
#include "model/config.h"
#include "model/precision.h"
#include "offload/async_io.h"
#include "optim/clip.h"
#include "optim/adamw.h"
#include "optim/loss_scaler.h"
#include "optim/schedule.h"
#include "optim/zclip.h"
#include "optim/weight_decay.h"
#include "parallel/data/two_level_reduce.h"
#include "parallel/pipeline/schedule.h"
#include "train/spike_detector.h"
#include "train/stability_actions.h"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ndt {

// parallel.layout: the mesh and parallel settings as the config gives them (manual), or
// searched by the planner at start-up (auto: plan/auto_layout.h), the settings the
// config gives explicitly kept as constraints.
enum class LayoutMode { manual, automatic };
std::string_view layout_mode_name(LayoutMode mode);  // "manual", "auto"
LayoutMode layout_mode_from_name(std::string_view name);  // throws naming parallel.layout and the value

struct RunConfig {
  ModelConfig model;

  // [train]
  int64_t steps = 100;
  int batch_size = 8;        // sequences per optimizer step (the global batch)
  int micro_batch_size = 0;  // sequences per forward/backward per rank; 0 (unresolved): no accumulation
  int seq_len = 128;
  uint64_t seed = 1337;
  int64_t eval_every = 50;
  int eval_batches = 8;
  int loss_chunk_rows = 256;
  int64_t log_every = 1;
  bool profile = false;  // time every step by op class into the metrics (train/step_profile.h)
  std::string init_from;  // a model file or checkpoint to start from (fresh optimizer, step 0)
  ActivationCheckpointing activation_checkpointing;  // what blocks save for backward

  // [optim]
  LrSchedule schedule{.decay_steps = 0};  // decay_steps 0 (unresolved): train.steps
  AdamWConfig adamw;
  WeightDecayPolicy weight_decay_policy = WeightDecayPolicy::matrices;
  float grad_clip = 1.0f;  // clip_mode norm: the fixed global-norm bound (0: off)
  ClipMode clip_mode = ClipMode::norm;
  float z_loss = 0;  // coefficient of PaLM's z-loss, lse(logits)^2 per token (0: off)
  ZClipConfig zclip;

  // [data]
  std::string train_data;  // a shard, a glob or a TOML list of them (data/dataset_spec.h)
  std::string val_data;
  std::string data_mix;    // a TOML list of { path, weight } (data/dataset_spec.h); empty: data.train
  std::string tokenizer;   // the tokenizer file for text; empty: the one recorded beside data.train, or bytes
  // Attention and positions restart at each document (docs/data.md); off: plain packed rows.
  bool document_boundaries = false;
  // The token that starts a document; -1: the separator `ndtrain prepare --tokenizer`
  // recorded beside the shards, which the trainer fills in (TrainingData) when
  // document_boundaries is on.
  int document_separator = -1;
  // Only targets whose loss-mask byte is 1 count in the loss (docs/data.md).
  bool loss_mask = false;

  // [sample]
  int sample_tokens = 200;
  std::string sample_prompt = "\n";
  float temperature = 0.8f;
  int top_k = 40;

  // [parallel]
  // dp_replicate 0 (unresolved): every rank the other axes leave; dp_shard 0: automatic
  // (1 under DDP; with ZeRO the data-parallel ranks of a node: resolve_mesh).
  MeshShape mesh{1, 0, 0, 1, 1};
  double bucket_mb = 25;
  int zero_stage = 0;  // 0: DDP; 1, 2: ZeRO over dp_shard; 3: FSDP
  bool reshard_after_forward = true;
  bool prefetch = true;
  bool sequence_parallel = false;  // with tp > 1: norms and residual adds split by tokens
  bool allow_cross_node_tp = false;  // tp (and Ulysses cp) groups may span nodes
  DpReduction dp_reduction = DpReduction::automatic;  // DDP across nodes (parallel/data/two_level_reduce.h)
  CpMode cp_mode = CpMode::ring;          // with cp > 1 (model/activation_layout.h)
  CpChunks cp_chunks = CpChunks::zigzag;  // with cp > 1
  PipelineSchedule pp_schedule = PipelineSchedule::one_f_one_b;
  int pp_virtual_stages = 1;         // chunks per pp rank (interleaved_1f1b: 2 or more)
  int pp_seq_chunks = 1;             // sequence chunks per micro-batch (seq1f1b: 2 or more)
  std::string pp_layers;             // blocks per chunk, "3,3"; empty: balanced by cost
  LayoutMode layout = LayoutMode::manual;
  std::string layout_device = "cpu";  // auto: the device profile searched on ("cpu": measured) or a device file
  int64_t layout_check_steps = 5;     // auto: steps measured (after the first) against the predicted step time
  // auto, an MoE model under ep: the experts' load the search prices (the most loaded ep
  // rank's expert rows over the mean; 1: balanced; a run records its own, moe.expert_load)
  float layout_expert_load = 1;

  // [precision]
  Precision precision;  // compute dtype of matmuls and saved activations
  DType reduce_dtype = DType::f32;  // of data-parallel gradient reductions
  LossScaling loss_scaling = LossScaling::automatic;
  LossScalerConfig loss_scale;
  bool scales_loss() const;  // dynamic loss scaling is on

  // [stability] (docs/stability.md)
  SpikeAction on_spike = SpikeAction::warn;
  NonfiniteAction on_nonfinite = NonfiniteAction::stop;
  SpikeDetectorConfig spike;
  int max_rollbacks = 3;              // within rollback_window steps; one more stops the run
  int64_t rollback_window = 1000;
  int64_t rollback_extra_batches = 0;  // skipped beyond the spike's batch too
  float rollback_lr_factor = 1.0f;    // the learning rate's factor for rollback_lr_steps after a rollback
  int64_t rollback_lr_steps = 0;
  bool rolls_back() const { return on_spike == SpikeAction::rollback || on_nonfinite == NonfiniteAction::rollback; }

  // [debug] fault injection, to show the defences work (docs/precision.md, docs/stability.md)
  int64_t nonfinite_gradient_step = 0;  // on this step (1-based; 0: never) a gradient becomes +inf
  int nonfinite_gradient_rank = 0;      // on this world rank
  std::string corrupt_batches;          // "FIRST:COUNT": these training batches get random tokens

  // [checkpoint]
  std::string checkpoint_dir;  // empty: <out_dir>/checkpoints
  int64_t checkpoint_every = 0;  // steps between saves; 0: only at the end
  int keep_last = 3;
  bool checkpoint_async = true;
  bool save_on_exit = true;  // at the end of the run and on SIGTERM
  std::string resume;        // a checkpoint directory, or "latest"
  bool overwrite = false;    // may delete checkpoints this run does not continue from

  // [offload] (docs/offload.md): model states on disk, streamed through memory
  bool offload_optimizer = false;  // offload.optimizer = "disk": AdamW moments in swap files
  bool offload_params = false;     // offload.params = "disk": FSDP's parameter and gradient shards too
  std::string offload_dir;         // empty: <runtime.out_dir>/offload; each rank uses rank-NNNNN in it
  double offload_chunk_mb = 4;
  int offload_prefetch = 2;
  offload::IoBackend offload_io = offload::IoBackend::io_uring;
  bool offloads() const { return offload_optimizer || offload_params; }
  // The swap folder (offload.dir, or <runtime.out_dir>/offload); empty when neither is set.
  std::string offload_folder() const;

  // [runtime]
  int threads = 0;  // 0 (unresolved): the cores of this node divided among its ranks
  double peak_gflops = 0;  // 0: measure with the built-in FMA calibration
  std::string out_dir = "runs/latest";
  double comm_timeout_s = 300;

  void validate() const;  // throws naming the key and value
  // The checks of a layout (model shape, batch, precision, recompute and parallel keys),
  // leaving out the run's files and the token format: validate() runs them first.
  void validate_layout() const;
  // The mesh for a job of world_size ranks (dp_replicate 0 resolved); throws if it does
  // not fit, naming the sizes.
  MeshShape resolve_mesh(int world_size) const;  // on one node
  MeshShape resolve_mesh(int world_size, int ranks_per_node) const;
  // This config for a job of world_size ranks with every value that defaults from
  // others filled in: mesh (resolve_mesh), micro_batch_size (0: the rows of a
  // data-parallel rank), threads (0: the node's cores divided among the ranks on it),
  // schedule.decay_steps (0: steps). Throws like resolve_mesh. Idempotent.
  RunConfig resolved(int world_size) const;  // on one node
  struct JobShape {
    int world_size;
    int ranks_per_node;      // the fewest ranks a node holds (parallel.dp_shard = 0 under ZeRO)
    int ranks_on_this_node;  // runtime.threads = 0
  };
  RunConfig resolved(const JobShape& job) const;
  // Rows of the global batch each data-parallel rank takes, and the micro-batches it
  // runs them in (a resolved config).
  int rows_per_rank() const { return batch_size / mesh.size(Axis::dp); }
  int micro_batches() const { return rows_per_rank() / micro_batch_size; }
};

// Reads a TOML file (empty path: defaults), then applies overrides "section.key=value".
RunConfig load_run_config(const std::string& path, const std::vector<std::string>& overrides);
// The same without validate(): each key's value checked as it is read, the whole not.
RunConfig read_run_config(const std::string& path, const std::vector<std::string>& overrides);

// The keys the file and the overrides set explicitly (in that order, repeats kept), what
// parallel.layout = "auto" keeps as constraints.
std::vector<std::string> given_config_keys(const std::string& path, const std::vector<std::string>& overrides);

// One entry per configuration key, for `ndtrain config` and docs/config.md.
struct ConfigFieldDoc {
  std::string key;
  std::string default_value;
  std::string doc;
};
// debug.corrupt_batches: "FIRST:COUNT" as (first, count); empty: none. Throws naming the value.
std::optional<std::pair<int64_t, int64_t>> parse_batch_window(const std::string& text);
std::vector<ConfigFieldDoc> config_field_docs();
// Every key with its value as TOML writes it (strings quoted), in the table's order;
// model.preset is left out (the model's own keys say what it resolved to).
std::vector<std::pair<std::string, std::string>> run_config_values(const RunConfig& config);
// "key = value" lines of a config, for the run log.
std::string describe_run_config(const RunConfig& config);

}  // namespace ndt
