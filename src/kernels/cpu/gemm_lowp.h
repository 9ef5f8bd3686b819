// Matrix multiply with 16-bit float inputs (bf16 or f16 bits in uint16_t) and fp32
// products, sums and output, and the linear layer built on it: the GEMMs of mixed-
// precision training. Row-major with leading dimensions, like cpu::gemm (gemm.h).
//
// Two backends, which compute the same exact products (a product of two bf16, or of two
// f16, values is exact in fp32) and differ only in the order of the fp32 sums:
//   onednn    oneDNN's matmul (bf16/f16 sources, f32 destination; transposes through the
//             memory descriptors' strides, beta through a sum post-op), primitives cached
//             by shape, transposes, leading dimensions, beta and thread count. Used only
//             where oneDNN has a native kernel for the dtype on this CPU (AMX or AVX512-BF16
//             for bf16; oneDNN 2.6 has no CPU f16 matmul), never its reference code. A
//             shape for which oneDNN offers only reference code runs on the fallback.
//             AMX and AVX512-BF16 treat subnormal bf16 inputs as zero.
//   fallback  converts blocks of A and B to fp32 (lowp_bits.h) and calls OpenBLAS
//             cblas_sgemm on them; any CPU.
// The backend is decided per dtype at first use: NDT_LOWP_GEMM=onednn|fallback forces
// one, else default_lowp_gemm_backend: oneDNN where native, except its AVX512-BF16 kernel
// (no AMX) on a CPU whose bf16 dot product, the instruction that kernel is built on, does
// fewer FLOPs a second than its fp32 FMA (measured, instruction_rate.h): there the
// fallback multiplies faster. Both use the shared OpenMP pool (threads.h): oneDNN here
// is built on the same libgomp and follows omp_set_num_threads.
//
// Accumulation contract as in gemm.h: linear_forward_lowp overwrites `out`;
// linear_backward_lowp adds (+=) into dinp and dweight.
//
// Threads: a call uses the calling thread's OpenMP team size (omp_get_max_threads()).
// Calls from several threads at once are safe (the primitive cache is locked, each thread
// has its own oneDNN scratchpad): a parallel region whose threads set their team size to
// one (omp_set_num_threads(1)) runs one-thread GEMMs side by side (attention_lowp.cpp).
#pragma once

#include "core/dtype.h"

#include <cstdint>
#include <string>

namespace ndt::cpu {

enum class LowpGemmBackend { onednn, fallback };

// C[M,N] = op(A)[M,K] op(B)[K,N] + beta * C, op(X) = X or X^T, A and B of `dtype` (bf16 or
// f16). Any finite beta; beta = 0 does not read C (NaN there is overwritten). M, N, K >= 0.
void gemm_lowp(DType dtype, bool trans_a, bool trans_b, int M, int N, int K, const uint16_t* A,
               int lda, const uint16_t* B, int ldb, float beta, float* C, int ldc);
// The same on the given backend (tests, benchmarks); onednn throws ndt::Error where oneDNN
// has no native kernel for dtype.
void gemm_lowp_on(LowpGemmBackend backend, DType dtype, bool trans_a, bool trans_b, int M, int N, int K,
                  const uint16_t* A, int lda, const uint16_t* B, int ldb, float beta, float* C, int ldc);

// out[N, OC] = inp[N, IC] @ weight[OC, IC]^T + bias[OC]   (bias fp32, may be null)
void linear_forward_lowp(DType dtype, float* out, const uint16_t* inp, const uint16_t* weight,
                         const float* bias, int N, int IC, int OC);
// dinp[N, IC] += dout @ weight; dweight[OC, IC] += dout^T @ inp. Either may be null.
void linear_backward_lowp(DType dtype, float* dinp, float* dweight, const uint16_t* dout,
                          const uint16_t* inp, const uint16_t* weight, int N, int IC, int OC);

// For logs: e.g. "oneDNN brg:avx512_core_amx_bf16", "fallback: fp32 convert + OpenBLAS
// sgemm (oneDNN has no native f16 matmul on this CPU)", or with the measured rates where
// they chose the fallback. Decides the backend if not yet.
std::string lowp_gemm_backend(DType dtype);

// The backend gemm_lowp(dtype, ...) runs, decided at first use by
// choose_lowp_gemm_backend(dtype, getenv("NDT_LOWP_GEMM")).
LowpGemmBackend active_lowp_gemm_backend(DType dtype);
// The rule: env_value "onednn" or "fallback" forces that backend; null or empty picks
// default_lowp_gemm_backend(onednn_lowp_impl(dtype), the measured bf16_dot_over_fma_rate()
// where the implementation is the AVX512-BF16 kernel, else 0). An unknown value, or onednn
// without a native kernel, is an ndt::Error naming NDT_LOWP_GEMM and the value.
LowpGemmBackend choose_lowp_gemm_backend(DType dtype, const char* env_value);
// The default for oneDNN's implementation (onednn_lowp_impl; "" where none) and the CPU's
// bf16 dot-product rate over its FMA rate: fallback without a native kernel; for oneDNN's
// AVX512-BF16 kernel ("avx512_core_bf16" in its name), onednn only where the dot product
// is at least as fast as the FMA; onednn for any other native kernel (AMX, its jit gemm).
LowpGemmBackend default_lowp_gemm_backend(const std::string& onednn_impl, double dot_over_fma);
// Replaces the decision for dtype (tests, benchmarks); onednn throws where not native.
void set_lowp_gemm_backend(DType dtype, LowpGemmBackend backend);
// oneDNN's native matmul implementation for dtype on this CPU (e.g.
// "brg:avx512_core_amx_bf16"), or "" where it has none or only reference code.
std::string onednn_lowp_impl(DType dtype);

}  // namespace ndt::cpu
