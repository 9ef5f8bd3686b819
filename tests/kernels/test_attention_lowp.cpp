// Low-precision attention (kernels/cpu/attention_lowp.h) against the double-precision
// reference on the same dtype-rounded inputs, forward (out, lse) and backward (dq, dk,
// dv), on each gemm_lowp backend (oneDNN skipped, saying so, where this CPU has no native
// kernel for the dtype) and both dtypes: causal and with document starts, with and
// without grouped heads, several row blocks and a ragged last one. Also: the span forms
// over two key spans merged by lse (what ring attention does) equal the reference; the
// same inputs give the same bits twice, and on 1 and 3 threads; the += contract; refusals
// by name; routing through kernels.h.
#include "kernels/cpu/attention_lowp.h"

#include "../common/errors.h"
#include "../common/gradcheck.h"
#include "attention_reference.h"
#include "kernels/cpu/attention_span.h"
#include "kernels/cpu/cast.h"
#include "kernels/cpu/gemm_lowp.h"
#include "kernels/cpu/threads.h"
#include "kernels/kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

namespace ndt::cpu {
namespace {

using ndt::testing::random_vector;

struct Case {
  const char* name;
  int B, T, NH, NKV, HS;
  bool documents;  // document starts every 37 positions (offset per sequence), else causal
};

const Case kCases[] = {
    {"causal", 2, 150, 4, 4, 32, false},
    {"grouped", 2, 150, 6, 2, 16, false},
    {"documents", 2, 150, 4, 4, 32, true},
    {"grouped_documents", 3, 130, 4, 1, 16, true},
};

std::vector<int32_t> starts_of(const Case& c) {
  std::vector<int32_t> s(size_t(c.B) * c.T, 0);
  for (int b = 0; b < c.B; ++b)
    for (int t = 0; t < c.T; ++t) s[size_t(b) * c.T + t] = t < 11 * b ? 0 : t - (t - 11 * b) % 37;
  return s;
}

// Random inputs rounded to dtype: the values the model hands the kernel.
testing::AttentionInputs rounded_inputs(const Case& c, DType dtype) {
  const int64_t qn = int64_t{c.B} * c.T * c.NH * c.HS, kn = int64_t{c.B} * c.T * c.NKV * c.HS;
  testing::AttentionInputs in{random_vector(qn, 11), random_vector(kn, 12), random_vector(kn, 13),
                              random_vector(qn, 14)};
  for (std::vector<float>* x : {&in.q, &in.k, &in.v, &in.dout}) round_to_lowp(dtype, x->data(), int64_t(x->size()));
  return in;
}

// Largest |got - ref| / (1 + |ref|); NaN counts as infinite.
double max_error(const std::vector<float>& got, const std::vector<double>& ref) {
  double worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double e = std::fabs(got[i] - ref[i]) / (1 + std::fabs(ref[i]));
    worst = std::max(worst, std::isnan(e) ? INFINITY : e);
  }
  return worst;
}

// P and dS are rounded to dtype for the products that take them (relative error up to
// 2^-9 for bf16's 8-bit significand, 2^-12 for f16) and every sum is fp32: the results
// carry a few times that. fp32 kernels on the same inputs are held to 1e-4 (attention tests).
double tolerance(DType dtype) { return dtype == DType::bf16 ? 1.5e-2 : 2e-3; }

struct Result {
  std::vector<float> out, lse, dq, dk, dv;
};

Result run_whole(DType dtype, const Case& c, const testing::AttentionInputs& in, const int32_t* starts) {
  Result r{std::vector<float>(in.q.size()), std::vector<float>(size_t(c.B) * c.NH * c.T),
           std::vector<float>(in.q.size(), 0.0f), std::vector<float>(in.k.size(), 0.0f),
           std::vector<float>(in.k.size(), 0.0f)};
  attention_forward_lowp(dtype, r.out.data(), r.lse.data(), in.q.data(), in.k.data(), in.v.data(), starts, c.B, c.T,
                         c.NH, c.NKV, c.HS);
  attention_backward_lowp(dtype, r.dq.data(), r.dk.data(), r.dv.data(), in.dout.data(), in.q.data(), in.k.data(),
                          in.v.data(), r.out.data(), r.lse.data(), starts, c.B, c.T, c.NH, c.NKV, c.HS);
  return r;
}

// The span forms as ring attention uses them: all queries against two key spans (the
// first half of the sequence, then the second), merged by lse; backward per key span
// with the merged lse and the row term of the merged output.
Result run_two_key_spans(DType dtype, const Case& c, const testing::AttentionInputs& in, const int32_t* starts) {
  Result r{std::vector<float>(in.q.size()), std::vector<float>(size_t(c.B) * c.NH * c.T),
           std::vector<float>(in.q.size(), 0.0f), std::vector<float>(in.k.size(), 0.0f),
           std::vector<float>(in.k.size(), 0.0f)};
  const int half = c.T / 2;
  const AttentionSpan all{0, c.T, 0}, key_spans[] = {{0, half, 0}, {half, c.T - half, half}};
  std::vector<float> out_part(r.out.size()), lse_part(r.lse.size());
  std::fill(r.lse.begin(), r.lse.end(), -INFINITY);
  for (const AttentionSpan& ks : key_spans) {
    attention_span_forward_lowp(dtype, out_part.data(), lse_part.data(), in.q.data(), in.k.data(), in.v.data(), starts,
                                c.B, c.T, c.T, c.NH, c.NKV, c.HS, all, ks);
    attention_merge(r.out.data(), r.lse.data(), out_part.data(), lse_part.data(), c.B, c.T, c.NH, c.HS, all);
  }
  std::vector<float> D(r.lse.size());
  attention_row_dot(D.data(), in.dout.data(), r.out.data(), c.B, c.T, c.NH, c.HS);
  for (const AttentionSpan& ks : key_spans) {
    attention_span_backward_recompute_lowp(dtype, r.dq.data(), r.dk.data(), r.dv.data(), in.dout.data(), in.q.data(),
                                           in.k.data(), in.v.data(), r.lse.data(), D.data(), starts, c.B, c.T, c.T,
                                           c.NH, c.NKV, c.HS, all, ks);
  }
  return r;
}

void expect_matches_reference(const Result& got, const testing::AttentionReference& ref, double tol) {
  EXPECT_LE(max_error(got.out, ref.out), tol) << "out";
  EXPECT_LE(max_error(got.lse, ref.lse), tol) << "lse";
  EXPECT_LE(max_error(got.dq, ref.dq), tol) << "dq";
  EXPECT_LE(max_error(got.dk, ref.dk), tol) << "dk";
  EXPECT_LE(max_error(got.dv, ref.dv), tol) << "dv";
}

// Sets gemm_lowp's backend for the test, restoring the previous one after.
class BackendScope {
 public:
  BackendScope(DType dtype, LowpGemmBackend backend) : dtype_(dtype), saved_(active_lowp_gemm_backend(dtype)) {
    set_lowp_gemm_backend(dtype, backend);
  }
  ~BackendScope() { set_lowp_gemm_backend(dtype_, saved_); }

 private:
  DType dtype_;
  LowpGemmBackend saved_;
};

using Param = std::tuple<LowpGemmBackend, DType, Case>;

class AttentionLowpTest : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    const auto& [backend, dtype, c] = GetParam();
    if (backend == LowpGemmBackend::onednn && onednn_lowp_impl(dtype).empty()) {
      GTEST_SKIP() << "oneDNN has no native " << dtype_name(dtype)
                   << " matmul on this CPU: gemm_lowp runs the fallback for it (tested by the fallback cases)";
    }
    scope_ = std::make_unique<BackendScope>(dtype, backend);
    dtype_ = dtype, c_ = c;
    in_ = rounded_inputs(c, dtype);
    starts_ = starts_of(c);
  }
  const int32_t* starts() const { return c_.documents ? starts_.data() : nullptr; }
  testing::AttentionReference reference() const {
    return testing::attention_reference(in_, c_.B, c_.T, c_.NH, c_.NKV, c_.HS, starts());
  }

  std::unique_ptr<BackendScope> scope_;
  DType dtype_ = DType::bf16;
  Case c_{};
  testing::AttentionInputs in_;
  std::vector<int32_t> starts_;
};

TEST_P(AttentionLowpTest, WholeSequenceMatchesDoubleReference) {
  expect_matches_reference(run_whole(dtype_, c_, in_, starts()), reference(), tolerance(dtype_));
}

TEST_P(AttentionLowpTest, TwoKeySpansMergedMatchDoubleReference) {
  expect_matches_reference(run_two_key_spans(dtype_, c_, in_, starts()), reference(), tolerance(dtype_));
}

// Recompute and pipelining rely on it: the same inputs give the same bits.
TEST_P(AttentionLowpTest, SameInputsSameBits) {
  const Result a = run_whole(dtype_, c_, in_, starts()), b = run_whole(dtype_, c_, in_, starts());
  for (auto field : {&Result::out, &Result::lse, &Result::dq, &Result::dk, &Result::dv}) {
    EXPECT_EQ(std::memcmp((a.*field).data(), (b.*field).data(), (a.*field).size() * sizeof(float)), 0);
  }
}

// Each (sequence, key/value head) is one task on one thread with one-thread GEMMs: the
// bits do not depend on how many threads share the tasks.
TEST_P(AttentionLowpTest, SameBitsOnAnyThreadCount) {
  const int saved = num_threads();
  set_num_threads(1);
  const Result one = run_whole(dtype_, c_, in_, starts());
  set_num_threads(3);
  const Result three = run_whole(dtype_, c_, in_, starts());
  set_num_threads(saved);
  for (auto field : {&Result::out, &Result::lse, &Result::dq, &Result::dk, &Result::dv}) {
    EXPECT_EQ(std::memcmp((one.*field).data(), (three.*field).data(), (one.*field).size() * sizeof(float)), 0);
  }
}

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  const auto [backend, dtype, c] = info.param;
  return std::string(backend == LowpGemmBackend::onednn ? "onednn_" : "fallback_") + std::string(dtype_name(dtype)) + "_" + c.name;
}

INSTANTIATE_TEST_SUITE_P(All, AttentionLowpTest,
                         ::testing::Combine(::testing::Values(LowpGemmBackend::onednn, LowpGemmBackend::fallback),
                                            ::testing::Values(DType::bf16, DType::f16), ::testing::ValuesIn(kCases)),
                         param_name);

// Backward adds into dq, dk, dv: twice from zero is twice once.
TEST(AttentionLowp, BackwardAddsIntoGradients) {
  const Case c = kCases[1];
  const testing::AttentionInputs in = rounded_inputs(c, DType::bf16);
  Result r = run_whole(DType::bf16, c, in, nullptr);
  const Result once = r;
  attention_backward_lowp(DType::bf16, r.dq.data(), r.dk.data(), r.dv.data(), in.dout.data(), in.q.data(),
                          in.k.data(), in.v.data(), r.out.data(), r.lse.data(), nullptr, c.B, c.T, c.NH, c.NKV, c.HS);
  for (auto field : {&Result::dq, &Result::dk, &Result::dv}) {
    for (size_t i = 0; i < (r.*field).size(); ++i) ASSERT_EQ((r.*field)[i], 2 * (once.*field)[i]) << i;
  }
}

TEST(AttentionLowp, RefusesFp32AndBadHeadsByName) {
  std::vector<float> x(64, 0.0f), lse(8);
  testing::expect_error(
      [&] { attention_forward_lowp(DType::f32, x.data(), lse.data(), x.data(), x.data(), x.data(), nullptr, 1, 2, 2, 2, 16); },
      {"attention_span_forward_lowp", "dtype must be bf16 or f16", "f32"});
  testing::expect_error(
      [&] { attention_forward_lowp(DType::bf16, x.data(), lse.data(), x.data(), x.data(), x.data(), nullptr, 1, 2, 3, 2, 8); },
      {"query heads (3)", "key/value heads (2)"});
}

TEST(AttentionLowp, RoutedThroughKernels) {
  const Case c = kCases[0];
  const testing::AttentionInputs in = rounded_inputs(c, DType::bf16);
  const Result direct = run_whole(DType::bf16, c, in, nullptr);
  std::vector<float> out(in.q.size()), lse(direct.lse.size());
  kernels::attention_forward_lowp(DType::bf16, out.data(), lse.data(), in.q.data(), in.k.data(), in.v.data(), nullptr,
                                  c.B, c.T, c.NH, c.NKV, c.HS);
  EXPECT_EQ(std::memcmp(out.data(), direct.out.data(), out.size() * sizeof(float)), 0);
}

}  // namespace
}  // namespace ndt::cpu
