// The CUDA backend's kernels: each has the name, signature and contract of its CPU twin
// (kernels/cpu/*.h documents them: overwrite vs +=, layouts, what is refused), with every
// pointer in device memory. Reached through ndt::kernels (kernels/kernels.h) once
// set_backend(Backend::cuda) ran; kernels/cuda/twins.h pairs them with their twins.
// Differences that stay within the contract: sums run in another order (results agree
// up to fp32 rounding, not bitwise), GEMMs run on cuBLASLt with fp32 compute (no TF32)
// and a kernel's bad-input check (an attention start, a RoPE position) costs a wait for
// the device. Safe for nvcc and the host compiler alike.
#pragma once

#include "core/dtype.h"
#include "kernels/cpu/adamw.h"
#include "kernels/rope_frequencies.h"

#include <cstdint>
#include <string>

namespace ndt::cuda {

// gemm.h (cuBLASLt, fp32 compute: TF32 off)
void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc);
void linear_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int IC, int OC);
void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int IC, int OC);
// gemm_lowp.h (bf16/f16 inputs, fp32 compute and output)
void gemm_lowp(DType dtype, bool trans_a, bool trans_b, int M, int N, int K, const uint16_t* A, int lda,
               const uint16_t* B, int ldb, float beta, float* C, int ldc);
void linear_forward_lowp(DType dtype, float* out, const uint16_t* inp, const uint16_t* weight, const float* bias,
                         int N, int IC, int OC);
void linear_backward_lowp(DType dtype, float* dinp, float* dweight, const uint16_t* dout, const uint16_t* inp,
                          const uint16_t* weight, int N, int IC, int OC);
std::string lowp_gemm_backend(DType dtype);  // "cuBLASLt (bf16 inputs, fp32 compute)"

// elementwise.h
void add_inplace(float* y, const float* x, int64_t n);
void zero(float* x, int64_t n);
void copy(float* dst, const float* src, int64_t n);
void fill(float* x, float value, int64_t n);
void add_bias(float* out, const float* bias, int64_t rows, int64_t C);
void bias_backward(float* dbias, const float* dout, int64_t rows, int64_t C);

// cast.h
void cast_to_lowp(DType dtype, const float* src, uint16_t* dst, int64_t n);
void cast_rows_to_lowp(DType dtype, const float* src, int64_t rows, int64_t cols, uint16_t* dst, int64_t ld);
void cast_from_lowp(DType dtype, const uint16_t* src, float* dst, int64_t n);
void round_to_lowp(DType dtype, float* x, int64_t n);

// norm.h
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C, float eps);
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int N, int C);
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C, float eps);
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, int N, int C);

// attention.h: one warp per query row, online softmax; head size up to kMaxAttentionHeadSize.
inline constexpr int kMaxAttentionHeadSize = 256;
void attention_forward(float* out, float* lse, float* att, const float* q, const float* k, const float* v,
                       const int32_t* starts, int B, int T, int NH, int NKV, int HS);
void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                        const float* v, const float* att, const int32_t* starts, int B, int T, int NH, int NKV,
                        int HS);

// rope.h
void rope_forward(float* out, const float* inp, int B, int T, int H, int D, int pos_offset,
                  const RopeFrequencies& frequencies);
void rope_backward(float* dinp, const float* dout, int B, int T, int H, int D, int pos_offset,
                   const RopeFrequencies& frequencies);
void rope_forward_at(float* out, const float* inp, int B, int T, int H, int D, const int32_t* positions,
                     const RopeFrequencies& frequencies);
void rope_backward_at(float* dinp, const float* dout, int B, int T, int H, int D, const int32_t* positions,
                      const RopeFrequencies& frequencies);

// activation.h
void gelu_forward(float* out, const float* inp, int64_t n);
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n);
void swiglu_forward(float* out, const float* gate, const float* up, int64_t n);
void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up, int64_t n);

// embedding.h (ids on the device; backward deterministic: one thread per column, rows in order)
void embedding_forward(float* out, const int32_t* ids, const float* table, int N, int C, bool accumulate);
void embedding_backward(float* dtable, const float* dout, const int32_t* ids, int N, int C);
void embedding_forward_range(float* out, const int32_t* ids, const float* table, int64_t vocab_begin,
                             int64_t local_vocab, int64_t rows, int64_t C);
void embedding_backward_range(float* dtable, const float* dout, const int32_t* ids, int64_t vocab_begin,
                              int64_t local_vocab, int64_t rows, int64_t C);

// cross_entropy.h: fused, or in three pieces for a vocab-parallel caller (one block per row)
void softmax_cross_entropy(float* logits, float* losses, const int32_t* targets, int N, int V, float grad_scale,
                           float z_loss, float* z_losses);
void cross_entropy_row_max(const float* logits, float* row_max, int rows, int V);
void cross_entropy_exp_sums(float* logits, const float* row_max, const int32_t* targets, int64_t vocab_begin,
                            float* sums, float* target_logit, int rows, int V, bool keep_exp);
void cross_entropy_finish(float* logits, float* losses, const float* row_max, const float* sums,
                          const float* target_logit, const int32_t* targets, int64_t vocab_begin, int rows, int V,
                          float grad_scale, float z_loss, float* z_losses);

// adamw.h
void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n, const cpu::AdamWStep& step);

}  // namespace ndt::cuda
