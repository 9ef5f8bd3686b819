// Which OpenBLAS kernels run. OpenBLAS picks its kernels (its "core") from the CPU when
// it loads, before main, unless OPENBLAS_CORETYPE names one. Debian 12's OpenBLAS
// 0.3.21 does not know every CPU: on a Xeon with AVX-512 and AMX under a VM it falls
// back to its generic Prescott (SSE3) kernels, and sgemm runs 5x slower (22 vs 115
// GFLOP/s on one core for 2048 x 3072 x 768). recommended_blas_core() names the core
// that the CPU's features (detected at run time) support when OpenBLAS chose a weaker
// one: SkylakeX with AVX-512, Haswell with AVX2 and FMA. ndtrain then restarts itself
// with OPENBLAS_CORETYPE set (restart_with_recommended_blas_core, called first thing by
// ndtrain and bench_kernels); a user's own setting is kept.
#pragma once

#include <optional>
#include <string>

namespace ndt::cpu {

// The core OpenBLAS runs ("SkylakeX", "Prescott", ...).
std::string blas_core_name();
// A better core for this CPU than the one running, or nothing.
std::optional<std::string> recommended_blas_core();
// Where OpenBLAS chose a weaker core than recommended_blas_core() and OPENBLAS_CORETYPE is
// unset: sets it (and NDT_OPENBLAS_CORE_DETECTED to the core OpenBLAS chose) and restarts
// the program with argv. Returns where nothing is to be done, or where the restart fails
// (the program goes on with the slower kernels). Call before threads or MPI start.
void restart_with_recommended_blas_core(char** argv);

}  // namespace ndt::cpu
