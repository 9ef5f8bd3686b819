// data.loss_mask on every layout (docs/data.md): rows whose masks count different numbers
// of targets, so the micro-batches of a step hold different counts. Step 1 equals the
// loss and gradient computed by hand (the sum of the counted targets' losses over their
// global count, on one rank, one micro-batch), and four steps equal the one-rank run
// (losses, gradient norms, final parameters) with gradient accumulation, on dp, dp with
// accumulation, tp = 2 (sequence parallel), cp = 2 and pp = 2 (1F1B), GPT-2 and Llama;
// with windows cut anywhere, and with rows packed from whole documents.
// A mean of per-micro-batch means fails here (scripts/mutations.txt:
// masked-loss-per-micro-batch-mean). A mask of all ones trains bitwise as no mask.
#include "../common/one_rank_mesh.h"
#include "../common/temp_dir.h"
#include "core/rng.h"
#include "core/targets.h"
#include "data/loss_mask.h"
#include "data/shard.h"
#include "mpi_env.h"
#include "parity.h"
#include "train/training_data.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

namespace ndt {
namespace {

constexpr int kSeparator = 255;

// Documents of 1 to 14 tokens of [0, 200), each after the separator; the mask in runs of
// 1 to 24 tokens, a run counted with probability 0.4 (or every token, all_ones), never on
// a separator.
void write_masked_shard(const std::string& path, int64_t n, bool all_ones) {
  const std::vector<uint16_t> tokens = testing::separated_documents(n, kSeparator, 14);
  std::vector<uint8_t> mask(tokens.size());
  for (int64_t at = 0, run = 0; at < n; ++run) {
    const auto w = philox(23, 0, static_cast<uint64_t>(run));
    const int64_t length = std::min<int64_t>(1 + w[0] % 24, n - at);
    std::fill_n(mask.begin() + at, length, all_ones || w[1] % 10 < 4 ? 1 : 0);
    at += length;
  }
  for (size_t i = 0; i < tokens.size() && !all_ones; ++i) mask[i] = tokens[i] == kSeparator ? 0 : mask[i];
  write_shard(path, tokens);
  write_mask(mask_path(path), mask);
}

// packed: data.document_boundaries too, so rows are packed from whole documents.
RunConfig masked_run(const std::string& train, bool llama, bool packed) {
  RunConfig c = testing::tiny_run(train, 8, 0);
  if (llama) testing::use_llama(c);
  c.steps = 4;
  c.grad_clip = 0.0f;  // off: the norms compare the raw gradients
  c.loss_mask = true;
  c.document_boundaries = packed;
  c.document_separator = kSeparator;
  return c;
}

// Step 1 by hand: the whole batch in one forward_backward on one rank, the gradient of
// the masked losses' sum over their count.
testing::FirstStep by_hand(const RunConfig& config) {
  const int B = config.batch_size, T = config.seq_len;
  std::vector<int32_t> inputs(size_t(B) * T), targets(inputs.size());
  TrainingData data(config);
  data.train_rows(0, 0, B, inputs.data(), targets.data());
  const int64_t counted = std::count_if(targets.begin(), targets.end(), [](int32_t t) { return t != kIgnoredTarget; });
  EXPECT_EQ(counted, data.train_targets(0));
  // The rows count different numbers of targets: a per-micro-batch mean weighs them wrongly.
  std::set<int64_t> per_row;
  for (int b = 0; b < B; ++b) {
    per_row.insert(std::count_if(targets.begin() + b * T, targets.begin() + (b + 1) * T,
                                 [](int32_t t) { return t != kIgnoredTarget; }));
  }
  EXPECT_GE(per_row.size(), 3u) << "the rows' counts should differ";
  Transformer model(config.model, config.seed);
  if (config.document_boundaries) model.set_document_separator(config.document_separator);
  model.store().zero_grads();
  const double mean_over_all = model.forward_backward(inputs.data(), targets.data(), B, T, 1.0f / counted);
  return {mean_over_all * B * T / counted, testing::gradient_norm(model.store())};
}

struct Layout {
  const char* name;
  int tp = 1, cp = 1, pp = 1, micro = 0;  // micro 0: one micro-batch per rank
};

class LossMaskLayouts : public ::testing::TestWithParam<testing::Family> {};

// Catches: the loss normalised per micro-batch or per rank (micro-batches and ranks hold
// different counts), masks read for other rows than the tokens, a layout that drops the
// ignored targets' zero (a pipeline stage or cp rank preparing targets without the mask).
void expect_every_layout_equal(bool llama, bool packed) {
  testing::TempDir dir;
  write_masked_shard(dir.file("train.bin"), 20000, false);
  const RunConfig base = masked_run(dir.file("train.bin"), llama, packed);
  const testing::FirstStep hand = by_hand(base);
  const testing::TrainedRun reference = testing::train(base, testing::one_rank_mesh());
  EXPECT_NEAR(reference.losses[0], hand.loss, 1e-5 * hand.loss) << "one rank, step 1 against the hand computation";
  EXPECT_NEAR(reference.grad_norms[0], hand.grad_norm, 1e-5 * hand.grad_norm) << "one rank, step 1";
  RunConfig accumulating = base;
  accumulating.micro_batch_size = 1;
  testing::expect_same_run(reference, testing::train(accumulating, testing::one_rank_mesh()), "one rank, 8 micro-batches");
  for (const Layout& l : {Layout{"dp"}, Layout{"dp + accumulation", 1, 1, 1, 1}, Layout{"tp=2", 2},
                          Layout{"cp=2", 1, 2}, Layout{"pp=2", 1, 1, 2, 1}}) {
    RunConfig c = base;
    c.mesh.tp = l.tp, c.mesh.cp = l.cp, c.mesh.pp = l.pp;
    c.sequence_parallel = l.tp > 1;
    c.micro_batch_size = l.micro;
    testing::expect_same_run(reference, testing::train_on_world(c), l.name);
  }
}

TEST_P(LossMaskLayouts, EqualTheHandComputationAndOneRankOnEveryLayout) { expect_every_layout_equal(GetParam().llama, false); }

// The same with rows packed from whole documents (data.document_boundaries): padding
// targets never count, and every layout packs the same rows.
TEST_P(LossMaskLayouts, PackedDocumentsEqualOnEveryLayout) { expect_every_layout_equal(GetParam().llama, true); }

INSTANTIATE_TEST_SUITE_P(Families, LossMaskLayouts,
                         ::testing::Values(testing::Family{"gpt2", false}, testing::Family{"llama", true}),
                         [](const auto& info) { return std::string(info.param.name); });

// Without masks the fp32 results are today's: a mask of all ones changes no bit of the
// parameters (the same gradient scale, B x T), and the loss only by the order of its sum.
TEST(LossMask, AllOnesTrainsBitwiseAsNoMask) {
  testing::TempDir dir;
  write_masked_shard(dir.file("train.bin"), 20000, true);
  RunConfig masked = masked_run(dir.file("train.bin"), false, false);
  masked.micro_batch_size = 2;
  RunConfig plain = masked;
  plain.loss_mask = false;
  const testing::TrainedRun a = testing::train(masked, testing::one_rank_mesh());
  const testing::TrainedRun b = testing::train(plain, testing::one_rank_mesh());
  EXPECT_EQ(a.params, b.params);
  EXPECT_EQ(a.grad_norms, b.grad_norms);
  for (size_t i = 0; i < a.losses.size(); ++i) EXPECT_NEAR(a.losses[i], b.losses[i], 1e-6 * b.losses[i]) << i;
}

}  // namespace
}  // namespace ndt
