// gemm_lowp and the low-precision linear layer (kernels/cpu/gemm_lowp.h) on both backends
// against a double-precision reference of the same rounded inputs: within 1e-6 of
// sum_k |a||b| (+ |beta C|) per element, all transposes, odd shapes, padded leading
// dimensions, beta 0 (C not read), 1 and -0.5, blocks past the fallback's block sizes;
// the linear forms against the fp32 linear kernels; the backend choice (NDT_LOWP_GEMM).
// Where oneDNN has no native kernel for a dtype (f16 with oneDNN 2.6, bf16 on AVX2-only
// machines) the oneDNN cases skip with the reason.
#include "kernels/cpu/gemm_lowp.h"

#include "core/dtype.h"
#include "core/error.h"
#include "core/rng.h"
#include "kernels/cpu/cast.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/instruction_rate.h"
#include "kernels/cpu/threads.h"
#include "kernels/kernels.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

namespace ndt::cpu {
namespace {

const char* backend_label(LowpGemmBackend b) { return b == LowpGemmBackend::onednn ? "onednn" : "fallback"; }

// Skips the calling test where the backend cannot run dtype here.
#define SKIP_IF_UNAVAILABLE(backend, dtype)                                                      \
  if ((backend) == LowpGemmBackend::onednn && onednn_lowp_impl(dtype).empty()) {                 \
    GTEST_SKIP() << "oneDNN has no native " << dtype_name(dtype) << " matmul on this CPU "     \
                 << "(gemm_lowp runs the fallback for it)";                                      \
  }

// Restores gemm_lowp's backend for a dtype after a test changed it.
class BackendGuard {
 public:
  explicit BackendGuard(DType dtype) : dtype_(dtype), saved_(active_lowp_gemm_backend(dtype)) {}
  ~BackendGuard() { set_lowp_gemm_backend(dtype_, saved_); }

 private:
  DType dtype_;
  LowpGemmBackend saved_;
};

// A rows x ld matrix of random dtype bits (normal values, scale `std`).
std::vector<uint16_t> random_bits(DType dtype, int64_t n, uint64_t stream, float std = 1.0f) {
  std::vector<float> x(static_cast<size_t>(n));
  fill_normal(x.data(), n, 0, 0.0f, std, 99, stream);
  std::vector<uint16_t> bits(x.size());
  cast_to_lowp(dtype, x.data(), bits.data(), n);
  return bits;
}

std::vector<float> to_float(DType dtype, const std::vector<uint16_t>& bits) {
  std::vector<float> x(bits.size());
  cast_from_lowp(dtype, bits.data(), x.data(), static_cast<int64_t>(bits.size()));
  return x;
}

// Checks C (after the call) against op(A) op(B) + beta C0 in double, element by element
// within 1e-6 of sum_k |a||b| + |beta C0|, and that the padding columns kept C0's bits.
void expect_gemm_matches(DType dtype, bool ta, bool tb, int M, int N, int K,
                         const std::vector<uint16_t>& A, int lda, const std::vector<uint16_t>& B,
                         int ldb, float beta, const std::vector<float>& C0,
                         const std::vector<float>& C, int ldc, const std::string& what) {
  const std::vector<float> a = to_float(dtype, A), b = to_float(dtype, B);
  int64_t failures = 0;
  for (int m = 0; m < M; ++m) {
    for (int j = 0; j < ldc; ++j) {
      const size_t at = static_cast<size_t>(m) * ldc + j;
      if (j >= N) {
        ASSERT_EQ(std::memcmp(&C[at], &C0[at], sizeof(float)), 0) << what << ": padding written at m=" << m << " col " << j;
        continue;
      }
      double sum = 0, scale = 0;
      for (int k = 0; k < K; ++k) {
        const double x = ta ? a[static_cast<size_t>(k) * lda + m] : a[static_cast<size_t>(m) * lda + k];
        const double y = tb ? b[static_cast<size_t>(j) * ldb + k] : b[static_cast<size_t>(k) * ldb + j];
        sum += x * y;
        scale += std::fabs(x * y);
      }
      if (beta != 0.0f) {
        sum += static_cast<double>(beta) * C0[at];
        scale += std::fabs(static_cast<double>(beta) * C0[at]);
      }
      const double err = std::fabs(C[at] - sum);
      if (!(err <= 1e-6 * scale + 1e-30) && ++failures <= 5) {
        ADD_FAILURE() << what << ": C[" << m << "," << j << "] = " << C[at] << ", want " << sum
                      << " (error " << err << ", allowed " << 1e-6 * scale << ")";
      }
    }
  }
  EXPECT_EQ(failures, 0) << what;
}

// Runs one gemm_lowp case on the given backend with leading dimensions padded by `pad`.
void check_case(LowpGemmBackend backend, DType dtype, bool ta, bool tb, int M, int N, int K,
                float beta, int pad) {
  const int a_rows = ta ? K : M, a_cols = ta ? M : K;
  const int b_rows = tb ? N : K, b_cols = tb ? K : N;
  const int lda = a_cols + pad, ldb = b_cols + 2 * pad, ldc = N + 3 * pad;
  const auto A = random_bits(dtype, static_cast<int64_t>(a_rows) * lda, 1);
  const auto B = random_bits(dtype, static_cast<int64_t>(b_rows) * ldb, 2);
  std::vector<float> C0(static_cast<size_t>(M) * ldc);
  fill_normal(C0.data(), static_cast<int64_t>(C0.size()), 0, 0.0f, 1.0f, 5, 3);
  if (beta == 0.0f) {  // beta = 0 must not read C: NaN there must not reach the result
    for (int m = 0; m < M; ++m) {
      for (int n = 0; n < N; ++n) C0[static_cast<size_t>(m) * ldc + n] = std::numeric_limits<float>::quiet_NaN();
    }
  }
  std::vector<float> C = C0;
  gemm_lowp_on(backend, dtype, ta, tb, M, N, K, A.data(), lda, B.data(), ldb, beta, C.data(), ldc);
  const std::string what = std::string(backend_label(backend)) + " " + std::string(dtype_name(dtype)) +
                           " ta=" + std::to_string(ta) + " tb=" + std::to_string(tb) + " M=" +
                           std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K) +
                           " beta=" + std::to_string(beta) + " pad=" + std::to_string(pad);
  expect_gemm_matches(dtype, ta, tb, M, N, K, A, lda, B, ldb, beta, C0, C, ldc, what);
}

using GemmParam = std::tuple<LowpGemmBackend, DType, bool, bool>;

class GemmLowpTest : public ::testing::TestWithParam<GemmParam> {};

TEST_P(GemmLowpTest, OddShapesAndBetasMatchDoubleReference) {
  const auto [backend, dtype, ta, tb] = GetParam();
  SKIP_IF_UNAVAILABLE(backend, dtype);
  struct Shape {
    int M, N, K;
  };
  for (const Shape s : {Shape{37, 29, 23}, Shape{1, 17, 5}, Shape{13, 1, 40}, Shape{19, 21, 1},
                        Shape{1, 1, 1}, Shape{64, 48, 32}, Shape{70, 130, 301}}) {
    for (float beta : {0.0f, 1.0f, -0.5f}) {
      for (int pad : {0, 3}) check_case(backend, dtype, ta, tb, s.M, s.N, s.K, beta, pad);
    }
  }
}

// Past the fallback's blocks (2048 rows or columns, 512 of K) and oneDNN's tiles.
TEST_P(GemmLowpTest, ShapesSpanningSeveralBlocks) {
  const auto [backend, dtype, ta, tb] = GetParam();
  SKIP_IF_UNAVAILABLE(backend, dtype);
  check_case(backend, dtype, ta, tb, 2100, 9, 1100, 1.0f, 0);
  check_case(backend, dtype, ta, tb, 7, 2100, 600, 0.0f, 1);
}

TEST_P(GemmLowpTest, OneAndTwoThreadsBothMatch) {
  const auto [backend, dtype, ta, tb] = GetParam();
  SKIP_IF_UNAVAILABLE(backend, dtype);
  const int saved = num_threads();
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    check_case(backend, dtype, ta, tb, 96, 80, 64, 1.0f, 0);
  }
  set_num_threads(saved);
}

INSTANTIATE_TEST_SUITE_P(
    All, GemmLowpTest,
    ::testing::Combine(::testing::Values(LowpGemmBackend::onednn, LowpGemmBackend::fallback),
                       ::testing::Values(DType::bf16, DType::f16), ::testing::Bool(), ::testing::Bool()),
    [](const auto& info) {
      return std::string(backend_label(std::get<0>(info.param))) + "_" +
             std::string(dtype_name(std::get<1>(info.param))) + (std::get<2>(info.param) ? "_T" : "_N") +
             (std::get<3>(info.param) ? "T" : "N");
    });

// --- The linear forms against the fp32 kernels on the same (bf16-representable) values.

class LinearLowpTest : public ::testing::TestWithParam<std::tuple<LowpGemmBackend, DType>> {};

// |got - want| within 2e-6 of `scale` (both sides are within 1e-6 of the exact sum).
void expect_close(const std::vector<float>& got, const std::vector<float>& want,
                  const std::vector<double>& scale, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_LE(std::fabs(got[i] - want[i]), 2e-6 * scale[i] + 1e-30) << what << " element " << i;
  }
}

TEST_P(LinearLowpTest, MatchesFp32LinearKernels) {
  const auto [backend, dtype] = GetParam();
  SKIP_IF_UNAVAILABLE(backend, dtype);
  BackendGuard guard(dtype);
  set_lowp_gemm_backend(dtype, backend);
  const int N = 45, IC = 67, OC = 33;
  const auto inp = random_bits(dtype, static_cast<int64_t>(N) * IC, 11);
  const auto weight = random_bits(dtype, static_cast<int64_t>(OC) * IC, 12, 0.5f);
  const auto dout = random_bits(dtype, static_cast<int64_t>(N) * OC, 13);
  const auto inp_f = to_float(dtype, inp), weight_f = to_float(dtype, weight), dout_f = to_float(dtype, dout);
  std::vector<float> bias(OC);
  fill_normal(bias.data(), OC, 0, 0.0f, 1.0f, 5, 14);

  // Forward: scale = sum |x w| + |bias|.
  std::vector<float> out(static_cast<size_t>(N) * OC, std::numeric_limits<float>::quiet_NaN());
  std::vector<float> want(out.size());
  std::vector<double> scale(out.size());
  for (int n = 0; n < N; ++n) {
    for (int o = 0; o < OC; ++o) {
      double s = std::fabs(bias[o]);
      for (int i = 0; i < IC; ++i) s += std::fabs(double(inp_f[n * IC + i]) * weight_f[o * IC + i]);
      scale[n * OC + o] = s;
    }
  }
  linear_forward_lowp(dtype, out.data(), inp.data(), weight.data(), bias.data(), N, IC, OC);
  linear_forward(want.data(), inp_f.data(), weight_f.data(), bias.data(), N, IC, OC);
  expect_close(out, want, scale, "linear_forward_lowp with bias");
  linear_forward_lowp(dtype, out.data(), inp.data(), weight.data(), nullptr, N, IC, OC);
  linear_forward(want.data(), inp_f.data(), weight_f.data(), nullptr, N, IC, OC);
  expect_close(out, want, scale, "linear_forward_lowp without bias");

  // Backward accumulates onto what is there: scales include the starting values.
  std::vector<float> dinp(static_cast<size_t>(N) * IC), dweight(static_cast<size_t>(OC) * IC);
  fill_normal(dinp.data(), static_cast<int64_t>(dinp.size()), 0, 0.0f, 1.0f, 5, 15);
  fill_normal(dweight.data(), static_cast<int64_t>(dweight.size()), 0, 0.0f, 1.0f, 5, 16);
  std::vector<double> dinp_scale(dinp.size()), dweight_scale(dweight.size());
  for (int n = 0; n < N; ++n) {
    for (int i = 0; i < IC; ++i) {
      double s = std::fabs(dinp[n * IC + i]);
      for (int o = 0; o < OC; ++o) s += std::fabs(double(dout_f[n * OC + o]) * weight_f[o * IC + i]);
      dinp_scale[n * IC + i] = s;
    }
  }
  for (int o = 0; o < OC; ++o) {
    for (int i = 0; i < IC; ++i) {
      double s = std::fabs(dweight[o * IC + i]);
      for (int n = 0; n < N; ++n) s += std::fabs(double(dout_f[n * OC + o]) * inp_f[n * IC + i]);
      dweight_scale[o * IC + i] = s;
    }
  }
  std::vector<float> dinp_want = dinp, dweight_want = dweight, dinp0 = dinp, dweight0 = dweight;
  linear_backward_lowp(dtype, dinp.data(), dweight.data(), dout.data(), inp.data(), weight.data(), N, IC, OC);
  linear_backward(dinp_want.data(), dweight_want.data(), nullptr, dout_f.data(), inp_f.data(),
                  weight_f.data(), N, IC, OC);
  expect_close(dinp, dinp_want, dinp_scale, "linear_backward_lowp dinp");
  expect_close(dweight, dweight_want, dweight_scale, "linear_backward_lowp dweight");

  // Either gradient may be null; the other is computed alone, the same way.
  std::vector<float> only_dinp = dinp0, only_dweight = dweight0;
  linear_backward_lowp(dtype, only_dinp.data(), nullptr, dout.data(), inp.data(), weight.data(), N, IC, OC);
  linear_backward_lowp(dtype, nullptr, only_dweight.data(), dout.data(), inp.data(), weight.data(), N, IC, OC);
  EXPECT_EQ(std::memcmp(only_dinp.data(), dinp.data(), dinp.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(only_dweight.data(), dweight.data(), dweight.size() * sizeof(float)), 0);
}

INSTANTIATE_TEST_SUITE_P(All, LinearLowpTest,
                         ::testing::Combine(::testing::Values(LowpGemmBackend::onednn, LowpGemmBackend::fallback),
                                            ::testing::Values(DType::bf16, DType::f16)),
                         [](const auto& info) {
                           return std::string(backend_label(std::get<0>(info.param))) + "_" +
                                  std::string(dtype_name(std::get<1>(info.param)));
                         });

// --- Backend choice.

TEST(GemmLowpBackend, EnvironmentValuesChooseOrAreRefusedByName) {
  for (DType dtype : {DType::bf16, DType::f16}) {
    const std::string impl = onednn_lowp_impl(dtype);
    const bool native = !impl.empty();
    if (!native) {
      EXPECT_EQ(choose_lowp_gemm_backend(dtype, nullptr), LowpGemmBackend::fallback);
    } else if (impl.find("avx512_core_bf16") == std::string::npos) {  // not decided by the rates
      EXPECT_EQ(choose_lowp_gemm_backend(dtype, nullptr), LowpGemmBackend::onednn);
    }
    EXPECT_EQ(choose_lowp_gemm_backend(dtype, ""), choose_lowp_gemm_backend(dtype, nullptr));
    EXPECT_EQ(choose_lowp_gemm_backend(dtype, "fallback"), LowpGemmBackend::fallback);
    if (native) {
      EXPECT_EQ(choose_lowp_gemm_backend(dtype, "onednn"), LowpGemmBackend::onednn);
    } else {
      try {
        choose_lowp_gemm_backend(dtype, "onednn");
        ADD_FAILURE() << "NDT_LOWP_GEMM=onednn accepted without a native " << dtype_name(dtype) << " kernel";
      } catch (const Error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("NDT_LOWP_GEMM=onednn"), std::string::npos) << msg;
        EXPECT_NE(msg.find(std::string(dtype_name(dtype))), std::string::npos) << msg;
      }
    }
    try {
      choose_lowp_gemm_backend(dtype, "mkl");
      ADD_FAILURE() << "NDT_LOWP_GEMM=mkl accepted";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("NDT_LOWP_GEMM=mkl"), std::string::npos) << msg;
      EXPECT_NE(msg.find("onednn, fallback"), std::string::npos) << msg;
    }
  }
}

// The default by oneDNN's implementation and the measured dot-product rate, for every
// kind of CPU (whatever this one is).
// Catches: a rule that keeps oneDNN's AVX512-BF16 kernel on a CPU whose dot product runs
// at half its FMA rate (1.5x slower than the fallback there), or that gives up AMX or the
// jit gemm (which does not use the dot product).
TEST(GemmLowpBackend, DefaultFollowsTheDotProductRateWithoutAmx) {
  EXPECT_EQ(default_lowp_gemm_backend("", 2.0), LowpGemmBackend::fallback);
  EXPECT_EQ(default_lowp_gemm_backend("brg:avx512_core_amx_bf16", 0.0), LowpGemmBackend::onednn);
  EXPECT_EQ(default_lowp_gemm_backend("brg:avx512_core_amx_bf16", 0.5), LowpGemmBackend::onednn);
  EXPECT_EQ(default_lowp_gemm_backend("brg:avx512_core_bf16", 0.48), LowpGemmBackend::fallback);
  EXPECT_EQ(default_lowp_gemm_backend("brg:avx512_core_bf16", 0.99), LowpGemmBackend::fallback);
  EXPECT_EQ(default_lowp_gemm_backend("brg:avx512_core_bf16", 1.0), LowpGemmBackend::onednn);
  EXPECT_EQ(default_lowp_gemm_backend("brg:avx512_core_bf16", 2.0), LowpGemmBackend::onednn);
  EXPECT_EQ(default_lowp_gemm_backend("gemm:jit", 0.0), LowpGemmBackend::onednn);
  EXPECT_EQ(default_lowp_gemm_backend("gemm:jit", 0.5), LowpGemmBackend::onednn);
}

// The measurement the default reads: 0 without AVX512-BF16, else a ratio of two rates
// a real CPU has (between a tenth and ten times).
TEST(GemmLowpBackend, DotProductRateIsMeasuredWhereTheInstructionExists) {
  const double ratio = bf16_dot_over_fma_rate();
  if (!has_bf16_dot_product()) {
    EXPECT_EQ(ratio, 0.0);
    return;
  }
  EXPECT_GT(ratio, 0.1);
  EXPECT_LT(ratio, 10.0);
  float sink = 0;
  EXPECT_EQ(bf16_dot_loop(1000, &sink), 1000.0 * 10 * 64);
  std::printf("bf16 dot product at %.2fx the fp32 FMA's rate on one thread\n", ratio);
}

TEST(GemmLowpBackend, NamesForLogsAndRefusals) {
  for (DType dtype : {DType::bf16, DType::f16}) {
    BackendGuard guard(dtype);
    set_lowp_gemm_backend(dtype, LowpGemmBackend::fallback);
    EXPECT_EQ(lowp_gemm_backend(dtype).rfind("fallback: fp32 convert + OpenBLAS sgemm", 0), 0u)
        << lowp_gemm_backend(dtype);
    if (onednn_lowp_impl(dtype).empty()) {
      EXPECT_THROW(set_lowp_gemm_backend(dtype, LowpGemmBackend::onednn), Error);
      EXPECT_EQ(active_lowp_gemm_backend(dtype), LowpGemmBackend::fallback) << "a refused backend must not become active";
    } else {
      set_lowp_gemm_backend(dtype, LowpGemmBackend::onednn);
      EXPECT_EQ(lowp_gemm_backend(dtype), "oneDNN " + onednn_lowp_impl(dtype));
      EXPECT_EQ(onednn_lowp_impl(dtype).rfind("ref", 0), std::string::npos);
    }
  }
  std::printf("gemm_lowp here: bf16 %s; f16 %s\n", lowp_gemm_backend(DType::bf16).c_str(),
              lowp_gemm_backend(DType::f16).c_str());
}

TEST(GemmLowpBackend, BadArgumentsAreRefused) {
  uint16_t a = 0, b = 0;
  float c = 0;
  EXPECT_THROW(gemm_lowp(DType::f32, false, false, 1, 1, 1, &a, 1, &b, 1, 0.0f, &c, 1), Error);
  EXPECT_THROW(gemm_lowp(DType::bf16, false, false, -1, 1, 1, &a, 1, &b, 1, 0.0f, &c, 1), Error);
  EXPECT_THROW(gemm_lowp(DType::bf16, false, false, 1, 1, 1, &a, 1, &b, 1, NAN, &c, 1), Error);
}

// K = 0 has no products: C = beta * C, and beta = 0 clears NaN.
// Catches: a call that multiplies the operands of an earlier call of its shape, or writes
// that call's C (each thread keeps its memory objects per oneDNN primitive and points them
// at every call's buffers), and one thread's operands reaching another thread's call. The
// attention calls one shape from every thread, one-threaded, thousands of times a step.
TEST(GemmLowpBackend, RepeatedShapesReadAndWriteEachCallsOwnBuffers) {
  SKIP_IF_UNAVAILABLE(LowpGemmBackend::onednn, DType::bf16);
  constexpr int M = 64, N = 48, K = 32, kCalls = 8;
  std::vector<std::vector<uint16_t>> A, B;
  std::vector<std::vector<float>> C0, C;
  for (int i = 0; i < kCalls; ++i) {
    A.push_back(random_bits(DType::bf16, M * K, 10 + i));
    B.push_back(random_bits(DType::bf16, K * N, 40 + i));
    C0.emplace_back(M * N);
    fill_normal(C0.back().data(), M * N, 0, 0.0f, 1.0f, 7, 70 + i);
    C.push_back(C0.back());
  }
  const auto call = [&](int i) {
    gemm_lowp_on(LowpGemmBackend::onednn, DType::bf16, false, false, M, N, K, A[i].data(), K, B[i].data(), N, 1.0f,
                 C[i].data(), N);
  };
  for (int i = 0; i < kCalls / 2; ++i) call(i);  // in turn on this thread
#pragma omp parallel num_threads(2)
  {
    omp_set_num_threads(1);  // as the attention's nested calls
#pragma omp for schedule(static, 1)
    for (int i = kCalls / 2; i < kCalls; ++i) call(i);
  }
  for (int i = 0; i < kCalls; ++i) {
    expect_gemm_matches(DType::bf16, false, false, M, N, K, A[i], K, B[i], N, 1.0f, C0[i], C[i], N,
                        "call " + std::to_string(i));
  }
}

TEST(GemmLowpBackend, EmptyInnerDimensionScalesC) {
  std::vector<float> C = {1.0f, 2.0f, NAN, 4.0f};
  gemm_lowp(DType::bf16, false, false, 2, 2, 0, nullptr, 1, nullptr, 2, 0.0f, C.data(), 2);
  EXPECT_EQ(C, (std::vector<float>{0, 0, 0, 0}));
  C = {1.0f, 2.0f, 3.0f, 4.0f};
  gemm_lowp(DType::bf16, false, false, 2, 2, 0, nullptr, 1, nullptr, 2, 1.0f, C.data(), 2);
  EXPECT_EQ(C, (std::vector<float>{1, 2, 3, 4}));
}

// The dispatch seam routes every low-precision kernel to cpu:: with the same bits.
TEST(GemmLowpBackend, KernelsRouteToCpuBitwise) {
  const DType dtype = DType::bf16;
  const int N = 9, IC = 14, OC = 11;
  const auto inp = random_bits(dtype, N * IC, 21), weight = random_bits(dtype, OC * IC, 22);
  const auto dout = random_bits(dtype, N * OC, 23);
  std::vector<float> bias(OC, 0.25f);
  std::vector<float> a(N * OC), b(N * OC);
  kernels::linear_forward_lowp(dtype, a.data(), inp.data(), weight.data(), bias.data(), N, IC, OC);
  linear_forward_lowp(dtype, b.data(), inp.data(), weight.data(), bias.data(), N, IC, OC);
  EXPECT_EQ(a, b);
  std::vector<float> da(N * IC, 1.0f), db = da, wa(OC * IC, 1.0f), wb = wa;
  kernels::linear_backward_lowp(dtype, da.data(), wa.data(), dout.data(), inp.data(), weight.data(), N, IC, OC);
  linear_backward_lowp(dtype, db.data(), wb.data(), dout.data(), inp.data(), weight.data(), N, IC, OC);
  EXPECT_EQ(da, db);
  EXPECT_EQ(wa, wb);
  std::vector<float> ca(N * N, 0.0f), cb = ca;
  kernels::gemm_lowp(dtype, false, true, N, N, IC, inp.data(), IC, inp.data(), IC, 0.0f, ca.data(), N);
  gemm_lowp(dtype, false, true, N, N, IC, inp.data(), IC, inp.data(), IC, 0.0f, cb.data(), N);
  EXPECT_EQ(ca, cb);
  EXPECT_EQ(kernels::lowp_gemm_backend(dtype), lowp_gemm_backend(dtype));
}

}  // namespace
}  // namespace ndt::cpu
