// Which OpenBLAS kernels run. OpenBLAS picks its kernels (its "core") from the CPU when
// it loads, before main, unless OPENBLAS_CORETYPE names one. Debian 12's OpenBLAS
// 0.3.21 does not know every CPU: on a Xeon with AVX-512 and AMX under a VM it falls
// back to its generic Prescott (SSE3) kernels, and sgemm runs 5x slower (22 vs 115
// GFLOP/s on one core for 2048 x 3072 x 768). recommended_blas_core() names the core of
// the widest vectors the CPU's features (detected at run time) support where the running
// core's are narrower: SkylakeX with AVX-512, Haswell with AVX2 and FMA. ndtrain then
// restarts itself with OPENBLAS_CORETYPE set (restart_with_recommended_blas_core, called
// first thing by ndtrain and bench_kernels). A user's own OPENBLAS_CORETYPE is kept, but
// where it names narrower kernels than the CPU runs the run header says so: a VM image
// that set OPENBLAS_CORETYPE=Haswell on an AVX-512 AMD EPYC made a gpt2-124m fp32 step
// 1.75x slower (docs/performance.md, "OpenBLAS's kernels on a CPU it does not know").
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace ndt::cpu {

// The widest vectors a CPU runs, or an OpenBLAS core is written for.
enum class VectorWidth { narrow, avx2, avx512 };

// The core OpenBLAS runs ("SkylakeX", "Prescott", ...).
std::string blas_core_name();
// This CPU's widest vectors (AVX-512 counts with its f, bw, vl and dq parts; AVX2 with FMA).
VectorWidth cpu_vector_width();
// The core to run instead of `core` on a CPU of `cpu` vectors, where `core` is an x86-64
// core of narrower vectors; nothing where it is as wide, or a name this table does not know
// (a newer OpenBLAS's core is left as chosen).
std::optional<std::string> wider_blas_core(std::string_view core, VectorWidth cpu);
// wider_blas_core for the core running on this CPU.
std::optional<std::string> recommended_blas_core();
// What the run header says of the kernels: "OpenBLAS <core> kernels", with why where ndtrain
// set OPENBLAS_CORETYPE (`detected`: the core OpenBLAS chose, NDT_OPENBLAS_CORE_DETECTED)
// or where the user's (`user_coretype`) holds `core` below the CPU's widest vectors.
// Null pointers for unset variables.
std::string describe_blas_core(std::string_view core, VectorWidth cpu, const char* user_coretype,
                               const char* detected);
// Where OpenBLAS chose a narrower core than recommended_blas_core() and OPENBLAS_CORETYPE is
// unset: sets it (and NDT_OPENBLAS_CORE_DETECTED to the core OpenBLAS chose) and restarts
// the program with argv. Returns where nothing is to be done, or where the restart fails
// (the program goes on with the slower kernels). Call before threads or MPI start.
void restart_with_recommended_blas_core(char** argv);

}  // namespace ndt::cpu
