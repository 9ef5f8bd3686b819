// Edge shapes against the one-rank run (losses, gradient norms and final parameters, as
// in parity.h), chosen so that nothing divides evenly by accident:
//   - sequence parallel with one sequence per micro-step, so each tp rank's token rows
//     start at a position that is not 0 mod seq_len, for GPT-2 (learned positions) and
//     Llama (RoPE); and plain tensor parallelism; both with a vocabulary of 260 (65 rows
//     a rank on 4: odd, not a power of two), 3 heads a rank on 4 (6 on 2), d_ff 132
//     (33 a rank on 4), 3 sequences a batch and loss chunks of 5 rows;
//   - seq_len = max_seq_len = 72, not a multiple of the attention kernel's row block
//     (64), under DDP and FSDP with 3 sequences a rank, 3 heads of width 10, d_model 30
//     and d_ff 90 (padded shards on 4 ranks);
//   - the vocab-parallel cross-entropy with logits of +-100 and a row of equal logits
//     against the one-rank fused kernel.
// Each family / layout runs with clipping off (grad_clip 0) or a clip that never fires
// (1e3), so a gradient off by a constant factor shows in the updates too.
#include "../common/one_rank_mesh.h"
#include "../common/temp_dir.h"
#include "../train/test_support.h"
#include "kernels/kernels.h"
#include "model/tp_layers.h"
#include "mpi_env.h"
#include "parallel/tensor/tensor_parallel.h"
#include "parity.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace ndt {
namespace {

using testing::expect_same_run;
using testing::tiny_run;
using testing::train;
using testing::TrainedRun;

class EdgeShapes : public ::testing::Test {
 protected:
  EdgeShapes() { write_shard(dir_.file("train.bin"), testing::synthetic_text(30000, 13)); }
  std::string data() const { return dir_.file("train.bin"); }
  testing::TempDir dir_;
};

// Catches: a sequence-parallel rank ignoring its position offset; tp splits assuming even or power-of-two blocks.
TEST_F(EdgeShapes, TensorParallelWithOddSplitsAndOneSequencePerMicroStep) {
  Communicator& world = testing::world();
  const int n = world.size();
  for (bool llama : {false, true}) {
    RunConfig base = tiny_run(data(), 3, 0);
    base.steps = 6;
    base.model.vocab_size = 260;  // 65 rows a rank on 4, 130 on 2
    base.model.n_head = 12;       // 3 heads a rank on 4, 6 on 2
    base.model.d_model = 48;      // head width 4
    base.model.d_ff = 132;        // 33 units a rank on 4, 66 on 2
    base.grad_clip = llama ? 1e3f : 0.0f;
    if (llama) {
      base.model.arch = Arch::llama;
      base.model.tied_embeddings = false;
      base.model.n_kv_head = 4;  // 1 K/V head for 3 query heads a rank on 4
      base.model.qk_norm = true;
    }
    const TrainedRun reference = train(base, testing::one_rank_mesh());
    for (bool sp : {true, false}) {
      RunConfig config = base;
      config.mesh.tp = n;
      config.sequence_parallel = sp;
      // With sp: one sequence of 16 tokens per micro-step, so tp rank r holds the rows
      // at positions 16 r / tp ... (not 0 mod 16), and 3 micro-steps a step.
      config.micro_batch_size = sp ? 1 : 0;
      config.loss_chunk_rows = 5;  // the head's rows in chunks of 5, 5, 5, 1 (or ..., 3)
      DeviceMesh mesh(world, config.resolve_mesh(n));
      const std::string what = std::string(llama ? "llama" : "gpt2") + " tp=" + std::to_string(n) +
                               (sp ? " sp, one sequence per micro-step" : "") + ", vocab 260";
      expect_same_run(reference, train(config, mesh), what.c_str());
    }
  }
}

// Catches: attention dropping a partial row block (72 = 64 + 8); dp / FSDP assuming even shards or power-of-two rows.
TEST_F(EdgeShapes, SequenceLongerThanOneAttentionRowBlockUnderDdpAndFsdp) {
  Communicator& world = testing::world();
  const int n = world.size();
  RunConfig base = tiny_run(data(), 3 * n, 0);  // 3 sequences a rank
  base.steps = 5;
  base.model.max_seq_len = 72;
  base.seq_len = 72;
  base.model.vocab_size = 260;
  base.model.n_head = 3;
  base.model.d_model = 30;
  base.model.d_ff = 90;
  base.grad_clip = 0.0f;
  const TrainedRun reference = train(base, testing::one_rank_mesh());
  {
    RunConfig config = base;  // DDP, clipping off
    DeviceMesh mesh(world, config.resolve_mesh(n));
    expect_same_run(reference, train(config, mesh), "ddp, seq_len 72");
  }
  RunConfig fsdp = base;  // FSDP with a clip that never fires: same updates as clipping off
  fsdp.zero_stage = 3;
  fsdp.mesh.dp_shard = n;
  fsdp.micro_batch_size = 1;  // 3 micro-steps a rank
  fsdp.grad_clip = 1e3f;
  DeviceMesh mesh(world, fsdp.resolve_mesh(n));
  expect_same_run(reference, train(fsdp, mesh), "fsdp, seq_len 72, 3 micro-steps");
}

// Catches: a vocab-parallel loss without (global) max subtraction, a target logit from the wrong rank, a bad gradient.
TEST(VocabParallelCrossEntropy, LargeLogitsMatchTheOneRankLoss) {
  Communicator& world = testing::world();
  const int n = world.size(), me = world.rank();
  const int local_vocab = 65, V = local_vocab * n, rows = 7;
  const int64_t vocab_begin = int64_t{me} * local_vocab;
  // Logits of magnitude up to 100 (exp(100) overflows f32), every rank the same.
  std::vector<float> full(static_cast<size_t>(rows) * V);
  std::vector<int32_t> targets(rows);
  for (int r = 0; r < rows; ++r) {
    float* row = full.data() + int64_t{r} * V;
    for (int j = 0; j < V; ++j) row[j] = 100.0f * std::sin(0.731f * static_cast<float>(j) + 1.17f * r);
    targets[r] = (37 * r + 11) % V;
  }
  float* equal = full.data() + int64_t{2} * V;  // all logits equal: loss log V, uniform softmax
  std::fill(equal, equal + V, 100.0f);
  float* offset = full.data() + int64_t{3} * V;  // large, nearly equal: 99 .. 101
  for (int j = 0; j < V; ++j) offset[j] = 100.0f + std::sin(0.3f * static_cast<float>(j));
  float* peaked = full.data() + int64_t{4} * V;  // the target is the maximum, on the last rank
  targets[4] = V - 3;
  peaked[targets[4]] = 100.0f;
  float* low = full.data() + int64_t{5} * V;  // the target is far below the maximum, on rank 0
  targets[5] = 1;
  low[1] = -100.0f;
  low[V - 1] = 100.0f;
  targets[6] = V - 1;

  MegatronRegions regions(TensorParallel{&world, false});
  for (float grad_scale : {0.0f, 0.125f}) {
    std::vector<float> reference = full, reference_losses(rows);
    kernels::softmax_cross_entropy(reference.data(), reference_losses.data(), targets.data(), rows, V, grad_scale, 0.0f,
                                   nullptr);
    ASSERT_NEAR(reference_losses[2], std::log(static_cast<double>(V)), 1e-5);
    std::vector<float> local(static_cast<size_t>(rows) * local_vocab), losses(rows, -1.0f), work(3 * rows);
    for (int r = 0; r < rows; ++r) {
      std::copy_n(full.data() + int64_t{r} * V + vocab_begin, local_vocab, local.data() + int64_t{r} * local_vocab);
    }
    vocab_parallel_cross_entropy(regions, local.data(), losses.data(), targets.data(), rows, local_vocab, vocab_begin,
                                 grad_scale, work.data());
    for (int r = 0; r < rows; ++r) {
      EXPECT_NEAR(losses[r], reference_losses[r], 1e-5 * std::max(1.0, std::fabs(double{reference_losses[r]})))
          << "row " << r << ", grad_scale " << grad_scale << ", rank " << me;
      // The gradient slice (without grad_scale: the logits untouched); the first mismatch of a row.
      for (int j = 0; j < local_vocab; ++j) {
        const float want = grad_scale != 0.0f ? reference[int64_t{r} * V + vocab_begin + j]
                                              : full[int64_t{r} * V + vocab_begin + j];
        const float got = local[int64_t{r} * local_vocab + j];
        if (!(std::fabs(got - want) <= 1e-5 * std::fabs(want) + 1e-8 * grad_scale)) {
          ADD_FAILURE() << "gradient of row " << r << ", logit " << vocab_begin + j << ", grad_scale " << grad_scale
                        << ", rank " << me << ": " << got << " vs " << want;
          break;
        }
      }
    }
  }
}

}  // namespace
}  // namespace ndt
