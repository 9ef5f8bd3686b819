// The kernel dispatch seam: model, parallel and optimiser code call ndt::kernels::*,
// never a backend directly. Each function here has the signature and contract of the
// backend function of the same name and routes to the active backend (backend()):
// only the CPU backend (ndt::cpu, kernels/cpu/) exists today. A CUDA backend adds
// kernels/cuda/ with the same functions, an enumerator in Backend and a case in each
// routing switch of kernels.cpp (or, if that grows, a function table filled once by
// set_backend); callers do not change. The switch costs one predictable branch per
// call, outside any hot loop; the GEMM-sized work dominates.
//
// Pointers: every pointer is host memory today. With a device backend they are that
// device's memory (Tensor::device() says where a tensor lives).
//
// Accumulation contract (as in the cpu headers, which document each kernel in full):
// forward kernels overwrite their outputs; backward kernels add (+=) into their
// gradients, so a tensor used twice gets the sum and callers zero gradients first.
//   gemm, linear_*                 kernels/cpu/gemm.h
//   gemm_lowp, linear_*_lowp,
//   lowp_gemm_backend              kernels/cpu/gemm_lowp.h
//   cast_to_lowp, cast_from_lowp,
//   round_to_lowp                  kernels/cpu/cast.h
//   add_inplace, zero, copy, fill,
//   add_bias, bias_backward        kernels/cpu/elementwise.h
//   layernorm_*, rmsnorm_*         kernels/cpu/norm.h
//   attention_*                    kernels/cpu/attention.h
//   attention_span_forward,
//   attention_span_backward_recompute,
//   attention_merge,
//   attention_row_dot              kernels/cpu/attention_span.h
//   rope_*                         kernels/cpu/rope.h
//   gelu_*, swiglu_*               kernels/cpu/activation.h
//   embedding_*                    kernels/cpu/embedding.h
//   softmax_cross_entropy,
//   cross_entropy_*                kernels/cpu/cross_entropy.h
//   adamw_update                   kernels/cpu/adamw.h
//   set_num_threads, num_threads   kernels/cpu/threads.h
#pragma once

#include "core/dtype.h"
#include "kernels/cpu/adamw.h"
#include "kernels/cpu/attention_span.h"

#include <cstdint>
#include <string>

namespace ndt::kernels {

// Which implementation the functions below run. cuda would be the next enumerator.
enum class Backend { cpu };
const char* backend_name(Backend backend);  // "cpu"
// The active backend: cpu unless set_backend chose another.
Backend backend();
// Chooses the backend, once at start-up before any kernel runs (not synchronised with
// running kernels). Throws ndt::Error naming the value for a backend this build lacks.
void set_backend(Backend backend);

// --- Threads of the host backend (one OpenMP pool shared with OpenBLAS).
void set_num_threads(int n);  // n >= 1
int num_threads();
// What runs the GEMMs, for logs: e.g. "OpenBLAS SkylakeX kernels".
std::string gemm_library();

// --- Matrix multiply and linear layers (gemm.h); bias helpers (elementwise.h).
void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc);
void linear_forward(float* out, const float* inp, const float* weight, const float* bias, int N,
                    int IC, int OC);
void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int IC, int OC);
// bf16/f16 inputs (raw bits), fp32 products, sums and outputs (gemm_lowp.h).
void gemm_lowp(DType dtype, bool trans_a, bool trans_b, int M, int N, int K, const uint16_t* A,
               int lda, const uint16_t* B, int ldb, float beta, float* C, int ldc);
void linear_forward_lowp(DType dtype, float* out, const uint16_t* inp, const uint16_t* weight,
                         const float* bias, int N, int IC, int OC);
void linear_backward_lowp(DType dtype, float* dinp, float* dweight, const uint16_t* dout,
                          const uint16_t* inp, const uint16_t* weight, int N, int IC, int OC);
// What runs gemm_lowp for dtype, for logs: e.g. "oneDNN brg:avx512_core_amx_bf16".
std::string lowp_gemm_backend(DType dtype);
void add_bias(float* out, const float* bias, int64_t rows, int64_t C);           // out += bias per row
void bias_backward(float* dbias, const float* dout, int64_t rows, int64_t C);    // dbias += row sums

// --- Elementwise (elementwise.h).
void add_inplace(float* y, const float* x, int64_t n);  // y += x
void zero(float* x, int64_t n);
void copy(float* dst, const float* src, int64_t n);     // no overlap
void fill(float* x, float value, int64_t n);

// --- fp32 <-> bf16/f16 conversions, round to nearest even (cast.h).
void cast_to_lowp(DType dtype, const float* src, uint16_t* dst, int64_t n);
void cast_from_lowp(DType dtype, const uint16_t* src, float* dst, int64_t n);
void round_to_lowp(DType dtype, float* x, int64_t n);  // x = float(dtype(x))

// --- Normalisation (norm.h).
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C, float eps);
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int N, int C);
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C,
                     float eps);
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, const float* rstd, int N, int C);

// --- Attention (attention.h) and rotary embedding (rope.h).
void attention_forward(float* out, float* lse, float* att, const float* q, const float* k,
                       const float* v, int B, int T, int NH, int NKV, int HS);
void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q,
                        const float* k, const float* v, const float* att, int B, int T, int NH,
                        int NKV, int HS);
// Ring attention's span kernels (attention_span.h): one (query span, key span) pair at a
// time, merged by log-sum-exp; no probabilities are kept, the backward recomputing them
// from the merged lse.
using AttentionSpan = cpu::AttentionSpan;
void attention_span_forward(float* out, float* lse, const float* q, const float* k,
                            const float* v, int B, int Tq, int Tk, int NH, int NKV, int HS,
                            AttentionSpan qs, AttentionSpan ks);
void attention_merge(float* out, float* lse, const float* out_part, const float* lse_part, int B,
                     int T, int NH, int HS, AttentionSpan rows);
void attention_row_dot(float* D, const float* dout, const float* out, int B, int T, int NH, int HS);
void attention_span_backward_recompute(float* dq, float* dk, float* dv, const float* dout,
                                       const float* q, const float* k, const float* v,
                                       const float* lse, const float* D, int B, int Tq, int Tk,
                                       int NH, int NKV, int HS, AttentionSpan qs, AttentionSpan ks);
void rope_forward(float* out, const float* inp, int B, int T, int H, int D, int pos_offset,
                  float theta);
void rope_backward(float* dinp, const float* dout, int B, int T, int H, int D, int pos_offset,
                   float theta);
void rope_forward_at(float* out, const float* inp, int B, int T, int H, int D, const int32_t* positions,
                     float theta);
void rope_backward_at(float* dinp, const float* dout, int B, int T, int H, int D, const int32_t* positions,
                      float theta);

// --- Activations (activation.h).
void gelu_forward(float* out, const float* inp, int64_t n);
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n);
void swiglu_forward(float* out, const float* gate, const float* up, int64_t n);
void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate,
                     const float* up, int64_t n);

// --- Embedding (embedding.h); the _range forms work on a vocabulary slice of the table.
void embedding_forward(float* out, const int32_t* ids, const float* table, int N, int C,
                       bool accumulate);
void embedding_backward(float* dtable, const float* dout, const int32_t* ids, int N, int C);
void embedding_forward_range(float* out, const int32_t* ids, const float* table, int64_t vocab_begin,
                             int64_t local_vocab, int64_t rows, int64_t C);
void embedding_backward_range(float* dtable, const float* dout, const int32_t* ids, int64_t vocab_begin,
                              int64_t local_vocab, int64_t rows, int64_t C);

// --- Loss (cross_entropy.h): fused, or in three pieces for a vocab-parallel caller;
// both with the optional z-loss (coefficient z_loss, per-row terms into z_losses).
void softmax_cross_entropy(float* logits, float* losses, const int32_t* targets, int N, int V,
                           float grad_scale, float z_loss = 0.0f, float* z_losses = nullptr);
void cross_entropy_row_max(const float* logits, float* row_max, int rows, int V);
void cross_entropy_exp_sums(float* logits, const float* row_max, const int32_t* targets, int64_t vocab_begin,
                            float* sums, float* target_logit, int rows, int V, bool keep_exp);
void cross_entropy_finish(float* logits, float* losses, const float* row_max, const float* sums,
                          const float* target_logit, const int32_t* targets, int64_t vocab_begin, int rows,
                          int V, float grad_scale, float z_loss = 0.0f, float* z_losses = nullptr);

// --- Optimiser (adamw.h).
using AdamWStep = cpu::AdamWStep;
void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n,
                  const AdamWStep& step);

}  // namespace ndt::kernels
