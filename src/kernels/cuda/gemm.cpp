// GEMMs on cuBLASLt. Row-major C[M,N] = op(A) op(B) is column-major C^T[N,M] =
// op(B)^T op(A)^T, so each call swaps A and B and keeps the leading dimensions. fp32
// inputs compute in plain fp32 (CUBLAS_COMPUTE_32F: no TF32, for parity with the CPU);
// bf16/f16 inputs compute and write fp32, as gemm_lowp.h asks. One handle and one
// workspace for the process, on the legacy default stream like every other kernel.
#include "core/error.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/cuda_kernels.h"

#include <cublasLt.h>

namespace ndt::cuda {
namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;

void check_lt(cublasStatus_t status, const char* call) {
  if (status != CUBLAS_STATUS_SUCCESS) fail("cuBLASLt: {} failed: {}", call, cublasLtGetStatusString(status));
}
#define NDT_LT_CHECK(call) check_lt((call), #call)

struct LtContext {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  LtContext() {
    NDT_LT_CHECK(cublasLtCreate(&handle));
    NDT_CUDA_CHECK(cudaMalloc(&workspace, kWorkspaceBytes));
  }
};

LtContext& context() {
  static LtContext* lt = new LtContext();  // never destroyed: the driver may be gone at exit
  return *lt;
}

// A column-major layout of a matrix stored as `rows x cols` with leading dimension ld.
struct Layout {
  cublasLtMatrixLayout_t desc = nullptr;
  Layout(cudaDataType_t type, int rows, int cols, int ld) {
    NDT_LT_CHECK(cublasLtMatrixLayoutCreate(&desc, type, rows, cols, ld));
  }
  ~Layout() { cublasLtMatrixLayoutDestroy(desc); }
  Layout(const Layout&) = delete;
  Layout& operator=(const Layout&) = delete;
};

cudaDataType_t cuda_type(DType dtype) {
  switch (dtype) {
    case DType::bf16:
      return CUDA_R_16BF;
    case DType::f16:
      return CUDA_R_16F;
    case DType::f32:
      return CUDA_R_32F;
    default:
      fail("cuda gemm: dtype {} is not a GEMM input (f32, bf16 or f16)", dtype_name(dtype));
  }
}

// C[M,N] (row-major, fp32) = alpha op(A) op(B) + beta C with A and B of in_type.
void lt_gemm(cudaDataType_t in_type, bool trans_a, bool trans_b, int M, int N, int K, float alpha, const void* A,
             int lda, const void* B, int ldb, float beta, float* C, int ldc) {
  NDT_CHECK(M >= 0 && N >= 0 && K >= 0, "cuda gemm: negative size M={} N={} K={}", M, N, K);
  if (M == 0 || N == 0) return;
  if (K == 0) {  // no products: C = beta C; beta 0 writes zeros without reading C
    if (beta == 1.0f) return;
    NDT_CHECK(beta == 0.0f, "cuda gemm: K=0 with beta={} (the cuda backend supports 0 and 1 there)", beta);
    for (int row = 0; row < M; ++row) zero(C + static_cast<int64_t>(row) * ldc, N);
    return;
  }
  LtContext& lt = context();
  cublasLtMatmulDesc_t op = nullptr;
  NDT_LT_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  // Column-major: first operand is B^T (stored N x K, or K x N when trans_b), second A^T.
  const cublasOperation_t first = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t second = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  NDT_LT_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &first, sizeof(first)));
  NDT_LT_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &second, sizeof(second)));
  Layout b_layout(in_type, trans_b ? K : N, trans_b ? N : K, ldb);
  Layout a_layout(in_type, trans_a ? M : K, trans_a ? K : M, lda);
  Layout c_layout(CUDA_R_32F, N, M, ldc);
  cublasLtMatmulPreference_t preference = nullptr;
  NDT_LT_CHECK(cublasLtMatmulPreferenceCreate(&preference));
  NDT_LT_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                    &kWorkspaceBytes, sizeof(kWorkspaceBytes)));
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  NDT_LT_CHECK(cublasLtMatmulAlgoGetHeuristic(lt.handle, op, b_layout.desc, a_layout.desc, c_layout.desc,
                                              c_layout.desc, preference, 1, &heuristic, &found));
  NDT_CHECK(found > 0, "cuBLASLt has no algorithm for M={} N={} K={} (trans_a={}, trans_b={})", M, N, K, trans_a,
            trans_b);
  NDT_LT_CHECK(cublasLtMatmul(lt.handle, op, &alpha, B, b_layout.desc, A, a_layout.desc, &beta, C, c_layout.desc, C,
                              c_layout.desc, &heuristic.algo, lt.workspace, kWorkspaceBytes, nullptr));
  cublasLtMatmulPreferenceDestroy(preference);
  cublasLtMatmulDescDestroy(op);
}

cudaDataType_t lowp_type(DType dtype) {
  NDT_CHECK(dtype == DType::bf16 || dtype == DType::f16, "cuda gemm_lowp: dtype {} is not bf16 or f16",
            dtype_name(dtype));
  return cuda_type(dtype);
}

}  // namespace

void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
          int ldb, float beta, float* C, int ldc) {
  lt_gemm(CUDA_R_32F, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void linear_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int IC, int OC) {
  gemm(false, true, N, OC, IC, 1.0f, inp, IC, weight, IC, 0.0f, out, OC);
  if (bias) add_bias(out, bias, N, OC);
}

void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int IC, int OC) {
  if (dinp) gemm(false, false, N, IC, OC, 1.0f, dout, OC, weight, IC, 1.0f, dinp, IC);
  if (dweight) gemm(true, false, OC, IC, N, 1.0f, dout, OC, inp, IC, 1.0f, dweight, IC);
  if (dbias) bias_backward(dbias, dout, N, OC);
}

void gemm_lowp(DType dtype, bool trans_a, bool trans_b, int M, int N, int K, const uint16_t* A, int lda,
               const uint16_t* B, int ldb, float beta, float* C, int ldc) {
  lt_gemm(lowp_type(dtype), trans_a, trans_b, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
}

void linear_forward_lowp(DType dtype, float* out, const uint16_t* inp, const uint16_t* weight, const float* bias,
                         int N, int IC, int OC) {
  gemm_lowp(dtype, false, true, N, OC, IC, inp, IC, weight, IC, 0.0f, out, OC);
  if (bias) add_bias(out, bias, N, OC);
}

void linear_backward_lowp(DType dtype, float* dinp, float* dweight, const uint16_t* dout, const uint16_t* inp,
                          const uint16_t* weight, int N, int IC, int OC) {
  if (dinp) gemm_lowp(dtype, false, false, N, IC, OC, dout, OC, weight, IC, 1.0f, dinp, IC);
  if (dweight) gemm_lowp(dtype, true, false, OC, IC, N, dout, OC, inp, IC, 1.0f, dweight, IC);
}

std::string lowp_gemm_backend(DType dtype) {
  lowp_type(dtype);  // refuses what is not bf16 or f16
  return fmt::format("cuBLASLt ({} inputs, fp32 compute)", dtype_name(dtype));
}

}  // namespace ndt::cuda
