// The split backward zero-bubble pipeline schedules use (model/unit.h): every unit's
// backward_input then backward_weight adds bitwise the gradients of the fused backward,
// also with two micro-batches whose weight halves wait until both input halves ran, for
// GPT-2 and Llama (QK-norm, GQA); the weight halves' copies are freed; misuse is an
// error.
#include "../common/errors.h"
#include "core/memory.h"
#include "model/transformer.h"
#include "tiny_model.h"

#include <gtest/gtest.h>

#include <vector>

namespace ndt {
namespace {

using testing::tiny;
using testing::tokens;

constexpr int B = 2, T = 7;

std::vector<float> grads_of(const Transformer& model) {
  const float* g = model.store().grads().data<float>();
  return {g, g + model.store().numel()};
}

// Catches: a weight gradient computed from a workspace buffer the next unit already
// overwrote, one left out or applied twice, or the halves doing other arithmetic than
// the fused backward.
TEST(SplitBackward, InputThenWeightHalvesAreBitwiseTheFusedBackward) {
  for (Arch arch : {Arch::gpt2, Arch::llama}) {
    const ModelConfig c = tiny(arch, /*qk_norm=*/arch == Arch::llama);
    const auto in = tokens(2 * B * T, c.vocab_size, 31), target = tokens(2 * B * T, c.vocab_size, 32);
    const int32_t *in_b = in.data() + B * T, *target_b = target.data() + B * T;

    Transformer fused(c, 3, /*loss_chunk_rows=*/5);
    fused.store().zero_grads();
    fused.forward_backward(in.data(), target.data(), B, T, 0.5f);
    fused.forward_backward(in_b, target_b, B, T, 0.5f);

    MemoryLedger& ledger = MemoryLedger::instance();
    Transformer split(c, 3, /*loss_chunk_rows=*/5);
    split.store().zero_grads();
    MicroBatchContext a, b;
    split.prepare(a, in.data(), target.data(), B, T, 0.5f, false);
    split.prepare(b, in_b, target_b, B, T, 0.5f, false);
    const int units = split.num_units();
    for (int u = 0; u < units; ++u) split.unit(u).forward(a);
    for (int u = 0; u < units; ++u) split.unit(u).forward(b);
    const size_t before = ledger.current(MemTag::activations);
    for (int u = units - 1; u >= 0; --u) split.unit(u).backward_input(a, nullptr);
    for (int u = units - 1; u >= 0; --u) split.unit(u).backward_input(b, nullptr);
    EXPECT_GT(ledger.current(MemTag::activations), before) << "the weight halves' output gradients are kept";
    for (int u = units - 1; u >= 0; --u) split.unit(u).backward_weight(a, nullptr);
    for (int u = units - 1; u >= 0; --u) split.unit(u).backward_weight(b, nullptr);
    EXPECT_EQ(ledger.current(MemTag::activations), before) << "and freed by them";

    EXPECT_EQ(grads_of(split), grads_of(fused)) << arch_name(arch);
  }
}

TEST(SplitBackward, MisuseIsAnError) {
  const ModelConfig c = tiny(Arch::gpt2, false);
  const auto in = tokens(B * T, c.vocab_size, 33);
  Transformer model(c, 3);
  model.store().zero_grads();
  MicroBatchContext ctx;
  model.prepare(ctx, in.data(), in.data(), B, T, 1.0f, false);
  for (int u = 0; u < model.num_units(); ++u) model.unit(u).forward(ctx);
  Unit& block = model.unit(model.num_units() - 2);  // the last block
  testing::expect_error([&] { block.backward_weight(ctx, nullptr); }, {"block 1", "backward_weight without backward_input"});
  model.unit(model.num_units() - 1).backward_input(ctx, nullptr);
  block.backward_input(ctx, nullptr);
  testing::expect_error([&] { block.backward_input(ctx, nullptr); }, {"block 1", "backward_input twice"});

  Transformer checkpointed(c, 3);
  checkpointed.set_activation_checkpointing({CheckpointMode::full, 1});
  checkpointed.store().zero_grads();
  MicroBatchContext ctx2;
  checkpointed.prepare(ctx2, in.data(), in.data(), B, T, 1.0f, false);
  for (int u = 0; u < checkpointed.num_units(); ++u) checkpointed.unit(u).forward(ctx2);
  checkpointed.unit(checkpointed.num_units() - 1).backward_input(ctx2, nullptr);
  testing::expect_error([&] { checkpointed.unit(checkpointed.num_units() - 2).backward_input(ctx2, nullptr); },
                        {"block 1", "activation checkpointing (full)"});
}

}  // namespace
}  // namespace ndt
