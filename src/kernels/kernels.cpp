// Routing of ndt::kernels::* to the active backend: one switch per function. A new
// backend adds its case to NDT_ROUTE (and its enumerator to the checks below).
#include "kernels/kernels.h"

#include "core/error.h"
#include "kernels/cpu/activation.h"
#include "kernels/cpu/adamw.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/attention_span.h"
#include "kernels/cpu/blas_core.h"
#include "kernels/cpu/cast.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_lowp.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/threads.h"

#include <cstdlib>

#include <atomic>

namespace ndt::kernels {
namespace {

std::atomic<Backend> g_backend{Backend::cpu};

[[noreturn]] void unknown_backend(const char* kernel) {
  fail("kernels::{}: active backend {} has no implementation in this build (available: cpu)", kernel,
       static_cast<int>(g_backend.load(std::memory_order_relaxed)));
}

}  // namespace

// Calls backend::kernel(args...) for the active backend.
#define NDT_ROUTE(kernel, ...)                 \
  switch (backend()) {                         \
    case Backend::cpu:                         \
      return cpu::kernel(__VA_ARGS__);         \
  }                                            \
  unknown_backend(#kernel)

const char* backend_name(Backend backend) {
  switch (backend) {
    case Backend::cpu:
      return "cpu";
  }
  return "unknown";
}

Backend backend() { return g_backend.load(std::memory_order_relaxed); }

void set_backend(Backend backend) {
  switch (backend) {
    case Backend::cpu:
      g_backend.store(backend, std::memory_order_relaxed);
      return;
  }
  fail("kernels::set_backend: unknown backend {} (this build has: cpu)", static_cast<int>(backend));
}

void set_num_threads(int n) { NDT_ROUTE(set_num_threads, n); }
int num_threads() { NDT_ROUTE(num_threads); }
std::string gemm_library() {
  std::string s = "OpenBLAS " + cpu::blas_core_name() + " kernels";
  // Set by ndtrain when it restarted itself with a better core (apps/ndtrain/main.cpp).
  if (const char* weaker = std::getenv("NDT_OPENBLAS_CORE_DETECTED")) {
    s += std::string(" (OpenBLAS chose ") + weaker + " for this CPU; ndtrain set OPENBLAS_CORETYPE)";
  }
  return s;
}

void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc) {
  NDT_ROUTE(gemm, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
void linear_forward(float* out, const float* inp, const float* weight, const float* bias, int N,
                    int IC, int OC) {
  NDT_ROUTE(linear_forward, out, inp, weight, bias, N, IC, OC);
}
void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int IC, int OC) {
  NDT_ROUTE(linear_backward, dinp, dweight, dbias, dout, inp, weight, N, IC, OC);
}
void gemm_lowp(DType dtype, bool trans_a, bool trans_b, int M, int N, int K, const uint16_t* A,
               int lda, const uint16_t* B, int ldb, float beta, float* C, int ldc) {
  NDT_ROUTE(gemm_lowp, dtype, trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc);
}
void linear_forward_lowp(DType dtype, float* out, const uint16_t* inp, const uint16_t* weight,
                         const float* bias, int N, int IC, int OC) {
  NDT_ROUTE(linear_forward_lowp, dtype, out, inp, weight, bias, N, IC, OC);
}
void linear_backward_lowp(DType dtype, float* dinp, float* dweight, const uint16_t* dout,
                          const uint16_t* inp, const uint16_t* weight, int N, int IC, int OC) {
  NDT_ROUTE(linear_backward_lowp, dtype, dinp, dweight, dout, inp, weight, N, IC, OC);
}
std::string lowp_gemm_backend(DType dtype) { NDT_ROUTE(lowp_gemm_backend, dtype); }
void add_bias(float* out, const float* bias, int64_t rows, int64_t C) {
  NDT_ROUTE(add_bias, out, bias, rows, C);
}
void bias_backward(float* dbias, const float* dout, int64_t rows, int64_t C) {
  NDT_ROUTE(bias_backward, dbias, dout, rows, C);
}

void add_inplace(float* y, const float* x, int64_t n) { NDT_ROUTE(add_inplace, y, x, n); }
void zero(float* x, int64_t n) { NDT_ROUTE(zero, x, n); }
void copy(float* dst, const float* src, int64_t n) { NDT_ROUTE(copy, dst, src, n); }
void fill(float* x, float value, int64_t n) { NDT_ROUTE(fill, x, value, n); }

void cast_to_lowp(DType dtype, const float* src, uint16_t* dst, int64_t n) {
  NDT_ROUTE(cast_to_lowp, dtype, src, dst, n);
}
void cast_from_lowp(DType dtype, const uint16_t* src, float* dst, int64_t n) {
  NDT_ROUTE(cast_from_lowp, dtype, src, dst, n);
}
void round_to_lowp(DType dtype, float* x, int64_t n) { NDT_ROUTE(round_to_lowp, dtype, x, n); }

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C, float eps) {
  NDT_ROUTE(layernorm_forward, out, mean, rstd, inp, weight, bias, N, C, eps);
}
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int N, int C) {
  NDT_ROUTE(layernorm_backward, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C,
                     float eps) {
  NDT_ROUTE(rmsnorm_forward, out, rstd, inp, weight, N, C, eps);
}
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, const float* rstd, int N, int C) {
  NDT_ROUTE(rmsnorm_backward, dinp, dweight, dout, inp, weight, rstd, N, C);
}

void attention_forward(float* out, float* lse, float* att, const float* q, const float* k,
                       const float* v, int B, int T, int NH, int NKV, int HS) {
  NDT_ROUTE(attention_forward, out, lse, att, q, k, v, B, T, NH, NKV, HS);
}
void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q,
                        const float* k, const float* v, const float* att, int B, int T, int NH,
                        int NKV, int HS) {
  NDT_ROUTE(attention_backward, dq, dk, dv, dout, q, k, v, att, B, T, NH, NKV, HS);
}
void attention_span_forward(float* out, float* lse, const float* q, const float* k,
                            const float* v, int B, int Tq, int Tk, int NH, int NKV, int HS,
                            AttentionSpan qs, AttentionSpan ks) {
  NDT_ROUTE(attention_span_forward, out, lse, q, k, v, B, Tq, Tk, NH, NKV, HS, qs, ks);
}
void attention_merge(float* out, float* lse, const float* out_part, const float* lse_part, int B,
                     int T, int NH, int HS, AttentionSpan rows) {
  NDT_ROUTE(attention_merge, out, lse, out_part, lse_part, B, T, NH, HS, rows);
}
void attention_row_dot(float* D, const float* dout, const float* out, int B, int T, int NH,
                       int HS) {
  NDT_ROUTE(attention_row_dot, D, dout, out, B, T, NH, HS);
}
void attention_span_backward_recompute(float* dq, float* dk, float* dv, const float* dout,
                                       const float* q, const float* k, const float* v,
                                       const float* lse, const float* D, int B, int Tq, int Tk,
                                       int NH, int NKV, int HS, AttentionSpan qs, AttentionSpan ks) {
  NDT_ROUTE(attention_span_backward_recompute, dq, dk, dv, dout, q, k, v, lse, D, B, Tq, Tk, NH,
            NKV, HS, qs, ks);
}
void rope_forward(float* out, const float* inp, int B, int T, int H, int D, int pos_offset,
                  float theta) {
  NDT_ROUTE(rope_forward, out, inp, B, T, H, D, pos_offset, theta);
}
void rope_backward(float* dinp, const float* dout, int B, int T, int H, int D, int pos_offset,
                   float theta) {
  NDT_ROUTE(rope_backward, dinp, dout, B, T, H, D, pos_offset, theta);
}
void rope_forward_at(float* out, const float* inp, int B, int T, int H, int D, const int32_t* positions,
                     float theta) {
  NDT_ROUTE(rope_forward_at, out, inp, B, T, H, D, positions, theta);
}
void rope_backward_at(float* dinp, const float* dout, int B, int T, int H, int D, const int32_t* positions,
                      float theta) {
  NDT_ROUTE(rope_backward_at, dinp, dout, B, T, H, D, positions, theta);
}

void gelu_forward(float* out, const float* inp, int64_t n) { NDT_ROUTE(gelu_forward, out, inp, n); }
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) {
  NDT_ROUTE(gelu_backward, dinp, inp, dout, n);
}
void swiglu_forward(float* out, const float* gate, const float* up, int64_t n) {
  NDT_ROUTE(swiglu_forward, out, gate, up, n);
}
void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate,
                     const float* up, int64_t n) {
  NDT_ROUTE(swiglu_backward, dgate, dup, dout, gate, up, n);
}

void embedding_forward(float* out, const int32_t* ids, const float* table, int N, int C,
                       bool accumulate) {
  NDT_ROUTE(embedding_forward, out, ids, table, N, C, accumulate);
}
void embedding_backward(float* dtable, const float* dout, const int32_t* ids, int N, int C) {
  NDT_ROUTE(embedding_backward, dtable, dout, ids, N, C);
}
void embedding_forward_range(float* out, const int32_t* ids, const float* table, int64_t vocab_begin,
                             int64_t local_vocab, int64_t rows, int64_t C) {
  NDT_ROUTE(embedding_forward_range, out, ids, table, vocab_begin, local_vocab, rows, C);
}
void embedding_backward_range(float* dtable, const float* dout, const int32_t* ids, int64_t vocab_begin,
                              int64_t local_vocab, int64_t rows, int64_t C) {
  NDT_ROUTE(embedding_backward_range, dtable, dout, ids, vocab_begin, local_vocab, rows, C);
}

void softmax_cross_entropy(float* logits, float* losses, const int32_t* targets, int N, int V,
                           float grad_scale, float z_loss, float* z_losses) {
  NDT_ROUTE(softmax_cross_entropy, logits, losses, targets, N, V, grad_scale, z_loss, z_losses);
}
void cross_entropy_row_max(const float* logits, float* row_max, int rows, int V) {
  NDT_ROUTE(cross_entropy_row_max, logits, row_max, rows, V);
}
void cross_entropy_exp_sums(float* logits, const float* row_max, const int32_t* targets, int64_t vocab_begin,
                            float* sums, float* target_logit, int rows, int V, bool keep_exp) {
  NDT_ROUTE(cross_entropy_exp_sums, logits, row_max, targets, vocab_begin, sums, target_logit, rows, V, keep_exp);
}
void cross_entropy_finish(float* logits, float* losses, const float* row_max, const float* sums,
                          const float* target_logit, const int32_t* targets, int64_t vocab_begin, int rows,
                          int V, float grad_scale, float z_loss, float* z_losses) {
  NDT_ROUTE(cross_entropy_finish, logits, losses, row_max, sums, target_logit, targets, vocab_begin, rows, V,
            grad_scale, z_loss, z_losses);
}

void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n,
                  const AdamWStep& step) {
  NDT_ROUTE(adamw_update, param, grad, m, v, n, step);
}

#undef NDT_ROUTE

}  // namespace ndt::kernels
