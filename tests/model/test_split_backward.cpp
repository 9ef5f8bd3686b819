// The split backward zero-bubble pipeline schedules use (model/unit.h): every unit's
// backward_input then backward_weight adds bitwise the gradients of the fused backward,
// with two micro-batches whose weight halves wait until both input halves ran, for
// GPT-2 and Llama (QK-norm, GQA), in fp32, bf16, fp16 and fp8, under every activation
// checkpointing policy; the weight halves keep exactly the bytes the memory model says
// and free them; misuse is an error.
#include "../common/errors.h"
#include "core/memory.h"
#include "model/transformer.h"
#include "tiny_model.h"

#include <gtest/gtest.h>

#include <string>
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

struct Setting {
  const char* name;
  DType compute;
  bool fp8;
};
constexpr Setting kSettings[] = {
    {"fp32", DType::f32, false}, {"bf16", DType::bf16, false}, {"fp16", DType::f16, false}, {"fp8", DType::bf16, true}};
const ActivationCheckpointing kPolicies[] = {{}, {CheckpointMode::selective, 1}, {CheckpointMode::full, 1},
                                             {CheckpointMode::full, 2}};

std::string describe(Arch arch, const Setting& s, const ActivationCheckpointing& p) {
  return std::string(arch_name(arch)) + " " + s.name + " recompute " + std::string(checkpoint_mode_name(p.mode)) +
         (p.every > 1 ? " every " + std::to_string(p.every) : "");
}

// The gradients of two micro-batches, a then b: fused (each one's forward and backward
// in turn) or split as a zero-bubble stage runs them (both forwards, both input halves,
// then both weight halves). kept: the activation bytes the input halves left for the
// weight halves. fp8 first takes its scales from one step, so that the weight halves'
// re-quantisation is at scales other than 1.
std::vector<float> two_micro_batches(const ModelConfig& c, const Setting& s, const ActivationCheckpointing& policy,
                                     bool split, int64_t* kept = nullptr) {
  const auto in = tokens(2 * B * T, c.vocab_size, 31), target = tokens(2 * B * T, c.vocab_size, 32);
  const int32_t *in_b = in.data() + B * T, *target_b = target.data() + B * T;
  Transformer model(c, 3, /*loss_chunk_rows=*/5);
  model.set_precision({s.compute, s.fp8, {}});
  model.set_activation_checkpointing(policy);
  model.store().zero_grads();
  if (s.fp8) {
    model.fp8()->begin_step();
    model.forward_backward(in.data(), target.data(), B, T, 0.5f);
    model.fp8()->finish_step();
  }
  model.store().zero_grads();
  if (!split) {
    model.forward_backward(in.data(), target.data(), B, T, 0.5f);
    model.forward_backward(in_b, target_b, B, T, 0.5f);
    return grads_of(model);
  }
  MemoryLedger& ledger = MemoryLedger::instance();
  MicroBatchContext a, b;
  model.prepare(a, in.data(), target.data(), B, T, 0.5f, false);
  model.prepare(b, in_b, target_b, B, T, 0.5f, false);
  const int units = model.num_units();
  for (int u = 0; u < units; ++u) model.unit(u).forward(a);
  for (int u = 0; u < units; ++u) model.unit(u).forward(b);
  const size_t before = ledger.current(MemTag::activations);
  for (int u = units - 1; u >= 0; --u) model.unit(u).backward_input(a, nullptr);
  for (int u = units - 1; u >= 0; --u) model.unit(u).backward_input(b, nullptr);
  if (kept) *kept = static_cast<int64_t>(ledger.current(MemTag::activations) - before);
  for (int u = units - 1; u >= 0; --u) model.unit(u).backward_weight(a, nullptr);
  for (int u = units - 1; u >= 0; --u) model.unit(u).backward_weight(b, nullptr);
  EXPECT_EQ(ledger.current(MemTag::activations), before) << "the weight halves free what they kept";
  return grads_of(model);
}

// Catches: a weight gradient computed from a workspace buffer the next unit already
// overwrote (the recompute area, where low precision unpacks and recompute rebuilds a
// block's activations), one left out or applied twice, a kept input in another dtype
// than the weight GEMM reads (fp8 re-quantising a value the fused pass did not), or the
// halves doing other arithmetic than the fused backward; and a split backward keeping
// more than its weight halves read (the whole recompute area, an input once per layer
// that reads it) or less, or a memory model that disagrees with what it keeps. Every
// policy against the fused backward that keeps everything: recompute is bitwise too.
TEST(SplitBackward, InputThenWeightHalvesAreBitwiseTheFusedBackward) {
  for (Arch arch : {Arch::gpt2, Arch::llama}) {
    const ModelConfig c = tiny(arch, /*qk_norm=*/arch == Arch::llama);
    for (const Setting& s : kSettings) {
      const std::vector<float> fused = two_micro_batches(c, s, {}, /*split=*/false);
      for (const ActivationCheckpointing& policy : kPolicies) {
        int64_t kept = 0;
        EXPECT_EQ(two_micro_batches(c, s, policy, /*split=*/false), fused) << describe(arch, s, policy) << " fused";
        EXPECT_EQ(two_micro_batches(c, s, policy, /*split=*/true, &kept), fused) << describe(arch, s, policy);
        EXPECT_EQ(kept, 2 * deferred_weight_bytes(c, {}, B, T, policy, {}, s.compute)) << describe(arch, s, policy);
      }
    }
  }
}

// Catches: a memory model of the kept bytes that is not the closed form.
TEST(SplitBackward, KeptBytesHaveTheirClosedForm) {
  for (Arch arch : {Arch::gpt2, Arch::llama}) {
    const ModelConfig c = tiny(arch, /*qk_norm=*/arch == Arch::llama);
    // The closed form of one block without recompute: the output gradients of q, k, v,
    // the attention output and the MLP, fp32, nothing of the inputs (in the context).
    const int64_t N = B * T, C = c.d_model, F = c.d_ff, KD = int64_t{c.kv_heads()} * c.head_dim();
    const int64_t mlp = arch == Arch::llama ? 2 * F + C : F + C;
    EXPECT_EQ(deferred_weight_bytes(c, {}, B, T), 4 * c.n_layer * N * (C + 2 * KD + C + mlp));
    // Selective recompute in bf16 adds ln1, ln2 and the MLP activation in 2 bytes.
    EXPECT_EQ(deferred_weight_bytes(c, {}, B, T, {CheckpointMode::selective, 1}, {}, DType::bf16) -
                  deferred_weight_bytes(c, {}, B, T),
              2 * c.n_layer * N * (2 * C + F));
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
}

}  // namespace
}  // namespace ndt
