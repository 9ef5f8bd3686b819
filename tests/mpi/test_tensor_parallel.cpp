// Tensor parallelism (with and without sequence parallel) against one rank, for the
// GPT-2 and the Llama shapes, alone and composed with DDP and FSDP on a 2-D mesh; the
// tp communication of a step against the theory; activation memory against the
// prediction; activation checkpointing on fsdp x tp bitwise equal to none.
#include "../common/one_rank_mesh.h"
#include "../common/temp_dir.h"
#include "../train/test_support.h"
#include "core/memory.h"
#include "mpi_env.h"
#include "parity.h"

#include <gtest/gtest.h>

#include <string>

namespace ndt {
namespace {

using testing::expect_same_run;
using testing::tiny_run;
using testing::train;

struct Shape {
  const char* name;
  bool llama;
  bool sequence_parallel;
  float grad_clip;  // of MatchesOneRank: 0 (off) or 1e3 (never fires); the default 1.0 clips every step here
};
void PrintTo(const Shape& shape, std::ostream* os) { *os << shape.name; }

class TensorParallelTest : public ::testing::TestWithParam<Shape> {
 protected:
  TensorParallelTest() { write_shard(dir_.file("train.bin"), testing::synthetic_text(30000, 5)); }
  // A tiny model whose heads, KV heads, widths and vocabulary divide by 4.
  RunConfig run(int tp, int dp_shard, int zero_stage) const {
    RunConfig c = tiny_run(dir_.file("train.bin"), 8, 0);
    if (GetParam().llama) {
      c.model.arch = Arch::llama;
      c.model.tied_embeddings = false;
      c.model.n_head = 8;
      c.model.n_kv_head = 4;  // grouped: 2 query heads per K/V head on every rank
      c.model.d_ff = 96;
      c.model.qk_norm = true;
    }
    c.mesh.tp = tp;
    c.mesh.dp_shard = dp_shard;
    c.zero_stage = zero_stage;
    c.sequence_parallel = GetParam().sequence_parallel && tp > 1;
    return c;
  }
  testing::TempDir dir_;
};

// Catches: a tp region operator missing or doubled (a gradient off by a factor tp too), or a wrong tp block.
TEST_P(TensorParallelTest, MatchesOneRank) {
  Communicator& world = testing::world();
  RunConfig single = run(1, 1, 0);
  single.grad_clip = GetParam().grad_clip;
  const testing::TrainedRun reference = train(single, testing::one_rank_mesh());
  RunConfig config = run(world.size(), 1, 0);
  config.grad_clip = GetParam().grad_clip;
  DeviceMesh mesh(world, config.resolve_mesh(world.size()));
  expect_same_run(reference, train(config, mesh), ("tp=" + std::to_string(world.size())).c_str());
}

// Catches: dp / ZeRO / FSDP over tp blocks reducing over the wrong group, or splitting the batch over tp peers too.
TEST_P(TensorParallelTest, ComposesWithDataParallelAndFsdp) {
  Communicator& world = testing::world();
  if (world.size() != 4) GTEST_SKIP() << "dp x tp = 2 x 2 needs 4 ranks";
  const testing::TrainedRun reference = train(run(1, 1, 0), testing::one_rank_mesh());
  {
    RunConfig config = run(2, 1, 0);  // dp_replicate = 2 (DDP) x tp = 2
    config.micro_batch_size = 2;      // with gradient accumulation: 2 micro-steps per rank
    DeviceMesh mesh(world, config.resolve_mesh(world.size()));
    expect_same_run(reference, train(config, mesh), "ddp=2 x tp=2");
  }
  {
    RunConfig config = run(2, 2, 3);  // FSDP over dp_shard = 2 of the tp shards
    DeviceMesh mesh(world, config.resolve_mesh(world.size()));
    expect_same_run(reference, train(config, mesh), "fsdp=2 x tp=2");
  }
  {
    RunConfig config = run(2, 2, 1);  // ZeRO-1
    DeviceMesh mesh(world, config.resolve_mesh(world.size()));
    expect_same_run(reference, train(config, mesh), "zero1=2 x tp=2");
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, TensorParallelTest,
                         ::testing::Values(Shape{"gpt2", false, false, 0.0f}, Shape{"gpt2_sp", false, true, 1e3f},
                                           Shape{"llama", true, false, 1e3f}, Shape{"llama_sp", true, true, 0.0f}),
                         [](const auto& info) { return std::string(info.param.name); });

// One training step's tp traffic against the theory (GPT-2 shape, no QK-norm, L
// blocks, N = B x T rows on each rank, C = d_model, row chunks of the loss = k):
//   without SP: all-reduces of N x C: 1 (embedding) + 2L forward, 2L + 1 (output layer)
//     backward; the loss: 2 per chunk (N and 2N floats in all); the gradient norm: 1 float.
//   with SP: the same 4L + 2 as all-gathers and as many reduce-scatters of N x C; the
//     loss's and the norm's all-reduces; one all-reduce per block of its partial
//     replicated gradients (norms and row-parallel biases: 6C floats), one for the final
//     norm (2C), one for the positions (T x C).
// Catches: an extra, missing or oversized tp collective per step (a gather of the logits, a region reduced twice).
TEST(TensorParallelComm, BytesPerStepMatchTheory) {
  Communicator& world = testing::world();
  testing::TempDir dir;
  write_shard(dir.file("train.bin"), testing::synthetic_text(30000, 3));
  for (bool sp : {false, true}) {
    RunConfig c = tiny_run(dir.file("train.bin"), 4, 0);
    c.mesh.tp = world.size();
    c.sequence_parallel = sp;
    c.loss_chunk_rows = 24;  // 64 rows: chunks of 24, 24, 16
    c.steps = 1;
    DeviceMesh mesh(world, c.resolve_mesh(world.size()));
    Trainer trainer(c, mesh, nullptr);
    const CommStats before = mesh.axis(Axis::tp).stats();
    trainer.step();
    const CommStats& after = mesh.axis(Axis::tp).stats();
    auto delta = [&](CommOp op) {
      return std::pair{after[op].calls - before[op].calls, after[op].payload_bytes - before[op].payload_bytes};
    };
    const int64_t L = c.model.n_layer, C = c.model.d_model, N = int64_t{c.batch_size} * c.seq_len, chunks = 3;
    const int64_t activation = N * C * 4, loss_bytes = 3 * N * 4, norm_bytes = 4;
    if (!sp) {
      EXPECT_EQ(delta(CommOp::all_reduce), (std::pair{4 * L + 2 + 2 * chunks + 1,
                                                      (4 * L + 2) * activation + loss_bytes + norm_bytes}));
      EXPECT_EQ(delta(CommOp::all_gather).first, 0);
      EXPECT_EQ(delta(CommOp::reduce_scatter).first, 0);
    } else {
      EXPECT_EQ(delta(CommOp::all_gather), (std::pair{4 * L + 2, (4 * L + 2) * activation}));
      EXPECT_EQ(delta(CommOp::reduce_scatter), (std::pair{4 * L + 2, (4 * L + 2) * activation}));
      const int64_t partial_bytes = (L * 6 * C + 2 * C + int64_t{c.model.max_seq_len} * C) * 4;
      EXPECT_EQ(delta(CommOp::all_reduce),
                (std::pair{2 * chunks + L + 2 + 1, loss_bytes + partial_bytes + norm_bytes}));
    }
  }
}

// Activation memory per rank: the ledger equals the prediction with and without
// sequence parallel, and sequence parallel saves (1 - 1/tp) of the bytes of the
// token-split regions (residual stream, norm statistics, residual adds), less the two
// scratch buffers it adds (an all-gathered output gradient [N, C], a reduce-scattered
// input gradient [N / tp, C]); measured within 1% of the non-SP activation bytes.
// Catches: sequence parallel still holding whole-sequence activations, or a ledger drifting from the prediction.
TEST(TensorParallelMemory, SequenceParallelSplitsTheTokenRegions) {
  Communicator& world = testing::world();
  testing::TempDir dir;
  write_shard(dir.file("train.bin"), testing::synthetic_text(30000, 4));
  const int tp = world.size();
  size_t measured[2] = {0, 0};
  RunConfig c = tiny_run(dir.file("train.bin"), 4, 0);
  c.model.n_layer = 4;
  c.mesh.tp = tp;
  c.steps = 1;
  for (bool sp : {false, true}) {
    c.sequence_parallel = sp;
    DeviceMesh mesh(world, c.resolve_mesh(world.size()));
    MemoryLedger& ledger = MemoryLedger::instance();
    const size_t before = ledger.current(MemTag::activations);
    Trainer trainer(c, mesh, nullptr);
    trainer.step();
    measured[sp] = ledger.current(MemTag::activations) - before;
    const int64_t predicted = Transformer::predict_activation_bytes(c.model, c.batch_size, c.seq_len,
                                                                     c.loss_chunk_rows, ActivationLayout{tp, sp, {}});
    EXPECT_EQ(static_cast<int64_t>(measured[sp]), predicted) << "sequence parallel " << sp;
  }
  const int64_t N = int64_t{c.batch_size} * c.seq_len, C = c.model.d_model;
  const int64_t split = Transformer::predict_local_row_activation_bytes(c.model, c.batch_size, c.seq_len);
  const double expected_saving = split * (1.0 - 1.0 / tp) - (N * C + N / tp * C) * 4.0;
  EXPECT_NEAR(static_cast<double>(measured[0]) - static_cast<double>(measured[1]), expected_saving,
              0.01 * static_cast<double>(measured[0]));
  EXPECT_LT(measured[1], measured[0]);
}

// Catches: a recompute that under sharded parameters (FSDP gathers a block's parameters
// for backward, where the recompute runs) or tensor parallel with sequence parallel
// (the recomputed norms all-gather again) differs in any bit from the saved forward.
// fsdp=2 x tp=2 with sequence parallel on 4 ranks, tp=2 on 2; GPT-2 and Llama (QK-norm,
// GQA); every policy against none, losses, gradient norms and parameters bitwise; and
// the activation ledger equal to the prediction under each.
TEST(ActivationCheckpointingParallel, EveryPolicyIsBitwiseNoneOnFsdpTimesTp) {
  Communicator& world = testing::world();
  testing::TempDir dir;
  write_shard(dir.file("train.bin"), testing::synthetic_text(30000, 9));
  const bool four = world.size() == 4;
  for (bool llama : {false, true}) {
    RunConfig c = tiny_run(dir.file("train.bin"), 8, 0);
    c.model.n_layer = 3;
    if (llama) testing::use_llama(c);
    c.steps = 3;
    c.mesh.tp = 2;
    c.mesh.dp_shard = four ? 2 : 1;
    c.zero_stage = four ? 3 : 0;
    c.sequence_parallel = four;
    DeviceMesh mesh(world, c.resolve_mesh(world.size()));
    const testing::TrainedRun reference = train(c, mesh);
    for (const ActivationCheckpointing& policy : {ActivationCheckpointing{CheckpointMode::full, 1},
                                                  ActivationCheckpointing{CheckpointMode::full, 2},
                                                  ActivationCheckpointing{CheckpointMode::selective, 1}}) {
      const std::string what = std::string(llama ? "llama " : "gpt2 ") + std::string(checkpoint_mode_name(policy.mode)) +
                                " every " + std::to_string(policy.every);
      c.activation_checkpointing = policy;
      MemoryLedger& ledger = MemoryLedger::instance();
      const size_t before = ledger.current(MemTag::activations);
      testing::TrainedRun run;
      {
        Trainer trainer(c, mesh, nullptr);
        for (int64_t s = 0; s < c.steps; ++s) {
          const StepStats stats = trainer.step();
          run.losses.push_back(stats.loss);
          run.grad_norms.push_back(stats.grad_norm);
        }
        EXPECT_EQ(static_cast<int64_t>(ledger.current(MemTag::activations) - before),
                  Transformer::predict_activation_bytes(c.model, c.batch_size / (four ? 2 : 1), c.seq_len,
                                                        c.loss_chunk_rows, ActivationLayout{2, four, {}}, policy))
            << what;
        run.params = trainer.full_parameters();
      }
      EXPECT_EQ(run.losses, reference.losses) << what;
      EXPECT_EQ(run.grad_norms, reference.grad_norms) << what;
      EXPECT_EQ(run.params, reference.params) << what;
    }
  }
}

// Catches: a policy that breaks under another layout: DDP and ZeRO-2 (gradients
// reduced as blocks finish, after their recompute), and pipeline stages (several
// micro-batches' contexts sharing the recompute area). Each against none on the same
// layout, bitwise.
TEST(ActivationCheckpointingParallel, EveryPolicyIsBitwiseNoneOnDdpZeroAndPipeline) {
  Communicator& world = testing::world();
  testing::TempDir dir;
  write_shard(dir.file("train.bin"), testing::synthetic_text(30000, 10));
  const int n = world.size();
  struct Layout {
    const char* name;
    int dp_shard, zero_stage, pp;
  };
  for (const Layout& l : {Layout{"ddp", 1, 0, 1}, Layout{"zero-2", n, 2, 1}, Layout{"pp 1f1b", 1, 0, n}}) {
    RunConfig c = tiny_run(dir.file("train.bin"), 8, 1);
    c.model.n_layer = 4;
    c.steps = 3;
    c.mesh.dp_shard = l.dp_shard;
    c.zero_stage = l.zero_stage;
    c.mesh.pp = l.pp;
    DeviceMesh mesh(world, c.resolve_mesh(n));
    const testing::TrainedRun reference = train(c, mesh);
    for (CheckpointMode mode : {CheckpointMode::full, CheckpointMode::selective}) {
      c.activation_checkpointing = {mode, 1};
      const testing::TrainedRun run = train(c, mesh);
      const std::string what = std::string(l.name) + ", " + std::string(checkpoint_mode_name(mode));
      EXPECT_EQ(run.losses, reference.losses) << what;
      EXPECT_EQ(run.params, reference.params) << what;
    }
  }
}

}  // namespace
}  // namespace ndt
