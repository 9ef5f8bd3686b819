// Hardware peak for MFU. On CPU the peak is measured by a short fused-multiply-add
// loop on every thread (the vector FMA units' throughput), unless the config gives
// one; the run log says which. With a low-precision compute dtype the matmul units may
// be faster than the FMA loop (AMX): the peak is then the larger of the FMA loop and a
// large GEMM in that dtype (2048^3, median of 3), a measured lower bound of the unit's
// peak, so MFU there is an upper bound.
#pragma once

#include "comm/communicator.h"
#include "core/dtype.h"

#include <string>
#include <vector>

namespace ndt {

struct PeakFlops {
  double flops_per_s = 0;
  std::string source;  // "measured: ..." or "config runtime.peak_gflops"
};

// Runs the FMA calibration on `threads` threads (about 0.2 s): the best of five trials.
double measure_fma_peak(int threads);

// The same on every rank of `world` at once, each trial between two barriers, so it lasts
// until the slowest rank is done: on ranks that share cores, a rank whose trial runs while
// the others already wait would otherwise see a whole core (4 ranks on 2 cores, each
// trial timed alone: 88-153 GFLOP/s per rank from one calibration to the next). One rank:
// measure_fma_peak.
double measure_fma_peak_together(int threads, Communicator& world);

// One sample of the machine's rate now, by the measurement a measured peak of `compute`
// takes: one FMA trial on `threads` threads (about 40 ms on a free core), and for a
// low-precision dtype the larger of that and a 2048^3 GEMM in it (the median of 3 calls,
// as the peak); on every rank of
// `world` at once (between barriers) where given. A peak is the best of several trials;
// a sample beside each step follows a machine whose speed drifts (`bench train
// --peak-each-step`).
double sample_peak_rate(int threads, DType compute, Communicator* world);

// Each step's MFU against the machine's rate beside it: step i (step_seconds[i]) lies
// between samples[i] and samples[i + 1], and its MFU is flops_per_step / step_seconds[i]
// over their mean. Throws unless there is one sample more than steps, all positive.
std::vector<double> mfu_beside_steps(double flops_per_step, const std::vector<double>& step_seconds,
                                     const std::vector<double>& samples);

// configured_gflops > 0 is taken as given; otherwise measured.
PeakFlops resolve_peak_flops(double configured_gflops, int threads, DType compute = DType::f32);

// A run's peak per rank: configured, or measured by every rank of `world` at once
// (measure_fma_peak_together), the ranks' mean. Ranks that share cores must measure together: one that
// measures while the others still start up sees a whole core (4 ranks on 2 cores measured
// 77-172 GFLOP/s apart), and the planner's validation compares runs with calibrations
// that measure together (plan/calibration.h).
PeakFlops resolve_run_peak_flops(double configured_gflops, int threads, DType compute, Communicator& world);

// Throughput of one single-precision GEMM of M x K times K x N through OpenBLAS, in
// FLOP/s (median of several calls), on the current thread setting.
double measure_sgemm_flops(int M, int N, int K, int repeats = 5);

}  // namespace ndt
