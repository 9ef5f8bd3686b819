// Learning-rate schedule, global-norm clipping and AdamW's choice of which
// parameters decay.
#include "model/transformer.h"
#include "optim/adamw.h"
#include "optim/clip.h"
#include "optim/schedule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace ndt {
namespace {

TEST(LrSchedule, WarmupThenCosineToFloor) {
  LrSchedule s{1.0f, 0.1f, 10, 110};
  EXPECT_FLOAT_EQ(s.at(0), 0.1f);   // (0 + 1) / 10
  EXPECT_FLOAT_EQ(s.at(9), 1.0f);   // end of warmup
  EXPECT_FLOAT_EQ(s.at(10), 1.0f);  // cosine starts at the peak
  EXPECT_NEAR(s.at(60), 0.55f, 1e-6f);  // halfway: floor + (peak - floor) / 2
  EXPECT_NEAR(s.at(109), 0.1f, 1e-3f);
  EXPECT_FLOAT_EQ(s.at(110), 0.1f);
  EXPECT_FLOAT_EQ(s.at(500), 0.1f);
  for (int64_t t = 10; t < 110; ++t) EXPECT_LE(s.at(t + 1), s.at(t));
}

TEST(LrSchedule, RejectsBadSettings) {
  LrSchedule s{-1.0f, 0.1f, 0, 10};
  EXPECT_THROW(s.validate(), Error);
  s = {1.0f, 1.5f, 0, 10};
  try {
    s.validate();
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("optim.min_lr_ratio = 1.5"), std::string::npos) << e.what();
  }
}

TEST(Clip, NormAndFactor) {
  std::vector<float> g = {3.0f, 4.0f};
  EXPECT_DOUBLE_EQ(std::sqrt(sum_of_squares(g.data(), 2)), 5.0);
  EXPECT_FLOAT_EQ(clip_factor(5.0, 0.0f), 1.0f);   // disabled
  EXPECT_FLOAT_EQ(clip_factor(5.0, 10.0f), 1.0f);  // already small
  EXPECT_NEAR(clip_factor(5.0, 1.0f), 0.2f, 1e-6f);
  // Many chunks: the chunked sum equals a plain double sum.
  std::vector<float> big(300000);
  double expect = 0;
  for (size_t i = 0; i < big.size(); ++i) {
    big[i] = static_cast<float>(i % 7) - 3.0f;
    expect += static_cast<double>(big[i]) * big[i];
  }
  EXPECT_DOUBLE_EQ(sum_of_squares(big.data(), static_cast<int64_t>(big.size())), expect);
}

// The lanes fix every addition by position: a sequence given in pieces of any sizes
// (offload's streamed chunks) sums to the bits of one call, and the sum is within 1e-13
// of a long-double one (the order is fixed by position and each square is exact, so any
// correct build gives these bits). Values spread over many magnitudes, so any change of
// order shows in the last bits.
TEST(Clip, SquaresInPiecesHaveTheBitsOfOneCall) {
  const int64_t n = 3 * kSquaresChunk + 12345;
  std::vector<float> g(static_cast<size_t>(n));
  long double exact = 0;
  for (int64_t i = 0; i < n; ++i) {
    g[static_cast<size_t>(i)] = std::ldexp(static_cast<float>((i * 7919) % 1000) - 499.5f, static_cast<int>(i % 23) - 11);
    exact += static_cast<long double>(g[static_cast<size_t>(i)]) * g[static_cast<size_t>(i)];
  }
  const double whole = sum_of_squares(g.data(), n);
  EXPECT_NEAR(whole, static_cast<double>(exact), 1e-13 * static_cast<double>(exact));
  for (int64_t piece : {int64_t{1}, int64_t{31}, int64_t{33}, int64_t{1000}, kSquaresChunk - 1, kSquaresChunk + 5}) {
    SquaresFold fold;
    for (int64_t i = 0; i < n; i += piece) fold.add(g.data() + i, std::min(piece, n - i));
    EXPECT_EQ(fold.total(), whole) << "pieces of " << piece;
  }
}

TEST(AdamW, DecaysOnlyMatrices) {
  ModelConfig c = ModelConfig::preset("gpt2-tiny");
  c.n_layer = 1;
  Transformer model(c, 5);
  ParameterStore& store = model.store();
  std::vector<float> before(store.values().data<float>(), store.values().data<float>() + store.numel());
  store.zero_grads();  // zero gradient: only weight decay moves parameters
  AdamW opt(store, AdamWConfig{0.9f, 0.95f, 1e-8f, 0.5f});
  opt.step(0.1f, 1.0f);
  for (const Parameter& p : store.params()) {
    const float* now = p.data();
    const float* was = before.data() + p.arena_offset;
    for (int64_t i = 0; i < p.numel(); ++i) {
      const float expected = p.spec.weight_decay ? was[i] * (1.0f - 0.1f * 0.5f) : was[i];
      ASSERT_NEAR(now[i], expected, 1e-7f) << p.name();
    }
  }
  EXPECT_FALSE(store.get("wte.weight").spec.weight_decay);
  EXPECT_FALSE(store.get("blocks.0.ln1.bias").spec.weight_decay);
  EXPECT_TRUE(store.get("blocks.0.attn.wq.weight").spec.weight_decay);
}

}  // namespace
}  // namespace ndt
