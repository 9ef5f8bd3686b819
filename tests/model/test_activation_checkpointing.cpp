// Activation checkpointing on one rank: every policy gives bitwise the losses and
// gradients of no recompute (GPT-2, and Llama with QK-norm and GQA), also with two
// micro-batches in flight at once (the shared recompute area must not leak between
// them); the ledger equals the memory model under every policy, and the model equals
// its closed form: full recompute of every block keeps each block's input and one
// block's activations, selective drops exactly the norm outputs, attention
// probabilities, log-sum-exp and MLP activation of all but one block; the recompute
// FLOPs; bad settings. The same on fsdp x tp: tests/mpi/test_tensor_parallel.cpp.
#include "core/memory.h"
#include "tiny_model.h"
#include "model/transformer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace ndt {
namespace {

// Three blocks, so that full recompute of every 2nd block mixes recomputed and kept
// blocks; Llama with QK-norm.
ModelConfig tiny(Arch arch) {
  ModelConfig c = testing::tiny(arch, /*qk_norm=*/arch == Arch::llama);
  c.n_layer = 3;
  return c;
}

using testing::tokens;

std::vector<ActivationCheckpointing> policies() {
  return {{CheckpointMode::full, 1}, {CheckpointMode::full, 2}, {CheckpointMode::selective, 1}};
}

std::string describe(const ActivationCheckpointing& p) {
  return std::string(checkpoint_mode_name(p.mode)) + " every " + std::to_string(p.every);
}

struct Result {
  std::vector<double> losses;
  std::vector<float> grads;
};

// Two micro-batches, the second prepared and run forward before the first's backward
// (as a pipeline schedule would), then the gradients.
Result interleaved_run(const ModelConfig& c, const ActivationCheckpointing& policy) {
  const int B = 2, T = 7;
  const auto in = tokens(2 * B * T, c.vocab_size, 1), target = tokens(2 * B * T, c.vocab_size, 2);
  Transformer model(c, 11, /*loss_chunk_rows=*/5);
  model.set_activation_checkpointing(policy);
  model.store().zero_grads();
  MicroBatchContext a, b;
  model.prepare(a, in.data(), target.data(), B, T, 0.25f, false);
  model.prepare(b, in.data() + B * T, target.data() + B * T, B, T, 0.25f, false);
  testing::run_interleaved(model, a, b);
  Result r;
  r.losses = {a.loss_sum, b.loss_sum};
  // One more micro-batch through the convenience path, accumulating.
  r.losses.push_back(model.forward_backward(in.data(), target.data() + 1, B, T, 0.5f));
  const float* g = model.store().grads().data<float>();
  r.grads.assign(g, g + model.store().numel());
  return r;
}

// Catches: a recompute that differs from the forward in any bit (another kernel, a
// stale or shared buffer, a missing piece), or one micro-batch's recompute clobbering
// another's saved activations.
TEST(ActivationCheckpointing, EveryPolicyGivesBitwiseTheSameLossesAndGradients) {
  for (Arch arch : {Arch::gpt2, Arch::llama}) {
    const ModelConfig c = tiny(arch);
    const Result reference = interleaved_run(c, {});
    int nonzero = 0;
    for (float g : reference.grads) nonzero += g != 0.0f;
    ASSERT_GT(nonzero, static_cast<int>(reference.grads.size()) / 2);
    for (const ActivationCheckpointing& policy : policies()) {
      const Result got = interleaved_run(c, policy);
      EXPECT_EQ(got.losses, reference.losses) << arch_name(arch) << ", " << describe(policy);
      ASSERT_EQ(got.grads.size(), reference.grads.size());
      for (size_t i = 0; i < got.grads.size(); ++i) {
        ASSERT_EQ(got.grads[i], reference.grads[i]) << arch_name(arch) << ", " << describe(policy) << ", element " << i;
      }
    }
  }
}

// Catches: memory held beyond the model (or a model that does not describe what is
// held) under any policy, and a policy saving more than its definition.
TEST(ActivationCheckpointing, LedgerEqualsTheMemoryModelAndItsClosedForm) {
  MemoryLedger& ledger = MemoryLedger::instance();
  const int B = 3, T = 8, chunk = 4;
  for (Arch arch : {Arch::gpt2, Arch::llama}) {
    const ModelConfig c = tiny(arch);
    const auto in = tokens(B * T, c.vocab_size, 3);
    const int64_t none = Transformer::predict_activation_bytes(c, B, T, chunk);
    for (const ActivationCheckpointing& policy : policies()) {
      const size_t before = ledger.current(MemTag::activations);
      {
        Transformer model(c, 1, chunk);
        model.set_activation_checkpointing(policy);
        model.store().zero_grads();
        model.forward_backward(in.data(), in.data(), B, T, 1.0f);
        EXPECT_EQ(ledger.current(MemTag::activations) - before,
                  static_cast<size_t>(Transformer::predict_activation_bytes(c, B, T, chunk, {}, policy)))
            << arch_name(arch) << ", " << describe(policy);
      }
      EXPECT_EQ(ledger.current(MemTag::activations), before);
    }
    // The closed forms, in floats of one block: all of it, and what selective drops.
    const int64_t N = int64_t{B} * T, block = block_activation_floats(c, {}, B, T);
    const int64_t dropped = 2 * N * c.d_model + int64_t{B} * c.n_head * T * T + int64_t{B} * c.n_head * T +
                            N * c.d_ff;  // ln1, ln2, probabilities, log-sum-exp, activation
    const int64_t L = c.n_layer;
    // Full recompute of every block: the inputs (kept anyway) and one block's activations.
    EXPECT_EQ(Transformer::predict_activation_bytes(c, B, T, chunk, {}, {CheckpointMode::full, 1}),
              none - (L - 1) * block * 4);
    // Every 2nd block (0 and 2 of 3): two blocks recomputed, one kept, plus the area.
    EXPECT_EQ(Transformer::predict_activation_bytes(c, B, T, chunk, {}, {CheckpointMode::full, 2}),
              none - (2 - 1) * block * 4);
    EXPECT_EQ(Transformer::predict_activation_bytes(c, B, T, chunk, {}, {CheckpointMode::selective, 1}),
              none - (L - 1) * dropped * 4);
  }
}

// Catches: HFU counting the wrong recompute (or MFU counting it): full reruns each
// block's forward matmuls and attention, selective the attention core only.
TEST(ActivationCheckpointing, RecomputeFlopsAreTheRerunForward) {
  const ModelConfig c = tiny(Arch::llama);
  const int T = 8;
  Transformer model(c, 1);
  EXPECT_EQ(model.recompute_flops_per_token(T), 0.0);
  int64_t block_params = 0;
  for (const Parameter& p : model.store().params()) {
    if (p.name().starts_with("blocks.0.")) block_params += p.numel();
  }
  const double attention = 4.0 * c.d_model * T;
  model.set_activation_checkpointing({CheckpointMode::full, 1});
  EXPECT_DOUBLE_EQ(model.recompute_flops_per_token(T), c.n_layer * (2.0 * block_params + attention));
  model.set_activation_checkpointing({CheckpointMode::full, 2});  // blocks 0 and 2
  EXPECT_DOUBLE_EQ(model.recompute_flops_per_token(T), 2 * (2.0 * block_params + attention));
  model.set_activation_checkpointing({CheckpointMode::selective, 1});
  EXPECT_DOUBLE_EQ(model.recompute_flops_per_token(T), c.n_layer * attention);
}

TEST(ActivationCheckpointing, BadSettingsNameTheKey) {
  try {
    checkpoint_mode_from_name("some");
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("train.activation_checkpointing = \"some\" is not a policy: none, full or "
                                         "selective"),
              std::string::npos)
        << e.what();
  }
  Transformer model(tiny(Arch::gpt2), 1);
  try {
    model.set_activation_checkpointing({CheckpointMode::full, 0});
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("train.activation_checkpointing_every = 0 must be at least 1"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace ndt
