// The per-step cost of the stability checks the trainer adds (docs/stability.md): the
// spike detector's check and record over its default window of 32 steps, and a ZClip
// update. (The non-finite flag's 4-byte all-reduce predates them.)
//   ./bench_kernels --benchmark_filter='Stability' --benchmark_repetitions=5 --benchmark_report_aggregates_only
#include "optim/zclip.h"
#include "train/spike_detector.h"

#include <benchmark/benchmark.h>

#include <cmath>

namespace {

void BM_StabilitySpikeCheckAndRecord(benchmark::State& state) {
  ndt::SpikeDetector detector{ndt::SpikeDetectorConfig{}};
  double loss = 3.0;
  for (int i = 0; i < 64; ++i) detector.record(loss + 0.01 * std::sin(i), 1.0 + 0.01 * std::cos(i));
  for (auto _ : state) {
    loss += 1e-9;
    benchmark::DoNotOptimize(detector.check(loss, 1.0));
    detector.record(loss, 1.0);
  }
}
BENCHMARK(BM_StabilitySpikeCheckAndRecord);

void BM_StabilityZClipUpdate(benchmark::State& state) {
  ndt::ZClip zclip{ndt::ZClipConfig{}};
  double norm = 1.0;
  for (auto _ : state) {
    norm = 1.0 + 0.01 * std::sin(norm);
    benchmark::DoNotOptimize(zclip.update(norm));
  }
}
BENCHMARK(BM_StabilityZClipUpdate);

}  // namespace
