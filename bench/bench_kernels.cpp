// Micro-benchmarks of the CPU kernels at GPT-2 124M training shapes (B*T = 2048 rows,
// C = 768, the loss on 256-row chunks of V = 50257). Thread count from env NDT_THREADS
// (default 1), applied to OpenMP and OpenBLAS.
//   NDT_THREADS=1 ./bench_kernels --benchmark_min_time=0.2
#include "kernels/cpu/activation.h"
#include "kernels/cpu/adamw.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/threads.h"
#include "optim/clip.h"

#include "core/rng.h"

#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

int bench_threads() {
  static const int n = [] {
    const char* env = std::getenv("NDT_THREADS");
    int t = env != nullptr ? std::atoi(env) : 1;
    ndt::cpu::set_num_threads(t);  // throws (benchmark aborts) on t < 1
    return t;
  }();
  ndt::cpu::set_num_threads(n);
  return n;
}

std::vector<float> random_data(int64_t n, uint64_t stream) {
  std::vector<float> v(static_cast<size_t>(n));
  ndt::fill_normal(v.data(), n, 0, 0.0f, 1.0f, 42, stream);
  return v;
}

// C[M, N] = A[M, K] @ op(B): trans_b = true is the linear forward (weight [N, K]),
// trans_a = true the weight gradient dout^T @ inp.
void BM_Sgemm(benchmark::State& state, bool trans_a, bool trans_b) {
  const int threads = bench_threads();
  const int M = static_cast<int>(state.range(0));
  const int K = static_cast<int>(state.range(1));
  const int N = static_cast<int>(state.range(2));
  auto A = random_data(static_cast<int64_t>(M) * K, 1);
  auto B = random_data(static_cast<int64_t>(K) * N, 2);
  std::vector<float> C(static_cast<size_t>(M) * N, 0.0f);
  const int lda = trans_a ? M : K, ldb = trans_b ? K : N;
  for (auto _ : state) {
    ndt::cpu::gemm(trans_a, trans_b, M, N, K, 1.0f, A.data(), lda, B.data(), ldb, 0.0f, C.data(),
                   N);
    benchmark::DoNotOptimize(C.data());
    benchmark::ClobberMemory();
  }
  const double flops = 2.0 * M * N * K;
  state.counters["FLOPS"] =
      benchmark::Counter(flops * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  state.SetLabel("threads=" + std::to_string(threads));
}

// {M, K, N}: qkv (768 -> 2304), fc (768 -> 3072), fc proj (3072 -> 768), lm head on a
// 512-row chunk (768 -> 50257).
void SgemmShapes(benchmark::internal::Benchmark* b) {
  b->Args({2048, 768, 2304})->Args({2048, 768, 3072})->Args({2048, 3072, 768})->Args({512, 768, 50257});
  b->ArgNames({"M", "K", "N"})->Unit(benchmark::kMillisecond)->UseRealTime();
}
BENCHMARK_CAPTURE(BM_Sgemm, NN, false, false)->Apply(SgemmShapes);
BENCHMARK_CAPTURE(BM_Sgemm, NT_linear_fwd, false, true)->Apply(SgemmShapes);

constexpr int kRows = 2048, kC = 768;

void BM_LayerNormForward(benchmark::State& state) {
  const int threads = bench_threads();
  auto x = random_data(kRows * kC, 3), w = random_data(kC, 4), b = random_data(kC, 5);
  std::vector<float> out(kRows * kC), mean(kRows), rstd(kRows);
  for (auto _ : state) {
    ndt::cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(),
                                kRows, kC, 1e-5f);
    benchmark::ClobberMemory();
  }
  // Read inp, write out.
  state.SetBytesProcessed(state.iterations() * int64_t{2} * kRows * kC * 4);
  state.SetLabel("threads=" + std::to_string(threads));
}
BENCHMARK(BM_LayerNormForward)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_LayerNormBackward(benchmark::State& state) {
  const int threads = bench_threads();
  auto x = random_data(kRows * kC, 6), w = random_data(kC, 7), b = random_data(kC, 8);
  auto dout = random_data(kRows * kC, 9);
  std::vector<float> out(kRows * kC), mean(kRows), rstd(kRows);
  ndt::cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(),
                              kRows, kC, 1e-5f);
  std::vector<float> dx(kRows * kC, 0.0f), dw(kC, 0.0f), db(kC, 0.0f);
  for (auto _ : state) {
    ndt::cpu::layernorm_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(),
                                 mean.data(), rstd.data(), kRows, kC);
    benchmark::ClobberMemory();
  }
  // Minimum traffic: read dout, inp, dinp; write dinp.
  state.SetBytesProcessed(state.iterations() * int64_t{4} * kRows * kC * 4);
  state.SetLabel("threads=" + std::to_string(threads));
}
BENCHMARK(BM_LayerNormBackward)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_GeluForward(benchmark::State& state) {
  const int threads = bench_threads();
  const int64_t n = int64_t{kRows} * kC;
  auto x = random_data(n, 10);
  std::vector<float> out(n);
  for (auto _ : state) {
    ndt::cpu::gelu_forward(out.data(), x.data(), n);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * 2 * n * 4);  // read inp, write out
  state.SetLabel("threads=" + std::to_string(threads));
}
BENCHMARK(BM_GeluForward)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_GeluBackward(benchmark::State& state) {
  const int threads = bench_threads();
  const int64_t n = int64_t{kRows} * kC;
  auto x = random_data(n, 11), dout = random_data(n, 12);
  std::vector<float> dx(n, 0.0f);
  for (auto _ : state) {
    ndt::cpu::gelu_backward(dx.data(), x.data(), dout.data(), n);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * 4 * n * 4);  // read inp, dout, dinp; write dinp
  state.SetLabel("threads=" + std::to_string(threads));
}
BENCHMARK(BM_GeluBackward)->Unit(benchmark::kMicrosecond)->UseRealTime();

// The fused loss and gradient on one chunk of train.loss_chunk_rows' default 256 rows.
void BM_SoftmaxCrossEntropy(benchmark::State& state) {
  const int threads = bench_threads();
  constexpr int kChunk = 256, kVocab = 50257;
  const auto logits = random_data(int64_t{kChunk} * kVocab, 13);
  std::vector<float> work(logits.size()), losses(kChunk);
  std::vector<int32_t> targets(kChunk);
  for (int n = 0; n < kChunk; ++n) targets[static_cast<size_t>(n)] = n * 97 % kVocab;
  for (auto _ : state) {
    state.PauseTiming();
    work = logits;  // the kernel writes the gradient over the logits
    state.ResumeTiming();
    ndt::cpu::softmax_cross_entropy(work.data(), losses.data(), targets.data(), kChunk, kVocab, 1.0f / 2048);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * int64_t{kChunk} * kVocab);  // logits
  state.SetLabel("threads=" + std::to_string(threads));
}
BENCHMARK(BM_SoftmaxCrossEntropy)->Unit(benchmark::kMillisecond)->UseRealTime();

// The gradient norm's sum of squares over gpt2-124m's 124.4M gradients.
void BM_SumOfSquares(benchmark::State& state) {
  const int threads = bench_threads();
  constexpr int64_t kParams = 124439808;
  const auto grads = random_data(kParams, 14);
  for (auto _ : state) benchmark::DoNotOptimize(ndt::sum_of_squares(grads.data(), kParams));
  state.SetBytesProcessed(state.iterations() * kParams * 4);
  state.SetLabel("threads=" + std::to_string(threads));
}
BENCHMARK(BM_SumOfSquares)->Unit(benchmark::kMillisecond)->UseRealTime();

// AdamW over n parameters (the argument, in Mi): 28 bytes read and written per parameter,
// within the caches and beyond them (`plan --calibrate` times 8Mi: docs/planner.md).
void BM_AdamW(benchmark::State& state) {
  const int threads = bench_threads();
  const int64_t n = state.range(0) << 20;
  std::vector<float> param(static_cast<size_t>(n), 0.5f), grad(param.size(), 0.01f), m(param.size(), 0.0f),
      v(param.size(), 0.0f);
  ndt::cpu::AdamWStep s{1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 0};
  for (auto _ : state) {
    ++s.t;
    ndt::cpu::adamw_update(param.data(), grad.data(), m.data(), v.data(), n, s);
  }
  state.SetBytesProcessed(state.iterations() * n * 28);
  state.SetLabel("threads=" + std::to_string(threads));
}
BENCHMARK(BM_AdamW)->Arg(2)->Arg(8)->Arg(32)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
