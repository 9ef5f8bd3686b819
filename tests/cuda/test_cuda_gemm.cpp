// cuBLASLt GEMMs against the CPU twins (kernels/cpu/gemm.h, gemm_lowp.h): every
// transpose pair, beta 0 and 1, leading dimensions wider than the rows, sizes that are
// multiples of nothing. Each element's bound is derived from its own terms: both sides
// add the same K exact-ish products in different orders, so they differ by at most
// 2 (K + 2) 2^-24 sum_k |a_ik b_kj| (+ |beta c|).
#include "../common/gradcheck.h"
#include "cuda_test.h"
#include "kernels/cpu/cast.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_lowp.h"
#include "kernels/cuda/cuda_kernels.h"

#include <cmath>
#include <vector>

namespace ndt {
namespace {

using testing::CudaTest;
using testing::on_device;
using testing::on_host;
using testing::random_vector;

// Element (i, j) of op(X) for row-major X with leading dimension ld.
float at(const std::vector<float>& x, bool trans, int i, int j, int ld) {
  return trans ? x[static_cast<size_t>(j) * ld + i] : x[static_cast<size_t>(i) * ld + j];
}

std::vector<double> gemm_bounds(bool ta, bool tb, int M, int N, int K, const std::vector<float>& A, int lda,
                                const std::vector<float>& B, int ldb, float beta, const std::vector<float>& C,
                                int ldc) {
  std::vector<double> bound(C.size(), 0.0);
  for (int i = 0; i < M; ++i) {
    for (int j = 0; j < N; ++j) {
      double sum = std::abs(beta * C[static_cast<size_t>(i) * ldc + j]);
      for (int k = 0; k < K; ++k) sum += std::abs(static_cast<double>(at(A, ta, i, k, lda)) * at(B, tb, k, j, ldb));
      bound[static_cast<size_t>(i) * ldc + j] = 2.0 * (K + 2) * std::ldexp(sum, -24);
    }
  }
  return bound;
}

class CudaGemm : public CudaTest {};

TEST_F(CudaGemm, Fp32EveryTransposeAndBetaMatchesCpu) {
  const int M = 37, N = 29, K = 53, pad = 3;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      for (float beta : {0.0f, 1.0f}) {
        const int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
        const std::vector<float> A = random_vector(int64_t{ta ? K : M} * lda, 1);
        const std::vector<float> B = random_vector(int64_t{tb ? N : K} * ldb, 2);
        std::vector<float> C = random_vector(int64_t{M} * ldc, 3);
        Tensor dA = on_device(A), dB = on_device(B), dC = on_device(C);
        cuda::gemm(ta, tb, M, N, K, 0.75f, dA.data<float>(), lda, dB.data<float>(), ldb, beta, dC.data<float>(), ldc);
        const std::vector<double> bound = gemm_bounds(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
        cpu::gemm(ta, tb, M, N, K, 0.75f, A.data(), lda, B.data(), ldb, beta, C.data(), ldc);
        testing::expect_within(on_host<float>(dC), C, bound,
                               "gemm ta=" + std::to_string(ta) + " tb=" + std::to_string(tb) +
                                   " beta=" + std::to_string(beta));
      }
    }
  }
}

TEST_F(CudaGemm, LinearForwardAndBackwardMatchCpu) {
  const int N = 19, IC = 24, OC = 13;
  const std::vector<float> inp = random_vector(N * IC, 4), w = random_vector(OC * IC, 5), b = random_vector(OC, 6);
  const std::vector<float> dout = random_vector(N * OC, 7);
  std::vector<float> out(N * OC), dinp = random_vector(N * IC, 8), dw = random_vector(OC * IC, 9),
                                  db = random_vector(OC, 10);
  Tensor d_inp = on_device(inp), d_w = on_device(w), d_b = on_device(b), d_dout = on_device(dout);
  Tensor d_out = on_device(out), d_dinp = on_device(dinp), d_dw = on_device(dw), d_db = on_device(db);
  kernels::linear_forward(d_out.data<float>(), d_inp.data<float>(), d_w.data<float>(), d_b.data<float>(), N, IC, OC);
  kernels::linear_backward(d_dinp.data<float>(), d_dw.data<float>(), d_db.data<float>(), d_dout.data<float>(),
                           d_inp.data<float>(), d_w.data<float>(), N, IC, OC);
  cpu::linear_forward(out.data(), inp.data(), w.data(), b.data(), N, IC, OC);
  cpu::linear_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), N, IC, OC);
  testing::expect_close(on_host<float>(d_out), out, IC, "linear_forward");
  testing::expect_close(on_host<float>(d_dinp), dinp, OC, "linear_backward dinp (+=)");
  testing::expect_close(on_host<float>(d_dw), dw, N, "linear_backward dweight (+=)");
  testing::expect_close(on_host<float>(d_db), db, N, "linear_backward dbias (+=)");
}

// bf16 and f16 inputs: the products are exact in fp32 on both sides, so the same bound holds.
TEST_F(CudaGemm, LowPrecisionInputsMatchCpu) {
  const int M = 21, N = 34, K = 45;
  for (DType dtype : {DType::bf16, DType::f16}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        const int lda = ta ? M : K, ldb = tb ? K : N;
        std::vector<float> A = random_vector(int64_t{M} * K, 11), B = random_vector(int64_t{K} * N, 12);
        cpu::round_to_lowp(dtype, A.data(), static_cast<int64_t>(A.size()));
        cpu::round_to_lowp(dtype, B.data(), static_cast<int64_t>(B.size()));
        std::vector<uint16_t> A16(A.size()), B16(B.size());
        cpu::cast_to_lowp(dtype, A.data(), A16.data(), static_cast<int64_t>(A.size()));
        cpu::cast_to_lowp(dtype, B.data(), B16.data(), static_cast<int64_t>(B.size()));
        std::vector<float> C = random_vector(int64_t{M} * N, 13);
        Tensor dA = on_device(A16), dB = on_device(B16), dC = on_device(C);
        cuda::gemm_lowp(dtype, ta, tb, M, N, K, dA.data<uint16_t>(), lda, dB.data<uint16_t>(), ldb, 1.0f,
                        dC.data<float>(), N);
        const std::vector<double> bound = gemm_bounds(ta, tb, M, N, K, A, lda, B, ldb, 1.0f, C, N);
        cpu::gemm_lowp(dtype, ta, tb, M, N, K, A16.data(), lda, B16.data(), ldb, 1.0f, C.data(), N);
        testing::expect_within(on_host<float>(dC), C, bound, std::string("gemm_lowp ") + std::string(dtype_name(dtype)));
      }
    }
  }
}

TEST_F(CudaGemm, ZeroInnerDimensionWritesZerosOrKeepsC) {
  std::vector<float> C = random_vector(12, 14);
  Tensor dC = on_device(C);
  cuda::gemm(false, false, 3, 4, 0, 1.0f, nullptr, 1, nullptr, 4, 1.0f, dC.data<float>(), 4);
  EXPECT_EQ(on_host<float>(dC), C);
  cuda::gemm(false, false, 3, 4, 0, 1.0f, nullptr, 1, nullptr, 4, 0.0f, dC.data<float>(), 4);
  EXPECT_EQ(on_host<float>(dC), std::vector<float>(12, 0.0f));
}

}  // namespace
}  // namespace ndt
