// Fused softmax cross-entropy: losses against a double reference (including logits
// far beyond exp's float range), the in-place gradient against finite differences,
// grad_scale = 0 leaving the logits alone, and target validation. The three-piece form
// (row max, exp sums, finish) against the fused kernel, over the whole vocabulary and
// over two slices combined by hand as a vocab-parallel all-reduce would.
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/threads.h"

#include "../common/gradcheck.h"
#include "core/error.h"

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
  for (int32_t bad : {8, -1, 12345}) {
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

}  // namespace
