// The kernel dispatch seam: model, parallel and optimiser code call ndt::kernels::*,
// never a backend directly. Each kernel is named once, in NDT_KERNEL_LIST below; its
// signature and contract are the backend function of the same name (the CPU backend,
// ndt::cpu, kernels/cpu/*.h, documents each in full), and ndt::kernels::NAME is a
// callable with exactly that signature that routes to the active backend (backend()).
// The CUDA backend (kernels/cuda/, built with NDT_CUDA, docs/gpu.md) pairs its function
// of the same name and signature with each cpu kernel in kernels/cuda/twins.cpp; a
// kernel without a twin throws ndt::Error naming it when called on that backend. Callers
// do not change. The switch costs one predictable branch per call, outside any hot loop;
// the GEMM-sized work dominates.
//
// Pointers: the active backend's memory: host memory on cpu, device memory on cuda
// (Tensor::device() says where a tensor lives; Tensor::copy_from moves it).
//
// Accumulation contract (as in the cpu headers): forward kernels overwrite their
// outputs; backward kernels add (+=) into their gradients, so a tensor used twice gets
// the sum and callers zero gradients first.
#pragma once

#include "core/dtype.h"
#include "kernels/cpu/activation.h"
#include "kernels/cpu/adamw.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/attention_lowp.h"
#include "kernels/cpu/attention_span.h"
#include "kernels/cpu/cast.h"
#include "kernels/cpu/columns.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_lowp.h"
#include "kernels/cpu/moe_rows.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/threads.h"
#include "kernels/op_class.h"
#include "kernels/profile.h"

#include <cstdint>
#include <string>

namespace ndt::kernels {

// Which implementation the functions below run.
enum class Backend { cpu, cuda };
const char* backend_name(Backend backend);  // "cpu", "cuda"
// The active backend: cpu unless set_backend chose another.
Backend backend();
// Chooses the backend, once at start-up before any kernel runs (not synchronised with
// running kernels); cuda starts the device (its memory for Device::cuda tensors). Throws
// ndt::Error naming the value for a backend this build lacks (cuda with NDT_CUDA=off)
// or a device that cannot start (no GPU).
void set_backend(Backend backend);

// What runs the GEMMs, for logs: e.g. "OpenBLAS SkylakeX kernels".
std::string gemm_library();

// Types of the kernels' arguments (kernels/cpu/attention_span.h, adamw.h, columns.h).
using AttentionSpan = cpu::AttentionSpan;
using AdamWStep = cpu::AdamWStep;
using ColumnBlock = cpu::ColumnBlock;

// Every routed kernel, by the header of kernels/cpu/ that documents it.
#define NDT_KERNEL_LIST(X)                                                                              \
  /* threads.h: the host backend's threads (one OpenMP pool shared with OpenBLAS) */                     \
  X(set_num_threads) X(num_threads)                                                                      \
  /* gemm.h: fp32 matrix multiply and linear layers */                                                   \
  X(gemm) X(linear_forward) X(linear_backward)                                                           \
  /* gemm_lowp.h: bf16/f16 inputs, fp32 products, sums and outputs */                                    \
  X(gemm_lowp) X(linear_forward_lowp) X(linear_backward_lowp) X(lowp_gemm_backend)                      \
  /* elementwise.h */                                                                                    \
  X(add_bias) X(bias_backward) X(add_inplace) X(zero) X(copy) X(fill)                                    \
  /* cast.h: fp32 <-> bf16/f16, round to nearest even */                                                 \
  X(cast_to_lowp) X(cast_rows_to_lowp) X(cast_from_lowp) X(round_to_lowp)                                \
  /* columns.h: fused projections' outputs split and rounded, output gradients gathered */               \
  X(split_columns_round) X(gather_columns_lowp) X(gather_columns)                                        \
  /* norm.h */                                                                                           \
  X(layernorm_forward) X(layernorm_backward) X(rmsnorm_forward) X(rmsnorm_backward)                      \
  /* attention.h; attention_span.h: ring attention's span kernels, merged by log-sum-exp; causal, or */  \
  /* restarted at document starts (data.document_boundaries) */                                          \
  X(attention_forward) X(attention_backward) X(attention_span_forward) X(attention_merge)                \
  X(attention_row_dot) X(attention_span_backward_recompute)                                              \
  /* attention_lowp.h: the same in bf16/f16 on gemm_lowp, flash-style (no probabilities kept) */        \
  X(attention_forward_lowp) X(attention_backward_lowp) X(attention_span_forward_lowp)                    \
  X(attention_span_backward_recompute_lowp)                                                              \
  /* rope.h: the _at forms at each row's own position */                                                 \
  X(rope_forward) X(rope_backward) X(rope_forward_at) X(rope_backward_at)                                \
  /* activation.h */                                                                                     \
  X(gelu_forward) X(gelu_backward) X(swiglu_forward) X(swiglu_backward)                                  \
  /* embedding.h: the _range forms work on a vocabulary slice of the table */                            \
  X(embedding_forward) X(embedding_backward) X(embedding_forward_range) X(embedding_backward_range)      \
  /* cross_entropy.h: fused, or in three pieces for a vocab-parallel caller */                           \
  X(softmax_cross_entropy) X(cross_entropy_row_max) X(cross_entropy_exp_sums) X(cross_entropy_finish)    \
  /* moe_rows.h: a mixture-of-experts block's rows to and from its experts */                          \
  X(moe_dispatch_rows) X(moe_combine) X(moe_combine_backward) X(moe_gather_add)                          \
  /* adamw.h */                                                                                          \
  X(adamw_update)

namespace detail {

[[noreturn]] void unknown_backend(const char* kernel);
[[noreturn]] void no_cuda_twin(const char* kernel);

// The cuda backend's form of the cpu kernel Cpu: call() is defined out of line, once per
// build (kernels/cuda/twins.cpp with NDT_CUDA; else kernels.cpp, where it throws), so this
// header, and every file including it, is the same with and without CUDA.
template <auto Cpu>
struct CudaTwin;
template <typename R, typename... Args, R (*Cpu)(Args...)>
struct CudaTwin<Cpu> {
  static R call(const char* name, Args... args);
};

// A kernel routed to the active backend: cpu::NAME's signature, deduced from it.
template <auto Cpu>
struct Routed;
template <typename R, typename... Args, R (*Cpu)(Args...)>
struct Routed<Cpu> {
  const char* name;
  OpClass op_class;
  R operator()(Args... args) const {
    if (profiling()) {
      ProfileScope scope(op_class);
      return call(args...);
    }
    return call(args...);
  }

 private:
  R call(Args... args) const {
    switch (backend()) {
      case Backend::cpu:
        return Cpu(args...);
      case Backend::cuda:
        return CudaTwin<Cpu>::call(name, args...);
    }
    unknown_backend(name);
  }
};

}  // namespace detail

#define NDT_ROUTED_KERNEL(name)                                                                \
  static_assert(op_class_of(#name).has_value(), "kernel " #name " has no row in kernels/op_class.h"); \
  inline constexpr detail::Routed<&cpu::name> name{#name, *op_class_of(#name)};
NDT_KERNEL_LIST(NDT_ROUTED_KERNEL)
#undef NDT_ROUTED_KERNEL

}  // namespace ndt::kernels
