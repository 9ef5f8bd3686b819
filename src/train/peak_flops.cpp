#include "train/peak_flops.h"

#include "core/error.h"
#include "core/timing.h"
#include "kernels/cpu/instruction_rate.h"
#include "kernels/kernels.h"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <vector>

namespace ndt {

namespace {

constexpr int kFmaTrials = 5;

// One trial's FLOP/s on `threads` threads (about 40 ms on a free core); with `world`,
// between two barriers on all its ranks, so the trial lasts until the slowest is done.
double fma_trial_rate(int threads, std::vector<float>& sink, Communicator* world) {
  constexpr long kIterations = 20'000'000;
  if (world) world->barrier();
  const auto t0 = std::chrono::steady_clock::now();
  double total = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
  total += cpu::fma_loop(kIterations, &sink[static_cast<size_t>(omp_get_thread_num()) * 16]);
  if (world) world->barrier();
  return total / seconds_since(t0);
}

// The best of kFmaTrials trials: a peak.
double best_fma_trial(int threads, Communicator* world) {
  std::vector<float> sink(static_cast<size_t>(threads) * 16);
  double best = 0;
  for (int trial = 0; trial < kFmaTrials; ++trial) best = std::max(best, fma_trial_rate(threads, sink, world));
  return best;
}

}  // namespace

double measure_fma_peak(int threads) { return best_fma_trial(threads, nullptr); }

double measure_fma_peak_together(int threads, Communicator& world) {
  return best_fma_trial(threads, world.size() == 1 ? nullptr : &world);
}

namespace {

double measure_lowp_gemm_flops(DType dtype, int n, int repeats) {
  std::vector<uint16_t> a(static_cast<size_t>(n) * n), b(a.size());
  std::vector<float> c(a.size());
  kernels::cast_to_lowp(dtype, std::vector<float>(a.size(), 0.01f).data(), a.data(), static_cast<int64_t>(a.size()));
  b = a;
  std::vector<double> rates;
  for (int r = 0; r <= repeats; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    kernels::gemm_lowp(dtype, false, true, n, n, n, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    if (r > 0) rates.push_back(2.0 * n * n * n / seconds_since(t0));  // the first builds the kernel
  }
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

}  // namespace

double sample_peak_rate(int threads, DType compute, Communicator* world) {
  std::vector<float> sink(static_cast<size_t>(threads) * 16);
  double rate = fma_trial_rate(threads, sink, world);
  if (compute != DType::f32 && kernels::lowp_gemm_backend(compute).starts_with("oneDNN")) {
    rate = std::max(rate, measure_lowp_gemm_flops(compute, 2048, 3));  // as the peak: median of 3
  }
  return rate;
}

std::vector<double> mfu_beside_steps(double flops_per_step, const std::vector<double>& step_seconds,
                                     const std::vector<double>& samples) {
  NDT_CHECK(samples.size() == step_seconds.size() + 1, "{} steps need {} peak samples around them, got {}",
            step_seconds.size(), step_seconds.size() + 1, samples.size());
  std::vector<double> mfu;
  for (size_t i = 0; i < step_seconds.size(); ++i) {
    NDT_CHECK(step_seconds[i] > 0 && samples[i] > 0 && samples[i + 1] > 0,
              "step {}: its seconds ({}) and the peak samples beside it ({}, {}) must be positive", i + 1,
              step_seconds[i], samples[i], samples[i + 1]);
    mfu.push_back(flops_per_step / step_seconds[i] / (0.5 * (samples[i] + samples[i + 1])));
  }
  return mfu;
}

namespace {

// The peak of a run computing in `compute`, given the FMA loop's figure and its source.
PeakFlops peak_of(double fma, const std::string& fma_source, DType compute) {
  if (compute == DType::f32) return {fma, "measured: " + fma_source};
  const double gemm = measure_lowp_gemm_flops(compute, 2048, 3);
  if (gemm <= fma) return {fma, fmt::format("measured: {} (above a {} GEMM's {:.0f} GFLOP/s)", fma_source, dtype_name(compute), gemm / 1e9)};
  return {gemm, fmt::format("measured: a 2048^3 {} GEMM ({}), above the {} ({:.0f} GFLOP/s)", dtype_name(compute),
                            kernels::lowp_gemm_backend(compute), fma_source, fma / 1e9)};
}

std::string fma_source(int threads) {
  return fmt::format("FMA calibration on {} thread{}", threads, threads == 1 ? "" : "s");
}

}  // namespace

PeakFlops resolve_peak_flops(double configured_gflops, int threads, DType compute) {
  if (configured_gflops > 0) return {configured_gflops * 1e9, "config runtime.peak_gflops"};
  return peak_of(measure_fma_peak(threads), fma_source(threads), compute);
}

PeakFlops resolve_run_peak_flops(double configured_gflops, int threads, DType compute, Communicator& world) {
  if (configured_gflops > 0 || world.size() == 1) return resolve_peak_flops(configured_gflops, threads, compute);
  const double fma = measure_fma_peak_together(threads, world);
  world.barrier();  // the bf16 GEMM, if any, measured together too
  PeakFlops peak = peak_of(fma, fma_source(threads), compute);
  float mean = static_cast<float>(peak.flops_per_s);  // 7 digits are plenty
  world.all_reduce(&mean, 1, DType::f32, ReduceOp::avg);
  peak.flops_per_s = mean;
  peak.source += fmt::format(", the mean of {} ranks measuring at once", world.size());
  return peak;
}

double measure_sgemm_flops(int M, int N, int K, int repeats) {
  std::vector<float> a(static_cast<size_t>(M) * K, 0.01f), b(static_cast<size_t>(K) * N, 0.02f),
      c(static_cast<size_t>(M) * N, 0.0f);
  kernels::gemm(false, true, M, N, K, 1.0f, a.data(), K, b.data(), K, 0.0f, c.data(), N);  // warm up
  std::vector<double> rates;
  for (int r = 0; r < repeats; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    kernels::gemm(false, true, M, N, K, 1.0f, a.data(), K, b.data(), K, 0.0f, c.data(), N);
    rates.push_back(2.0 * M * N * K / seconds_since(t0));
  }
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

}  // namespace ndt
