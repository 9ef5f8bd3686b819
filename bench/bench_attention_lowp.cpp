// One block's attention core of gpt2-124m at B = 8, T = 256 (12 heads of 64), forward then
// backward, on 2 threads: the fp32 kernels (kernels/cpu/attention.h, which keep the T x T
// probabilities; what bf16 ran before issue 36) against the bf16 flash-style kernels
// (kernels/cpu/attention_lowp.h) on the active gemm_lowp backend. Arg 0: fp32, 1: bf16.
//   ./build/bench_kernels --benchmark_filter=AttentionLowp --benchmark_repetitions=5
//     --benchmark_enable_random_interleaving=true   (one command line)
#include "kernels/cpu/attention.h"
#include "kernels/cpu/attention_lowp.h"
#include "kernels/cpu/cast.h"
#include "kernels/cpu/threads.h"

#include "core/rng.h"

#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

namespace {

constexpr int kB = 8, kT = 256, kNH = 12, kHS = 64;

void BM_AttentionLowp(benchmark::State& state) {
  ndt::cpu::set_num_threads(2);
  const bool bf16 = state.range(0) == 1;
  const int64_t n = int64_t{kB} * kT * kNH * kHS;
  std::vector<float> q(n), k(n), v(n), dout(n), out(n), dq(n), dk(n), dv(n);
  std::vector<float> lse(int64_t{kB} * kNH * kT), att(bf16 ? 0 : int64_t{kB} * kNH * kT * kT);
  for (auto [x, stream] : {std::pair{&q, 1}, {&k, 2}, {&v, 3}, {&dout, 4}}) {
    ndt::fill_normal(x->data(), n, 0, 0.0f, 1.0f, 42, stream);
    ndt::cpu::round_to_lowp(ndt::DType::bf16, x->data(), n);  // as the model hands them over
  }
  for (auto _ : state) {
    if (bf16) {
      ndt::cpu::attention_forward_lowp(ndt::DType::bf16, out.data(), lse.data(), q.data(), k.data(), v.data(), nullptr,
                                       kB, kT, kNH, kNH, kHS);
      ndt::cpu::attention_backward_lowp(ndt::DType::bf16, dq.data(), dk.data(), dv.data(), dout.data(), q.data(),
                                        k.data(), v.data(), out.data(), lse.data(), nullptr, kB, kT, kNH, kNH, kHS);
    } else {
      ndt::cpu::attention_forward(out.data(), lse.data(), att.data(), q.data(), k.data(), v.data(), nullptr, kB, kT,
                                  kNH, kNH, kHS);
      ndt::cpu::attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(),
                                   att.data(), nullptr, kB, kT, kNH, kNH, kHS);
    }
    benchmark::DoNotOptimize(dq.data());
  }
}
BENCHMARK(BM_AttentionLowp)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
