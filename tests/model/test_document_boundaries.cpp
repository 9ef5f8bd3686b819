// data.document_boundaries on one rank (Transformer::set_document_separator,
// model/document_starts.h): a row packing several documents gives, token for token, the
// losses and, parameter for parameter, the gradients of feeding each document alone as
// its own row with positions from 0 to a model without document boundaries. For GPT-2
// (learned positions) and Llama (RoPE, grouped K/V heads, QK-norm), with and without
// activation checkpointing (its recompute reruns the masked attention). Also: where
// documents start, generation after a separator, the separator checked.
//
// Tolerance 1e-5 relative (the project's fp32 parity bound): both sides compute the same
// sums; only the GEMMs' blocking (M = 2 x 70 rows against one document's) and the
// attention scores' column range differ, which reorders float additions: a few 2^-24
// per operation through two blocks, about 1e-6 at most here.
#include "tiny_model.h"
#include "../common/errors.h"
#include "model/document_starts.h"
#include "model/transformer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace ndt {
namespace {

constexpr int kVocab = 13, kSeparator = 12, kB = 2, kT = 70;

ModelConfig model_config(Arch arch) {
  ModelConfig c = testing::tiny(arch, /*qk_norm=*/arch == Arch::llama);
  c.max_seq_len = kT;
  return c;
}

// Two rows of 70 tokens: row 0 starts with a document and holds a one-token document
// (separators at 5 and 6), a document crossing the attention kernel's 64-row block and
// one that is only the last token; row 1 starts inside a document begun before the row.
struct Batch {
  std::vector<int32_t> inputs, targets;
};

Batch packed_batch() {
  Batch b{testing::tokens(kB * kT, kSeparator, 11), testing::tokens(kB * kT, kVocab, 12)};
  for (int p : {0, 5, 6, 30, 64, 69}) b.inputs[p] = kSeparator;
  for (int p : {20, 50}) b.inputs[kT + p] = kSeparator;
  return b;
}

// Each row's documents [begin, end), found here independently of the model.
std::vector<std::pair<int, int>> documents(const Batch& b, int row) {
  std::vector<std::pair<int, int>> docs;
  int begin = 0;
  for (int t = 1; t <= kT; ++t) {
    if (t == kT || b.inputs[size_t(row) * kT + t] == kSeparator) docs.emplace_back(begin, t), begin = t;
  }
  return docs;
}

struct Result {
  std::vector<float> losses;                // per token, in row order
  std::vector<std::vector<float>> grads;    // per parameter
};

std::vector<std::vector<float>> gradients(Transformer& model) {
  std::vector<std::vector<float>> g;
  for (const Parameter& p : model.store().params()) g.emplace_back(p.grad_data(), p.grad_data() + p.numel());
  return g;
}

// One micro-batch of `rows` rows of `T` tokens; appends the per-token losses.
void run(Transformer& model, MicroBatchContext& ctx, const int32_t* in, const int32_t* tgt, int rows, int T,
         std::vector<float>& losses) {
  model.prepare(ctx, in, tgt, rows, T, 1.0f / (kB * kT), /*forward_only=*/false);
  run_forward_backward(model, ctx, nullptr);
  losses.insert(losses.end(), ctx.head.losses, ctx.head.losses + int64_t{rows} * T);
}

Result packed(Arch arch, CheckpointMode recompute, bool boundaries) {
  Transformer model(model_config(arch), 5);
  model.set_activation_checkpointing({recompute, 1});
  if (boundaries) model.set_document_separator(kSeparator);
  const Batch b = packed_batch();
  model.store().zero_grads();
  MicroBatchContext ctx;
  Result r;
  run(model, ctx, b.inputs.data(), b.targets.data(), kB, kT, r.losses);
  r.grads = gradients(model);
  return r;
}

// Every document alone, as a row of its own, on a model without document boundaries.
Result alone(Arch arch) {
  Transformer model(model_config(arch), 5);
  const Batch b = packed_batch();
  model.store().zero_grads();
  MicroBatchContext ctx;
  Result r;
  for (int row = 0; row < kB; ++row) {
    for (const auto& [begin, end] : documents(b, row)) {
      const size_t at = size_t(row) * kT + begin;
      run(model, ctx, b.inputs.data() + at, b.targets.data() + at, 1, end - begin, r.losses);
    }
  }
  r.grads = gradients(model);
  return r;
}

double largest_loss_difference(const Result& a, const Result& b) {
  double worst = 0;
  for (size_t i = 0; i < a.losses.size(); ++i) worst = std::max(worst, double(std::fabs(a.losses[i] - b.losses[i])));
  return worst;
}

struct Case {
  Arch arch;
  CheckpointMode recompute;
};
void PrintTo(const Case& c, std::ostream* os) { *os << arch_name(c.arch) << " " << checkpoint_mode_name(c.recompute); }

class DocumentBoundaries : public ::testing::TestWithParam<Case> {};

// Catches: attention across a document start, positions not restarting (learned or
// RoPE), a recompute that drops the mask, the separator counted in the wrong document.
TEST_P(DocumentBoundaries, PackedRowEqualsEachDocumentAlone) {
  const Case c = GetParam();
  const Result docs = alone(c.arch), row = packed(c.arch, c.recompute, /*boundaries=*/true);
  ASSERT_EQ(row.losses.size(), docs.losses.size());
  for (size_t i = 0; i < docs.losses.size(); ++i) {
    ASSERT_NEAR(row.losses[i], docs.losses[i], 1e-5 * (1 + std::fabs(docs.losses[i])))
        << "token " << i % kT << " of row " << i / kT;
  }
  // Per parameter, 1e-5 of its gradient's norm, with a floor of 1e-7 of the whole
  // gradient's norm (about twice float's unit roundoff of gradient-sized sums): a key
  // bias's gradient is 0 in exact arithmetic (softmax ignores what adds the same to every
  // score of a row), so both sides hold rounding alone there (measured 6e-9 of the whole).
  Transformer names(model_config(c.arch), 5);
  std::vector<double> diff(docs.grads.size(), 0.0), norm(docs.grads.size(), 0.0);
  double total = 0;
  for (size_t p = 0; p < docs.grads.size(); ++p) {
    for (size_t i = 0; i < docs.grads[p].size(); ++i) {
      diff[p] += std::pow(double(row.grads[p][i]) - docs.grads[p][i], 2);
      norm[p] += std::pow(double(docs.grads[p][i]), 2);
    }
    total += norm[p];
  }
  for (size_t p = 0; p < docs.grads.size(); ++p) {
    EXPECT_LT(std::sqrt(diff[p]), std::max(1e-5 * std::sqrt(norm[p]), 1e-7 * std::sqrt(total)))
        << names.store().params()[p].name();
  }
  // The documents do see each other without the boundaries: the test can tell.
  EXPECT_GT(largest_loss_difference(packed(c.arch, c.recompute, /*boundaries=*/false), docs), 1e-3);
}

INSTANTIATE_TEST_SUITE_P(Families, DocumentBoundaries,
                         ::testing::Values(Case{Arch::gpt2, CheckpointMode::none}, Case{Arch::llama, CheckpointMode::none},
                                           Case{Arch::gpt2, CheckpointMode::selective},
                                           Case{Arch::llama, CheckpointMode::full}),
                         [](const auto& info) {
                           return std::string(arch_name(info.param.arch)) + "_" +
                                  std::string(checkpoint_mode_name(info.param.recompute));
                         });

// A separator is its document's first token; tokens before a row's first separator are
// a document from position 0; positions count from each document's start.
// Catches: the separator given to the document before it (a start one past it).
TEST(DocumentBoundaries, DocumentsStartAtEachSeparator) {
  const std::vector<int32_t> tokens = {4, 4, 9, 4, 9, 9, 4,  // a tail, then documents at 2, 4 and 5
                                       9, 4, 4, 4, 4, 4, 9};
  EXPECT_EQ(document_starts(tokens.data(), 2, 7, 9), (std::vector<int32_t>{0, 0, 2, 2, 4, 5, 5, 0, 0, 0, 0, 0, 0, 6}));
  Transformer model(model_config(Arch::gpt2), 5);
  model.set_document_separator(9);
  MicroBatchContext ctx;
  model.prepare(ctx, tokens.data(), nullptr, 2, 7, 0.0f, /*forward_only=*/true);
  EXPECT_EQ(ctx.positions, (std::vector<int32_t>{0, 1, 0, 1, 0, 0, 1, 0, 1, 2, 3, 4, 5, 0}));
  model.set_document_separator(std::nullopt);
  model.prepare(ctx, tokens.data(), nullptr, 2, 7, 0.0f, /*forward_only=*/true);
  EXPECT_TRUE(ctx.document_starts.empty());
  EXPECT_EQ(ctx.positions, (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 0, 1, 2, 3, 4, 5, 6}));
}

// The next token after "... SEP a b c" is predicted from "SEP a b c" alone.
// Catches: generation (and the end-of-run sample) ignoring the boundaries training used.
TEST(DocumentBoundaries, GenerationStartsAfterTheLastSeparator) {
  for (Arch arch : {Arch::gpt2, Arch::llama}) {
    Transformer packed_model(model_config(arch), 5), alone_model(model_config(arch), 5);
    packed_model.set_document_separator(kSeparator);
    std::vector<int32_t> prompt = testing::tokens(20, kSeparator, 13);
    prompt[14] = kSeparator;
    std::vector<float> a(kVocab), b(kVocab);
    packed_model.next_token_logits(prompt.data(), 20, a.data());
    alone_model.next_token_logits(prompt.data() + 14, 6, b.data());
    for (int v = 0; v < kVocab; ++v) EXPECT_NEAR(a[v], b[v], 1e-5 * (1 + std::fabs(b[v]))) << arch_name(arch);
  }
}

TEST(DocumentBoundaries, SeparatorOutsideTheVocabularyIsRefused) {
  Transformer model(model_config(Arch::gpt2), 5);
  for (int32_t bad : {kVocab, -1}) {
    testing::expect_error([&] { model.set_document_separator(bad); },
                          {"data.document_separator = " + std::to_string(bad), "[0, 13)"});
  }
}

}  // namespace
}  // namespace ndt
