// Subcommands of the ndtrain CLI. Each returns the process exit code and throws
// ndt::Error for bad input (caught and printed once in main).
#pragma once

#include "core/text_list.h"
#include "data/prepare_tokens.h"
#include "parallel/pipeline/simulator.h"
#include "train/generate.h"

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

namespace ndt {

// "a,b,c" or "a, b, c" -> {"a", "b", "c"}, empty items kept (the option's own check
// names them).
inline std::vector<std::string> split_comma_list(const std::string& text) { return split_trimmed(text, ','); }

// Whether this process was started by mpirun/srun (then MPI is used), and its rank.
bool launched_by_mpi();
int launched_rank();

int run_train(const std::string& config_path, const std::vector<std::string>& overrides);
int run_prepare(const std::vector<std::string>& inputs, const std::string& out_dir, double val_fraction,
                bool force);
int run_config_doc();
// prepare's inputs as files: folders give their text files (recursively, sorted).
std::vector<std::string> expand_prepare_inputs(const std::vector<std::string>& inputs);
int run_prepare_tokens(const std::vector<std::string>& inputs, TokenPrepareOptions options);

struct TokenizeOptions {
  std::string tokenizer;  // a tokenizer.json, encoder.json (+ vocab.bpe) or *.tiktoken file
  bool decode = false;    // ids on standard input -> bytes
  bool ordinary = false;  // added/special tokens in the text are plain text; no template tokens
};
int run_tokenize(const TokenizeOptions& options);

struct TokenizerBenchOptions {
  std::string text;  // empty: Debian's fortunes
  int threads = 0;   // 0: every core
};
int run_bench_tokenizer(const TokenizerBenchOptions& options);

struct TrainBenchOptions {
  std::string preset = "gpt2-124m";
  int batch = 8;
  int seq_len = 256;
  int threads = 1;
  int steps = 3;
  int zero_stage = 0;  // under mpirun: 0 DDP, 1-2 ZeRO, 3 FSDP (all data-parallel ranks on dp_shard)
  bool prefetch = true;
  int tp = 1;          // under mpirun: tensor-parallel group size (the other ranks: data parallel)
  bool sequence_parallel = false;
  int cp = 1;          // under mpirun: context-parallel group size
  std::string cp_mode = "ring";
  std::string cp_chunks = "zigzag";
  int cp_ulysses = 1;  // with cp_mode "usp": the Ulysses ranks of each group (the rest of cp: the ring)
  int ep = 1;          // under mpirun: expert-parallel group size (an MoE preset; borrowed from the data-parallel ranks)
  int vocab = 0;       // 0: the preset's vocabulary
  std::vector<std::string> model_settings;  // --model model.KEY=VALUE over the preset's, as a config file sets them
  std::string activation_checkpointing = "none";
  int checkpointing_every = 1;
  double memory_budget_gib = 4;  // for the largest batch that fits, by the memory model
  std::string precision = "fp32";  // precision.compute: fp32, bf16 or fp16
  std::string reduce_dtype = "fp32";  // precision.reduce_dtype: fp32 or bf16
  // Fine-tuning (docs/fine_tuning.md): LoRA of this rank on lora_targets (0: off), and
  // train.freeze's patterns.
  int lora_rank = 0;
  float lora_alpha = 32;
  std::string lora_targets = "wq, wk, wv, wo, mlp.*";
  std::string freeze;
  // Print the median step's time by op class, communication and the rest (train/step_profile.h).
  bool profile = false;
  // Sample the peak's rate (train/peak_flops.h, sample_peak_rate) before the first counted
  // step and after each, and print each step's MFU against the mean of its two samples.
  bool peak_each_step = false;
};
int run_bench_train(const TrainBenchOptions& options);

// `ndtrain bench comm` and `ndtrain bench overlap` (apps/ndtrain/bench_comm.cpp), run
// under mpirun: collective bandwidth against raw MPI, and all-reduce/compute overlap.
struct CommBenchOptions {
  size_t min_bytes = 4096;
  size_t max_bytes = size_t{256} << 20;
  int step_factor = 4;  // sizes min, min x f, ... up to max
  int iters = 10;
  int warmup = 2;
  bool async = false;  // time the i* form + wait instead of the blocking form
};
int run_bench_comm(const CommBenchOptions& options);

struct OverlapBenchOptions {
  size_t bytes = size_t{64} << 20;
  int reps = 5;
  double poll_ms = 1.0;     // test() interval of mode (b); also tried at a tenth of it
  double compute_ms = 0;    // compute loop length; 0: as long as the iall_reduce alone
};
int run_bench_overlap(const OverlapBenchOptions& options);

// `ndtrain bench checkpoint` (apps/ndtrain/bench_checkpoint.cpp): blocked time of
// synchronous and asynchronous saves, save and load throughput.
struct CheckpointBenchOptions {
  std::string preset = "gpt2-124m";
  std::string dir = "/tmp/ndtrain-bench-checkpoint";
  int batch = 4;
  int seq_len = 256;
  int threads = 2;
  int reps = 3;
};
int run_bench_checkpoint(const CheckpointBenchOptions& options);

// `ndtrain bench offload` (apps/ndtrain/bench_offload.cpp): the I/O backends, the
// overhead of optimizer offload, the largest model with and without offload.
struct OffloadBenchOptions {
  std::string part = "all";  // io, overhead, capacity or all
  std::string dir = "/tmp/ndtrain-bench-offload";
  int threads = 2;
  int rounds = 3;
  double probe_gib = 1;        // io: bytes of each probe
  std::string preset = "gpt2-124m";  // overhead: the model
  int batch = 8, seq_len = 256;      // overhead: the batch
  double memory_gib = 0;       // capacity: the memory budget (0: 90% of MemAvailable)
  double disk_gib = 0;         // capacity: the disk budget (0: half the free space under dir)
  int capacity_batch = 1, capacity_seq = 64, capacity_steps = 3;
  int compute_batch = 4;       // capacity: the offloaded model again, at a batch whose compute outweighs its I/O
  std::string capacity_runs = "memory,offload";  // which to train (the choice is printed either way)
};
int run_bench_offload(const OffloadBenchOptions& options);
void bench_offload_capacity(const OffloadBenchOptions& options);

// `ndtrain bench recompute` (apps/ndtrain/bench_recompute.cpp): activation checkpointing
// policies interleaved step by step in one process.
struct RecomputeBenchOptions {
  std::string preset = "gpt2-124m";
  int batch = 8;
  int seq_len = 256;
  int threads = 2;
  int rounds = 5;
  double memory_budget_gib = 4;
};
int run_bench_recompute(const RecomputeBenchOptions& options);

// `ndtrain bench pipeline` (apps/ndtrain/bench_pipeline.cpp, under mpirun): each
// schedule's measured bubble against the simulator's.
struct PipelineBenchOptions {
  std::string preset = "gpt2-tiny";
  int layers = 8;
  int seq_len = 128;
  int micro_batches = 8;
  int micro_batch_size = 2;
  int steps = 5;
  std::string schedules = "gpipe,1f1b,interleaved_1f1b,zb_h1,zb_v,dualpipev,seq1f1b";
  int seq_chunks = 2;  // seq1f1b's parallel.pp_seq_chunks
};
int run_bench_pipeline(const PipelineBenchOptions& options);

// `ndtrain simulate-pipeline` (apps/ndtrain/simulate_pipeline.cpp): a pipeline
// schedule timed with per-action costs, as text and optionally SVG.
struct SimulatePipelineOptions {
  std::string schedule = "1f1b";  // a parallel.pp_schedule name
  int pp = 4;
  int virtual_stages = 1;
  int seq_chunks = 1;  // seq1f1b: sequence chunks per micro-batch
  int micro_batches = 8;
  PipelineCosts costs;
  std::string svg;  // empty: no SVG file
};
int run_simulate_pipeline(const SimulatePipelineOptions& options);

// `ndtrain convert` (apps/ndtrain/convert.cpp): a whole model from one format to another.
struct ConvertOptions {
  std::string from, to;  // *.safetensors, *.bin (llm.c), a Hugging Face folder (from) or a checkpoint directory
  std::string to_hf;     // a new Hugging Face model folder (instead of --to)
  uint64_t max_shard_size = 5000000000;  // --to-hf: bytes per safetensors shard (transformers' default 5GB)
  std::string tokenizer;  // --to-hf: a tokenizer file to copy in (besides a source folder's own)
  int n_head = 0;        // config hint for safetensors without ndtrain metadata; 0: none
  std::string dtype = "f32";  // the destination's parameters: f32, bf16 or f16
  bool merge_lora = false;    // write W + (alpha / r) B A for every adapted weight, no adapters
  bool peft = false;          // write the adapters alone as a PEFT folder at `to`
};
int run_convert(const ConvertOptions& options);

// `ndtrain generate` (apps/ndtrain/generate.cpp): sampling from a checkpoint's model.
struct GenerateOptions {
  std::string checkpoint;  // a checkpoint, a folder of step-* checkpoints or a run folder
  std::string prompt;      // text, or with raw_tokens comma-separated token ids
  SampleOptions sample;
  bool raw_tokens = false;
  std::string tokenizer;   // empty: the one recorded beside the run's training shards, else bytes
};
int run_generate(const GenerateOptions& options);

// `ndtrain report` (apps/ndtrain/report.cpp): a run folder's metrics as an HTML page of
// SVG charts, and a digest on the terminal (docs/report.md).
struct ReportOptions {
  std::string run_dir;
  std::string out;  // empty: RUN_DIR/report.html
};
int run_report(const ReportOptions& options);

// `ndtrain plan` (apps/ndtrain/plan.cpp): layouts of a model on a cluster, scored by the
// planner (docs/planner.md); --validate runs the planner's check against this machine.
struct PlanOptions {
  std::string preset;                  // a model preset, or
  std::string config;                  // a train config file (its model, run and precision)
  std::vector<std::string> overrides;  // --set section.key=value
  std::string device = "h100-sxm";     // a built-in profile or a TOML file
  int nodes = 0, devices_per_node = 0, devices = 0;  // any two fix the third
  // The network between nodes, replacing the profile's (the cpu profile knows one machine
  // only): Gbit/s per device and direction, and latency per message; 0: the profile's.
  double inter_node_gbps = 0, inter_node_latency_us = 0;
  double expert_load = 1;  // Cluster::expert_load
  // --device cpu: the ranks sharing this machine's cores (0: a node's devices). Emulated
  // hosts (scripts/hosts.sh) are nodes that share one machine: give every rank.
  int cpu_ranks = 0;
  int seq_len = 0;                     // 0: the config's train.seq_len
  int batch = 0;                       // sequences per step; 0: the config's train.batch_size
  std::string precision;               // fp32, bf16, fp16; empty: the config's
  bool fp8 = false;
  std::string zero_stages, micro_batches, recompute, schedules, cp_modes, offloads;  // comma lists; empty: all
  std::string disk_dir = "/tmp";       // --device cpu: where the disk bandwidth is measured
  int max_tp = 0;                      // 0: one node's devices
  int top = 10;                        // table rows
  std::string json, csv;               // write every layout
  bool validate = false;               // hold the planner to runs on this machine
  std::string validate_dir;            // where those runs go (empty: a temporary folder)
  bool keep_runs = false;
  double time_bound = 20;              // --validate: the step-time error allowed on every run, percent
  std::string validate_models = "small";  // --validate: small or tiny (plan/validation.h)
  int validate_rounds = 3;             // --validate: times the set runs (--rounds)
  bool calibrate = false;              // measure this machine's constants into a device file
  int calibrate_ranks = 0;             // the ranks sharing the machine (0: devices_per_node, else 1)
  std::string calibrate_out;           // the device file --calibrate writes
  bool calibrate_rank = false;         // one of the measuring ranks --calibrate starts
  bool device_given = false;           // --device on the command line (--validate: device files)
};
int run_plan(const PlanOptions& options);

}  // namespace ndt
