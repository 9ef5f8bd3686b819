// The output z-loss (Transformer::set_z_loss): finite-difference gradients of the whole
// model for (cross-entropy + z-loss) on the GPT-2 and Llama shapes, ctx.loss_sum staying
// the plain cross-entropy while ctx.z_loss_sum holds the z terms (the same in the
// forward-only and the backward path), coefficient 0 bitwise as without it, and the
// coefficient's validation.
#include "../common/gradcheck.h"
#include "tiny_model.h"
#include "core/error.h"
#include "model/transformer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace ndt {
namespace {

using testing::tiny;
using testing::tokens;

constexpr float kZLoss = 0.1f;  // large enough that the z term moves every gradient visibly

// Forward only: (loss_sum, z_loss_sum).
std::pair<double, double> forward_sums(Transformer& model, const std::vector<int32_t>& in,
                                       const std::vector<int32_t>& target, int B, int T) {
  MicroBatchContext ctx;
  model.prepare(ctx, in.data(), target.data(), B, T, 0.0f, /*forward_only=*/true);
  run_forward(model, ctx, nullptr);
  return {ctx.loss_sum, ctx.z_loss_sum};
}

class ZLossGradient : public ::testing::TestWithParam<Arch> {};

TEST_P(ZLossGradient, EveryParameterMatchesFiniteDifferences) {
  const ModelConfig c = tiny(GetParam(), GetParam() == Arch::llama);
  const int B = 2, T = 7;
  const float scale = 1.0f / (B * T);
  Transformer model(c, 42, /*loss_chunk_rows=*/5);  // chunks cross rows of both sequences
  model.set_z_loss(kZLoss);
  EXPECT_EQ(model.z_loss(), kZLoss);
  const auto in = tokens(B * T, c.vocab_size, 1), target = tokens(B * T, c.vocab_size, 2);
  model.store().zero_grads();
  MicroBatchContext ctx;
  model.prepare(ctx, in.data(), target.data(), B, T, scale, /*forward_only=*/false);
  const double mean = run_forward_backward(model, ctx, nullptr);

  // loss_sum is the plain cross-entropy (the returned mean too), the same bits as a model
  // without z-loss; z_loss_sum the z terms, the same in forward-only and in backward.
  Transformer plain(c, 42, /*loss_chunk_rows=*/5);
  const auto [plain_loss, plain_z] = forward_sums(plain, in, target, B, T);
  EXPECT_EQ(plain_z, 0.0);
  const auto [loss_sum, z_sum] = forward_sums(model, in, target, B, T);
  EXPECT_EQ(ctx.loss_sum, loss_sum);
  EXPECT_EQ(loss_sum, plain_loss);
  EXPECT_EQ(mean, loss_sum / (B * T));
  EXPECT_EQ(ctx.z_loss_sum, z_sum);
  // Every token's lse is at least log(vocab): z > c log(V)^2 per token.
  EXPECT_GT(z_sum, kZLoss * std::log(double(c.vocab_size)) * std::log(double(c.vocab_size)) * B * T);

  auto eval = [&] {
    const auto [l, z] = forward_sums(model, in, target, B, T);
    return double(scale) * (l + z);
  };
  for (Parameter& p : model.store().params()) {
    // As ModelGradient (test_transformer.cpp): fp32 forward, loss noise ~1e-7.
    testing::expect_gradient_matches(eval, p.data(), p.numel(), p.grad_data(), p.name().c_str(),
                                     /*eps=*/1e-3f, /*rtol=*/2e-2, /*atol=*/2e-4, /*max_checks=*/24);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, ZLossGradient, ::testing::Values(Arch::gpt2, Arch::llama),
                         [](const auto& info) { return std::string(arch_name(info.param)); });

// Coefficient 0 (set explicitly, or after a nonzero one): gradients and loss bitwise those
// of a model that never heard of the z-loss; a nonzero one changes every gradient tensor.
TEST(ZLoss, ZeroCoefficientIsBitwiseThePlainModel) {
  const ModelConfig c = tiny(Arch::llama, true);
  const int B = 2, T = 7;
  const auto in = tokens(B * T, c.vocab_size, 3), target = tokens(B * T, c.vocab_size, 4);
  auto grads = [&](float coefficient, bool set) {
    Transformer model(c, 9, /*loss_chunk_rows=*/4);
    if (set) {
      model.set_z_loss(0.5f);
      model.set_z_loss(coefficient);
    }
    model.store().zero_grads();
    MicroBatchContext ctx;
    model.prepare(ctx, in.data(), target.data(), B, T, 1.0f / (B * T), false);
    run_forward_backward(model, ctx, nullptr);
    if (!set || coefficient == 0.0f) {
      EXPECT_EQ(ctx.z_loss_sum, 0.0);
    }
    const float* g = model.store().grads().data<float>();
    return std::vector<float>(g, g + model.store().numel());
  };
  const std::vector<float> plain = grads(0.0f, false), zero = grads(0.0f, true), z = grads(kZLoss, true);
  EXPECT_EQ(std::memcmp(plain.data(), zero.data(), plain.size() * sizeof(float)), 0);
  double diff = 0, norm = 0;
  for (size_t i = 0; i < plain.size(); ++i) {
    diff += double(z[i] - plain[i]) * (z[i] - plain[i]);
    norm += double(plain[i]) * plain[i];
  }
  EXPECT_GT(std::sqrt(diff / norm), 1e-2);
}

TEST(ZLoss, RejectsNegativeOrNonFiniteCoefficients) {
  Transformer model(tiny(Arch::gpt2, false), 1);
  for (float bad : {-1.0f, -1e-9f, std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    try {
      model.set_z_loss(bad);
      ADD_FAILURE() << "no throw for " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("optim.z_loss = "), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(model.z_loss(), 0.0f);  // unchanged by the refused values
  model.set_z_loss(1e-4f);
  EXPECT_EQ(model.z_loss(), 1e-4f);
}

}  // namespace
}  // namespace ndt
