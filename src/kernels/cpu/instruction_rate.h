// The rate of one thread's widest fp32 FMA and of its bf16 dot product (AVX512-BF16's
// vdpbf16ps), each in a loop of independent accumulators that hides the latency: what
// the peak FLOP/s (train/peak_flops.h) and the choice of the bf16 GEMM backend
// (gemm_lowp.h) are measured by.
#pragma once

namespace ndt::cpu {

// Runs `iterations` rounds of FMAs on this thread; returns the FLOPs done (an FMA is 2)
// and stores a lane of the result in *sink so the loop is not optimised away. The widest
// vector FMA the build targets: AVX-512, else AVX2, else what the compiler makes of a
// scalar loop.
double fma_loop(long iterations, float* sink);

// Whether this CPU has AVX512-BF16's dot product (checked at run time, whatever the build
// targets).
bool has_bf16_dot_product();

// The same with vdpbf16ps on 512-bit registers (64 FLOPs an instruction: 32 products and
// their sums into 16 fp32 lanes). Requires has_bf16_dot_product().
double bf16_dot_loop(long iterations, float* sink);

// One thread's bf16 dot-product FLOP/s over its fp32 FMA FLOP/s, each the best of five
// trials of a few milliseconds by the thread's CPU time, the two alternated; 0 without the
// instruction. oneDNN's bf16 matmul without AMX is built on this instruction: where the
// ratio is below 1 (a CPU that issues vdpbf16ps at half the FMA's rate, for example), fp32
// sgemm on the converted operands multiplies faster.
double bf16_dot_over_fma_rate();

}  // namespace ndt::cpu
