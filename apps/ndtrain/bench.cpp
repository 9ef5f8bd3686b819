// `ndtrain bench train`: training-step throughput of a model preset on synthetic
// tokens, next to the sgemm throughput of one of its matmuls at the same thread
// count, and the memory the ledger predicted against what the process used.
// Under mpirun with several ranks it runs data parallelism (the global batch split
// over the ranks) and also measures how much of the gradient all-reduce backward
// hides: steps with and without communication, and the all-reduces alone. With --tp
// the ranks form tensor-parallel groups (the rest data parallel), and the time spent
// in tp collectives is reported; with --cp context-parallel groups, and the bytes on cp,
// the time waiting for them and (ring) how much of the ring's transfers the block
// compute hid. It also prints, from the memory model, the longest sequence that fits
// the memory budget at cp = 1, 2, 4 and 8. With an MoE preset it reports MFU on the
// active parameters, the routing, the time in the all-to-alls (--ep), and the grouped
// expert GEMMs against one sgemm of the same total shape. With --profile it prints the
// median step's time by op class (GEMM by dtype, attention, ...), communication, barriers
// and the unaccounted rest (train/step_profile.h).
#include "apps/ndtrain/commands.h"
#include "core/timing.h"
#include "comm/device_mesh.h"
#include "comm/mpi_communicator.h"
#include "core/memory.h"
#include "core/rng.h"
#include "core/text_list.h"
#include "kernels/kernels.h"
#include "model/transformer.h"
#include "optim/clip.h"
#include "parallel/data/data_parallel.h"
#include "parallel/data/fsdp.h"
#include "parallel/memory_model.h"
#include "parallel/parallelize.h"
#include "parallel/context/ring_attention.h"
#include "parallel/context/usp_attention.h"
#include "parallel/tensor/tensor_parallel.h"
#include "apps/ndtrain/synthetic_rows.h"
#include "train/config.h"
#include "train/training_model.h"
#include "train/peak_flops.h"
#include "train/step_profile.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <functional>
#include <iterator>
#include <set>
#include <sstream>
#include <memory>
#include <optional>
#include <vector>

namespace ndt {

namespace {

// The CPU's vector and matrix features that decide the GEMM speed, from /proc/cpuinfo.
std::string cpu_feature_summary() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::set<std::string> flags{std::istream_iterator<std::string>(words), std::istream_iterator<std::string>()};
    std::string found;
    for (const char* f : {"avx2", "fma", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_tile"}) {
      if (!flags.count(f)) continue;
      if (!found.empty()) found += ' ';
      found += f;
    }
    return found.empty() ? "none of avx2, avx512, amx" : found;
  }
  return "unknown (no /proc/cpuinfo)";
}

// From the memory model (held to the ledger by tests): the longest sequence, in steps
// of 64 tokens, whose model states and activations for B sequences fit the budget,
// at cp = 1, 2, 4 and 8 (this rank's share of each sequence: T / cp). The model's
// positions reach the sequence (gpt2's learned table grows with it: states_at).
void print_longest_sequences(const ModelConfig& config, int B, const ActivationCheckpointing& checkpointing,
                             DType compute, int tp, bool sequence_parallel, const CpLayout& cp,
                             const std::function<int64_t(const ModelConfig&)>& states_at, double budget_bytes,
                             const std::function<void(const std::string&)>& print) {
  std::string line;
  for (int n : {1, 2, 4, 8}) {
    // USP needs a ring of 2 or more groups of cp_ulysses ranks.
    if (cp.mode == CpMode::usp && n > 1 && (n <= cp.ulysses || n % cp.ulysses != 0)) {
      line += fmt::format("{}cp={}: -", line.empty() ? "" : ", ", n);
      continue;
    }
    ActivationLayout layout{tp, sequence_parallel, CpLayout{n, cp.mode, cp.chunks, cp.ulysses}};
    ModelConfig long_model = config;
    int longest = 0;
    for (int T = 64;; T += 64) {
      long_model.max_seq_len = T;
      const int64_t bytes = Transformer::predict_activation_bytes(long_model, B, T, 256, layout, checkpointing, {},
                                                                  compute);
      if (static_cast<double>(states_at(long_model) + bytes) > budget_bytes || T > (1 << 20)) break;
      longest = T;
    }
    line += fmt::format("{}cp={}: {}", line.empty() ? "" : ", ", n, longest);
  }
  print(fmt::format("  longest sequence in {:.1f} GiB per rank for {} sequence{} (memory model, {}): {}\n",
                    budget_bytes / (1024.0 * 1024.0 * 1024.0), B, B == 1 ? "" : "s", cp_mode_name(cp.mode), line));
}

// The communicators context parallelism sends on: cp, and under USP its two parts.
std::vector<Axis> context_parallel_axes(const CpLayout& cp) {
  if (cp.mode == CpMode::usp) return {Axis::cp, Axis::cp_ulysses, Axis::cp_ring};
  return {Axis::cp};
}

// Context parallelism's traffic and, for the ring, the share of its transfers the block
// compute hid. A training step's waits on cp also hold the skew between ranks (each
// ring step is a rendezvous), so the hidden share is measured on one block's ring
// attention alone (forward and backward on random inputs of the step's shapes, every
// rank starting together): the time it waited on cp against the same transfers alone.
void print_context_parallel(DeviceMesh& mesh, const Transformer& model, const CpLayout& cp, int B, int T, int steps,
                            double cp_wait, double step_s, const std::function<void(const std::string&)>& print) {
  Communicator& comm = mesh.axis(Axis::cp);
  std::string sent;
  for (Axis axis : context_parallel_axes(cp)) {
    sent += fmt::format("{}{:.1f} MiB on {}", sent.empty() ? "" : ", ",
                        mesh.axis(axis).stats().total_wire_bytes() / double(1 << 20) / (steps + 1), axis_name(axis));
  }
  print(fmt::format("  context parallel ({}): sent per rank per step: {}; median {:.3f} s per step "
                    "waiting for it ({:.1f}% of the step)\n",
                    cp_mode_name(cp.mode), sent, cp_wait, 100.0 * cp_wait / step_s));
  if (cp.mode != CpMode::ring) return;
  const ModelConfig& c = model.config();
  const int n = cp.size, tp = model.tensor_parallel().size(), local = T / n, HS = c.head_dim();
  const int NH = c.n_head / tp, NKV = c.kv_heads() / tp;
  const int64_t N = int64_t{B} * local, QD = int64_t{NH} * HS, KD = int64_t{NKV} * HS;
  std::vector<float> q(static_cast<size_t>(N * QD)), k(static_cast<size_t>(N * KD)), out(q.size()), dq(q.size()),
      dk(k.size()), dv(k.size()), lse(static_cast<size_t>(int64_t{B} * NH * local)),
      scratch(static_cast<size_t>(context_parallel_scratch_floats(cp, B, local, NH, NKV, HS)));
  for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<float>(philox(3, 5, i)[0] % 1000) / 1000.0f - 0.5f;
  for (size_t i = 0; i < k.size(); ++i) k[i] = static_cast<float>(philox(3, 6, i)[0] % 1000) / 1000.0f - 0.5f;
  RingAttention ring(comm, cp);
  std::vector<double> alone, waits, totals;
  for (int rep = 0; rep < 3; ++rep) {
    mesh.world().barrier();
    const double waited = comm.stats().total_wait_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    ring.forward({out.data(), lse.data(), nullptr, q.data(), k.data(), k.data(), B, local, NH, NKV, HS,
                  scratch.data()});
    ring.backward({dq.data(), dk.data(), dv.data(), q.data(), q.data(), k.data(), k.data(), nullptr, out.data(),
                   lse.data(), B, local, NH, NKV, HS, scratch.data()});
    totals.push_back(seconds_since(t0));
    waits.push_back(comm.stats().total_wait_seconds() - waited);
    // The same transfers alone: (n - 1) K/V blocks forward, (n - 1) K/V blocks and n dK/dV
    // sums backward, each 2 N KD floats.
    mesh.world().barrier();
    const auto t1 = std::chrono::steady_clock::now();
    const int next = (comm.rank() + 1) % n, prev = (comm.rank() + n - 1) % n;
    const size_t block = static_cast<size_t>(2 * N * KD);
    for (int turn = 0; turn < 3 * n - 2; ++turn) {
      WorkHandle r = comm.irecv(scratch.data(), block, DType::f32, prev, 7);
      WorkHandle s = comm.isend(scratch.data() + block, block, DType::f32, next, 7);
      r->wait(), s->wait();
    }
    alone.push_back(seconds_since(t1));
  }
  // Each rank's wait: a rank that waits while its peer does not is waiting for the
  // peer's compute (skew), not for the wire.
  const float mine = static_cast<float>(median(waits));
  std::vector<float> rank_waits(static_cast<size_t>(n));
  comm.all_gather(&mine, rank_waits.data(), 1, DType::f32);
  std::string per_rank;
  for (float w : rank_waits) per_rank += fmt::format("{}{:.4f}", per_rank.empty() ? "" : ", ", w);
  const double wait = *std::min_element(rank_waits.begin(), rank_waits.end()), transfers = median(alone);
  print(fmt::format("  ring attention of one block alone (forward + backward): {:.4f} s; waiting on cp per rank {} s; "
                    "its transfers alone {:.4f} s -> {:.0f}% of the ring's communication hidden behind block compute "
                    "(by the least-waiting rank)\n",
                    median(totals), per_rank, transfers, 100.0 * std::clamp(1.0 - wait / transfers, 0.0, 1.0)));
}

// The routed experts' first matmul as the MoE layer runs it (one GEMM per expert over
// its rows, model/moe.h), against one sgemm over all the rows: the grouping's cost.
void print_grouped_experts(const ModelConfig& c, const std::vector<int64_t>& rows_per_expert,
                           const std::function<void(const std::string&)>& print) {
  const int64_t C = c.d_model, F = c.expert_d_ff();
  int64_t rows = 0;
  for (int64_t r : rows_per_expert) rows += r;
  if (rows == 0) return;
  std::vector<float> in(static_cast<size_t>(rows * C), 0.01f), w(static_cast<size_t>(c.n_experts * F * C), 0.02f),
      out(static_cast<size_t>(rows * F));
  std::vector<double> rates;
  for (int rep = 0; rep < 6; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    int64_t row = 0;
    for (size_t e = 0; e < rows_per_expert.size(); ++e) {
      const int n = static_cast<int>(rows_per_expert[e]);
      if (n > 0) kernels::linear_forward(out.data() + row * F, in.data() + row * C, w.data() + e * F * C, nullptr, n,
                                         static_cast<int>(C), static_cast<int>(F));
      row += n;
    }
    if (rep > 0) rates.push_back(2.0 * rows * C * F / seconds_since(t0));  // the first warms up
  }
  const double grouped = median(rates), one = measure_sgemm_flops(static_cast<int>(rows), static_cast<int>(F),
                                                                    static_cast<int>(C), 5);
  std::string counts;
  for (int64_t r : rows_per_expert) counts += fmt::format("{}{}", counts.empty() ? "" : " ", r);
  print(fmt::format("  grouped experts: {} GEMMs over [{}] rows x {} -> {} (one block's routing): {:.1f} GFLOP/s; one "
                    "sgemm {}x{}x{}: {:.1f} GFLOP/s -> grouped at {:.0f}% of sgemm\n",
                    rows_per_expert.size(), counts, C, F, grouped / 1e9, rows, F, C, one / 1e9, 100.0 * grouped / one));
}

// The preset, with --model's keys over it as a config file's [model] section would set them.
ModelConfig bench_model(const TrainBenchOptions& o) {
  if (o.model_settings.empty()) return ModelConfig::preset(o.preset);
  std::vector<std::string> keys{"model.preset=" + o.preset};
  for (const std::string& s : o.model_settings) {
    NDT_CHECK(s.starts_with("model.") && s.find('=') != std::string::npos,
              "--model {}: give a key of the model section and its value, model.KEY=VALUE (docs/config.md)", s);
    keys.push_back(s);
  }
  return read_run_config("", keys).model;
}

// The run the options describe, resolved for the mesh: what TrainingModel builds.
RunConfig bench_run_config(const TrainBenchOptions& o, const MeshShape& shape) {
  RunConfig c;
  c.model = bench_model(o);
  if (o.vocab > 0) c.model.vocab_size = o.vocab;
  if (o.lora_rank > 0) {
    c.model.lora.rank = o.lora_rank;
    c.model.lora.alpha = o.lora_alpha;
    c.model.lora.targets = split_trimmed(o.lora_targets);
  }
  if (!o.freeze.empty()) c.model.freeze = split_trimmed(o.freeze);
  // Long-context runs (--seq beyond the preset's): the model's positions reach --seq.
  c.model.max_seq_len = std::max(c.model.max_seq_len, o.seq_len);
  c.seed = 1;
  c.batch_size = o.batch;
  c.seq_len = o.seq_len;
  c.mesh = shape;
  c.zero_stage = o.zero_stage;
  c.prefetch = o.prefetch;
  c.sequence_parallel = o.sequence_parallel;
  c.cp_mode = cp_mode_from_name(o.cp_mode);
  c.cp_chunks = cp_chunks_from_name(o.cp_chunks);
  c.precision.compute = compute_dtype_from_config_name(o.precision, "--precision");
  c.reduce_dtype = reduce_dtype_from_config_name(o.reduce_dtype, "--reduce-dtype");
  c.activation_checkpointing = {checkpoint_mode_from_name(o.activation_checkpointing), o.checkpointing_every};
  c.threads = o.threads;
  c.validate_layout();
  return c.resolved(static_cast<int>(shape.product()));
}

// --peak-each-step: each step's MFU against the peak's rate sampled on its two sides.
std::string format_mfu_beside_steps(double flops_per_step, const std::vector<double>& step_seconds,
                                    const std::vector<double>& samples) {
  const std::vector<double> mfu = mfu_beside_steps(flops_per_step, step_seconds, samples);
  std::string steps, rates;
  for (double m : mfu) steps += fmt::format("{}{:.1f}%", steps.empty() ? "" : ", ", 100 * m);
  for (double r : samples) rates += fmt::format("{}{:.1f}", rates.empty() ? "" : ", ", r / 1e9);
  return fmt::format("  MFU against the peak sampled beside each step: median {:.1f}% (steps {}; samples {} GFLOP/s "
                     "per rank)\n",
                     100 * median(mfu), steps, rates);
}

}  // namespace

int run_bench_train(const TrainBenchOptions& o) {
  NDT_CHECK(o.batch > 0 && o.seq_len > 0, "--batch {} and --seq {} must be positive", o.batch, o.seq_len);
  NDT_CHECK(o.steps > 0, "--steps {} must be positive", o.steps);
  NDT_CHECK(!o.profile || o.steps >= 3, "--profile needs --steps 3 or more (it reports the median step), got --steps {}",
            o.steps);
  NDT_CHECK(std::isfinite(o.memory_budget_gib) && o.memory_budget_gib > 0, "--memory-budget-gib {} must be positive",
            o.memory_budget_gib);
  std::unique_ptr<Communicator> world = launched_by_mpi() ? mpi_world() : nullptr;
  const int ranks = world ? world->size() : 1, rank = world ? world->rank() : 0;
  NDT_CHECK(o.tp >= 1 && ranks % o.tp == 0, "--tp {} does not divide the {} ranks", o.tp, ranks);
  NDT_CHECK(o.cp >= 1 && (ranks / o.tp) % o.cp == 0, "--cp {} does not divide the {} ranks left by --tp {}", o.cp,
            ranks / o.tp, o.tp);
  const CpLayout cp_layout{o.cp, cp_mode_from_name(o.cp_mode), cp_chunks_from_name(o.cp_chunks), o.cp_ulysses};
  if (cp_layout.active()) validate_cp_ulysses(o.cp, cp_layout.mode, o.cp_ulysses);
  if (cp_layout.active()) cp_layout.check_sequence(o.seq_len);
  const int dp = ranks / o.tp / o.cp;
  NDT_CHECK(o.batch % dp == 0, "--batch {} is not a multiple of the {} data-parallel ranks", o.batch, dp);
  NDT_CHECK(o.ep == 1 || world, "--ep {} needs mpirun", o.ep);
  // ZeRO, and expert parallelism (which borrows dp_shard x cp), put the data-parallel ranks on dp_shard.
  MeshShape shape = o.zero_stage > 0 || o.ep > 1 ? MeshShape{1, 1, dp, o.cp, o.tp} : MeshShape{1, dp, 1, o.cp, o.tp};
  shape.ep = o.ep;
  shape.cp_ulysses = o.cp_ulysses;
  std::unique_ptr<DeviceMesh> mesh = world ? std::make_unique<DeviceMesh>(*world, shape) : std::make_unique<DeviceMesh>();
  auto print = [rank](const std::string& text) {
    if (rank == 0) fmt::print("{}", text), std::fflush(stdout);
  };

  kernels::set_num_threads(o.threads);
  const RunConfig run = bench_run_config(o, shape);
  const ModelConfig& config = run.model;
  const int B = o.batch / dp, T = o.seq_len, N = B * T;
  const size_t rss_before = process_current_rss_bytes();
  TrainingModel training(run, *mesh);
  Transformer& model = training.model();
  GradientSync* sync = &training.sync();
  const Precision& precision = run.precision;
  const ActivationCheckpointing& checkpointing = run.activation_checkpointing;
  auto* fsdp = dynamic_cast<FullyShardedDataParallel*>(sync);
  const FetchRows rows = synthetic_rows(T, config.vocab_size);
  const std::string usp_shape = o.cp_ulysses > 1 ? fmt::format(" {} x ring {}", o.cp_ulysses, o.cp / o.cp_ulysses) : "";
  std::string model_name = o.preset;
  for (const std::string& s : o.model_settings) model_name += " " + s;
  print(fmt::format("bench train: {} ({:.2f}M parameters, vocab {}), B={} T={}, {} rank{} x {} thread{}{}{}{}\n",
                    model_name, count_parameters(config) / 1e6, config.vocab_size, o.batch, T, ranks,
                    ranks == 1 ? "" : "s", o.threads, o.threads == 1 ? "" : "s",
                    o.zero_stage == 0 ? std::string(dp > 1 ? ", DDP" : "")
                                      : fmt::format(", ZeRO stage {}{}", o.zero_stage,
                                                    o.zero_stage == 3 && !o.prefetch ? " without prefetch" : ""),
                    o.tp > 1 ? fmt::format(", tp={}{}", o.tp, o.sequence_parallel ? " with sequence parallel" : "")
                             : "",
                    o.cp > 1 ? fmt::format(", cp={} ({}{}, {} chunks)", o.cp, o.cp_mode, usp_shape, o.cp_chunks) : "",
                    o.ep > 1 ? fmt::format(", ep={}", o.ep) : ""));
  if (config.is_moe()) {
    print(fmt::format("  mixture of experts: {} experts of width {}, top-{}: {:.2f}M of {:.2f}M matmul parameters "
                      "active per token (MFU counts those)\n",
                      config.n_experts, config.expert_d_ff(), config.moe_top_k, model.active_matmul_params() / 1e6,
                      model.matmul_params() / 1e6));
  }

  print(fmt::format("  matmuls: {}\n", kernels::gemm_library()));
  if (precision.low()) {
    print(fmt::format("  precision {}: matmuls {}; CPU features: {}\n", o.precision,
                      kernels::lowp_gemm_backend(precision.compute), cpu_feature_summary()));
  }
  if (dp > 1) print(fmt::format("  gradient reductions in {}\n", o.reduce_dtype));
  if (checkpointing.mode != CheckpointMode::none) {
    print(fmt::format("  activation checkpointing: {}{} (recompute adds {:.1f}% to the model's FLOPs)\n",
                      o.activation_checkpointing,
                      o.checkpointing_every > 1 ? fmt::format(" of every {}th block", o.checkpointing_every) : "",
                      100.0 * model.recompute_flops_per_token(T) / model.flops_per_token(T)));
  }

  // The trainer's forward and backward (TrainingModel), then a plain update.
  auto train_step = [&](bool communicate) {
    const auto t0 = std::chrono::steady_clock::now();
    training.compute_gradients(rows, 1.0f / static_cast<float>(o.batch * T), communicate);
    sync->step(1e-4f, clip_factor(sync->grad_norm(), 1.0f));
    if (world) world->barrier();  // time the slowest rank
    return seconds_since(t0);
  };

  // Seconds spent in tp and cp communication so far (blocking calls: the whole call;
  // non-blocking: the wait).
  auto axis_seconds = [&](Axis axis) { return mesh->axis(axis).stats().total_wait_seconds(); };
  auto cp_seconds = [&] {
    double total = 0;
    for (Axis axis : context_parallel_axes(cp_layout)) total += axis_seconds(axis);
    return total;
  };
  std::vector<double> seconds, gather_waits, tp_waits, cp_waits, ep_waits;
  MoeTotals moe;
  std::optional<StepProfiler> profiler;
  if (o.profile) profiler.emplace(*mesh);
  std::vector<StepProfile> profiles;
  std::vector<double> peak_samples;  // with --peak-each-step: after step 0 (the warm-up), 1, ...
  for (int s = 0; s <= o.steps; ++s) {
    if (profiler) profiler->begin();
    const double waited = fsdp ? fsdp->gather_wait_seconds() : 0, tp_before = axis_seconds(Axis::tp),
                 cp_before = cp_seconds(), ep_before = axis_seconds(Axis::ep);
    const double dt = train_step(true);
    const double gather_wait = fsdp ? fsdp->gather_wait_seconds() - waited : 0,
                 tp_wait = axis_seconds(Axis::tp) - tp_before, cp_wait = cp_seconds() - cp_before,
                 ep_wait = axis_seconds(Axis::ep) - ep_before;
    moe = model.take_moe_totals();  // the last step's
    print(fmt::format("  step {}: {:.3f} s{}{}{}{}{}\n", s, dt,
                      fsdp ? fmt::format(" (all-gather wait {:.3f} s)", gather_wait) : "",
                      o.tp > 1 ? fmt::format(" (tp collectives {:.3f} s)", tp_wait) : "",
                      o.cp > 1 ? fmt::format(" (cp communication {:.3f} s)", cp_wait) : "",
                      o.ep > 1 ? fmt::format(" (ep all-to-alls {:.3f} s)", ep_wait) : "",
                      s == 0 ? " (warm-up, not counted)" : ""));
    if (s > 0 && profiler) profiles.push_back(profiler->end(dt));
    if (o.peak_each_step) peak_samples.push_back(sample_peak_rate(o.threads, precision.compute, world.get()));
    if (s > 0) {
      seconds.push_back(dt), gather_waits.push_back(gather_wait), tp_waits.push_back(tp_wait);
      cp_waits.push_back(cp_wait), ep_waits.push_back(ep_wait);
    }
  }
  profiler.reset();  // the timers off for what follows
  const double step_s = median(seconds);
  const double tokens_per_s = o.batch * T / step_s;
  const double model_flops = model.flops_per_token(T) * tokens_per_s;

  // The MLP's first matmul: [N, C] x [C, 4C], the model's most common GEMM shape.
  const double sgemm = measure_sgemm_flops(N, config.d_ff, config.d_model);
  const PeakFlops peak_flops = resolve_peak_flops(0, o.threads, precision.compute);
  const double peak = peak_flops.flops_per_s;
  const ModelStateBytes states = predict_model_states(local_parameter_specs(model_parameter_specs(config), o.tp),
                                                      mesh->size(Axis::dp_shard_cp), o.zero_stage,
                                                      precision.compute, o.ep);
  const ActivationLayout tp_layout = model.activation_layout();
  const int64_t predicted_activations =
      Transformer::predict_activation_bytes(config, B, T, 256, tp_layout, checkpointing, {}, precision.compute);
  const double predicted_total = static_cast<double>(states.total() + predicted_activations);
  const MemoryLedger& ledger = MemoryLedger::instance();
  const double rss_used = static_cast<double>(process_peak_rss_bytes()) - rss_before;
  const double gib = 1024.0 * 1024.0 * 1024.0;

  print(fmt::format("  median step {:.3f} s: {:.0f} tokens/s, model {:.1f} GFLOP/s per rank\n", step_s,
                    tokens_per_s, model_flops / ranks / 1e9));
  if (o.profile) print(format_step_profile(profiles, "  "));
  print(fmt::format("  sgemm {}x{}x{} (one call, median of 5): {:.1f} GFLOP/s -> step at {:.1f}% of sgemm\n", N,
                    config.d_ff, config.d_model, sgemm / 1e9, 100.0 * model_flops / ranks / sgemm));
  const double hardware_flops = model_flops * (1.0 + model.recompute_flops_per_token(T) / model.flops_per_token(T));
  print(fmt::format("  peak {:.1f} GFLOP/s per rank ({}) -> MFU {:.1f}%, HFU {:.1f}%\n", peak / 1e9, peak_flops.source,
                    100.0 * model_flops / ranks / peak, 100.0 * hardware_flops / ranks / peak));
  if (o.peak_each_step) {
    print(format_mfu_beside_steps(model.flops_per_token(T) * o.batch * T / ranks, seconds, peak_samples));
  }
  print(fmt::format("  memory (rank 0): predicted {:.3f} GiB (model states after a step {:.3f} GiB), ledger peak "
                    "{:.3f} GiB, process RSS growth {:.3f} GiB (RSS / prediction {:.3f}; {:.3f} GiB of freed blocks "
                    "kept for reuse)\n",
                    predicted_total / gib, states.total() / gib, ledger.peak_total() / gib, rss_used / gib,
                    rss_used / predicted_total, storage_cached_bytes() / gib));
  std::string by_tag;
  for (size_t t = 0; t < kNumMemTags; ++t) {
    const MemTag tag = static_cast<MemTag>(t);
    if (ledger.peak(tag) > 0) by_tag += fmt::format(" {} {:.3f}", mem_tag_name(tag), ledger.peak(tag) / gib);
  }
  print(fmt::format("  ledger peak by tag (GiB, each tag's own peak):{}\n", by_tag));
  const int64_t saved_floats =
      context_floats(config, tp_layout, B, T / o.cp, checkpointing, {}, precision.compute);
  print(fmt::format("  activations: ledger peak {:.3f} GiB, predicted {:.3f} GiB (kept for backward {:.3f} GiB, "
                    "workspace {:.3f} GiB)\n",
                    ledger.peak(MemTag::activations) / gib, predicted_activations / gib, saved_floats * 4.0 / gib,
                    (predicted_activations - saved_floats * 4.0) / gib));
  // The largest batch per rank whose predicted memory (model states after a step and
  // activations, held to the ledger by tests) fits the budget.
  const int fits =
      largest_batch_in_budget(config, T, 256, tp_layout, checkpointing, states.total(), o.memory_budget_gib * gib);
  print(fmt::format("  largest batch per rank in {:.1f} GiB (memory model): {} sequences of {}\n", o.memory_budget_gib,
                    fits, T));
  auto states_at = [&](const ModelConfig& model) {
    return predict_model_states(local_parameter_specs(model_parameter_specs(model), o.tp),
                                mesh->size(Axis::dp_shard_cp), o.zero_stage, precision.compute, o.ep)
        .total();
  };
  print_longest_sequences(config, B, checkpointing, precision.compute, o.tp, o.sequence_parallel, cp_layout,
                          states_at, o.memory_budget_gib * gib, print);
  if (o.zero_stage == 3) print(fmt::format("  FSDP: median all-gather wait per step {:.3f} s\n", median(gather_waits)));
  if (dp > 1) {
    const Axis axis = o.zero_stage > 0 ? Axis::dp_shard : Axis::dp;
    const CommStats& stats = mesh->axis(axis).stats();
    print(fmt::format("  data parallel: {:.1f} MiB sent per rank per step on {}\n",
                      stats.total_wire_bytes() / double(1 << 20) / (o.steps + 1), axis_name(axis)));
  }
  if (config.is_moe()) {
    int blocks = 0;
    for (int l = 0; l < config.n_layer; ++l) blocks += config.is_moe_block(l);
    // This rank's tokens' routing over its MoE blocks in the last step; one block's share.
    std::vector<int64_t> per_block = moe.stats.tokens_per_expert;
    for (int64_t& r : per_block) r /= blocks;
    const auto [least, most] = std::minmax_element(per_block.begin(), per_block.end());
    print(fmt::format("  routing (rank 0's tokens, one block): most loaded expert {} rows, least {}; load-balancing "
                      "loss {:.4f} per token\n",
                      *most, *least, moe.aux_sum / (B * T)));
    if (o.ep > 1) {
      const CommStats& stats = mesh->axis(Axis::ep).stats();
      print(fmt::format("  expert parallel: median {:.3f} s per step in the ep all-to-alls ({:.1f}% of the step); "
                        "{:.1f} MiB sent per rank per step\n",
                        median(ep_waits), 100.0 * median(ep_waits) / step_s,
                        stats.total_wire_bytes() / double(1 << 20) / (o.steps + 1)));
    }
    print_grouped_experts(config, per_block, print);
  }
  if (o.cp > 1) print_context_parallel(*mesh, model, cp_layout, B, T, o.steps, median(cp_waits), step_s, print);
  if (o.tp > 1) {
    const CommStats& stats = mesh->axis(Axis::tp).stats();
    print(fmt::format("  tensor parallel: median {:.3f} s per step in tp collectives ({:.1f}% of the step); over the "
                      "run {} all-reduces, {} all-gathers, {} reduce-scatters, {:.1f} MiB sent per rank\n",
                      median(tp_waits), 100.0 * median(tp_waits) / step_s, stats[CommOp::all_reduce].calls,
                      stats[CommOp::all_gather].calls, stats[CommOp::reduce_scatter].calls,
                      stats.total_wire_bytes() / double(1 << 20)));
  }

  if (dp > 1 && o.tp == 1 && o.zero_stage == 0) {
    // The same steps without communication, then the bucketed all-reduces alone.
    std::vector<double> local, comm_only;
    for (int s = 0; s < o.steps; ++s) local.push_back(train_step(false));
    float* grads = model.store().grads().data<float>();
    for (int s = 0; s < o.steps; ++s) {
      world->barrier();
      const auto t0 = std::chrono::steady_clock::now();
      for (const GradientBucket& b : dynamic_cast<const DataParallel&>(*sync).buckets()) {
        mesh->axis(Axis::dp).all_reduce(grads + b.begin, static_cast<size_t>(b.end - b.begin), DType::f32, ReduceOp::sum);
      }
      world->barrier();
      comm_only.push_back(seconds_since(t0));
    }
    const double exposed = step_s - median(local), comm = median(comm_only);
    print(fmt::format("  data parallel: step without communication {:.3f} s, all-reduces alone {:.3f} s "
                      "({} buckets, {:.1f} MiB) -> {:.0f}% of the all-reduce time hidden behind backward\n",
                      median(local), comm, sync->bucket_count(), model.store().numel() * 4.0 / (1 << 20),
                      100.0 * std::clamp(1.0 - exposed / comm, 0.0, 1.0)));
  }
  return 0;
}

}  // namespace ndt
