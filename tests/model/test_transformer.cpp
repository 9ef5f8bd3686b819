// Whole-model checks: finite-difference gradients for every parameter tensor of tiny
// GPT-2 and Llama shapes (with and without QK-norm), the memory ledger against the
// model's own prediction, and the initialisation's independence from layout.
#include "../common/gradcheck.h"
#include "tiny_model.h"
#include "core/memory.h"
#include "core/rng.h"
#include "model/transformer.h"
#include "parallel/memory_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

namespace ndt {
namespace {

using testing::tiny;
using testing::tokens;

class ModelGradient : public ::testing::TestWithParam<std::pair<Arch, bool>> {};

TEST_P(ModelGradient, EveryParameterMatchesFiniteDifferences) {
  const auto [arch, qk_norm] = GetParam();
  const ModelConfig c = tiny(arch, qk_norm);
  const int B = 2, T = 7;
  Transformer model(c, 42, /*loss_chunk_rows=*/5);  // chunking crosses rows of both sequences
  const auto in = tokens(B * T, c.vocab_size, 1), target = tokens(B * T, c.vocab_size, 2);
  model.store().zero_grads();
  const double loss = model.forward_backward(in.data(), target.data(), B, T, 1.0f / (B * T));
  EXPECT_NEAR(loss, model.evaluate(in.data(), target.data(), B, T), 1e-6);
  EXPECT_GT(loss, 1.0);

  auto eval = [&] { return model.evaluate(in.data(), target.data(), B, T); };
  for (Parameter& p : model.store().params()) {
    // fp32 forward: loss noise ~1e-7 over a 2e-3 step gives ~5e-5 noise in the quotient.
    testing::expect_gradient_matches(eval, p.data(), p.numel(), p.grad_data(), p.name().c_str(),
                                     /*eps=*/1e-3f, /*rtol=*/2e-2, /*atol=*/2e-4, /*max_checks=*/24);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, ModelGradient,
                         ::testing::Values(std::make_pair(Arch::gpt2, false),
                                           std::make_pair(Arch::gpt2, true),
                                           std::make_pair(Arch::llama, false),
                                           std::make_pair(Arch::llama, true)),
                         [](const auto& info) {
                           return std::string(arch_name(info.param.first)) +
                                  (info.param.second ? "_qknorm" : "");
                         });

TEST(Model, GradientsAccumulateAcrossMicroBatches) {
  const ModelConfig c = tiny(Arch::gpt2, false);
  const int T = 6;
  const auto in = tokens(4 * T, c.vocab_size, 5), target = tokens(4 * T, c.vocab_size, 6);
  Transformer whole(c, 7), parts(c, 7);
  whole.store().zero_grads();
  whole.forward_backward(in.data(), target.data(), 4, T, 1.0f / (4 * T));
  parts.store().zero_grads();
  parts.forward_backward(in.data(), target.data(), 2, T, 1.0f / (4 * T));
  parts.forward_backward(in.data() + 2 * T, target.data() + 2 * T, 2, T, 1.0f / (4 * T));
  const float* a = whole.store().grads().data<float>();
  const float* b = parts.store().grads().data<float>();
  for (int64_t i = 0; i < whole.store().numel(); ++i) {
    ASSERT_NEAR(a[i], b[i], 1e-6f + 1e-4f * std::fabs(a[i])) << "element " << i;
  }
}

// What pipeline schedules need: a micro-batch's context holds everything between its
// forward and its backward, so forward A, forward B, backward B, backward A through the
// units gives the gradients of running B and then A one after the other, bit for bit
// (gradients accumulate in the order of the backwards), and those of A then B to float
// rounding.
TEST(Units, InterleavedMicroBatchContextsGiveTheSameGradients) {
  for (const auto& [arch, qk_norm] : {std::pair{Arch::gpt2, false}, std::pair{Arch::llama, true}}) {
    const ModelConfig c = tiny(arch, qk_norm);
    const int B = 2, T = 7;
    const float scale = 1.0f / (2 * B * T);
    const auto in = tokens(2 * B * T, c.vocab_size, 21), target = tokens(2 * B * T, c.vocab_size, 22);
    const int32_t *in_a = in.data(), *in_b = in.data() + B * T;
    const int32_t *target_a = target.data(), *target_b = target.data() + B * T;

    auto one_after_the_other = [&](bool b_first, double* loss_a, double* loss_b) {
      auto model = std::make_unique<Transformer>(c, 5, /*loss_chunk_rows=*/6);
      model->store().zero_grads();
      MicroBatchContext ctx;
      for (bool b : {b_first, !b_first}) {
        model->prepare(ctx, b ? in_b : in_a, b ? target_b : target_a, B, T, scale, false);
        (b ? *loss_b : *loss_a) = run_forward_backward(*model, ctx, nullptr);
      }
      return model;
    };
    double loss_a = 0, loss_b = 0, unused_a = 0, unused_b = 0;
    auto b_then_a = one_after_the_other(true, &loss_a, &loss_b);
    auto a_then_b = one_after_the_other(false, &unused_a, &unused_b);

    Transformer interleaved(c, 5, /*loss_chunk_rows=*/6);
    interleaved.store().zero_grads();
    MicroBatchContext a, b;
    interleaved.prepare(a, in_a, target_a, B, T, scale, false);
    interleaved.prepare(b, in_b, target_b, B, T, scale, false);
    const int units = interleaved.num_units();
    ASSERT_EQ(units, c.n_layer + 2);
    for (int u = 0; u < units; ++u) interleaved.unit(u).forward(a);
    for (int u = 0; u < units; ++u) interleaved.unit(u).forward(b);
    for (int u = units - 1; u >= 0; --u) interleaved.unit(u).backward(b, nullptr);
    for (int u = units - 1; u >= 0; --u) interleaved.unit(u).backward(a, nullptr);

    EXPECT_EQ(a.loss_sum / (B * T), loss_a) << arch_name(arch);
    EXPECT_EQ(b.loss_sum / (B * T), loss_b) << arch_name(arch);
    const float* expected = b_then_a->store().grads().data<float>();
    const float* rounded = a_then_b->store().grads().data<float>();
    const float* got = interleaved.store().grads().data<float>();
    int nonzero = 0;
    for (int64_t i = 0; i < interleaved.store().numel(); ++i) {
      ASSERT_EQ(got[i], expected[i]) << arch_name(arch) << ", gradient element " << i;
      ASSERT_NEAR(got[i], rounded[i], 1e-6f + 1e-5f * std::fabs(rounded[i])) << arch_name(arch) << ", element " << i;
      nonzero += got[i] != 0.0f;
    }
    EXPECT_GT(nonzero, interleaved.store().numel() / 2);
  }
}

// The contract data parallelism relies on: when a unit's backward is done, the gradients
// from its first arena offset on are final and no longer change before backward ends.
class RecordingObserver : public ModelHooks {
 public:
  explicit RecordingObserver(const ParameterStore& store) : store_(store) {}
  void after_backward(int unit) override {
    const int64_t offset = store_.unit_arena_begin(unit);
    const float* g = store_.grads().data<float>();
    offsets.push_back(offset);
    snapshots.emplace_back(g + offset, g + store_.numel());
  }
  void poll() override { ++polls; }
  const ParameterStore& store_;
  std::vector<int64_t> offsets;
  std::vector<std::vector<float>> snapshots;
  int polls = 0;
};

TEST(Model, BackwardReportsFinalGradientsFromTheEndOfTheArena) {
  for (bool tied : {true, false}) {
    ModelConfig c = tiny(Arch::gpt2, false);
    c.tied_embeddings = tied;
    const int B = 2, T = 6;
    Transformer model(c, 3);
    const auto in = tokens(B * T, c.vocab_size, 9);
    RecordingObserver observer(model.store());
    model.store().zero_grads();
    model.set_hooks(&observer);
    model.forward_backward(in.data(), in.data(), B, T, 1.0f);
    ASSERT_EQ(observer.offsets.size(), static_cast<size_t>(c.n_layer + 2));
    EXPECT_EQ(observer.offsets.back(), 0);
    EXPECT_GT(observer.polls, 0);
    const float* final_grads = model.store().grads().data<float>();
    for (size_t i = 0; i < observer.offsets.size(); ++i) {
      if (i > 0) {
        EXPECT_LT(observer.offsets[i], observer.offsets[i - 1]);
      }
      const int64_t offset = observer.offsets[i];
      for (int64_t j = offset; j < model.store().numel(); ++j) {
        ASSERT_EQ(observer.snapshots[i][j - offset], final_grads[j])
            << "gradient element " << j << " changed after it was reported final at offset " << offset;
      }
    }
  }
}

TEST(Model, ParameterCountsOfPresets) {
  // GPT-2 small as published (tied embeddings, 1024 positions): 124,439,808.
  EXPECT_EQ(count_parameters(ModelConfig::preset("gpt2-124m")), 124439808);
  // GPT-2 medium: 354,823,168.
  EXPECT_EQ(count_parameters(ModelConfig::preset("gpt2-350m")), 354823168);
}

TEST(Model, LedgerMatchesPrediction) {
  MemoryLedger& ledger = MemoryLedger::instance();
  const size_t params0 = ledger.current(MemTag::params), grads0 = ledger.current(MemTag::grads),
               acts0 = ledger.current(MemTag::activations);
  const ModelConfig c = tiny(Arch::llama, true);
  const int B = 3, T = 8, chunk = 4;
  {
    Transformer model(c, 1, chunk);
    const auto in = tokens(B * T, c.vocab_size, 8);
    model.store().zero_grads();
    model.forward_backward(in.data(), in.data(), B, T, 1.0f);
    const ModelStateBytes states = predict_model_states(model_parameter_specs(c), 1, 0);
    EXPECT_EQ(ledger.current(MemTag::params) - params0, static_cast<size_t>(states.params));
    EXPECT_EQ(ledger.current(MemTag::grads) - grads0, static_cast<size_t>(states.grads));
    EXPECT_EQ(ledger.current(MemTag::activations) - acts0,
              static_cast<size_t>(Transformer::predict_activation_bytes(c, B, T, chunk)));
  }
  EXPECT_EQ(ledger.current(MemTag::activations), acts0);  // freed with the model
}

TEST(Model, InitialisationDependsOnNameAndIndexOnly) {
  // Element i of a parameter is the same whatever else the model holds: a shard can
  // initialise its slice alone. Here: the same tensor in a 2-layer and a 3-layer model.
  ModelConfig small = tiny(Arch::gpt2, false), big = small;
  big.n_layer = 3;
  big.init_std = small.init_std;
  Transformer a(small, 9), b(big, 9);
  const Parameter& pa = a.store().get("blocks.1.mlp.fc.weight");
  const Parameter& pb = b.store().get("blocks.1.mlp.fc.weight");
  ASSERT_EQ(pa.numel(), pb.numel());
  // Same name, index and std: same values (residual stds differ with n_layer, fc does not).
  for (int64_t i = 0; i < pa.numel(); ++i) ASSERT_EQ(pa.data()[i], pb.data()[i]);

  // A block of a tensor initialised on its own equals the same block of the whole.
  const ParameterSpec& spec = pa.spec;
  const Shape block = {spec.logical_shape[0] / 2, spec.logical_shape[1] / 2};
  const Shape offset = {spec.logical_shape[0] / 2, spec.logical_shape[1] / 4};
  std::vector<float> part(static_cast<size_t>(shape_numel(block)));
  init_parameter_block(part.data(), spec, block, offset, 9);
  for (int64_t r = 0; r < block[0]; ++r) {
    for (int64_t col = 0; col < block[1]; ++col) {
      ASSERT_EQ(part[r * block[1] + col],
                pa.data()[(r + offset[0]) * spec.logical_shape[1] + col + offset[1]]);
    }
  }
}

TEST(Model, ResidualProjectionsUseScaledInit) {
  const ModelConfig c = ModelConfig::preset("gpt2-tiny");
  Transformer model(c, 3);
  auto std_of = [](const Parameter& p) {
    double s = 0;
    for (int64_t i = 0; i < p.numel(); ++i) s += static_cast<double>(p.data()[i]) * p.data()[i];
    return std::sqrt(s / p.numel());
  };
  EXPECT_NEAR(std_of(model.store().get("blocks.0.mlp.fc.weight")), 0.02, 0.001);
  EXPECT_NEAR(std_of(model.store().get("blocks.0.mlp.proj.weight")), 0.02 / std::sqrt(2.0 * c.n_layer), 0.0005);
  EXPECT_NEAR(std_of(model.store().get("blocks.0.attn.wo.weight")), 0.02 / std::sqrt(2.0 * c.n_layer), 0.0005);
}

TEST(Model, RejectsBadShapes) {
  ModelConfig c = tiny(Arch::llama, false);
  c.n_kv_head = 3;
  try {
    c.validate();
    FAIL() << "accepted n_kv_head = 3 with n_head = 4";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.n_kv_head = 3"), std::string::npos) << e.what();
  }
  Transformer model(tiny(Arch::gpt2, false), 1);
  std::vector<int32_t> bad = {1, 2, 99, 3};
  EXPECT_THROW(model.evaluate(bad.data(), bad.data(), 1, 4), Error);
  std::vector<int32_t> longer(20, 1);
  EXPECT_THROW(model.evaluate(longer.data(), longer.data(), 1, 20), Error);  // T > max_seq_len
}

}  // namespace
}  // namespace ndt
