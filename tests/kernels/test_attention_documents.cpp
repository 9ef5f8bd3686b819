// Attention with document masks (data.document_boundaries): each query sees only the keys
// of its own document, from its document's start to itself. Against a double-precision
// reference, forward and backward: the one-rank kernel (attention.h) and the span kernels
// of ring attention (attention_span.h) on a simulated ring with zigzag and contiguous
// runs, merged by log-sum-exp, and as one whole-sequence pair (as Ulysses calls them).
// Also: keys before every row's document are never read (the skipped blocks), starts all
// 0 give the causal kernels' bits, the same bits on 1 and 2 threads, bad starts refused.
//
// Tolerances are the causal kernels' tests' (test_attention.cpp, test_attention_span.cpp):
// a masked row runs the very float operations of a causal row whose keys are its
// document's, so each sum has at most as many terms (a window of <= t + 1 keys) and its
// rounding error at most the causal bound: out and gradients are convex combinations /
// sums of O(1) values with relative rounding ~sqrt(terms) x 2^-24 per product, about
// 1e-7 here, well inside 1e-6 (span kernels) and 2e-5 (one-rank kernel). The sgemm
// blocking differs by CPU (AVX2, AVX-512, AMX builds of OpenBLAS) but not the size of
// these errors.
#include "kernels/cpu/attention.h"
#include "kernels/cpu/attention_span.h"

#include "../common/errors.h"
#include "../common/gradcheck.h"
#include "attention_reference.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

namespace {

using ndt::cpu::AttentionSpan;
using ndt::testing::random_vector;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

struct Case {
  int B, T, NH, NKV, HS;
  std::vector<std::vector<int>> documents;  // per sequence: the positions where documents start
};

size_t at(int b, int t, int h, int T, int H, int HS) { return ((size_t(b) * T + t) * H + h) * HS; }

// starts[b, t]: the last document start <= t (0 before the first).
std::vector<int32_t> starts_of(const Case& c) {
  std::vector<int32_t> s(size_t(c.B) * c.T, 0);
  for (int b = 0; b < c.B; ++b)
    for (int t = 0; t < c.T; ++t)
      for (int d : c.documents[b])
        if (d <= t) s[size_t(b) * c.T + t] = std::max(s[size_t(b) * c.T + t], int32_t(d));
  return s;
}

using Inputs = ndt::testing::AttentionInputs;

Inputs inputs(const Case& c, uint64_t stream) {
  const size_t qn = size_t(c.B) * c.T * c.NH * c.HS, kn = size_t(c.B) * c.T * c.NKV * c.HS;
  return {random_vector(qn, stream), random_vector(kn, stream + 1), random_vector(kn, stream + 2),
          random_vector(qn, stream + 3)};
}

ndt::testing::AttentionReference reference(const Case& c, const Inputs& in, const std::vector<int32_t>& starts) {
  return ndt::testing::attention_reference(in, c.B, c.T, c.NH, c.NKV, c.HS, starts.data());
}

// max |got - ref| / (1 + |ref|), NaN counting as infinite.
double max_error(const std::vector<float>& got, const std::vector<double>& ref) {
  double worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double e = std::fabs(double(got[i]) - ref[i]) / (1 + std::fabs(ref[i]));
    worst = std::max(worst, std::isnan(e) ? INFINITY : e);
  }
  return worst;
}

// max |got - ref| over max |ref| (the causal backward test's measure); the plain
// max |got - ref| when the reference is all 0 (a token alone in its document has
// probability 1, so no gradient reaches its q or k).
double relative_to_largest(const std::vector<float>& got, const std::vector<double>& ref) {
  double err = 0, largest = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    largest = std::max(largest, std::fabs(ref[i]));
    const double e = std::fabs(double(got[i]) - ref[i]);
    err = std::max(err, std::isnan(e) ? INFINITY : e);
  }
  return largest > 0 ? err / largest : err;
}

struct OneRank {
  std::vector<float> out, lse, att, dq, dk, dv;
};

OneRank one_rank(const Case& c, const Inputs& in, const int32_t* starts) {
  OneRank o{std::vector<float>(in.q.size(), kNaN), std::vector<float>(size_t(c.B) * c.NH * c.T, kNaN),
            std::vector<float>(size_t(c.B) * c.NH * c.T * c.T, kNaN), std::vector<float>(in.q.size(), 0.0f),
            std::vector<float>(in.k.size(), 0.0f), std::vector<float>(in.k.size(), 0.0f)};
  ndt::cpu::attention_forward(o.out.data(), o.lse.data(), o.att.data(), in.q.data(), in.k.data(), in.v.data(), starts,
                              c.B, c.T, c.NH, c.NKV, c.HS);
  ndt::cpu::attention_backward(o.dq.data(), o.dk.data(), o.dv.data(), in.dout.data(), in.q.data(), in.k.data(),
                               in.v.data(), o.att.data(), starts, c.B, c.T, c.NH, c.NKV, c.HS);
  return o;
}

std::string name_of(const Case& c) {
  return fmt::format("T{}_nkv{}_docs{}", c.T, c.NKV, c.documents[0].size());
}
void PrintTo(const Case& c, std::ostream* os) { *os << name_of(c); }

// T = 7: nothing divides; 150: three row blocks (64, 64, 22), the parallel path, documents
// starting inside blocks, on a block's first row (64, 128) and one token long (50, 51).
const Case kCases[] = {
    {2, 7, 4, 2, 8, {{0, 3, 4}, {2, 6}}},
    {1, 7, 2, 1, 8, {{0, 1, 2, 3, 4, 5, 6}}},  // every token its own document: it sees itself
    {2, 150, 4, 2, 16, {{0, 20, 50, 51, 64, 100, 128, 149}, {70}}},
    {1, 150, 2, 1, 16, {{0, 64, 128}}},
};

class AttentionDocuments : public ::testing::TestWithParam<Case> {};

// Catches: a row's softmax over keys of an earlier document, probabilities not zeroed
// before the document start, a backward reading the wrong window.
TEST_P(AttentionDocuments, OneRankKernelMatchesDoubleReference) {
  const Case& c = GetParam();
  const std::vector<int32_t> starts = starts_of(c);
  const Inputs in = inputs(c, 10);
  const OneRank o = one_rank(c, in, starts.data());
  const ndt::testing::AttentionReference r = reference(c, in, starts);
  EXPECT_LT(max_error(o.out, r.out), 2e-5);
  EXPECT_LT(max_error(o.lse, r.lse), 1e-5);
  for (int b = 0; b < c.B; ++b)
    for (int h = 0; h < c.NH; ++h)
      for (int t = 0; t < c.T; ++t) {
        const float* row = o.att.data() + ((size_t(b) * c.NH + h) * c.T + t) * c.T;
        double sum = 0;
        for (int j = 0; j < c.T; ++j) {
          if (j < starts[size_t(b) * c.T + t] || j > t) {
            ASSERT_EQ(row[j], 0.0f) << "masked probability b " << b << " h " << h << " t " << t << " j " << j;
          }
          sum += row[j];
        }
        ASSERT_NEAR(sum, 1.0, 1e-5) << "b " << b << " h " << h << " t " << t;
      }
  EXPECT_LT(relative_to_largest(o.dq, r.dq), 1e-5) << "dq";
  EXPECT_LT(relative_to_largest(o.dk, r.dk), 1e-5) << "dk";
  EXPECT_LT(relative_to_largest(o.dv, r.dv), 1e-5) << "dv";
}

// The ring of attention_span.h simulated in one process: cp ranks, each holding runs of
// chunks (zigzag: chunks r and 2cp-1-r; else chunk r), attends its queries to every
// rank's key runs and merges by lse; backward recomputes from the merged lse.
struct RingResult {
  std::vector<float> out, lse, dq, dk, dv;  // in whole-sequence order
};

RingResult simulated_ring(const Case& c, const Inputs& in, const std::vector<int32_t>& starts, int cp, bool zigzag) {
  const int B = c.B, NH = c.NH, NKV = c.NKV, HS = c.HS, T = c.T, Tl = T / cp, chunk = zigzag ? Tl / 2 : Tl;
  std::vector<std::vector<AttentionSpan>> spans(cp);
  std::vector<std::vector<int>> pos(cp);
  for (int r = 0; r < cp; ++r) {
    spans[r].push_back({0, chunk, r * chunk});
    if (zigzag) spans[r].push_back({chunk, chunk, (2 * cp - 1 - r) * chunk});
    for (const AttentionSpan& s : spans[r])
      for (int i = 0; i < s.count; ++i) pos[r].push_back(s.position + i);
  }
  auto gather = [&](const std::vector<float>& x, int r, int H) {
    std::vector<float> local(size_t(B) * Tl * H * HS);
    for (int b = 0; b < B; ++b)
      for (int i = 0; i < Tl; ++i)
        std::copy_n(x.begin() + at(b, pos[r][i], 0, T, H, HS), H * HS, local.begin() + at(b, i, 0, Tl, H, HS));
    return local;
  };
  std::vector<std::vector<float>> q(cp), k(cp), v(cp), dout(cp), out(cp), lse(cp), dq(cp), dk(cp), dv(cp);
  std::vector<std::vector<int32_t>> st(cp);
  for (int r = 0; r < cp; ++r) {
    q[r] = gather(in.q, r, NH), k[r] = gather(in.k, r, NKV), v[r] = gather(in.v, r, NKV), dout[r] = gather(in.dout, r, NH);
    for (int b = 0; b < B; ++b)
      for (int i = 0; i < Tl; ++i) st[r].push_back(starts[size_t(b) * T + pos[r][i]]);
    out[r].assign(q[r].size(), 0.0f), lse[r].assign(size_t(B) * NH * Tl, -kInf);
    dq[r].assign(q[r].size(), 0.0f), dk[r].assign(k[r].size(), 0.0f), dv[r].assign(k[r].size(), 0.0f);
  }
  for (int r = 0; r < cp; ++r)
    for (int step = 0; step < cp; ++step)
      for (const AttentionSpan& qs : spans[r])
        for (const AttentionSpan& ks : spans[(r - step + cp) % cp]) {
          const int s = (r - step + cp) % cp;
          std::vector<float> op(out[r].size(), kNaN), lp(lse[r].size(), kNaN);
          ndt::cpu::attention_span_forward(op.data(), lp.data(), q[r].data(), k[s].data(), v[s].data(), st[r].data(), B,
                                           Tl, Tl, NH, NKV, HS, qs, ks);
          ndt::cpu::attention_merge(out[r].data(), lse[r].data(), op.data(), lp.data(), B, Tl, NH, HS, qs);
        }
  for (int r = 0; r < cp; ++r) {
    std::vector<float> D(size_t(B) * NH * Tl);
    ndt::cpu::attention_row_dot(D.data(), dout[r].data(), out[r].data(), B, Tl, NH, HS);
    for (int step = 0; step < cp; ++step)
      for (const AttentionSpan& qs : spans[r])
        for (const AttentionSpan& ks : spans[(r - step + cp) % cp]) {
          const int s = (r - step + cp) % cp;
          ndt::cpu::attention_span_backward_recompute(dq[r].data(), dk[s].data(), dv[s].data(), dout[r].data(),
                                                      q[r].data(), k[s].data(), v[s].data(), lse[r].data(), D.data(),
                                                      st[r].data(), B, Tl, Tl, NH, NKV, HS, qs, ks);
        }
  }
  RingResult w{std::vector<float>(in.q.size()), std::vector<float>(size_t(B) * NH * T), std::vector<float>(in.q.size()),
               std::vector<float>(in.k.size()), std::vector<float>(in.k.size())};
  for (int r = 0; r < cp; ++r)
    for (int b = 0; b < B; ++b)
      for (int i = 0; i < Tl; ++i) {
        const size_t to_q = at(b, pos[r][i], 0, T, NH, HS), from_q = at(b, i, 0, Tl, NH, HS);
        const size_t to_k = at(b, pos[r][i], 0, T, NKV, HS), from_k = at(b, i, 0, Tl, NKV, HS);
        std::copy_n(out[r].begin() + from_q, NH * HS, w.out.begin() + to_q);
        std::copy_n(dq[r].begin() + from_q, NH * HS, w.dq.begin() + to_q);
        std::copy_n(dk[r].begin() + from_k, NKV * HS, w.dk.begin() + to_k);
        std::copy_n(dv[r].begin() + from_k, NKV * HS, w.dv.begin() + to_k);
        for (int h = 0; h < NH; ++h)
          w.lse[(size_t(b) * NH + h) * T + pos[r][i]] = lse[r][(size_t(b) * NH + h) * Tl + i];
      }
  return w;
}

struct RingCase {
  int cp;
  bool zigzag;
  Case c;
};

void PrintTo(const RingCase& rc, std::ostream* os) {
  *os << (rc.zigzag ? "zigzag" : "contiguous") << " cp " << rc.cp << " " << name_of(rc.c);
}

class AttentionDocumentsRing : public ::testing::TestWithParam<RingCase> {};

// Catches: a span pair merged across documents, a document start compared with local
// instead of sequence positions (zigzag runs are not contiguous), the recompute
// backward's window differing from the forward's, a fully masked pair's -inf lse merged
// into NaN.
TEST_P(AttentionDocumentsRing, SpanKernelsMatchDoubleReference) {
  const RingCase& rc = GetParam();
  const std::vector<int32_t> starts = starts_of(rc.c);
  const Inputs in = inputs(rc.c, 20);
  const ndt::testing::AttentionReference r = reference(rc.c, in, starts);
  const RingResult got = simulated_ring(rc.c, in, starts, rc.cp, rc.zigzag);
  EXPECT_LE(max_error(got.out, r.out), 1e-6) << "out";
  EXPECT_LE(max_error(got.lse, r.lse), 1e-6) << "lse";
  EXPECT_LE(max_error(got.dq, r.dq), 1.5e-6) << "dq";
  EXPECT_LE(max_error(got.dk, r.dk), 1.5e-6) << "dk";
  EXPECT_LE(max_error(got.dv, r.dv), 1.5e-6) << "dv";
}

// Chunks of 37 (cp = 2 zigzag: 4 chunks; cp = 4: 8) and 74: documents starting inside
// chunks, on a chunk's first position (74, 111: pairs wholly in other documents) and one
// sequence of a single document.
INSTANTIATE_TEST_SUITE_P(Layouts, AttentionDocumentsRing,
                         ::testing::Values(RingCase{2, true, {2, 148, 4, 2, 16, {{0, 20, 50, 51, 100, 140}, {74, 111}}}},
                                           RingCase{2, false, {2, 148, 4, 1, 16, {{0, 20, 50, 51, 100, 140}, {0}}}},
                                           RingCase{4, true, {1, 296, 4, 4, 16, {{0, 37, 90, 200, 222, 260}}}}),
                         [](const auto& info) {
                           return std::string(info.param.zigzag ? "zigzag" : "contiguous") + "_cp" +
                                  std::to_string(info.param.cp);
                         });

// Ulysses runs whole sequences as one pair: the span kernels on {0, T, 0} x {0, T, 0}.
TEST_P(AttentionDocuments, WholeSequenceSpanPairMatchesDoubleReference) {
  const Case& c = GetParam();
  const std::vector<int32_t> starts = starts_of(c);
  const Inputs in = inputs(c, 30);
  const ndt::testing::AttentionReference r = reference(c, in, starts);
  const AttentionSpan all{0, c.T, 0};
  std::vector<float> out(in.q.size(), kNaN), lse(size_t(c.B) * c.NH * c.T, kNaN), D(lse.size());
  std::vector<float> dq(in.q.size(), 0.0f), dk(in.k.size(), 0.0f), dv(in.k.size(), 0.0f);
  ndt::cpu::attention_span_forward(out.data(), lse.data(), in.q.data(), in.k.data(), in.v.data(), starts.data(), c.B,
                                   c.T, c.T, c.NH, c.NKV, c.HS, all, all);
  ndt::cpu::attention_row_dot(D.data(), in.dout.data(), out.data(), c.B, c.T, c.NH, c.HS);
  ndt::cpu::attention_span_backward_recompute(dq.data(), dk.data(), dv.data(), in.dout.data(), in.q.data(),
                                              in.k.data(), in.v.data(), lse.data(), D.data(), starts.data(), c.B, c.T,
                                              c.T, c.NH, c.NKV, c.HS, all, all);
  EXPECT_LE(max_error(out, r.out), 1e-6) << "out";
  EXPECT_LE(max_error(lse, r.lse), 1e-6) << "lse";
  EXPECT_LE(max_error(dq, r.dq), 1.5e-6) << "dq";
  EXPECT_LE(max_error(dk, r.dk), 1.5e-6) << "dk";
  EXPECT_LE(max_error(dv, r.dv), 1.5e-6) << "dv";
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionDocuments, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return name_of(info.param); });

// Documents at 64 and 128 (row-block boundaries): rows from 64 on never see keys 0..63,
// so neither kernel may read them. NaN there (in q, k, v and the output gradient) must
// stay in rows 0..63: a block that multiplied masked keys and zeroed them afterwards
// would spread it (0 x NaN is NaN).
// Catches: the fully masked blocks of the mask computed instead of skipped.
TEST(AttentionDocumentsSkipping, KeysBeforeEveryRowsDocumentAreNotRead) {
  const Case c{1, 150, 2, 1, 16, {{0, 64, 128}}};
  const std::vector<int32_t> starts = starts_of(c);
  const Inputs clean = inputs(c, 40);
  Inputs poisoned = clean;
  for (auto* x : {&poisoned.q, &poisoned.k, &poisoned.v, &poisoned.dout}) {
    std::fill(x->begin(), x->begin() + x->size() * 64 / 150, kNaN);
  }
  const OneRank a = one_rank(c, clean, starts.data()), p = one_rank(c, poisoned, starts.data());
  const size_t qfrom = size_t(64) * c.NH * c.HS, kfrom = size_t(64) * c.NKV * c.HS;
  auto same_from = [](const std::vector<float>& x, const std::vector<float>& y, size_t from) {
    return std::memcmp(x.data() + from, y.data() + from, (x.size() - from) * sizeof(float)) == 0;
  };
  EXPECT_TRUE(same_from(a.out, p.out, qfrom)) << "one-rank out";
  EXPECT_TRUE(same_from(a.dq, p.dq, qfrom)) << "one-rank dq";
  EXPECT_TRUE(same_from(a.dk, p.dk, kfrom)) << "one-rank dk";
  EXPECT_TRUE(same_from(a.dv, p.dv, kfrom)) << "one-rank dv";
  // The span kernels: queries 64.. against keys 0..63 of another span see nothing.
  const AttentionSpan qs{64, 86, 64}, ks{0, 64, 0};
  std::vector<float> out(clean.q.size(), 1.0f), lse(size_t(c.NH) * c.T, 1.0f), D(lse.size(), 0.0f);
  std::vector<float> dq(clean.q.size(), 0.0f), dk(clean.k.size(), 0.0f), dv(clean.k.size(), 0.0f);
  ndt::cpu::attention_span_forward(out.data(), lse.data(), poisoned.q.data(), poisoned.k.data(), poisoned.v.data(),
                                   starts.data(), 1, c.T, c.T, c.NH, c.NKV, c.HS, qs, ks);
  for (int h = 0; h < c.NH; ++h)
    for (int t = 64; t < c.T; ++t) {
      ASSERT_EQ(lse[size_t(h) * c.T + t], -kInf) << "h " << h << " t " << t;
      for (int e = 0; e < c.HS; ++e) ASSERT_EQ(out[at(0, t, h, c.T, c.NH, c.HS) + e], 0.0f);
    }
  std::fill(lse.begin(), lse.end(), 0.0f);
  ndt::cpu::attention_span_backward_recompute(dq.data(), dk.data(), dv.data(), poisoned.dout.data(), poisoned.q.data(),
                                              poisoned.k.data(), poisoned.v.data(), lse.data(), D.data(), starts.data(),
                                              1, c.T, c.T, c.NH, c.NKV, c.HS, qs, ks);
  for (auto* g : {&dq, &dk, &dv}) {
    EXPECT_TRUE(std::all_of(g->begin(), g->end(), [](float x) { return x == 0.0f; })) << "a masked pair's gradient";
  }
}

// Starts all 0 are the causal mask: the same bits as no starts, for both kernels.
// Catches: the document path changing the causal kernels' arithmetic (data.document_boundaries
// off must give today's results).
TEST(AttentionDocumentsCausal, AllZeroStartsGiveTheCausalBits) {
  const Case c{2, 150, 4, 2, 16, {{0}, {0}}};
  const std::vector<int32_t> zeros(size_t(c.B) * c.T, 0);
  const Inputs in = inputs(c, 50);
  const OneRank a = one_rank(c, in, nullptr), z = one_rank(c, in, zeros.data());
  for (auto [x, y] : {std::pair{&a.out, &z.out}, {&a.lse, &z.lse}, {&a.att, &z.att}, {&a.dq, &z.dq}, {&a.dk, &z.dk},
                      {&a.dv, &z.dv}}) {
    EXPECT_EQ(std::memcmp(x->data(), y->data(), x->size() * sizeof(float)), 0);
  }
  const AttentionSpan qs{20, 90, 60}, ks{0, 100, 10};
  std::vector<float> o1(in.q.size(), 0.0f), o2 = o1, l1(size_t(c.B) * c.NH * c.T, 0.0f), l2 = l1;
  ndt::cpu::attention_span_forward(o1.data(), l1.data(), in.q.data(), in.k.data(), in.v.data(), nullptr, c.B, c.T,
                                   c.T, c.NH, c.NKV, c.HS, qs, ks);
  ndt::cpu::attention_span_forward(o2.data(), l2.data(), in.q.data(), in.k.data(), in.v.data(), zeros.data(), c.B,
                                   c.T, c.T, c.NH, c.NKV, c.HS, qs, ks);
  EXPECT_EQ(std::memcmp(o1.data(), o2.data(), o1.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(l1.data(), l2.data(), l1.size() * sizeof(float)), 0);
}

// Each dK/dV row is still summed by one thread in a fixed order under a mask.
TEST(AttentionDocumentsDeterminism, SameBitsOnOneAndTwoThreads) {
  const Case c{2, 130, 4, 2, 32, {{0, 30, 64, 100}, {10}}};
  const std::vector<int32_t> starts = starts_of(c);
  const Inputs in = inputs(c, 60);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const OneRank one = one_rank(c, in, starts.data());
  omp_set_num_threads(2);
  const OneRank two = one_rank(c, in, starts.data());
  omp_set_num_threads(saved);
  for (auto [x, y] : {std::pair{&one.out, &two.out}, {&one.dq, &two.dq}, {&one.dk, &two.dk}, {&one.dv, &two.dv}}) {
    EXPECT_EQ(std::memcmp(x->data(), y->data(), x->size() * sizeof(float)), 0);
  }
}

// A start after its row, or negative, is refused naming it (before any thread starts).
TEST(AttentionDocumentsArguments, StartsOutsideTheirRowAreRefused) {
  using ndt::testing::expect_error;
  const Case c{1, 4, 2, 1, 8, {{0}}};
  const Inputs in = inputs(c, 70);
  std::vector<float> out(in.q.size()), lse(8), att(32), g(in.q.size());
  const std::vector<int32_t> late = {0, 0, 3, 2}, negative = {0, -1, 0, 0}, beyond = {0, 0, 3, 5};
  expect_error(
      [&] {
        ndt::cpu::attention_forward(out.data(), lse.data(), att.data(), in.q.data(), in.k.data(), in.v.data(),
                                    late.data(), 1, 4, 2, 1, 8);
      },
      {"document start 3 of row 2", "[0, 2]"});
  expect_error(
      [&] {
        ndt::cpu::attention_backward(g.data(), g.data(), g.data(), in.q.data(), in.q.data(), in.k.data(), in.v.data(),
                                     att.data(), negative.data(), 1, 4, 2, 1, 8);
      },
      {"document start -1 of row 1"});
  expect_error(
      [&] {
        ndt::cpu::attention_span_forward(out.data(), lse.data(), in.q.data(), in.k.data(), in.v.data(),
                                         beyond.data(), 1, 4, 4, 2, 1, 8, {0, 4, 1}, {0, 4, 1});
      },
      {"attention_span_forward", "document start 5 of the query at position 4", "[0, 4]"});
  expect_error(
      [&] {
        ndt::cpu::attention_span_backward_recompute(g.data(), g.data(), g.data(), in.q.data(), in.q.data(), in.k.data(),
                                                    in.v.data(), lse.data(), lse.data(), late.data(), 1, 4, 4, 2, 1, 8,
                                                    {0, 4, 0}, {0, 4, 0});
      },
      {"attention_span_backward_recompute", "document start 3 of the query at position 2", "[0, 2]"});
}

}  // namespace
