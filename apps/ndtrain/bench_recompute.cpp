// `ndtrain bench recompute`: what activation checkpointing costs and saves, with the
// policies interleaved in one process (none, full, selective: one training step each
// per round, the order rotating every round), so that the step-time ratios come from
// the same minutes of a noisy machine. Per policy: median step, its ratio to none, the
// predicted activation memory (the ledger equals it: `ndtrain bench train
// --activation-checkpointing P` prints both, and tests hold them equal), the FLOPs the
// recompute adds, and the largest batch whose predicted memory fits a budget.
#include "apps/ndtrain/commands.h"
#include "apps/ndtrain/synthetic_rows.h"
#include "train/training_model.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/timing.h"
#include "kernels/kernels.h"
#include "optim/clip.h"
#include "parallel/memory_model.h"
#include "parallel/parallelize.h"

#include <fmt/format.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>

namespace ndt {

int run_bench_recompute(const RecomputeBenchOptions& o) {
  NDT_CHECK(!launched_by_mpi(), "bench recompute runs in one process: start it without mpirun");
  NDT_CHECK(o.batch > 0 && o.seq_len > 0, "--batch {} and --seq {} must be positive", o.batch, o.seq_len);
  NDT_CHECK(o.rounds > 0, "--rounds {} must be positive", o.rounds);
  NDT_CHECK(std::isfinite(o.memory_budget_gib) && o.memory_budget_gib > 0, "--memory-budget-gib {} must be positive",
            o.memory_budget_gib);
  kernels::set_num_threads(o.threads);
  RunConfig run;
  run.model = ModelConfig::preset(o.preset);
  run.batch_size = o.batch;
  run.seq_len = o.seq_len;
  run.seed = 1;
  run.threads = o.threads;
  run = run.resolved(1);
  const ModelConfig& config = run.model;
  const int B = o.batch, T = o.seq_len;
  DeviceMesh mesh;
  TrainingModel training(run, mesh);
  Transformer& model = training.model();
  GradientSync* sync = &training.sync();
  const FetchRows rows = synthetic_rows(T, config.vocab_size);
  const std::array<ActivationCheckpointing, 3> policies = {
      ActivationCheckpointing{CheckpointMode::none, 1}, ActivationCheckpointing{CheckpointMode::full, 1},
      ActivationCheckpointing{CheckpointMode::selective, 1}};
  fmt::print("bench recompute: {} ({:.2f}M parameters), B={} T={}, {} thread{}, {} rounds of none/full/selective "
             "interleaved\n  matmuls: {}\n",
             o.preset, count_parameters(config) / 1e6, B, T, o.threads, o.threads == 1 ? "" : "s", o.rounds,
             kernels::gemm_library());
  std::fflush(stdout);

  auto train_step = [&](const ActivationCheckpointing& policy) {
    model.set_activation_checkpointing(policy);
    const auto t0 = std::chrono::steady_clock::now();
    training.compute_gradients(rows, 1.0f / static_cast<float>(B * T));
    sync->step(1e-4f, clip_factor(sync->grad_norm(), 1.0f));
    return seconds_since(t0);
  };
  for (const ActivationCheckpointing& p : policies) train_step(p);  // warm-up: arenas, page faults
  std::array<std::vector<double>, 3> seconds;
  for (int r = 0; r < o.rounds; ++r) {
    for (size_t k = 0; k < policies.size(); ++k) {
      const size_t i = (k + static_cast<size_t>(r)) % policies.size();
      seconds[i].push_back(train_step(policies[i]));
    }
    fmt::print("  round {}: none {:.3f} s, full {:.3f} s, selective {:.3f} s\n", r + 1, seconds[0].back(),
               seconds[1].back(), seconds[2].back());
    std::fflush(stdout);
  }

  const double gib = 1024.0 * 1024.0 * 1024.0;
  const ModelStateBytes states = predict_model_states(model_parameter_specs(config), 1, 0);
  const int64_t none_bytes = Transformer::predict_activation_bytes(config, B, T, 256);
  fmt::print("  policy     | median step | vs none | recompute FLOPs | activations (predicted) | vs none | "
             "largest batch in {:.1f} GiB\n",
             o.memory_budget_gib);
  for (size_t i = 0; i < policies.size(); ++i) {
    model.set_activation_checkpointing(policies[i]);
    const int64_t bytes = Transformer::predict_activation_bytes(config, B, T, 256, {}, policies[i]);
    const int fits = largest_batch_in_budget(config, T, 256, {}, policies[i], states.total(), o.memory_budget_gib * gib);
    fmt::print("  {:<10} | {:>9.3f} s | {:>+6.1f}% | {:>+14.1f}% | {:>17.3f} GiB | {:>+6.1f}% | {} x {}\n",
               checkpoint_mode_name(policies[i].mode), median(seconds[i]),
               100.0 * (median(seconds[i]) / median(seconds[0]) - 1.0),
               100.0 * model.recompute_flops_per_token(T) / model.flops_per_token(T), bytes / gib,
               100.0 * (static_cast<double>(bytes) / static_cast<double>(none_bytes) - 1.0), fits, T);
  }
  fmt::print("  (model states after a step: {:.3f} GiB, in every budget)\n", states.total() / gib);
  return 0;
}

}  // namespace ndt
