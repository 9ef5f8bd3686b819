// The one-rank attention kernel (kernels/cpu/attention.h), forward then backward, with and
// without document masks (data.document_boundaries), on one thread at B = 4, T = 512, 4
// heads of 64: no starts (the causal kernel), starts all 0 (one document per row: what
// the masked path itself costs), and documents of 170 and 37 tokens (the mean fortune and
// the mean line of Debian's fortunes, docs/performance.md).
//   ./build/bench_kernels --benchmark_filter=AttentionDocuments --benchmark_repetitions=5
#include "kernels/cpu/attention.h"
#include "kernels/cpu/threads.h"

#include "core/rng.h"

#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

namespace {

constexpr int kB = 4, kT = 512, kNH = 4, kHS = 64;

// document = 0: no starts; -1: all 0; else documents of that many tokens.
void BM_AttentionDocuments(benchmark::State& state) {
  ndt::cpu::set_num_threads(1);
  const int64_t document = state.range(0);
  const int64_t n = int64_t{kB} * kT * kNH * kHS;
  std::vector<float> q(n), k(n), v(n), dout(n), out(n), dq(n), dk(n), dv(n);
  std::vector<float> lse(int64_t{kB} * kNH * kT), att(int64_t{kB} * kNH * kT * kT);
  for (auto [x, stream] : {std::pair{&q, 1}, {&k, 2}, {&v, 3}, {&dout, 4}}) {
    ndt::fill_normal(x->data(), n, 0, 0.0f, 1.0f, 42, stream);
  }
  std::vector<int32_t> starts(int64_t{kB} * kT, 0);
  for (int64_t i = 0; document > 0 && i < kB * kT; ++i) starts[i] = static_cast<int32_t>((i % kT) / document * document);
  const int32_t* s = document == 0 ? nullptr : starts.data();
  for (auto _ : state) {
    ndt::cpu::attention_forward(out.data(), lse.data(), att.data(), q.data(), k.data(), v.data(), s, kB, kT, kNH, kNH,
                                kHS);
    ndt::cpu::attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(), att.data(),
                                 s, kB, kT, kNH, kNH, kHS);
    benchmark::DoNotOptimize(dq.data());
  }
}
BENCHMARK(BM_AttentionDocuments)->Arg(0)->Arg(-1)->Arg(170)->Arg(37)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
