// Matrix multiply through OpenBLAS sgemm, and the linear layer built on it.
// All matrices are row-major float32.
//
// Accumulation contract: linear_forward overwrites `out`; linear_backward adds (+=)
// into dinp, dweight and dbias, so gradients of a tensor used twice sum naturally.
#pragma once

namespace ndt::cpu {

// C[M,N] = alpha * op(A) * op(B) + beta * C, op(X) = X or X^T. Row-major with leading
// dimensions lda/ldb/ldc (elements between consecutive rows as stored).
void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc);

// out[N, OC] = inp[N, IC] @ weight[OC, IC]^T + bias[OC]   (bias may be null)
void linear_forward(float* out, const float* inp, const float* weight, const float* bias, int N,
                    int IC, int OC);

// dinp[N, IC] += dout @ weight; dweight[OC, IC] += dout^T @ inp; dbias[OC] += sum_n dout.
// Any of dinp, dweight, dbias may be null (skipped).
void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int IC, int OC);

}  // namespace ndt::cpu
