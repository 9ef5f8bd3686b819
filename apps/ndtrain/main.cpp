// ndtrain: distributed training of transformer language models.
//   ndtrain train CONFIG [--set section.key=value ...] [--resume [DIR|latest]] [--overwrite] [--layout manual|auto]
//   ndtrain prepare INPUT... --out DIR [--val-fraction F] [--force]
//                   [--tokenizer FILE [--documents file|line|jsonl] [--jsonl-field F] [--shard-tokens N]
//                    [--separator TOKEN] [--threads N] [--special-in-text]]
//   ndtrain tokenize --tokenizer FILE [--decode] [--ordinary]
//   ndtrain bench train [--preset NAME] [--batch B] [--seq T] [--threads N] [--steps S] [--zero-stage Z]
//                       [--tp N] [--sequence-parallel] [--cp N] [--cp-mode M] [--cp-chunks C] [--cp-ulysses U]
//                       [--ep N] [--vocab V]
//                       [--activation-checkpointing P]
//                       [--checkpointing-every K] [--memory-budget-gib G]
//   ndtrain bench tokenizer [--text FILE] [--threads N]
//   ndtrain bench checkpoint [--preset NAME] [--dir DIR] [--reps R]
//   ndtrain bench offload [--part io|overhead|capacity|all] [--dir DIR] [--rounds R] [--memory-gib G] [--disk-gib D]
//   mpirun -np P ndtrain bench pipeline [--layers L] [--seq T] [--micro-batches M] [--schedules S,...]
//                                       [--seq-chunks K]
//   ndtrain bench recompute [--preset NAME] [--batch B] [--seq T] [--threads N] [--rounds R] [--memory-budget-gib G]
//   mpirun -np N ndtrain bench comm [--max-bytes B] [--iters I] [--async]
//   mpirun -np N ndtrain bench overlap [--bytes B] [--poll-ms MS]
//   ndtrain config
//   ndtrain simulate-pipeline --schedule S --pp P [--virtual-stages V] [--seq-chunks K] --micro-batches M
//                             [--svg FILE]
//                             [--forward-cost F] [--backward-cost B] [--backward-input-cost BI]
//                             [--backward-weight-cost BW] [--communication-cost C]
//   ndtrain plan (--preset NAME | --config FILE) [--device D] [--nodes N] [--devices-per-node G] [--devices D]
//                [--seq T] [--batch B] [--precision P] [--top K] [--json FILE] [--csv FILE] [search lists]
//   ndtrain plan --validate [--validate-dir DIR] [--validate-models small|tiny]
//   ndtrain convert --from SRC (--to DST | --to-hf DIR [--max-shard-size BYTES] [--tokenizer FILE])
//                   [--n-head N] [--dtype f32|bf16|f16] [--merge-lora | --peft]
//   ndtrain generate --checkpoint PATH --prompt TEXT [--tokens N] [--temperature T] [--top-k K] [--seed S]
//                    [--raw-tokens]
//   ndtrain report RUN_DIR [--out FILE]
#include "apps/ndtrain/commands.h"
#include "comm/mpi_runtime.h"
#include "core/error.h"
#include "core/printable.h"
#include "kernels/cpu/blas_core.h"

#include <CLI/CLI.hpp>
#include <mpi.h>
#include <fmt/format.h>

#include <cstdio>
#include <set>
#include <cstdlib>
#include <exception>
#include <optional>

// Prints the error (with the rank when several ranks run) and ends the job. Under MPI
// the whole job is aborted: the other ranks may be inside a collective and would
// otherwise wait for this one.
static int fail_job(int code, const char* kind, const char* raw_message) {
  std::fflush(stdout);
  // Messages quote what users and files gave (a metrics line, a value): their control
  // characters are shown, never obeyed by the terminal.
  const std::string text = ndt::printable_text(raw_message, /*keep_newlines=*/true);
  const char* message = text.c_str();
  if (ndt::launched_by_mpi()) {
    fmt::print(stderr, "ndtrain: rank {}: {}: {}\n", ndt::launched_rank(), kind, message);
  } else {
    fmt::print(stderr, "ndtrain: {}: {}\n", kind, message);
  }
  std::fflush(stderr);
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, code);
  return code;
}

int main(int argc, char** argv) {
  // OpenBLAS chose its kernels when it loaded, before main; where it fell back to kernels
  // weaker than this CPU supports, restart with the right ones (before MPI starts).
  ndt::cpu::restart_with_recommended_blas_core(argv);
  CLI::App app{"ndtrain: distributed training for transformer language models"};
  app.require_subcommand(1);

  std::string config_path;
  std::vector<std::string> overrides;
  auto* train = app.add_subcommand("train", "Train a model described by a TOML config");
  train->add_option("config", config_path, "Config file (see `ndtrain config` for every key)")->required();
  train->add_option("--set", overrides, "Override a config key: section.key=value (repeatable)");
  std::string resume;
  train->add_option("--resume", resume,
                    "Resume from a checkpoint directory, or \"latest\" (the newest under checkpoint.dir); any mesh")
      ->expected(0, 1)
      ->default_str("latest");
  std::string layout;
  train->add_option("--layout", layout,
                    "manual (the config's layout) or auto (the planner's fastest layout for this world size, the "
                    "layout keys the config gives kept fixed): parallel.layout");
  bool overwrite = false;
  train->add_flag("--overwrite", overwrite,
                  "Allow deleting checkpoints this run does not continue from (an earlier run's, or newer than "
                  "the resumed step)");

  std::vector<std::string> inputs;
  std::string out_dir;
  double val_fraction = 0.1;
  bool force_prepare = false;
  auto* prepare = app.add_subcommand(
      "prepare",
      "Turn text files or folders into byte-level token shards (train.bin and val.bin need at least 2 tokens "
      "each; training reads train.seq_len + 1 tokens per row)");
  prepare->add_option("inputs", inputs, "Text files or folders (folders: every text file inside, sorted)")
      ->required();
  prepare->add_option("--out", out_dir, "Folder for train.bin and val.bin")->required();
  prepare->add_option("--val-fraction", val_fraction, "Fraction of the bytes (the end) kept for validation");
  prepare->add_flag("--force", force_prepare, "Replace train.bin and val.bin if the folder already holds them");
  ndt::TokenPrepareOptions token_prepare;
  prepare->add_option("--tokenizer", token_prepare.tokenizer,
                      "Encode with this tokenizer (tokenizer.json, encoder.json or *.tiktoken; docs/data.md) into "
                      "train_NNNNNN.bin / val_NNNNNN.bin shards; without it: byte-level train.bin / val.bin");
  prepare->add_option("--format", token_prepare.format,
                      "With --tokenizer: text (documents), or JSONL conversations with loss masks beside the shards: "
                      "chat ({\"messages\": [{\"role\", \"content\"}]}) or prompt-response ({\"prompt\", "
                      "\"response\"}); docs/data.md");
  prepare->add_option("--chat-template", token_prepare.chat_template,
                      "With --format chat|prompt-response: auto (the tokenizer folder's when known, else default), "
                      "tokenizer, default, chatml or llama3");
  prepare->add_option("--documents", token_prepare.documents, "With --tokenizer: a document per file, line or jsonl");
  prepare->add_option("--jsonl-field", token_prepare.jsonl_field, "With --documents jsonl: the text field");
  prepare->add_option("--shard-tokens", token_prepare.shard_tokens, "With --tokenizer: tokens per shard");
  prepare->add_option("--separator", token_prepare.separator,
                      "With --tokenizer: the token before each document (default: the tokenizer's EOS)");
  prepare->add_option("--threads", token_prepare.threads, "With --tokenizer: encoding threads (0: every core)");
  prepare->add_flag("--special-in-text", token_prepare.special_in_text,
                    "With --tokenizer: special tokens written in documents are special (default: plain text)");

  auto* config = app.add_subcommand("config", "Print every config key with its default and meaning");

  ndt::TokenizeOptions tokenize_options;
  auto* tokenize = app.add_subcommand("tokenize", "Standard input to token ids on one line (or --decode: back to text)");
  tokenize->add_option("--tokenizer", tokenize_options.tokenizer,
                       "tokenizer.json, GPT-2's encoder.json (vocab.bpe beside it) or a *.tiktoken rank file")
      ->required();
  tokenize->add_flag("--decode", tokenize_options.decode, "Read space-separated ids and write the bytes they stand for");
  tokenize->add_flag("--ordinary", tokenize_options.ordinary,
                     "Special tokens in the text are plain text, and no template tokens (BOS) are added");

  ndt::TrainBenchOptions bench_options;
  auto* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);
  auto* bench_train = bench->add_subcommand("train", "Training-step throughput against sgemm, and memory");
  bench_train->add_option("--preset", bench_options.preset, "Model preset");
  bench_train->add_option("--batch", bench_options.batch, "Sequences per step");
  bench_train->add_option("--seq", bench_options.seq_len, "Tokens per sequence");
  bench_train->add_option("--threads", bench_options.threads, "Compute threads");
  bench_train->add_option("--steps", bench_options.steps, "Timed steps (after one warm-up step)");
  bench_train->add_option("--zero-stage", bench_options.zero_stage,
                          "Under mpirun: 0 DDP, 1-2 ZeRO, 3 FSDP (every rank on dp_shard)");
  bench_train->add_flag("!--no-prefetch", bench_options.prefetch, "FSDP: do not prefetch the next block's all-gather");
  bench_train->add_option("--tp", bench_options.tp, "Under mpirun: tensor-parallel ranks per group");
  bench_train->add_flag("--sequence-parallel", bench_options.sequence_parallel, "With --tp: sequence parallel")
      ->needs("--tp");
  bench_train->add_option("--cp", bench_options.cp, "Under mpirun: context-parallel ranks per group (docs/context_parallel.md)");
  bench_train->add_option("--cp-mode", bench_options.cp_mode, "With --cp: ring, ulysses or usp (with --cp-ulysses)")
      ->needs("--cp");
  bench_train->add_option("--ep", bench_options.ep, "Under mpirun, with an MoE preset (gpt2-moe-tiny, llama-moe-tiny): expert-parallel ranks, borrowed from the data-parallel ranks (docs/moe.md)");
  bench_train->add_option("--cp-chunks", bench_options.cp_chunks, "With --cp: zigzag or contiguous")->needs("--cp");
  bench_train->add_option("--cp-ulysses", bench_options.cp_ulysses,
                          "With --cp-mode usp: the Ulysses ranks of each group; the rest of --cp is the ring")
      ->needs("--cp-mode");
  bench_train->add_option("--activation-checkpointing", bench_options.activation_checkpointing,
                          "none, full or selective (train.activation_checkpointing)");
  bench_train->add_option("--checkpointing-every", bench_options.checkpointing_every,
                          "With full: recompute every k-th block (train.activation_checkpointing_every)")
      ->needs("--activation-checkpointing");
  bench_train->add_option("--memory-budget-gib", bench_options.memory_budget_gib,
                          "Report the largest batch whose predicted memory fits this budget (GiB per rank)");
  bench_train->add_option("--precision", bench_options.precision,
                          "Compute dtype of matmuls and saved activations: fp32, bf16 or fp16 (docs/precision.md)");
  bench_train->add_option("--reduce-dtype", bench_options.reduce_dtype,
                          "Under mpirun: dtype of the data-parallel gradient reductions, fp32 or bf16");
  bench_train->add_option("--lora-rank", bench_options.lora_rank,
                          "LoRA fine-tuning of this rank (lora.rank; 0: full training; docs/fine_tuning.md)");
  bench_train->add_option("--lora-alpha", bench_options.lora_alpha, "With --lora-rank: lora.alpha")->needs("--lora-rank");
  bench_train->add_option("--lora-targets", bench_options.lora_targets, "With --lora-rank: lora.targets, comma-separated")
      ->needs("--lora-rank");
  bench_train->add_option("--freeze", bench_options.freeze, "train.freeze's patterns, comma-separated");
  bench_train->add_flag("--profile", bench_options.profile,
                        "Time the kernels by op class and the communication; print the median step's profile");
  bench_train->add_flag("--peak-each-step", bench_options.peak_each_step,
                        "Sample the peak's rate (an FMA trial; low-precision GEMMs too where they are the peak) "
                        "between the steps and print each step's MFU against the samples on its two sides");
  bench_train->add_option("--vocab", bench_options.vocab,
                          "Override the preset's vocabulary size (gpt2's 50257 does not split over tp; 50304 does)");
  bench_train->add_option("--model", bench_options.model_settings,
                          "A model key over the preset's, model.KEY=VALUE as in a config file (repeatable; e.g. "
                          "model.d_model=512)");

  ndt::CheckpointBenchOptions checkpoint_bench;
  ndt::TokenizerBenchOptions tokenizer_bench;
  auto* bench_tokenizer = bench->add_subcommand(
      "tokenizer", "Encode MB/s of GPT-2's and Llama 3's tokenizers, one thread and all, beside the npm references");
  bench_tokenizer->add_option("--text", tokenizer_bench.text, "Text file (default: Debian's fortunes)");
  bench_tokenizer->add_option("--threads", tokenizer_bench.threads, "Threads of the parallel run (0: every core)");
  auto* bench_checkpoint = bench->add_subcommand("checkpoint", "Blocked time of sync vs async saves, save/load MB/s");
  bench_checkpoint->add_option("--preset", checkpoint_bench.preset, "Model preset");
  bench_checkpoint->add_option("--dir", checkpoint_bench.dir, "Folder to write checkpoints into");
  bench_checkpoint->add_option("--batch", checkpoint_bench.batch, "Sequences per training step");
  bench_checkpoint->add_option("--seq", checkpoint_bench.seq_len, "Tokens per sequence");
  bench_checkpoint->add_option("--threads", checkpoint_bench.threads, "Compute threads");
  bench_checkpoint->add_option("--reps", checkpoint_bench.reps, "Repetitions (medians reported)");

  ndt::OffloadBenchOptions offload_bench;
  auto* bench_offload = bench->add_subcommand(
      "offload", "Offload (docs/offload.md): I/O backends, optimizer-offload overhead, the largest model with and without");
  bench_offload->add_option("--part", offload_bench.part, "io, overhead, capacity or all");
  bench_offload->add_option("--dir", offload_bench.dir, "Folder for the swap files and disk probes");
  bench_offload->add_option("--threads", offload_bench.threads, "Compute threads");
  bench_offload->add_option("--rounds", offload_bench.rounds, "Rounds (medians reported)");
  bench_offload->add_option("--probe-gib", offload_bench.probe_gib, "io: GiB written and read per probe");
  bench_offload->add_option("--preset", offload_bench.preset, "overhead: the model (one that fits in memory)");
  bench_offload->add_option("--batch", offload_bench.batch, "overhead: sequences per step");
  bench_offload->add_option("--seq", offload_bench.seq_len, "overhead: tokens per sequence");
  bench_offload->add_option("--memory-gib", offload_bench.memory_gib, "capacity: memory budget (default 90% of available)");
  bench_offload->add_option("--disk-gib", offload_bench.disk_gib, "capacity: disk budget (default half the free space)");
  bench_offload->add_option("--capacity-batch", offload_bench.capacity_batch, "capacity: sequences per step");
  bench_offload->add_option("--capacity-seq", offload_bench.capacity_seq, "capacity: tokens per sequence");
  bench_offload->add_option("--capacity-steps", offload_bench.capacity_steps, "capacity: steps trained per model");
  bench_offload->add_option("--compute-batch", offload_bench.compute_batch,
                            "capacity: the offloaded model again at this batch (compute above its I/O)");
  bench_offload->add_option("--capacity-runs", offload_bench.capacity_runs,
                            "capacity: which models to train: memory, offload or memory,offload (none: only choose)");

  ndt::RecomputeBenchOptions recompute_bench;
  auto* bench_recompute =
      bench->add_subcommand("recompute", "Activation checkpointing policies interleaved: step time, memory, FLOPs");
  bench_recompute->add_option("--preset", recompute_bench.preset, "Model preset");
  bench_recompute->add_option("--batch", recompute_bench.batch, "Sequences per step");
  bench_recompute->add_option("--seq", recompute_bench.seq_len, "Tokens per sequence");
  bench_recompute->add_option("--threads", recompute_bench.threads, "Compute threads");
  bench_recompute->add_option("--rounds", recompute_bench.rounds, "Rounds of one step per policy (medians reported)");
  bench_recompute->add_option("--memory-budget-gib", recompute_bench.memory_budget_gib,
                              "Report the largest batch whose predicted memory fits this budget");

  ndt::PipelineBenchOptions pipeline_bench;
  auto* bench_pipeline =
      bench->add_subcommand("pipeline", "Pipeline schedules under mpirun: measured bubble against the simulator's");
  bench_pipeline->add_option("--preset", pipeline_bench.preset, "Model preset");
  bench_pipeline->add_option("--layers", pipeline_bench.layers, "Blocks (model.n_layer)");
  bench_pipeline->add_option("--seq", pipeline_bench.seq_len, "Tokens per sequence");
  bench_pipeline->add_option("--micro-batches", pipeline_bench.micro_batches, "Micro-batches per step (m)");
  bench_pipeline->add_option("--micro-batch-size", pipeline_bench.micro_batch_size, "Sequences per micro-batch");
  bench_pipeline->add_option("--steps", pipeline_bench.steps, "Timed steps per schedule (medians reported)");
  bench_pipeline->add_option("--schedules", pipeline_bench.schedules, "Comma-separated parallel.pp_schedule names");
  bench_pipeline->add_option("--seq-chunks", pipeline_bench.seq_chunks, "Sequence chunks per micro-batch of seq1f1b");

  // bench comm / bench overlap (apps/ndtrain/bench_comm.cpp)
  ndt::CommBenchOptions comm_bench;
  auto* bench_comm = bench->add_subcommand("comm", "Collective bandwidth of the Communicator vs raw MPI (mpirun)");
  bench_comm->add_option("--min-bytes", comm_bench.min_bytes, "Smallest buffer in bytes");
  bench_comm->add_option("--max-bytes", comm_bench.max_bytes, "Largest buffer in bytes");
  bench_comm->add_option("--step-factor", comm_bench.step_factor, "Size multiplier between rows");
  bench_comm->add_option("--iters", comm_bench.iters, "Timed iterations per size");
  bench_comm->add_option("--warmup", comm_bench.warmup, "Untimed iterations per size");
  bench_comm->add_flag("--async", comm_bench.async, "Time the non-blocking form + wait");
  ndt::OverlapBenchOptions overlap_bench;
  auto* bench_overlap = bench->add_subcommand("overlap", "All-reduce hidden behind compute, per progress method (mpirun)");
  bench_overlap->add_option("--bytes", overlap_bench.bytes, "All-reduce size in bytes");
  bench_overlap->add_option("--reps", overlap_bench.reps, "Runs per mode (median reported)");
  bench_overlap->add_option("--poll-ms", overlap_bench.poll_ms, "test() interval for polling");
  bench_overlap->add_option("--compute-ms", overlap_bench.compute_ms, "Compute length (0: the all-reduce's)");

  ndt::SimulatePipelineOptions pipeline_options;
  auto* simulate_pipeline = app.add_subcommand(
      "simulate-pipeline", "Time a pipeline schedule with per-action costs: timeline, bubble, live activations");
  simulate_pipeline->add_option("--schedule", pipeline_options.schedule,
                                "gpipe, 1f1b, interleaved_1f1b, zb_h1, zb_v, dualpipev or seq1f1b");
  simulate_pipeline->add_option("--pp", pipeline_options.pp, "Pipeline ranks");
  simulate_pipeline->add_option("--virtual-stages", pipeline_options.virtual_stages,
                                "Chunks per rank (interleaved_1f1b: 2 or more; zb_v, dualpipev: 2)");
  simulate_pipeline->add_option("--seq-chunks", pipeline_options.seq_chunks,
                                "Sequence chunks per micro-batch (seq1f1b: 2 or more)");
  simulate_pipeline->add_option("--micro-batches", pipeline_options.micro_batches, "Micro-batches per step");
  simulate_pipeline->add_option("--svg", pipeline_options.svg, "Also draw the timeline into this SVG file");
  simulate_pipeline->add_option("--forward-cost", pipeline_options.costs.forward,
                                "Forward of one micro-batch through one rank's layers");
  simulate_pipeline->add_option("--backward-cost", pipeline_options.costs.backward, "Fused backward, likewise");
  simulate_pipeline->add_option("--backward-input-cost", pipeline_options.costs.backward_input,
                                "Zero bubble: the input-gradient half of the backward");
  simulate_pipeline->add_option("--backward-weight-cost", pipeline_options.costs.backward_weight,
                                "Zero bubble: the weight-gradient half of the backward");
  simulate_pipeline->add_option("--communication-cost", pipeline_options.costs.communication,
                                "From a boundary tensor's send to its arrival");

  ndt::PlanOptions plan_options;
  auto* plan = app.add_subcommand(
      "plan", "Score every layout of a model on a cluster: memory, communication, step time, MFU (docs/planner.md)");
  plan->add_option("--preset", plan_options.preset, "Model preset (e.g. llama3-405b)");
  plan->add_option("--config", plan_options.config, "A train config file: its model, sequence length, batch, precision");
  plan->add_option("--set", plan_options.overrides, "Override a config key: section.key=value (repeatable)");
  plan->add_option("--device", plan_options.device,
                   "a100-80g, h100-sxm, h200, b200, cpu (this machine, measured) or a TOML file (docs/planner.md)");
  plan->add_option("--nodes", plan_options.nodes, "Nodes");
  plan->add_option("--devices-per-node", plan_options.devices_per_node, "Devices per node (default: the profile's)");
  plan->add_option("--inter-node-gbps", plan_options.inter_node_gbps,
                   "The network between nodes, Gbit/s per link and direction (default: the profile's; the cpu "
                   "profile measures one machine, docs/multinode.md)");
  plan->add_option("--cpu-ranks", plan_options.cpu_ranks,
                   "--device cpu: the ranks sharing this machine's cores (default: a node's devices; emulated hosts "
                   "share one machine: give every rank)");
  plan->add_option("--inter-node-latency-us", plan_options.inter_node_latency_us,
                   "Latency of a message between nodes, microseconds (default: the profile's)");
  plan->add_option("--expert-load", plan_options.expert_load,
                   "MoE under ep: the most loaded ep rank's expert rows over the mean rank's that the step time "
                   "assumes (default 1: balanced routing; a run records its own in metrics.jsonl, moe.expert_load)");
  plan->add_option("--devices", plan_options.devices, "Devices in all (any two of the three sizes fix the third)");
  plan->add_option("--seq", plan_options.seq_len, "Tokens per sequence (default: the config's train.seq_len)");
  plan->add_option("--batch", plan_options.batch, "Sequences per step (default: the config's train.batch_size)");
  plan->add_option("--precision", plan_options.precision, "fp32, bf16 or fp16 (default: the config's)");
  plan->add_flag("--fp8", plan_options.fp8, "The blocks' linear layers in fp8 (with --precision bf16)");
  plan->add_option("--zero-stages", plan_options.zero_stages, "Comma list to search (default 0,1,2,3)");
  plan->add_option("--micro-batch-sizes", plan_options.micro_batches, "Comma list to search (default 1,2,4,8)");
  plan->add_option("--recompute", plan_options.recompute, "Comma list to search (default none,selective,full)");
  plan->add_option("--schedules", plan_options.schedules,
                   "Comma list of pipeline schedules to search (default 1f1b,interleaved_1f1b,zb_h1,zb_v,dualpipev,gpipe)");
  plan->add_option("--cp-modes", plan_options.cp_modes,
                   "Comma list to search (default ring,ulysses,usp; usp with every parallel.cp_ulysses)");
  plan->add_option("--offload", plan_options.offloads,
                   "Comma list of offload choices to search, where the device has a disk bandwidth (--device cpu "
                   "measures one; default none,optimizer,params; docs/offload.md)");
  plan->add_option("--disk-dir", plan_options.disk_dir,
                   "With --device cpu: the folder whose disk is measured for offload (default /tmp)");
  plan->add_option("--max-tp", plan_options.max_tp, "Largest tp searched (default: one node's devices)");
  plan->add_option("--top", plan_options.top, "Rows of the table");
  plan->add_option("--json", plan_options.json, "Write every layout scored (and why the others were rejected) as JSON");
  plan->add_option("--csv", plan_options.csv, "The same as CSV");
  auto* validate = plan->add_flag("--validate", plan_options.validate,
                                  "Instead: train small layouts on this machine (1, 2, 4 ranks) and hold the planner to them "
                                  "(with --device: calibrated device files, one per rank count; without, it calibrates)");
  // An option that does nothing is refused, never ignored: the validation's own options
  // need --validate, and --validate plans nothing else.
  plan->add_option("--validate-dir", plan_options.validate_dir, "With --validate: the folder for the runs (kept)")
      ->needs(validate);
  plan->add_flag("--keep-runs", plan_options.keep_runs, "With --validate: keep the temporary folder")->needs(validate);
  plan->add_option("--time-bound", plan_options.time_bound,
                   "With --validate: the largest step-time error allowed on any run, percent (default 20)")
      ->needs(validate);
  plan->add_option("--validate-models", plan_options.validate_models,
                   "With --validate: small (default; d_model 256, steps of 0.1-0.4 s on 2 cores) or tiny (the tiny "
                   "presets, CI's)")
      ->needs(validate);
  plan->add_option("--rounds", plan_options.validate_rounds,
                   "With --validate: run the set this many times (default 3, at most 10); each run's step is the median "
                   "over the rounds, and the rounds are set against each other (the machine's repeatability)")
      ->needs(validate);
  auto* calibrate = plan->add_flag("--calibrate", plan_options.calibrate,
                                   "Instead: measure the step-time model's constants on this machine as --ranks ranks "
                                   "share it and write them as a device file (--out)");
  plan->add_option("--ranks", plan_options.calibrate_ranks,
                   "With --calibrate: the ranks sharing this machine (default: --devices-per-node, else 1)")
      ->needs(calibrate);
  auto* out = plan->add_option("--out", plan_options.calibrate_out, "With --calibrate: the device file to write");
  // The measuring ranks --calibrate starts under mpirun.
  auto* calibrate_rank = plan->add_flag("--calibrate-rank", plan_options.calibrate_rank)->group("")->needs(out);
  const std::set<std::string> validate_options = {"--validate", "--validate-dir", "--keep-runs", "--time-bound",
                                                  "--validate-models", "--rounds", "--device", "--help"};
  const std::set<std::string> calibrate_options = {"--calibrate", "--ranks", "--devices-per-node", "--out", "--help",
                                                   "--calibrate-rank"};
  for (CLI::Option* option : plan->get_options()) {
    const std::string name = option->get_name();
    if (!validate_options.count(name) && option != validate) option->excludes(validate);
    if (!calibrate_options.count(name) && option != calibrate) option->excludes(calibrate);
    if (name != "--out" && name != "--help" && option != calibrate_rank) option->excludes(calibrate_rank);
  }
  ndt::ConvertOptions convert_options;
  auto* convert = app.add_subcommand("convert", "Convert a model between safetensors, llm.c, Hugging Face folders and checkpoints");
  convert->add_option("--from", convert_options.from,
                      "*.safetensors, *.bin (llm.c), a Hugging Face folder, a checkpoint, a folder of step-* "
                      "checkpoints or a run folder")
      ->required();
  auto* convert_to = convert->add_option("--to", convert_options.to,
                                         "*.safetensors, *.bin (llm.c) or a new checkpoint directory");
  auto* convert_to_hf = convert->add_option(
      "--to-hf", convert_options.to_hf,
      "A new Hugging Face model folder: config.json, model.safetensors (or shards with an index), tokenizer files");
  convert_to->excludes(convert_to_hf);
  convert->add_option("--max-shard-size", convert_options.max_shard_size,
                      "--to-hf: most bytes per safetensors shard (default 5000000000, as transformers' 5GB)")
      ->needs(convert_to_hf);
  convert->add_option("--tokenizer", convert_options.tokenizer,
                      "--to-hf: a tokenizer file to copy into the folder (a source folder's own are copied too)")
      ->needs(convert_to_hf);
  convert->add_option("--n-head", convert_options.n_head, "Heads, for safetensors without ndtrain metadata");
  convert->add_option("--dtype", convert_options.dtype,
                      "Store the parameters as f32 (default), bf16 or f16 (safetensors; llm.c: f32 or bf16)");
  convert->add_flag("--merge-lora", convert_options.merge_lora,
                    "LoRA: write the merged weights W + (alpha / r) B A, without adapters (docs/fine_tuning.md)");
  convert->add_flag("--peft", convert_options.peft,
                    "LoRA: write the adapters alone to the folder --to, as PEFT's adapter_model.safetensors and "
                    "adapter_config.json");

  ndt::GenerateOptions generate_options;
  auto* generate = app.add_subcommand("generate", "Sample a continuation of a prompt from a checkpoint");
  generate->add_option("--checkpoint", generate_options.checkpoint,
                       "A checkpoint, a folder of step-* checkpoints, a run folder (latest) or a Hugging Face model folder")
      ->required();
  generate->add_option("--prompt", generate_options.prompt, "Text (or token ids with --raw-tokens)")->required();
  generate->add_option("--tokens", generate_options.sample.tokens, "Tokens to generate");
  generate->add_option("--temperature", generate_options.sample.temperature, "Sampling temperature (0: greedy)");
  generate->add_option("--top-k", generate_options.sample.top_k, "Sample among the k likeliest (0: all)");
  generate->add_option("--seed", generate_options.sample.seed, "Sampling seed");
  generate->add_option("--tokenizer", generate_options.tokenizer,
                       "Tokenizer for the prompt and the output (default: the one recorded beside the run's shards)");
  generate->add_flag("--raw-tokens", generate_options.raw_tokens,
                     "Prompt and output as comma-separated token ids (any vocabulary)");

  ndt::ReportOptions report_options;
  auto* report = app.add_subcommand("report", "A run's metrics as an HTML page of charts, and a summary");
  report->add_option("run_dir", report_options.run_dir, "The run folder (runtime.out_dir), holding metrics.jsonl")
      ->required();
  report->add_option("--out", report_options.out, "The HTML file to write (default RUN_DIR/report.html)");

  CLI11_PARSE(app, argc, argv);
  // Under mpirun/srun MPI lives for the whole process, outside the try: an error is
  // reported and aborts the job before any MPI_Finalize could wait on other ranks.
  std::optional<ndt::MpiRuntime> mpi;
  if (ndt::launched_by_mpi()) mpi.emplace();
  try {
    if (*train) {
      if (train->count("--resume") > 0) overrides.push_back("checkpoint.resume=" + (resume.empty() ? "latest" : resume));
      if (overwrite) overrides.push_back("checkpoint.overwrite=true");
      if (!layout.empty()) overrides.push_back("parallel.layout=" + layout);
      return ndt::run_train(config_path, overrides);
    }
    if (*prepare && !token_prepare.tokenizer.empty()) {
      token_prepare.out_dir = out_dir, token_prepare.val_fraction = val_fraction, token_prepare.overwrite = force_prepare;
      return ndt::run_prepare_tokens(inputs, token_prepare);
    }
    if (*prepare) {
      NDT_CHECK(token_prepare.format == "text", "prepare --format {} needs --tokenizer (the chat template's tokens)",
                token_prepare.format);
      return ndt::run_prepare(inputs, out_dir, val_fraction, force_prepare);
    }
    if (*config) return ndt::run_config_doc();
    if (*tokenize) return ndt::run_tokenize(tokenize_options);
    if (*bench_train) return ndt::run_bench_train(bench_options);
    if (*bench_tokenizer) return ndt::run_bench_tokenizer(tokenizer_bench);
    if (*bench_checkpoint) return ndt::run_bench_checkpoint(checkpoint_bench);
    if (*bench_offload) return ndt::run_bench_offload(offload_bench);
    if (*bench_recompute) return ndt::run_bench_recompute(recompute_bench);
    if (*bench_pipeline) return ndt::run_bench_pipeline(pipeline_bench);
    if (*bench_comm) return ndt::run_bench_comm(comm_bench);
    if (*bench_overlap) return ndt::run_bench_overlap(overlap_bench);
    if (*simulate_pipeline) return ndt::run_simulate_pipeline(pipeline_options);
    if (*plan) {
      plan_options.device_given = plan->count("--device") > 0;
      return ndt::run_plan(plan_options);
    }
    if (*convert) return ndt::run_convert(convert_options);
    if (*generate) return ndt::run_generate(generate_options);
    if (*report) return ndt::run_report(report_options);
  } catch (const ndt::Error& e) {
    return fail_job(1, "error", e.what());
  } catch (const std::exception& e) {
    return fail_job(2, "internal error", e.what());
  }
  return 0;
}
