// `ndtrain bench train`: training-step throughput of a model preset on synthetic
// tokens, next to the sgemm throughput of one of its matmuls at the same thread
// count, and the memory the ledger predicted against what the process used.
#include "apps/ndtrain/commands.h"
#include "core/memory.h"
#include "core/rng.h"
#include "kernels/cpu/threads.h"
#include "model/transformer.h"
#include "optim/adamw.h"
#include "optim/clip.h"
#include "train/flops.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

namespace ndt {

int run_bench_train(const TrainBenchOptions& o) {
  NDT_CHECK(o.batch > 0 && o.seq_len > 0, "--batch {} and --seq {} must be positive", o.batch, o.seq_len);
  NDT_CHECK(o.steps > 0, "--steps {} must be positive", o.steps);
  cpu::set_num_threads(o.threads);
  const ModelConfig config = ModelConfig::preset(o.preset);
  const int B = o.batch, T = o.seq_len, N = B * T;
  const size_t rss_before = process_current_rss_bytes();

  Transformer model(config, 1);
  AdamW optimizer(model.store(), AdamWConfig{});
  std::vector<int32_t> tokens(static_cast<size_t>(N) + 1);
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<int32_t>(philox(7, hash_name("bench"), i)[0] % config.vocab_size);
  }
  fmt::print("bench train: {} ({:.2f}M parameters), B={} T={}, {} thread{}\n", o.preset,
             model.store().numel() / 1e6, B, T, o.threads, o.threads == 1 ? "" : "s");
  std::fflush(stdout);

  std::vector<double> seconds;
  for (int s = 0; s <= o.steps; ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    model.store().zero_grads();
    model.forward_backward(tokens.data(), tokens.data() + 1, B, T, 1.0f / N);
    const double norm = std::sqrt(sum_of_squares(model.store().grads().data<float>(), model.store().numel()));
    optimizer.step(1e-4f, clip_factor(norm, 1.0f));
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    fmt::print("  step {}: {:.3f} s{}\n", s, dt, s == 0 ? " (warm-up, not counted)" : "");
    std::fflush(stdout);
    if (s > 0) seconds.push_back(dt);
  }
  std::sort(seconds.begin(), seconds.end());
  const double step_s = seconds[seconds.size() / 2];
  const double tokens_per_s = N / step_s;
  const double model_flops = model.flops_per_token(T) * tokens_per_s;

  // The MLP's first matmul: [N, C] x [C, 4C], the model's most common GEMM shape.
  const double sgemm = measure_sgemm_flops(N, config.d_ff, config.d_model);
  const double peak = measure_fma_peak(o.threads);
  const MemoryPrediction predicted = Transformer::predict_memory(config, B, T, 256);
  const double predicted_total = predicted.params + predicted.grads + 2.0 * predicted.params + predicted.activations;
  const MemoryLedger& ledger = MemoryLedger::instance();
  const double rss_used = static_cast<double>(process_peak_rss_bytes()) - rss_before;
  const double gib = 1024.0 * 1024.0 * 1024.0;

  fmt::print("  median step {:.3f} s: {:.0f} tokens/s, model {:.1f} GFLOP/s\n", step_s, tokens_per_s,
             model_flops / 1e9);
  fmt::print("  sgemm {}x{}x{} (one call, median of 5): {:.1f} GFLOP/s -> step at {:.1f}% of sgemm\n", N,
             config.d_ff, config.d_model, sgemm / 1e9, 100.0 * model_flops / sgemm);
  fmt::print("  FMA peak {:.1f} GFLOP/s -> MFU {:.1f}%\n", peak / 1e9, 100.0 * model_flops / peak);
  fmt::print("  memory: predicted {:.3f} GiB, ledger peak {:.3f} GiB, process RSS growth {:.3f} GiB "
             "(RSS / prediction {:.3f})\n",
             predicted_total / gib, ledger.peak_total() / gib, rss_used / gib, rss_used / predicted_total);
  return 0;
}

}  // namespace ndt
