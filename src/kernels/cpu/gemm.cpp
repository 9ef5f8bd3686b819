#include "kernels/cpu/gemm.h"

#include <cblas.h>

#include <cstdint>

namespace ndt::cpu {
namespace {

// Below this many elements our loops run on the calling thread (no fork/join cost).
constexpr int64_t kParallelMin = int64_t{1} << 14;

}  // namespace

void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void linear_forward(float* out, const float* inp, const float* weight, const float* bias, int N,
                    int IC, int OC) {
  float beta = 0.0f;
  if (bias != nullptr) {
    // Initialise every row of out with the bias and let sgemm accumulate onto it.
#pragma omp parallel for schedule(static) if (static_cast<int64_t>(N) * OC >= kParallelMin)
    for (int n = 0; n < N; ++n) {
      float* row = out + static_cast<int64_t>(n) * OC;
      for (int o = 0; o < OC; ++o) row[o] = bias[o];
    }
    beta = 1.0f;
  }
  // out[N, OC] = inp[N, IC] @ weight[OC, IC]^T (+ out)
  gemm(false, true, N, OC, IC, 1.0f, inp, IC, weight, IC, beta, out, OC);
}

void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int IC, int OC) {
  if (dinp != nullptr) {
    // dinp[N, IC] += dout[N, OC] @ weight[OC, IC]
    gemm(false, false, N, IC, OC, 1.0f, dout, OC, weight, IC, 1.0f, dinp, IC);
  }
  if (dweight != nullptr) {
    // dweight[OC, IC] += dout[N, OC]^T @ inp[N, IC]
    gemm(true, false, OC, IC, N, 1.0f, dout, OC, inp, IC, 1.0f, dweight, IC);
  }
  if (dbias != nullptr) {
    // Column sums; each thread owns a block of columns and sums rows in order n = 0..N-1,
    // so the result does not depend on the thread count. Blocks of 16 columns keep the
    // inner loop contiguous (vectorised) while walking the rows.
    constexpr int kBlock = 16;
    int nblocks = (OC + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (static_cast<int64_t>(N) * OC >= kParallelMin)
    for (int b = 0; b < nblocks; ++b) {
      int o0 = b * kBlock;
      int o1 = o0 + kBlock < OC ? o0 + kBlock : OC;
      float acc[kBlock] = {};
      for (int n = 0; n < N; ++n) {
        const float* row = dout + static_cast<int64_t>(n) * OC;
        for (int o = o0; o < o1; ++o) acc[o - o0] += row[o];
      }
      for (int o = o0; o < o1; ++o) dbias[o] += acc[o - o0];
    }
  }
}

}  // namespace ndt::cpu
