#include "kernels/cpu/instruction_rate.h"

#include "core/error.h"

#include <time.h>

#include <algorithm>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace ndt::cpu {

double fma_loop(long iterations, float* sink) {
#if defined(__AVX512F__)
  __m512 acc[10];
  for (int i = 0; i < 10; ++i) acc[i] = _mm512_set1_ps(0.001f * i);
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (long it = 0; it < iterations; ++it) {
    for (int i = 0; i < 10; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  }
  __m512 sum = acc[0];
  for (int i = 1; i < 10; ++i) sum = _mm512_add_ps(sum, acc[i]);
  float lanes[16];
  _mm512_storeu_ps(lanes, sum);
  *sink = lanes[0];
  return static_cast<double>(iterations) * 10 * 16 * 2;
#elif defined(__AVX2__) && defined(__FMA__)
  __m256 acc[10];
  for (int i = 0; i < 10; ++i) acc[i] = _mm256_set1_ps(0.001f * i);
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (long it = 0; it < iterations; ++it) {
    for (int i = 0; i < 10; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  }
  __m256 sum = acc[0];
  for (int i = 1; i < 10; ++i) sum = _mm256_add_ps(sum, acc[i]);
  float lanes[8];
  _mm256_storeu_ps(lanes, sum);
  *sink = lanes[0];
  return static_cast<double>(iterations) * 10 * 8 * 2;
#else
  float acc[32];
  for (int i = 0; i < 32; ++i) acc[i] = 0.001f * i;
  for (long it = 0; it < iterations; ++it) {
#pragma omp simd
    for (int i = 0; i < 32; ++i) acc[i] = acc[i] * 0.999999f + 1e-7f;
  }
  *sink = acc[0];
  return static_cast<double>(iterations) * 32 * 2;
#endif
}

#if defined(__x86_64__)

bool has_bf16_dot_product() { return __builtin_cpu_supports("avx512bf16"); }

// Compiled for AVX512-BF16 whatever the build targets; called only where the CPU has it.
__attribute__((target("avx512f,avx512bf16"))) double bf16_dot_loop(long iterations, float* sink) {
  NDT_CHECK(has_bf16_dot_product(), "bf16_dot_loop: this CPU has no AVX512-BF16");
  __m512 acc[10];
  for (int i = 0; i < 10; ++i) acc[i] = _mm512_set1_ps(0.001f * i);
  // 1.0 and 2^-20 in bf16: the sums grow slowly and stay finite.
  const __m512bh a = reinterpret_cast<__m512bh>(_mm512_set1_epi16(0x3F80));
  const __m512bh b = reinterpret_cast<__m512bh>(_mm512_set1_epi16(0x3580));
  for (long it = 0; it < iterations; ++it) {
    for (int i = 0; i < 10; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
  }
  __m512 sum = acc[0];
  for (int i = 1; i < 10; ++i) sum = _mm512_add_ps(sum, acc[i]);
  float lanes[16];
  _mm512_storeu_ps(lanes, sum);
  *sink = lanes[0];
  return static_cast<double>(iterations) * 10 * 64;
}

#else

bool has_bf16_dot_product() { return false; }

double bf16_dot_loop(long, float*) { fail("bf16_dot_loop: this CPU has no AVX512-BF16"); }

#endif

namespace {

// This thread's CPU seconds: they stop while the thread is descheduled, so ranks that share
// cores (4 ranks on 2 cores) time the instruction itself, not their share of a core. Wall
// time let one rank read its dot product faster than its FMA and another the reverse, and
// ranks that disagree on the backend disagree on what else they do (a calibration's
// barriers), so the ratio has to be the same on every rank.
double thread_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// FLOP/s of one call of loop(iterations), by this thread's CPU time.
template <typename Loop>
double loop_rate(Loop loop, long iterations, float* sink) {
  const double t0 = thread_seconds();
  const double flops = loop(iterations, sink);
  return flops / std::max(thread_seconds() - t0, 1e-9);
}

}  // namespace

double bf16_dot_over_fma_rate() {
  if (!has_bf16_dot_product()) return 0;
  // 1.5-6 ms a trial at 100-200 GFLOP/s: the choice costs about 40 ms, once a process.
  constexpr long kIterations = 1'000'000;
  float sink = 0;
  double dot = 0, fma = 0;
  for (int trial = 0; trial < 5; ++trial) {
    dot = std::max(dot, loop_rate(bf16_dot_loop, kIterations, &sink));
    fma = std::max(fma, loop_rate(fma_loop, kIterations, &sink));
  }
  return dot / fma;
}

}  // namespace ndt::cpu
