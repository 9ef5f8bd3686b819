// Causal grouped-head attention: forward against a double-precision loop reference,
// backward against finite differences, the += contract, determinism across thread
// counts, and the lse merge rule that ring attention relies on.
#include "kernels/cpu/attention.h"

#include "../common/gradcheck.h"
#include "core/error.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace {

using ndt::testing::random_vector;

struct Shape {
  int B, T, NH, NKV, HS;
};

size_t qsize(const Shape& s) { return size_t(s.B) * s.T * s.NH * s.HS; }
size_t ksize(const Shape& s) { return size_t(s.B) * s.T * s.NKV * s.HS; }
size_t asize(const Shape& s) { return size_t(s.B) * s.NH * s.T * s.T; }
size_t lsize(const Shape& s) { return size_t(s.B) * s.NH * s.T; }

struct Inputs {
  std::vector<float> q, k, v;
};

Inputs make_inputs(const Shape& s, float std = 1.0f, uint64_t stream = 10) {
  return {random_vector(qsize(s), stream, std), random_vector(ksize(s), stream + 1, std),
          random_vector(ksize(s), stream + 2)};
}

struct Outputs {
  std::vector<float> out, lse, att;
};

// Runs the kernel on buffers pre-filled with NaN, so anything it fails to write shows.
Outputs run_forward(const Shape& s, const Inputs& in) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Outputs o{std::vector<float>(qsize(s), nan), std::vector<float>(lsize(s), nan),
            std::vector<float>(asize(s), nan)};
  ndt::cpu::attention_forward(o.out.data(), o.lse.data(), o.att.data(), in.q.data(), in.k.data(),
                              in.v.data(), nullptr, s.B, s.T, s.NH, s.NKV, s.HS);
  return o;
}

// Double-precision reference over keys [j0, j1) for query row t of (b, h), no causal
// mask beyond the given range: returns lse and writes the softmax-weighted output.
double reference_partial(const Shape& s, const Inputs& in, int b, int h, int t, int j0, int j1,
                         std::vector<double>& o, std::vector<double>* probs = nullptr) {
  const int kvh = h / (s.NH / s.NKV);
  const double scale = 1.0 / std::sqrt(double(s.HS));
  auto qrow = [&](int tt) { return in.q.data() + ((size_t(b) * s.T + tt) * s.NH + h) * s.HS; };
  auto krow = [&](const std::vector<float>& x, int tt) {
    return x.data() + ((size_t(b) * s.T + tt) * s.NKV + kvh) * s.HS;
  };
  std::vector<double> sc(j1 - j0);
  double mx = -1e300;
  for (int j = j0; j < j1; ++j) {
    double d = 0;
    for (int c = 0; c < s.HS; ++c) d += double(qrow(t)[c]) * krow(in.k, j)[c];
    sc[j - j0] = d * scale;
    mx = std::max(mx, sc[j - j0]);
  }
  double sum = 0;
  for (double x : sc) sum += std::exp(x - mx);
  const double lse = mx + std::log(sum);
  o.assign(s.HS, 0.0);
  if (probs) probs->assign(j1 - j0, 0.0);
  for (int j = j0; j < j1; ++j) {
    const double p = std::exp(sc[j - j0] - lse);
    if (probs) (*probs)[j - j0] = p;
    for (int c = 0; c < s.HS; ++c) o[c] += p * krow(in.v, j)[c];
  }
  return lse;
}

class AttentionForward : public ::testing::TestWithParam<Shape> {};

TEST_P(AttentionForward, MatchesDoubleReference) {
  const Shape s = GetParam();
  for (float std : {1.0f, 4.0f}) {  // 4: scores of tens, exercises the max subtraction
    const Inputs in = make_inputs(s, std);
    const Outputs o = run_forward(s, in);
    std::vector<double> ref, probs;
    double max_out = 0, max_lse = 0, max_att = 0;
    for (int b = 0; b < s.B; ++b)
      for (int h = 0; h < s.NH; ++h)
        for (int t = 0; t < s.T; ++t) {
          const double lse = reference_partial(s, in, b, h, t, 0, t + 1, ref, &probs);
          const size_t bh = size_t(b) * s.NH + h;
          max_lse = std::max(max_lse, std::fabs(o.lse[bh * s.T + t] - lse) / (1 + std::fabs(lse)));
          const float* orow = o.out.data() + ((size_t(b) * s.T + t) * s.NH + h) * s.HS;
          for (int c = 0; c < s.HS; ++c) max_out = std::max(max_out, std::fabs(orow[c] - ref[c]));
          const float* arow = o.att.data() + (bh * s.T + t) * s.T;
          double rowsum = 0;
          for (int j = 0; j < s.T; ++j) {
            if (j <= t) {
              max_att = std::max(max_att, std::fabs(arow[j] - probs[j]));
              rowsum += arow[j];
            } else {
              ASSERT_EQ(arow[j], 0.0f) << "above the diagonal: b " << b << " h " << h << " t " << t
                                       << " j " << j;
            }
          }
          ASSERT_NEAR(rowsum, 1.0, 1e-5) << "b " << b << " h " << h << " t " << t;
        }
    // Float kernel vs double reference; scores up to ~|q||k|/sqrt(HS).
    const double tol = std == 1.0f ? 2e-5 : 1e-4;
    EXPECT_LT(max_out, tol) << "std " << std;
    EXPECT_LT(max_lse, 1e-5) << "std " << std;
    EXPECT_LT(max_att, tol) << "std " << std;
  }
}

// T = 7: nothing divides; 150: three row blocks of the kernel (64, 64, 22) and enough
// work for its parallel path.
INSTANTIATE_TEST_SUITE_P(Shapes, AttentionForward,
                         ::testing::Values(Shape{2, 7, 4, 2, 8}, Shape{2, 7, 4, 1, 8},
                                           Shape{1, 5, 3, 3, 8}, Shape{1, 1, 2, 1, 8},
                                           Shape{2, 150, 4, 2, 16}, Shape{1, 150, 2, 1, 16}));

// Backward against the same gradients derived by hand and accumulated in double:
// dP = dO V^T, dS = P o (dP - rowsum(dP o P)) * scale, dQ = dS K, dK = dS^T Q,
// dV = P^T dO. Tight enough (1e-5 relative to the largest entry) to catch what finite
// differences cannot resolve.
class AttentionBackwardReference : public ::testing::TestWithParam<Shape> {};

TEST_P(AttentionBackwardReference, MatchesDoubleReference) {
  const Shape s = GetParam();
  const Inputs in = make_inputs(s, 1.0f, 70);
  const std::vector<float> dout = random_vector(qsize(s), 73);
  const Outputs o = run_forward(s, in);
  std::vector<float> dq(qsize(s), 0.0f), dk(ksize(s), 0.0f), dv(ksize(s), 0.0f);
  ndt::cpu::attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), in.q.data(),
                               in.k.data(), in.v.data(), o.att.data(), nullptr, s.B, s.T, s.NH, s.NKV,
                               s.HS);

  std::vector<double> rq(qsize(s), 0.0), rk(ksize(s), 0.0), rv(ksize(s), 0.0), unused, p;
  const double scale = 1.0 / std::sqrt(double(s.HS));
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.NH; ++h) {
      const int kvh = h / (s.NH / s.NKV);
      for (int t = 0; t < s.T; ++t) {
        reference_partial(s, in, b, h, t, 0, t + 1, unused, &p);
        const size_t qi = ((size_t(b) * s.T + t) * s.NH + h) * s.HS;
        std::vector<double> dp(t + 1, 0.0);
        double dot = 0;
        for (int j = 0; j <= t; ++j) {
          const size_t kj = ((size_t(b) * s.T + j) * s.NKV + kvh) * s.HS;
          for (int c = 0; c < s.HS; ++c) dp[j] += double(dout[qi + c]) * in.v[kj + c];
          dot += dp[j] * p[j];
        }
        for (int j = 0; j <= t; ++j) {
          const size_t kj = ((size_t(b) * s.T + j) * s.NKV + kvh) * s.HS;
          const double ds = p[j] * (dp[j] - dot) * scale;
          for (int c = 0; c < s.HS; ++c) {
            rq[qi + c] += ds * in.k[kj + c];
            rk[kj + c] += ds * in.q[qi + c];
            rv[kj + c] += p[j] * dout[qi + c];
          }
        }
      }
    }
  auto check = [](const std::vector<float>& got, const std::vector<double>& ref, const char* what) {
    double mx = 0, err = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      mx = std::max(mx, std::fabs(ref[i]));
      err = std::max(err, std::fabs(got[i] - ref[i]));
    }
    EXPECT_LT(err, 1e-5 * mx) << what << ": max |error| " << err << ", max |ref| " << mx;
  };
  check(dq, rq, "dq");
  check(dk, rk, "dk");
  check(dv, rv, "dv");
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionBackwardReference,
                         ::testing::Values(Shape{2, 7, 4, 2, 8}, Shape{2, 7, 4, 1, 8},
                                           Shape{2, 150, 4, 2, 16}, Shape{1, 150, 2, 1, 16}));

// Gradients of L = sum(out * w): analytic backward with dout = w vs central
// differences of L (eps 1e-2, rtol 2e-2, atol 1e-3 as in gradcheck.h).
class AttentionBackward : public ::testing::TestWithParam<Shape> {};

TEST_P(AttentionBackward, MatchesFiniteDifferences) {
  const Shape s = GetParam();
  Inputs in = make_inputs(s, 1.0f, 20);
  const std::vector<float> w = random_vector(qsize(s), 30);
  std::vector<float> out(qsize(s)), lse(lsize(s)), att(asize(s));
  auto loss = [&] {
    ndt::cpu::attention_forward(out.data(), lse.data(), att.data(), in.q.data(), in.k.data(),
                                in.v.data(), nullptr, s.B, s.T, s.NH, s.NKV, s.HS);
    return ndt::testing::weighted_sum(out.data(), w.data(), int64_t(out.size()));
  };
  loss();
  std::vector<float> dq(qsize(s), 0.0f), dk(ksize(s), 0.0f), dv(ksize(s), 0.0f);
  ndt::cpu::attention_backward(dq.data(), dk.data(), dv.data(), w.data(), in.q.data(), in.k.data(),
                               in.v.data(), att.data(), nullptr, s.B, s.T, s.NH, s.NKV, s.HS);
  ndt::testing::expect_gradient_matches(loss, in.q.data(), int64_t(in.q.size()), dq.data(), "dq");
  ndt::testing::expect_gradient_matches(loss, in.k.data(), int64_t(in.k.size()), dk.data(), "dk");
  ndt::testing::expect_gradient_matches(loss, in.v.data(), int64_t(in.v.size()), dv.data(), "dv");
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionBackward,
                         ::testing::Values(Shape{2, 7, 4, 2, 8}, Shape{2, 7, 4, 1, 8},
                                           Shape{1, 70, 2, 1, 8}));

TEST(AttentionBackward, AccumulatesIntoGradients) {
  const Shape s{2, 7, 4, 2, 8};
  const Inputs in = make_inputs(s, 1.0f, 40);
  const Outputs o = run_forward(s, in);
  const std::vector<float> dout = random_vector(qsize(s), 43);
  auto backward = [&](std::vector<float>& dq, std::vector<float>& dk, std::vector<float>& dv) {
    ndt::cpu::attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), in.q.data(),
                                 in.k.data(), in.v.data(), o.att.data(), nullptr, s.B, s.T, s.NH, s.NKV,
                                 s.HS);
  };
  std::vector<float> gq(qsize(s), 0.0f), gk(ksize(s), 0.0f), gv(ksize(s), 0.0f);
  backward(gq, gk, gv);

  // Twice from zero: doubles.
  std::vector<float> tq(qsize(s), 0.0f), tk(ksize(s), 0.0f), tv(ksize(s), 0.0f);
  backward(tq, tk, tv);
  backward(tq, tk, tv);
  // From random initial values r: r + g.
  std::vector<float> rq = random_vector(qsize(s), 44), rk = random_vector(ksize(s), 45),
                     rv = random_vector(ksize(s), 46);
  std::vector<float> aq = rq, ak = rk, av = rv;
  backward(aq, ak, av);

  auto check = [](const std::vector<float>& got, const std::vector<float>& base,
                  const std::vector<float>& g, float factor, const char* what) {
    for (size_t i = 0; i < got.size(); ++i) {
      const float expect = (base.empty() ? 0.0f : base[i]) + factor * g[i];
      ASSERT_NEAR(got[i], expect, 1e-5f * (1 + std::fabs(expect))) << what << " index " << i;
    }
  };
  check(tq, {}, gq, 2, "dq twice");
  check(tk, {}, gk, 2, "dk twice");
  check(tv, {}, gv, 2, "dv twice");
  check(aq, rq, gq, 1, "dq onto r");
  check(ak, rk, gk, 1, "dk onto r");
  check(av, rv, gv, 1, "dv onto r");
}

// dK/dV of a shared KV head sum over its query heads in a fixed order, so the result
// is bitwise the same on 1 and 2 threads.
TEST(AttentionBackward, DeterministicAcrossThreadCounts) {
  const Shape s{2, 130, 4, 2, 32};  // enough work for the parallel path
  const Inputs in = make_inputs(s, 1.0f, 50);
  const std::vector<float> dout = random_vector(qsize(s), 53);
  const int saved = omp_get_max_threads();
  auto run = [&](int threads) {
    omp_set_num_threads(threads);
    const Outputs o = run_forward(s, in);
    std::vector<float> g(qsize(s) + 2 * ksize(s), 0.0f);
    ndt::cpu::attention_backward(g.data(), g.data() + qsize(s), g.data() + qsize(s) + ksize(s),
                                 dout.data(), in.q.data(), in.k.data(), in.v.data(), o.att.data(), nullptr,
                                 s.B, s.T, s.NH, s.NKV, s.HS);
    g.insert(g.end(), o.out.begin(), o.out.end());
    return g;
  };
  const std::vector<float> one = run(1), two = run(2);
  omp_set_num_threads(saved);
  ASSERT_EQ(one.size(), two.size());
  EXPECT_EQ(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)), 0);
}

// Ring attention merges partial results over key blocks: with (o_i, lse_i) the softmax-
// weighted output and log-sum-exp over block i, lse = log sum_i exp(lse_i) and
// out = sum_i exp(lse_i - lse) o_i. Keys of query t >= S split into [0, S) (a full
// block, reference in double) and [S, t] (the causal diagonal block: exactly what the
// kernel computes on the suffix sequence starting at S). Merging must give the
// kernel's output and lse over the whole sequence.
TEST(AttentionLse, BlockMergeReproducesFullAttention) {
  const Shape s{2, 9, 4, 2, 8};
  const int S = 4;
  const Inputs in = make_inputs(s, 1.5f, 60);
  const Outputs full = run_forward(s, in);

  // The suffix sequence: rows [S, T) of q, k, v.
  const Shape ss{s.B, s.T - S, s.NH, s.NKV, s.HS};
  Inputs suf{std::vector<float>(qsize(ss)), std::vector<float>(ksize(ss)),
             std::vector<float>(ksize(ss))};
  for (int b = 0; b < s.B; ++b) {
    const size_t qr = size_t(s.NH) * s.HS, kr = size_t(s.NKV) * s.HS;
    std::copy_n(in.q.begin() + (size_t(b) * s.T + S) * qr, ss.T * qr,
                suf.q.begin() + size_t(b) * ss.T * qr);
    std::copy_n(in.k.begin() + (size_t(b) * s.T + S) * kr, ss.T * kr,
                suf.k.begin() + size_t(b) * ss.T * kr);
    std::copy_n(in.v.begin() + (size_t(b) * s.T + S) * kr, ss.T * kr,
                suf.v.begin() + size_t(b) * ss.T * kr);
  }
  const Outputs diag = run_forward(ss, suf);

  std::vector<double> o1;
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.NH; ++h)
      for (int t = S; t < s.T; ++t) {
        const double lse1 = reference_partial(s, in, b, h, t, 0, S, o1);
        const double lse2 = diag.lse[(size_t(b) * s.NH + h) * ss.T + (t - S)];
        const float* o2 = diag.out.data() + ((size_t(b) * ss.T + (t - S)) * s.NH + h) * s.HS;
        const double mx = std::max(lse1, lse2);
        const double lse = mx + std::log(std::exp(lse1 - mx) + std::exp(lse2 - mx));
        const double w1 = std::exp(lse1 - lse), w2 = std::exp(lse2 - lse);
        EXPECT_NEAR(full.lse[(size_t(b) * s.NH + h) * s.T + t], lse, 1e-5 * (1 + std::fabs(lse)));
        const float* of = full.out.data() + ((size_t(b) * s.T + t) * s.NH + h) * s.HS;
        for (int c = 0; c < s.HS; ++c) {
          EXPECT_NEAR(of[c], w1 * o1[c] + w2 * o2[c], 2e-5)
              << "b " << b << " h " << h << " t " << t << " c " << c;
        }
      }
}

}  // namespace

namespace {

TEST(AttentionForward, RejectsHeadCountsThatDoNotGroup) {
  const Shape s{1, 3, 3, 2, 8};
  const Inputs in = make_inputs(s);
  std::vector<float> out(qsize(s)), lse(lsize(s)), att(asize(s));
  try {
    ndt::cpu::attention_forward(out.data(), lse.data(), att.data(), in.q.data(), in.k.data(),
                                in.v.data(), nullptr, s.B, s.T, s.NH, s.NKV, s.HS);
    ADD_FAILURE() << "NH = 3, NKV = 2 accepted";
  } catch (const ndt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("(3)"), std::string::npos) << e.what();
  }
}

}  // namespace
