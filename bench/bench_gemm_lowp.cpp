// GFLOP/s of the training GEMMs of GPT-2 124M (B8 x T256 = 2048 rows, C = 768, F = 3072,
// 3C = 2304; the output layer on a 512-row chunk of V = 50304) in the three forms of a
// linear layer (forward, dinp, dweight), on 1 and 2 threads (the last argument):
//   Fp32OpenBlas   cpu::gemm, what the fp32 model runs
//   Fp32OneDnn     oneDNN's fp32 matmul, built here only to compare with OpenBLAS
//   Bf16OneDnn     gemm_lowp on oneDNN (skipped where oneDNN has no native bf16 kernel)
//   Bf16Fallback   gemm_lowp's fallback: bf16 -> fp32 blocks + OpenBLAS sgemm
// and the bf16 attention's blocks (attention_block), one thread:
//   ./bench_kernels --benchmark_filter=Gemm --benchmark_repetitions=5 --benchmark_report_aggregates_only
#include "kernels/cpu/cast.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_lowp.h"
#include "kernels/cpu/threads.h"

#include "core/rng.h"

#include <benchmark/benchmark.h>
#include <oneapi/dnnl/dnnl.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace {

using ndt::DType;
using ndt::cpu::LowpGemmBackend;

// One GEMM of the benchmark: C[M, N] = op(A)[M, K] op(B)[K, N], dense row-major operands.
struct Problem {
  bool trans_a, trans_b;
  int M, N, K;
  int lda() const { return trans_a ? M : K; }
  int ldb() const { return trans_b ? K : N; }
};

// Reads the problem from the benchmark's arguments {M, N, K, threads} and sets the threads.
Problem problem(benchmark::State& state, bool trans_a, bool trans_b) {
  const int threads = static_cast<int>(state.range(3));
  ndt::cpu::set_num_threads(threads);
  state.SetLabel("threads=" + std::to_string(threads));
  return {trans_a, trans_b, static_cast<int>(state.range(0)), static_cast<int>(state.range(1)),
          static_cast<int>(state.range(2))};
}

std::vector<float> random_floats(int64_t n, uint64_t stream) {
  std::vector<float> v(static_cast<size_t>(n));
  ndt::fill_normal(v.data(), n, 0, 0.0f, 1.0f, 42, stream);
  return v;
}

std::vector<uint16_t> random_bf16(int64_t n, uint64_t stream) {
  const std::vector<float> x = random_floats(n, stream);
  std::vector<uint16_t> bits(x.size());
  ndt::cpu::cast_to_lowp(DType::bf16, x.data(), bits.data(), n);
  return bits;
}

void report_flops(benchmark::State& state, const Problem& p) {
  state.counters["GFLOPS"] = benchmark::Counter(2e-9 * p.M * p.N * p.K * static_cast<double>(state.iterations()),
                                                benchmark::Counter::kIsRate);
}

void BM_GemmFp32OpenBlas(benchmark::State& state, bool trans_a, bool trans_b) {
  const Problem p = problem(state, trans_a, trans_b);
  const auto A = random_floats(int64_t{p.M} * p.K, 1), B = random_floats(int64_t{p.K} * p.N, 2);
  std::vector<float> C(static_cast<size_t>(p.M) * p.N);
  for (auto _ : state) {
    ndt::cpu::gemm(p.trans_a, p.trans_b, p.M, p.N, p.K, 1.0f, A.data(), p.lda(), B.data(), p.ldb(), 0.0f,
                   C.data(), p.N);
    benchmark::ClobberMemory();
  }
  report_flops(state, p);
}

void BM_GemmFp32OneDnn(benchmark::State& state, bool trans_a, bool trans_b) {
  const Problem p = problem(state, trans_a, trans_b);
  const auto A = random_floats(int64_t{p.M} * p.K, 1), B = random_floats(int64_t{p.K} * p.N, 2);
  std::vector<float> C(static_cast<size_t>(p.M) * p.N);
  using md = dnnl::memory;
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  // A transposed operand is the stored matrix read with swapped strides.
  const md::desc a_md({p.M, p.K}, md::data_type::f32, p.trans_a ? md::dims{1, p.lda()} : md::dims{p.lda(), 1});
  const md::desc b_md({p.K, p.N}, md::data_type::f32, p.trans_b ? md::dims{1, p.ldb()} : md::dims{p.ldb(), 1});
  const md::desc c_md({p.M, p.N}, md::data_type::f32, md::dims{p.N, 1});
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), engine);
  const dnnl::matmul matmul(pd);
  md a(a_md, engine, const_cast<float*>(A.data())), b(b_md, engine, const_cast<float*>(B.data()));
  md c(c_md, engine, C.data());
  for (auto _ : state) {
    matmul.execute(stream, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
    stream.wait();
  }
  report_flops(state, p);
  state.SetLabel("threads=" + std::to_string(state.range(3)) + " " + pd.impl_info_str());
}

void run_bf16(benchmark::State& state, bool trans_a, bool trans_b, LowpGemmBackend backend) {
  const Problem p = problem(state, trans_a, trans_b);
  if (backend == LowpGemmBackend::onednn && ndt::cpu::onednn_lowp_impl(DType::bf16).empty()) {
    state.SkipWithError("oneDNN has no native bf16 matmul on this CPU");
    return;
  }
  const auto A = random_bf16(int64_t{p.M} * p.K, 1), B = random_bf16(int64_t{p.K} * p.N, 2);
  std::vector<float> C(static_cast<size_t>(p.M) * p.N);
  for (auto _ : state) {
    ndt::cpu::gemm_lowp_on(backend, DType::bf16, p.trans_a, p.trans_b, p.M, p.N, p.K, A.data(), p.lda(),
                        B.data(), p.ldb(), 0.0f, C.data(), p.N);
    benchmark::ClobberMemory();
  }
  report_flops(state, p);
}

void BM_GemmBf16OneDnn(benchmark::State& state, bool trans_a, bool trans_b) {
  run_bf16(state, trans_a, trans_b, LowpGemmBackend::onednn);
}
void BM_GemmBf16Fallback(benchmark::State& state, bool trans_a, bool trans_b) {
  run_bf16(state, trans_a, trans_b, LowpGemmBackend::fallback);
}

// The linear layers {rows, IC, OC}: qkv, attention projection, fc, fc projection, output
// layer on a 512-row chunk. Each form maps them to {M, N, K}.
constexpr int kLayers[][3] = {{2048, 768, 2304}, {2048, 768, 768}, {2048, 768, 3072},
                              {2048, 3072, 768}, {512, 768, 50304}};

template <int Form>  // 0: forward out = inp W^T, 1: dinp = dout W, 2: dweight = dout^T inp
void LinearShapes(benchmark::internal::Benchmark* b) {
  for (int threads : {1, 2}) {
    for (const auto& l : kLayers) {
      const int rows = l[0], ic = l[1], oc = l[2];
      if (Form == 0) b->Args({rows, oc, ic, threads});
      if (Form == 1) b->Args({rows, ic, oc, threads});
      if (Form == 2) b->Args({oc, ic, rows, threads});
    }
  }
  b->ArgNames({"M", "N", "K", "threads"})->Unit(benchmark::kMillisecond)->UseRealTime();
}

#define NDT_GEMM_FORMS(bm)                                                  \
  BENCHMARK_CAPTURE(bm, forward, false, true)->Apply(LinearShapes<0>);      \
  BENCHMARK_CAPTURE(bm, dinp, false, false)->Apply(LinearShapes<1>);        \
  BENCHMARK_CAPTURE(bm, dweight, true, false)->Apply(LinearShapes<2>)

NDT_GEMM_FORMS(BM_GemmFp32OpenBlas);
NDT_GEMM_FORMS(BM_GemmFp32OneDnn);
NDT_GEMM_FORMS(BM_GemmBf16OneDnn);
NDT_GEMM_FORMS(BM_GemmBf16Fallback);

// The bf16 attention's blocks (S = Q K^T of 64 query rows against 64 and 256 keys, head
// size 64), one thread: tens of thousands of calls a step, where a call's fixed cost
// shows (docs/performance.md, "oneDNN's per-call cost").
BENCHMARK_CAPTURE(BM_GemmBf16OneDnn, attention_block, false, true)
    ->Args({64, 64, 64, 1})
    ->Args({64, 256, 64, 1})
    ->ArgNames({"M", "N", "K", "threads"})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

}  // namespace
