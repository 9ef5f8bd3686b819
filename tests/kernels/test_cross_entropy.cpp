// Fused softmax cross-entropy: losses against a double reference (including logits
// far beyond exp's float range), the in-place gradient against finite differences,
// grad_scale = 0 leaving the logits alone, target validation, and a loss-masked row
// (kIgnoredTarget) counting nothing. The three-piece form
// (row max, exp sums, finish) against the fused kernel, over the whole vocabulary and
// over two slices combined by hand as a vocab-parallel all-reduce would. The z-loss
// (coefficient x lse^2 per row): its value against a double reference, the gradient of
// cross-entropy + z-loss against finite differences for the fused kernel and for the
// pieces over 1, 2 and 3 slices, and coefficient 0 giving bitwise the plain results.
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/threads.h"

#include "../common/gradcheck.h"
#include "core/error.h"
#include "core/targets.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

namespace {

using ndt::testing::random_vector;

// logsumexp(row) - row[target] in double, max-subtracted.
double reference_loss(const float* row, int V, int target) {
  double mx = row[0];
  for (int j = 1; j < V; ++j) mx = std::max(mx, double(row[j]));
  double sum = 0;
  for (int j = 0; j < V; ++j) sum += std::exp(double(row[j]) - mx);
  return mx + std::log(sum) - row[target];
}

std::vector<int32_t> make_targets(int N, int V) {
  std::vector<int32_t> t(N);
  for (int n = 0; n < N; ++n) t[n] = (n * 7 + 3) % V;
  return t;
}

TEST(CrossEntropy, LossMatchesReference) {
  const int N = 6, V = 37;
  const std::vector<float> logits = random_vector(N * V, 100, 3.0f);
  const std::vector<int32_t> targets = make_targets(N, V);
  for (float grad_scale : {0.0f, 1.0f}) {  // both code paths compute the loss
    std::vector<float> work = logits, losses(N, -1.0f);
    ndt::cpu::softmax_cross_entropy(work.data(), losses.data(), targets.data(), N, V, grad_scale);
    for (int n = 0; n < N; ++n) {
      const double ref = reference_loss(logits.data() + n * V, V, targets[n]);
      EXPECT_NEAR(losses[n], ref, 1e-5 * (1 + std::fabs(ref))) << "row " << n;
    }
  }
}

// exp(1000) overflows float and double: only a max-subtracted kernel gets these right.
TEST(CrossEntropy, StableForLargeLogits) {
  const int V = 5;
  std::vector<float> logits = {
      1000.0f, 999.0f,  -1000.0f, 998.0f,  1000.0f,   // target 1
      1000.0f, 1000.0f, 1000.0f,  1000.0f, 1000.0f,   // all equal: log V
      -1000.0f, -999.0f, -1000.0f, -998.0f, -1000.0f, // all very negative, target 3
      500.0f,  -500.0f, 0.0f,     0.0f,    0.0f,      // target 1: loss 1000
  };
  const std::vector<int32_t> targets = {1, 2, 3, 1};
  const int N = int(targets.size());
  const std::vector<float> original = logits;
  std::vector<float> losses(N);
  ndt::cpu::softmax_cross_entropy(logits.data(), losses.data(), targets.data(), N, V, 1.0f);
  for (int n = 0; n < N; ++n) {
    const double ref = reference_loss(original.data() + n * V, V, targets[n]);
    ASSERT_TRUE(std::isfinite(losses[n])) << "row " << n;
    EXPECT_NEAR(losses[n], ref, 1e-5 * (1 + std::fabs(ref))) << "row " << n;
    double gsum = 0;
    for (int j = 0; j < V; ++j) {
      ASSERT_TRUE(std::isfinite(logits[n * V + j])) << "row " << n << " col " << j;
      gsum += logits[n * V + j];
    }
    EXPECT_NEAR(gsum, 0.0, 1e-6) << "gradient of row " << n << " must sum to 0";
  }
  EXPECT_NEAR(losses[1], std::log(5.0), 1e-6);
  EXPECT_NEAR(losses[3], 1000.0, 1e-3);
  // Row 0: softmax weights of (1000, 999, -1000, 998, 1000) relative to e^0.
  const double z = 2 + std::exp(-1.0) + std::exp(-2.0);
  EXPECT_NEAR(logits[0], 1 / z, 1e-6);
  EXPECT_NEAR(logits[1], std::exp(-1.0) / z - 1, 1e-6);
  EXPECT_EQ(logits[2], 0.0f);  // e^-2000: exactly zero
}

// The in-place gradient grad_scale * (softmax - onehot) is d(grad_scale * loss)/dlogits.
TEST(CrossEntropy, GradientMatchesFiniteDifferences) {
  const int N = 4, V = 19;
  const float grad_scale = 0.5f;
  std::vector<float> logits = random_vector(N * V, 110, 2.0f);
  const std::vector<int32_t> targets = make_targets(N, V);
  std::vector<float> grad = logits, losses(N);
  ndt::cpu::softmax_cross_entropy(grad.data(), losses.data(), targets.data(), N, V, grad_scale);
  auto loss = [&] {
    std::vector<float> l(N);
    ndt::cpu::softmax_cross_entropy(logits.data(), l.data(), targets.data(), N, V, 0.0f);
    double s = 0;
    for (float x : l) s += double(grad_scale) * x;
    return s;
  };
  // eps 1e-2, rtol 2e-2, atol 1e-3; every element is checked (N * V < 128).
  ndt::testing::expect_gradient_matches(loss, logits.data(), N * V, grad.data(), "dlogits", 1e-2f,
                                        2e-2, 1e-3, N * V);
}

TEST(CrossEntropy, ZeroGradScaleLeavesLogitsUnchanged) {
  const int N = 3, V = 1000;
  std::vector<float> logits = random_vector(N * V, 120, 5.0f);
  const std::vector<float> original = logits;
  const std::vector<int32_t> targets = make_targets(N, V);
  std::vector<float> losses(N);
  ndt::cpu::softmax_cross_entropy(logits.data(), losses.data(), targets.data(), N, V, 0.0f);
  EXPECT_EQ(std::memcmp(logits.data(), original.data(), logits.size() * sizeof(float)), 0);
  for (int n = 0; n < N; ++n) {
    EXPECT_NEAR(losses[n], reference_loss(original.data() + n * V, V, targets[n]), 1e-4);
  }
}

TEST(CrossEntropy, TargetOutOfRangeThrows) {
  const int N = 3, V = 8;
  for (int32_t bad : {8, -2, 12345}) {  // (-1 is kIgnoredTarget)
    std::vector<float> logits = random_vector(N * V, 130);
    const std::vector<float> original = logits;
    std::vector<int32_t> targets = {0, 7, bad};
    std::vector<float> losses(N);
    try {
      ndt::cpu::softmax_cross_entropy(logits.data(), losses.data(), targets.data(), N, V, 1.0f);
      ADD_FAILURE() << "no throw for target " << bad;
    } catch (const ndt::Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(std::to_string(bad)), std::string::npos) << msg;
      EXPECT_NE(msg.find("row 2"), std::string::npos) << msg;
    }
    // Nothing was modified before the check.
    EXPECT_EQ(std::memcmp(logits.data(), original.data(), logits.size() * sizeof(float)), 0);
  }
}

// A loss-masked row (kIgnoredTarget) has loss 0, z-loss 0 and gradient 0, and leaves the
// other rows bitwise as they are without it; in the fused kernel and in the pieces.
TEST(CrossEntropy, IgnoredTargetCountsNothing) {
  const int N = 4, V = 11;
  const std::vector<float> logits = random_vector(N * V, 140, 2.0f);
  const std::vector<int32_t> plain = {3, 0, 10, 5};
  std::vector<int32_t> masked = plain;
  masked[2] = ndt::kIgnoredTarget;
  for (float grad_scale : {0.0f, 0.25f}) {
    std::vector<float> a = logits, b = logits, la(N), lb(N), za(N), zb(N, -1.0f);
    ndt::cpu::softmax_cross_entropy(a.data(), la.data(), plain.data(), N, V, grad_scale, 0.1f, za.data());
    ndt::cpu::softmax_cross_entropy(b.data(), lb.data(), masked.data(), N, V, grad_scale, 0.1f, zb.data());
    std::vector<float> pieces = logits, lp(N), row_max(N), sums(N), target_logit(N), zp(N, -1.0f);
    ndt::cpu::cross_entropy_row_max(pieces.data(), row_max.data(), N, V);
    ndt::cpu::cross_entropy_exp_sums(pieces.data(), row_max.data(), masked.data(), 0, sums.data(), target_logit.data(),
                                     N, V, grad_scale != 0.0f);
    ndt::cpu::cross_entropy_finish(pieces.data(), lp.data(), row_max.data(), sums.data(), target_logit.data(),
                                   masked.data(), 0, N, V, grad_scale, 0.1f, zp.data());
    for (int n = 0; n < N; ++n) {
      const bool ignored = n == 2;
      EXPECT_EQ(lb[n], ignored ? 0.0f : la[n]) << "fused loss of row " << n;
      EXPECT_EQ(zb[n], ignored ? 0.0f : za[n]) << "fused z-loss of row " << n;
      if (ignored) {
        EXPECT_EQ(lp[n], 0.0f) << "pieces' loss of the ignored row";
        EXPECT_EQ(zp[n], 0.0f) << "pieces' z-loss of the ignored row";
      }
      for (int j = 0; j < V && grad_scale != 0.0f; ++j) {
        const size_t i = size_t(n) * V + j;
        EXPECT_EQ(b[i], ignored ? 0.0f : a[i]) << "fused gradient row " << n << " column " << j;
        if (ignored) {
          EXPECT_EQ(pieces[i], 0.0f) << "pieces' gradient column " << j;
        }
      }
    }
  }
}

// ---- The three pieces -------------------------------------------------------------

// |a - ref| <= 1e-6 * max(|ref|, floor): relative, with a floor for values near zero
// (the sums pass through float in the pieces, double in the fused kernel).
void expect_rel(float a, float ref, float floor, const std::string& what) {
  EXPECT_NEAR(a, ref, 1e-6 * std::max(std::fabs(ref), floor)) << what;
}

struct PieceResult {
  std::vector<float> logits, losses, row_max, sums, target_logit;
};

// One slice, no reduction (the whole vocabulary when vocab_begin = 0 and V is all of it).
PieceResult run_pieces(std::vector<float> logits, const std::vector<int32_t>& targets, int64_t vocab_begin,
                       int N, int V, float grad_scale) {
  PieceResult r;
  r.losses.assign(N, -1.0f);
  r.row_max.assign(N, 0.0f);
  r.sums.assign(N, 0.0f);
  r.target_logit.assign(N, -1.0f);
  ndt::cpu::cross_entropy_row_max(logits.data(), r.row_max.data(), N, V);
  ndt::cpu::cross_entropy_exp_sums(logits.data(), r.row_max.data(), targets.data(), vocab_begin, r.sums.data(),
                                   r.target_logit.data(), N, V, grad_scale != 0.0f);
  ndt::cpu::cross_entropy_finish(logits.data(), r.losses.data(), r.row_max.data(), r.sums.data(),
                                 r.target_logit.data(), targets.data(), vocab_begin, N, V, grad_scale);
  r.logits = std::move(logits);
  return r;
}

void expect_pieces_match_fused(const std::vector<float>& logits, const std::vector<int32_t>& targets, int N, int V) {
  for (float grad_scale : {0.0f, 0.5f, 1.0f}) {
    std::vector<float> fused = logits, fused_losses(N);
    ndt::cpu::softmax_cross_entropy(fused.data(), fused_losses.data(), targets.data(), N, V, grad_scale);
    const PieceResult r = run_pieces(logits, targets, 0, N, V, grad_scale);
    for (int n = 0; n < N; ++n) {
      expect_rel(r.losses[n], fused_losses[n], 1.0f, "loss of row " + std::to_string(n));
      EXPECT_EQ(r.target_logit[n], logits[int64_t{n} * V + targets[n]]) << "row " << n;
    }
    if (grad_scale == 0.0f) {
      EXPECT_EQ(std::memcmp(r.logits.data(), logits.data(), logits.size() * sizeof(float)), 0)
          << "grad_scale 0 must leave the logits unchanged";
      continue;
    }
    for (size_t i = 0; i < logits.size(); ++i) {
      expect_rel(r.logits[i], fused[i], grad_scale, "gradient index " + std::to_string(i));
    }
  }
}

TEST(CrossEntropyPieces, WholeVocabularyMatchesFused) {
  {
    const int N = 6, V = 37;  // serial path
    expect_pieces_match_fused(random_vector(N * V, 200, 3.0f), make_targets(N, V), N, V);
  }
  {
    const int N = 9, V = 5003;  // N * V above the parallel threshold
    expect_pieces_match_fused(random_vector(int64_t{N} * V, 201, 4.0f), make_targets(N, V), N, V);
  }
  {
    const int V = 5;  // logits far beyond exp's range (as StableForLargeLogits)
    const std::vector<float> logits = {
        1000.0f,  999.0f,  -1000.0f, 998.0f,  1000.0f,  1000.0f, 1000.0f, 1000.0f,  1000.0f, 1000.0f,
        -1000.0f, -999.0f, -1000.0f, -998.0f, -1000.0f, 500.0f,  -500.0f, 0.0f,     0.0f,    0.0f,
    };
    expect_pieces_match_fused(logits, {1, 2, 3, 1}, 4, V);
  }
}

// Two vocabulary slices [0, split) and [split, V), each in its own [N, slice] array,
// combined between the pieces as the all-reduces would: max of the row maxima, sum of
// the exp sums and of the target logits (zero from the slice that does not own it).
TEST(CrossEntropyPieces, TwoSlicesCombineToTheWhole) {
  const int N = 8, V = 41, split = 17;
  const std::vector<float> logits = random_vector(N * V, 210, 3.0f);
  std::vector<int32_t> targets = make_targets(N, V);
  targets[0] = 0, targets[1] = split - 1, targets[2] = split, targets[3] = V - 1;  // both edges of both slices
  const int widths[2] = {split, V - split};
  const int64_t begins[2] = {0, split};

  for (float grad_scale : {0.0f, 1.0f}) {
    const PieceResult whole = run_pieces(logits, targets, 0, N, V, grad_scale);
    std::vector<float> fused = logits, fused_losses(N);
    ndt::cpu::softmax_cross_entropy(fused.data(), fused_losses.data(), targets.data(), N, V, grad_scale);

    std::vector<float> part[2], max_part[2], sums_part[2], tl_part[2];
    for (int s = 0; s < 2; ++s) {
      for (int n = 0; n < N; ++n) {
        const float* row = logits.data() + n * V + begins[s];
        part[s].insert(part[s].end(), row, row + widths[s]);
      }
      max_part[s].assign(N, 0.0f);
      ndt::cpu::cross_entropy_row_max(part[s].data(), max_part[s].data(), N, widths[s]);
    }
    std::vector<float> row_max(N), sums(N), target_logit(N);
    for (int n = 0; n < N; ++n) row_max[n] = std::max(max_part[0][n], max_part[1][n]);
    for (int n = 0; n < N; ++n) EXPECT_EQ(row_max[n], whole.row_max[n]) << "row " << n;  // max is exact
    for (int s = 0; s < 2; ++s) {
      sums_part[s].assign(N, 0.0f);
      tl_part[s].assign(N, -1.0f);
      ndt::cpu::cross_entropy_exp_sums(part[s].data(), row_max.data(), targets.data(), begins[s],
                                       sums_part[s].data(), tl_part[s].data(), N, widths[s], grad_scale != 0.0f);
    }
    for (int n = 0; n < N; ++n) {
      const int owner = targets[n] < split ? 0 : 1;
      EXPECT_EQ(tl_part[1 - owner][n], 0.0f) << "row " << n << ": a slice without the target gives 0";
      EXPECT_EQ(tl_part[owner][n], logits[n * V + targets[n]]) << "row " << n;
      sums[n] = sums_part[0][n] + sums_part[1][n];
      target_logit[n] = tl_part[0][n] + tl_part[1][n];
    }
    std::vector<float> losses[2];
    for (int s = 0; s < 2; ++s) {
      losses[s].assign(N, -1.0f);
      ndt::cpu::cross_entropy_finish(part[s].data(), losses[s].data(), row_max.data(), sums.data(),
                                     target_logit.data(), targets.data(), begins[s], N, widths[s], grad_scale);
    }
    for (int n = 0; n < N; ++n) {
      EXPECT_EQ(losses[0][n], losses[1][n]) << "row " << n << ": every slice computes the same loss";
      expect_rel(losses[0][n], whole.losses[n], 1.0f, "loss vs whole, row " + std::to_string(n));
      expect_rel(losses[0][n], fused_losses[n], 1.0f, "loss vs fused, row " + std::to_string(n));
      for (int s = 0; s < 2; ++s) {
        for (int j = 0; j < widths[s]; ++j) {
          const int64_t i = int64_t{n} * V + begins[s] + j;
          const float got = part[s][int64_t{n} * widths[s] + j];
          if (grad_scale == 0.0f) {
            ASSERT_EQ(got, logits[i]) << "grad_scale 0 must leave slice " << s << " unchanged";
          } else {
            expect_rel(got, whole.logits[i], 1.0f, "gradient vs whole, index " + std::to_string(i));
            expect_rel(got, fused[i], 1.0f, "gradient vs fused, index " + std::to_string(i));
          }
        }
      }
    }
  }
}

// One thread per row in a fixed order: the same bits on 1 and 2 threads.
TEST(CrossEntropyPieces, IndependentOfThreadCount) {
  const int N = 7, V = 6007;
  const std::vector<float> logits = random_vector(int64_t{N} * V, 220, 3.0f);
  const std::vector<int32_t> targets = make_targets(N, V);
  const int saved = ndt::cpu::num_threads();
  ndt::cpu::set_num_threads(1);
  const PieceResult one = run_pieces(logits, targets, 0, N, V, 0.25f);
  ndt::cpu::set_num_threads(2);
  const PieceResult two = run_pieces(logits, targets, 0, N, V, 0.25f);
  ndt::cpu::set_num_threads(saved);
  EXPECT_EQ(std::memcmp(one.logits.data(), two.logits.data(), logits.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(one.losses.data(), two.losses.data(), N * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(one.sums.data(), two.sums.data(), N * sizeof(float)), 0);
}

// ---- z-loss ------------------------------------------------------------------------

// logsumexp(row) in double, max-subtracted.
double reference_lse(const float* row, int V) {
  double mx = row[0];
  for (int j = 1; j < V; ++j) mx = std::max(mx, double(row[j]));
  double sum = 0;
  for (int j = 0; j < V; ++j) sum += std::exp(double(row[j]) - mx);
  return mx + std::log(sum);
}

struct LossResult {
  std::vector<float> logits, losses, z_losses;  // logits: the gradient when grad_scale != 0
};

LossResult run_fused(std::vector<float> logits, const std::vector<int32_t>& targets, int N, int V, float grad_scale,
                     float z_loss) {
  LossResult r;
  r.losses.assign(N, -1.0f);
  r.z_losses.assign(N, -1.0f);
  ndt::cpu::softmax_cross_entropy(logits.data(), r.losses.data(), targets.data(), N, V, grad_scale, z_loss,
                                  r.z_losses.data());
  r.logits = std::move(logits);
  return r;
}

// The pieces over vocabulary slices [bounds[s], bounds[s + 1]), each in its own [N, width]
// array, reduced between the pieces by hand as the all-reduces would (max of the row
// maxima; sums of the exp sums and of the target logits, in slice order). The slices'
// gradients are joined back into [N, V]; every slice must give the same losses.
LossResult run_sliced(const std::vector<float>& logits, const std::vector<int32_t>& targets, int N, int V,
                      const std::vector<int>& bounds, float grad_scale, float z_loss) {
  const int S = int(bounds.size()) - 1;
  std::vector<std::vector<float>> part(S), sums_part(S), tl_part(S);
  std::vector<float> row_max(N, -INFINITY), sums(N, 0.0f), target_logit(N, 0.0f);
  for (int s = 0; s < S; ++s) {
    const int width = bounds[s + 1] - bounds[s];
    for (int n = 0; n < N; ++n) {
      const float* row = logits.data() + int64_t{n} * V + bounds[s];
      part[s].insert(part[s].end(), row, row + width);
    }
    std::vector<float> mx(N);
    ndt::cpu::cross_entropy_row_max(part[s].data(), mx.data(), N, width);
    for (int n = 0; n < N; ++n) row_max[n] = std::max(row_max[n], mx[n]);
  }
  for (int s = 0; s < S; ++s) {
    sums_part[s].assign(N, 0.0f);
    tl_part[s].assign(N, 0.0f);
    ndt::cpu::cross_entropy_exp_sums(part[s].data(), row_max.data(), targets.data(), bounds[s], sums_part[s].data(),
                                     tl_part[s].data(), N, bounds[s + 1] - bounds[s], grad_scale != 0.0f);
    for (int n = 0; n < N; ++n) sums[n] += sums_part[s][n], target_logit[n] += tl_part[s][n];
  }
  LossResult r;
  r.logits.assign(logits.size(), 0.0f);
  for (int s = 0; s < S; ++s) {
    const int width = bounds[s + 1] - bounds[s];
    std::vector<float> losses(N, -1.0f), z_losses(N, -1.0f);
    ndt::cpu::cross_entropy_finish(part[s].data(), losses.data(), row_max.data(), sums.data(), target_logit.data(),
                                   targets.data(), bounds[s], N, width, grad_scale, z_loss, z_losses.data());
    if (s == 0) {
      r.losses = losses, r.z_losses = z_losses;
    } else {
      for (int n = 0; n < N; ++n) {
        EXPECT_EQ(losses[n], r.losses[n]) << "slice " << s << ", row " << n << ": every slice computes the same loss";
        EXPECT_EQ(z_losses[n], r.z_losses[n]) << "slice " << s << ", row " << n;
      }
    }
    for (int n = 0; n < N; ++n) {
      std::copy_n(part[s].data() + int64_t{n} * width, width, r.logits.data() + int64_t{n} * V + bounds[s]);
    }
  }
  return r;
}

// The value: losses stay the plain cross-entropy, z_losses = coefficient x lse^2, in both
// code paths of the fused kernel and over 1 and 3 slices of the pieces.
TEST(ZLoss, ValueMatchesReference) {
  const int N = 7, V = 43;
  const std::vector<float> logits = random_vector(N * V, 300, 3.0f);
  const std::vector<int32_t> targets = make_targets(N, V);
  for (float z_loss : {1e-4f, 0.1f, 2.0f}) {
    for (float grad_scale : {0.0f, 1.0f}) {
      const LossResult results[3] = {run_fused(logits, targets, N, V, grad_scale, z_loss),
                                     run_sliced(logits, targets, N, V, {0, V}, grad_scale, z_loss),
                                     run_sliced(logits, targets, N, V, {0, 11, 30, V}, grad_scale, z_loss)};
      const char* names[3] = {"fused", "one slice", "three slices"};
      for (int k = 0; k < 3; ++k) {
        for (int n = 0; n < N; ++n) {
          const double lse = reference_lse(logits.data() + n * V, V);
          const double ce = reference_loss(logits.data() + n * V, V, targets[n]);
          const double z = double(z_loss) * lse * lse;
          EXPECT_NEAR(results[k].losses[n], ce, 1e-5 * (1 + std::fabs(ce))) << names[k] << ", row " << n;
          EXPECT_NEAR(results[k].z_losses[n], z, 1e-5 * std::fabs(z)) << names[k] << ", row " << n << ", c " << z_loss;
        }
      }
    }
  }
}

// The in-place gradient is d(grad_scale x (CE + z-loss))/dlogits: softmax x (1 + 2 c lse)
// - onehot. Checked for every logit, for the fused kernel and for the pieces over 1, 2
// and 3 slices reduced by hand (a slice holds a target or not: both kinds are checked).
TEST(ZLoss, GradientMatchesFiniteDifferences) {
  const int N = 4, V = 19;
  const float grad_scale = 0.5f, z_loss = 0.2f;  // 2 c lse ~ 1: the z term is as large as the softmax
  std::vector<float> logits = random_vector(N * V, 310, 2.0f);
  std::vector<int32_t> targets = make_targets(N, V);
  targets[0] = 0, targets[1] = V - 1;
  const std::vector<std::vector<int>> slicings = {{}, {0, V}, {0, 8, V}, {0, 5, 12, V}};  // {}: fused
  for (const std::vector<int>& bounds : slicings) {
    const std::string what = bounds.empty() ? "fused" : std::to_string(bounds.size() - 1) + " slice(s)";
    auto run = [&](float scale) {
      return bounds.empty() ? run_fused(logits, targets, N, V, scale, z_loss)
                            : run_sliced(logits, targets, N, V, bounds, scale, z_loss);
    };
    const LossResult analytic = run(grad_scale);
    auto loss = [&] {
      const LossResult r = run(0.0f);
      double s = 0;
      for (int n = 0; n < N; ++n) s += double(grad_scale) * (double(r.losses[n]) + r.z_losses[n]);
      return s;
    };
    // eps 1e-2, rtol 2e-2, atol 1e-3; every element is checked (N * V < 128).
    ndt::testing::expect_gradient_matches(loss, logits.data(), N * V, analytic.logits.data(),
                                          ("dlogits, " + what).c_str(), 1e-2f, 2e-2, 1e-3, N * V);
    // Each row's gradient sums to grad_scale x 2 c lse (softmax sums to 1): the z term
    // is there, with its factor 2.
    for (int n = 0; n < N; ++n) {
      double sum = 0;
      for (int j = 0; j < V; ++j) sum += analytic.logits[n * V + j];
      const double expected = double(grad_scale) * 2.0 * z_loss * reference_lse(logits.data() + n * V, V);
      EXPECT_NEAR(sum, expected, 1e-5 * (1 + std::fabs(expected))) << what << ", row " << n;
    }
  }
}

// Coefficient 0: the losses and gradients are bitwise those of the plain kernels (default
// arguments), the z terms exactly 0; and for finish, whose inputs the test controls,
// bitwise the plain formulas: loss = float(row_max + log(sums) - target logit), gradient
// = exp x float(grad_scale / sums), minus grad_scale at the target.
TEST(ZLoss, ZeroCoefficientIsBitwiseThePlainLoss) {
  for (const auto& [N, V] : {std::pair{6, 37}, std::pair{9, 5003}}) {  // serial and parallel paths
    const std::vector<float> logits = random_vector(int64_t{N} * V, 320, 3.0f);
    const std::vector<int32_t> targets = make_targets(N, V);
    for (float grad_scale : {0.0f, 0.25f, 1.0f}) {
      std::vector<float> plain = logits, plain_losses(N);
      ndt::cpu::softmax_cross_entropy(plain.data(), plain_losses.data(), targets.data(), N, V, grad_scale);
      const LossResult z = run_fused(logits, targets, N, V, grad_scale, 0.0f);
      EXPECT_EQ(std::memcmp(z.logits.data(), plain.data(), plain.size() * sizeof(float)), 0) << "fused, V " << V;
      EXPECT_EQ(std::memcmp(z.losses.data(), plain_losses.data(), N * sizeof(float)), 0) << "fused, V " << V;
      for (int n = 0; n < N; ++n) EXPECT_EQ(z.z_losses[n], 0.0f) << "row " << n;

      // finish on the kept exps of the whole vocabulary.
      std::vector<float> exps = logits, row_max(N), sums(N), target_logit(N);
      ndt::cpu::cross_entropy_row_max(exps.data(), row_max.data(), N, V);
      ndt::cpu::cross_entropy_exp_sums(exps.data(), row_max.data(), targets.data(), 0, sums.data(),
                                       target_logit.data(), N, V, /*keep_exp=*/true);
      std::vector<float> with_z = exps, losses(N), z_losses(N, -1.0f), without = exps, plain_piece_losses(N);
      ndt::cpu::cross_entropy_finish(with_z.data(), losses.data(), row_max.data(), sums.data(), target_logit.data(),
                                     targets.data(), 0, N, V, grad_scale, 0.0f, z_losses.data());
      ndt::cpu::cross_entropy_finish(without.data(), plain_piece_losses.data(), row_max.data(), sums.data(),
                                     target_logit.data(), targets.data(), 0, N, V, grad_scale);
      EXPECT_EQ(std::memcmp(with_z.data(), without.data(), without.size() * sizeof(float)), 0) << "finish, V " << V;
      for (int n = 0; n < N; ++n) {
        const float loss = static_cast<float>(double(row_max[n]) + std::log(double(sums[n])) - double(target_logit[n]));
        ASSERT_EQ(losses[n], loss) << "finish, row " << n;
        ASSERT_EQ(plain_piece_losses[n], loss) << "finish, row " << n;
        ASSERT_EQ(z_losses[n], 0.0f) << "finish, row " << n;
        if (grad_scale == 0.0f) continue;
        const float f = static_cast<float>(grad_scale / double(sums[n]));
        for (int j = 0; j < V; ++j) {
          float g = exps[int64_t{n} * V + j] * f;
          if (j == targets[n]) g -= grad_scale;
          ASSERT_EQ(with_z[int64_t{n} * V + j], g) << "finish, row " << n << ", logit " << j;
        }
      }
    }
  }
}

// With a coefficient, the pieces over 1 and 2 slices agree with the fused kernel (as
// without: the sums pass through float) and the z-loss stays finite for logits far beyond
// exp's range.
TEST(ZLoss, PiecesMatchFusedAndStayStable) {
  const int V = 5;
  const std::vector<float> logits = {
      1000.0f,  999.0f,  -1000.0f, 998.0f,  1000.0f,  1000.0f, 1000.0f, 1000.0f,  1000.0f, 1000.0f,
      -1000.0f, -999.0f, -1000.0f, -998.0f, -1000.0f, 500.0f,  -500.0f, 0.0f,     0.0f,    0.0f,
  };
  const std::vector<int32_t> targets = {1, 2, 3, 1};
  const int N = 4;
  for (float grad_scale : {0.0f, 1.0f}) {
    const LossResult fused = run_fused(logits, targets, N, V, grad_scale, 1e-4f);
    for (const std::vector<int>& bounds : {std::vector<int>{0, V}, std::vector<int>{0, 2, V}}) {
      const LossResult r = run_sliced(logits, targets, N, V, bounds, grad_scale, 1e-4f);
      for (int n = 0; n < N; ++n) {
        const double lse = reference_lse(logits.data() + n * V, V);
        ASSERT_TRUE(std::isfinite(fused.z_losses[n])) << "row " << n;
        EXPECT_NEAR(fused.z_losses[n], 1e-4 * lse * lse, 1e-5 * 1e-4 * lse * lse) << "row " << n;
        expect_rel(r.losses[n], fused.losses[n], 1.0f, "loss of row " + std::to_string(n));
        expect_rel(r.z_losses[n], fused.z_losses[n], 1.0f, "z-loss of row " + std::to_string(n));
      }
      if (grad_scale == 0.0f) continue;
      for (size_t i = 0; i < logits.size(); ++i) {
        ASSERT_TRUE(std::isfinite(r.logits[i])) << i;
        expect_rel(r.logits[i], fused.logits[i], 1.0f, "gradient index " + std::to_string(i));
      }
    }
  }
}

}  // namespace
