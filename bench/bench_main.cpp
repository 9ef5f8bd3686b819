// bench_kernels' main: Google Benchmark's, after the restart that ndtrain also makes
// where OpenBLAS chose kernels weaker than the CPU supports (kernels/cpu/blas_core.h),
// so the figures are those of the kernels a training run calls.
#include "kernels/cpu/blas_core.h"

#include <benchmark/benchmark.h>

int main(int argc, char** argv) {
  ndt::cpu::restart_with_recommended_blas_core(argv);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
