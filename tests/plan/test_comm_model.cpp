// The communication model (plan/comm_model.h) against volumes computed by hand from the
// textbook formulas, on layouts small enough to count: DDP's ring all-reduce, ZeRO-3's
// gathers and reduce-scatters, tensor parallelism's per-block all-reduces, pipeline
// boundary messages; and its speed on a 405B-shaped model over 16K ranks. The
// multi-rank tests (tests/mpi/test_feature_matrix.cpp) hold it to the counters.
#include "model/transformer.h"
#include "parallel/pipeline/stages.h"
#include "plan/comm_model.h"

#include <gtest/gtest.h>

#include <chrono>

namespace ndt {
namespace {

// GPT-2 of 2 blocks, C 64, vocab 256, T 32: every width divides by 4.
RunConfig small_gpt2() {
  RunConfig c;
  c.model = ModelConfig::preset("gpt2-tiny");
  c.model.n_layer = 2;
  c.model.d_model = 64;
  c.model.d_ff = 256;
  c.model.n_head = 4;
  c.model.max_seq_len = 32;
  c.seq_len = 32;
  c.batch_size = 8;
  c.bucket_mb = 1000;  // one bucket
  return c;
}

MeshShape mesh_of(int pp, int dp_shard, int cp, int tp) {
  MeshShape m;
  m.pp = pp, m.dp_replicate = 0, m.dp_shard = dp_shard, m.cp = cp, m.tp = tp;
  return m;
}

int64_t params(const ModelConfig& m) { return count_parameters(m); }

// Parameters of one block of GPT-2: 2 norms (w, b), q/k/v/o and fc/proj with biases.
int64_t gpt2_block_params(int64_t C, int64_t F) { return 4 * C + 4 * (C * C + C) + (C * F + F) + (F * C + C); }

// Catches: a DDP volume other than one all-reduce of every gradient, or a ring factor
// other than 2(n-1)/n.
TEST(CommModel, DdpAllReducesEveryGradientOnceWithTheRingVolume) {
  const RunConfig c = small_gpt2();  // dp_replicate fills the 4 ranks
  const StepCommunication s = predict_step_communication(c, 4);
  const OpVolume& ar = s[Axis::dp][CommOp::all_reduce];
  const int64_t payload = 4 * params(c.model);
  // The gradients' bucket, plus the mean loss (one float).
  EXPECT_EQ(ar.calls, 2);
  EXPECT_EQ(ar.payload_bytes, payload + 4);
  EXPECT_EQ(ar.wire_bytes, 2 * 3 * payload / 4 + 2 * 3 * 4 / 4);
  EXPECT_EQ(s[Axis::tp].calls(), 0);
  EXPECT_EQ(s[Axis::dp_cp][CommOp::all_reduce].calls, 2) << "dp_cp is dp's communicator without cp";
  // bf16 reduction halves the bucket's payload.
  RunConfig half = c;
  half.reduce_dtype = DType::bf16;
  EXPECT_EQ(predict_step_communication(half, 4)[Axis::dp][CommOp::all_reduce].payload_bytes, payload / 2 + 4);
  // Small buckets: as many all-reduces, the same bytes.
  RunConfig small = c;
  small.bucket_mb = 0.01;
  const OpVolume many = predict_step_communication(small, 4)[Axis::dp][CommOp::all_reduce];
  EXPECT_GT(many.calls, 3);
  EXPECT_EQ(many.payload_bytes, payload + 4);
}

// Catches: FSDP gathering a block once instead of before forward and again before
// backward, the root group resharded, a reduce-scatter missing or counted per unit.
TEST(CommModel, Zero3GathersEachBlockTwiceAndTheRootOnce) {
  RunConfig c = small_gpt2();
  c.mesh = mesh_of(1, 4, 1, 1);
  c.zero_stage = 3;
  const int64_t L = c.model.n_layer, block = gpt2_block_params(64, 256), root = params(c.model) - L * block;
  const StepCommunication s = predict_step_communication(c, 4);
  const OpVolume& ag = s[Axis::dp_shard][CommOp::all_gather];
  EXPECT_EQ(ag.calls, 1 + 2 * L);
  EXPECT_EQ(ag.payload_bytes, 4 * (root + 2 * L * block));  // widths divide by 4: no padding
  EXPECT_EQ(ag.wire_bytes, 3 * root + 2 * L * 3 * block);  // (n-1)/n of each
  const OpVolume& rs = s[Axis::dp_shard][CommOp::reduce_scatter];
  EXPECT_EQ(rs.calls, 1 + L);
  EXPECT_EQ(rs.payload_bytes, 4 * params(c.model));
  // The norm's sum of squares (one float on dp_shard), the mean loss on dp.
  EXPECT_EQ(s[Axis::dp_shard][CommOp::all_reduce].calls, 1);
  EXPECT_EQ(s[Axis::dp][CommOp::all_reduce].calls, 1);
  // Without resharding after forward, the blocks stay gathered for their backward.
  c.reshard_after_forward = false;
  EXPECT_EQ(predict_step_communication(c, 4)[Axis::dp_shard][CommOp::all_gather].calls, 1 + L);
  // Two micro-batches: everything per micro-batch twice.
  c.reshard_after_forward = true;
  c.micro_batch_size = 1;  // 8 rows over 4 ranks: 2 micro-batches of 1
  EXPECT_EQ(predict_step_communication(c, 4)[Axis::dp_shard][CommOp::all_gather].calls, 2 * (1 + 2 * L));
}

// Catches: a tp volume other than Megatron's 2 all-reduces of B x T x C per block in
// forward and 2 in backward, the embedding's and the output layer's missing, the loss's
// two per row chunk missing; sequence parallel not trading each for a gather/scatter pair.
TEST(CommModel, TensorParallelAllReducesTwicePerBlockEachWay) {
  RunConfig c = small_gpt2();
  c.mesh = mesh_of(1, 1, 1, 2);
  c.batch_size = 4;
  c.loss_chunk_rows = 48;
  const int64_t L = c.model.n_layer, rows = 4 * 32, activation = rows * 64 * 4;
  const StepCommunication s = predict_step_communication(c, 2);  // dp_replicate 1
  const OpVolume& ar = s[Axis::tp][CommOp::all_reduce];
  const int64_t chunks = 3;  // 128 rows in chunks of 48
  // Blocks 4L, embedding 1, output layer's input gradient 1; loss 2 per chunk; the norm 1.
  EXPECT_EQ(ar.calls, 4 * L + 2 + 2 * chunks + 1);
  EXPECT_EQ(ar.payload_bytes, (4 * L + 2) * activation + 3 * rows * 4 + 4);
  EXPECT_EQ(ar.wire_bytes, ar.payload_bytes);  // 2(n-1)/n = 1 at n = 2
  EXPECT_EQ(s[Axis::tp][CommOp::all_gather].calls, 0);
  // Sequence parallel: per block 2 all-gathers and 2 reduce-scatters each way.
  c.sequence_parallel = true;
  const StepCommunication sp = predict_step_communication(c, 2);
  EXPECT_EQ(sp[Axis::tp][CommOp::all_gather].calls, 4 * L + 2);      // + head forward, embedding backward
  EXPECT_EQ(sp[Axis::tp][CommOp::reduce_scatter].calls, 4 * L + 2);  // + embedding forward, head backward
  EXPECT_EQ(sp[Axis::tp][CommOp::all_gather].payload_bytes, (4 * L + 2) * activation);
}

// Catches: a boundary message of another size than micro-batch x T x d_model floats, or
// a stage sending what it should receive.
TEST(CommModel, PipelineSendsOneActivationAndOneGradientPerMicroBatch) {
  RunConfig c = small_gpt2();
  c.mesh = mesh_of(2, 1, 1, 1);
  c.micro_batch_size = 1;
  c.batch_size = 8;  // dp 1: 8 micro-batches
  const int64_t boundary = 1 * 32 * 64 * 4;
  for (int stage : {0, 1}) {
    const StepCommunication s = predict_step_communication(c, 2, stage);
    EXPECT_EQ(s[Axis::pp][CommOp::send].calls, 8) << stage;  // activations out (0), gradients out (1)
    EXPECT_EQ(s[Axis::pp][CommOp::send].payload_bytes, 8 * boundary) << stage;
    EXPECT_EQ(s[Axis::pp][CommOp::send].wire_bytes, 8 * boundary) << stage;
    EXPECT_EQ(s[Axis::pp][CommOp::recv].payload_bytes, 8 * boundary) << stage;
    EXPECT_EQ(s[Axis::pp][CommOp::recv].wire_bytes, 0) << stage;
    // The tied embedding's gradient between the two end stages: its own pair.
    EXPECT_EQ(s.tied_embedding[CommOp::all_reduce].payload_bytes, 4 * 256 * 64) << stage;
  }
}

// Catches: the V placement counted as a loop: at pp = 2 rank 0 holds chunks 0 and 3, rank
// 1 chunks 1 and 2, so each rank sends 2 boundaries per micro-batch (rank 0: chunk 0's
// activation, chunk 3's gradient; rank 1: chunk 2's activation, chunk 1's gradient) and
// nothing between chunks 1 and 2; the tied embedding and head both on rank 0: no sum.
TEST(CommModel, VPlacementSendsNothingInsideARankAndSumsNoTiedCopies) {
  RunConfig c = small_gpt2();
  c.mesh = mesh_of(2, 1, 1, 1);
  c.micro_batch_size = 1;
  c.batch_size = 8;
  c.model.n_layer = 4;  // 4 chunks
  c.pp_virtual_stages = 2;
  const int64_t boundary = 1 * 32 * 64 * 4;
  for (PipelineSchedule schedule : {PipelineSchedule::zb_v, PipelineSchedule::dualpipev}) {
    c.pp_schedule = schedule;
    for (int stage : {0, 1}) {
      const StepCommunication s = predict_step_communication(c, 2, stage);
      EXPECT_EQ(s[Axis::pp][CommOp::send].calls, 2 * 8) << stage;
      EXPECT_EQ(s[Axis::pp][CommOp::send].payload_bytes, 2 * 8 * boundary) << stage;
      EXPECT_EQ(s[Axis::pp][CommOp::recv].payload_bytes, 2 * 8 * boundary) << stage;
      EXPECT_EQ(s.tied_embedding[CommOp::all_reduce].payload_bytes, 0) << stage;
    }
  }
}

// Catches: a prediction that walks ranks or tensors: a 405B Llama over 16K ranks (tp 8 x
// pp 16 x dp 128, FSDP; and with cp 16) predicted in well under a millisecond.
TEST(CommModel, Llama405bOnSixteenThousandRanksIsPredictedInUnderAMillisecond) {
  RunConfig c;
  c.model.arch = Arch::llama;
  c.model.n_layer = 126, c.model.d_model = 16384, c.model.n_head = 128, c.model.n_kv_head = 8;
  c.model.d_ff = 53248, c.model.vocab_size = 128256, c.model.max_seq_len = 8192;
  c.model.tied_embeddings = false;
  c.seq_len = 8192;
  c.batch_size = 2048;
  c.micro_batch_size = 1;
  c.zero_stage = 3;
  c.mesh = mesh_of(16, 128, 1, 8);
  c.sequence_parallel = true;
  for (int cp : {1, 16}) {
    c.mesh.cp = cp, c.mesh.dp_shard = 128 / cp;
    // The pipeline partition is the planner's, once per pipeline shape (it costs more
    // than a prediction); the rest is per rank.
    const PipelineStages stages = partition_pipeline(c.model, c.seq_len, 16);
    StepCommunication s;
    const int calls = 32;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) s = predict_step_communication(c, 16384, i % 16, &stages);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / calls;
    EXPECT_LT(seconds, 0.5e-3) << "cp " << cp;
    EXPECT_GT(s[Axis::tp][CommOp::all_gather].payload_bytes, 0);
    // The last stage (i = 31) sends each micro-batch's input gradient: 2048 / dp of them.
    EXPECT_EQ(s[Axis::pp][CommOp::send].calls, 2048 / c.mesh.dp_shard);
    // The same with the partition computed here.
    const StepCommunication again = predict_step_communication(c, 16384, (calls - 1) % 16);
    EXPECT_EQ(again[Axis::dp_shard_cp][CommOp::all_gather].payload_bytes,
              s[Axis::dp_shard_cp][CommOp::all_gather].payload_bytes);
    RecordProperty(cp == 1 ? "seconds_cp1" : "seconds_cp16", std::to_string(seconds));
  }
}

}  // namespace
}  // namespace ndt
