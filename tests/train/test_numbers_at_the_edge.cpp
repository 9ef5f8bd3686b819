// Numbers at the edge (issue 35, class 2), the model and batch families: a model or a
// batch too large for any machine is refused before anything is allocated, naming the
// settings and the bytes (not "internal error: std::bad_alloc"); a model whose counts
// would leave 64 bits (or 2^50 parameters) is refused naming its fields; the last line of
// defence, a tensor the system will not give, names its bytes and tag. The MoE family is
// in tests/model/test_moe.cpp (capacity), the planner's cluster and device file in
// tests/plan, the simulator's in tests/pipeline.
#include "../mpi/parity.h"
#include "core/tensor.h"
#include "test_support.h"
#include "train/memory_preflight.h"

#include <gtest/gtest.h>

#include <climits>
#include <functional>
#include <string>

namespace ndt {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Catches: a model that cannot fit refused only by the allocator ("std::bad_alloc",
// naming nothing), or its bytes computed in 32 bits.
TEST(NumbersAtTheEdge, ModelStatesBeyondTheMachineAreNamedBeforeAllocating) {
  RunConfig c = testing::tiny_run("unused", 4, 4);
  c.model.d_ff = 2000000000;  // 2 blocks x 2 x 32 x 2e9 = 2.6e11 parameters: 3.7 TiB of model states
  const RunMemoryFloor floor = run_memory_floor(c, MeshShape{});
  EXPECT_NEAR(floor.model_states, 16.0 * 2 * 2 * 32 * 2e9, 1e-6 * floor.model_states);
  const std::string e = error_of([&] { check_run_fits_in_memory(c, MeshShape{}, 64 * kGiB); });
  EXPECT_MENTIONS(e, "the model's parameters, gradients and AdamW moments need at least 3.");
  EXPECT_MENTIONS(e, "TiB on one rank (model.n_layer = 2, model.d_model = 32, model.d_ff = 2000000000");
  EXPECT_MENTIONS(e, "more than this machine's 64 GiB of memory");
  // ZeRO-3 over 8 ranks holds an eighth: the floor follows the layout.
  c.zero_stage = 3;
  EXPECT_NEAR(run_memory_floor(c, MeshShape{1, 1, 8, 1, 1}).model_states, floor.model_states / 8, 1e-6 * floor.model_states);
  // And a real run on this machine: any machine has less than 3.7e19 bytes.
  RunConfig huge = testing::tiny_run(testing::shared_shard(), 4, 0);
  huge.model.n_layer = 4096;
  huge.model.d_ff = 2000000000;  // 4096 x 2 x 32 x 2e9 = 5.2e14 parameters, 7.5 PiB
  EXPECT_MENTIONS(testing::trainer_error(huge), "PiB on one rank (model.n_layer = 4096, model.d_model = 32, model.d_ff = 2000000000");
}

// Catches: the preflight counting states that offload keeps on disk, refusing the very
// runs offload exists for (a model whose states exceed the machine's memory).
TEST(NumbersAtTheEdge, OffloadedModelStatesAreNotCountedAgainstMemory) {
  RunConfig c = testing::tiny_run("unused", 4, 4);
  c.model.d_ff = 2000000000;
  c.zero_stage = 1;
  const double in_memory = run_memory_floor(c, MeshShape{}).model_states;  // 16 bytes a parameter on one rank
  const double machine = 0.75 * in_memory;
  EXPECT_MENTIONS(error_of([&] { check_run_fits_in_memory(c, MeshShape{}, machine); }),
                  "the model's parameters, gradients and AdamW moments need at least");
  c.offload_optimizer = true;  // the moments on disk: 8 of the 16 bytes
  EXPECT_NEAR(run_memory_floor(c, MeshShape{}).model_states, in_memory / 2, 1e-6 * in_memory);
  EXPECT_EQ(error_of([&] { check_run_fits_in_memory(c, MeshShape{}, machine); }), "");
  c.zero_stage = 3, c.offload_params = true;  // parameter and gradient shards on disk too
  EXPECT_EQ(run_memory_floor(c, MeshShape{}).model_states, 0);
}

// Catches: the preflight counting gradients and moments of frozen parameters (fine-tuning
// with train.freeze or LoRA), refusing a run whose trainable states do fit.
TEST(NumbersAtTheEdge, FrozenParametersCountTheirValuesOnly) {
  RunConfig c = testing::tiny_run("unused", 4, 4);
  c.model.d_ff = 2000000000;
  const double whole = run_memory_floor(c, MeshShape{}).model_states;  // 16 bytes a parameter
  const double machine = 0.75 * whole;
  EXPECT_MENTIONS(error_of([&] { check_run_fits_in_memory(c, MeshShape{}, machine); }),
                  "the model's parameters, gradients and AdamW moments need at least");
  c.model.freeze = {"blocks"};  // nearly every parameter: 4 bytes each
  EXPECT_LT(run_memory_floor(c, MeshShape{}).model_states, 0.26 * whole);
  EXPECT_EQ(error_of([&] { check_run_fits_in_memory(c, MeshShape{}, machine); }), "");
  c.zero_stage = 3;  // the frozen values sharded too
  EXPECT_LT(run_memory_floor(c, MeshShape{1, 1, 4, 1, 1}).model_states, 0.26 * whole / 4);
}

// Catches: a batch too large for any machine ending in std::bad_alloc (or in the kernel's
// out-of-memory killer) instead of naming train.batch_size and the bytes.
TEST(NumbersAtTheEdge, ABatchBeyondTheMachineIsNamedBeforeAllocating) {
  RunConfig c = testing::tiny_run("unused", INT_MAX, 0);
  c.micro_batch_size = INT_MAX;
  const std::string e = error_of([&] { check_run_fits_in_memory(c, MeshShape{}, 64 * kGiB); });
  EXPECT_MENTIONS(e, "one micro-batch of train.micro_batch_size = 2147483647 sequences of train.seq_len = 16 tokens "
                     "(train.batch_size = 2147483647 over 1 data-parallel ranks) needs at least");
  EXPECT_MENTIONS(e, "the residual stream of each of model.n_layer = 2 blocks (model.d_model = 32) and a block's "
                     "attention probabilities (model.n_head = 4, seq_len per token)");
  // Exactly: 8 bytes of tokens, 3 unit boundaries of 32 floats and 16 probabilities of
  // each of 4 heads per token.
  EXPECT_DOUBLE_EQ(run_memory_floor(c, MeshShape{}).batch, double{INT_MAX} * 16 * (8 + 3 * 32 * 4 + 16 * 4 * 4));
  // Context parallel and sequence parallel split the tokens of the residual stream; cp
  // keeps no probabilities.
  RunConfig split = c;
  split.sequence_parallel = true;
  EXPECT_DOUBLE_EQ(run_memory_floor(split, MeshShape{1, 1, 1, 2, 2}).batch, double{INT_MAX} * 16 * (8 + 3 * 32 * 4 / 4.0));
  // A run of this machine: INT_MAX sequences of 256 tokens of width 1024 need petabytes.
  RunConfig huge = testing::tiny_run(testing::shared_shard(), INT_MAX, 0);
  huge.model.d_model = 1024, huge.model.max_seq_len = 256, huge.seq_len = 256;
  EXPECT_MENTIONS(testing::trainer_error(huge), "one micro-batch of train.micro_batch_size = 2147483647 sequences");
}

// Catches: counts derived from model fields overflowing 64 bits (a planner showing
// 0.0M of memory for d_model = 2e9), or millions of blocks built one spec at a time.
TEST(NumbersAtTheEdge, ModelFieldsWhoseCountsWouldOverflowAreRefused) {
  ModelConfig c = ModelConfig::preset("gpt2-tiny");
  c.d_model = 2000000000, c.n_head = 1;
  EXPECT_MENTIONS(error_of([&] { c.validate(); }), "the model would have about 6.4e+19 parameters (model.n_layer = 4, "
                                                    "model.d_model = 2000000000");
  c = ModelConfig::preset("gpt2-tiny");
  c.n_layer = kMaxLayers;
  c.validate();  // the edge itself is accepted
  c.n_layer = kMaxLayers + 1;
  EXPECT_EQ(error_of([&] { c.validate(); }), "model.n_layer = 65537 exceeds 65536 blocks (the deepest published models "
                                             "have about a hundred)");
  EXPECT_MENTIONS(error_of([&] { shape_numel({int64_t{1} << 40, int64_t{1} << 40}); }),
                  "tensor shape [1099511627776, 1099511627776] has more elements than a 64-bit count holds");
}

// Catches: memory the system refuses reported as a bare std::bad_alloc.
TEST(NumbersAtTheEdge, AnAllocationTheSystemRefusesNamesItsBytesAndTag) {
  EXPECT_MENTIONS(error_of([&] { Tensor::empty({int64_t{1} << 60}, DType::f32, MemTag::activations); }),
                  "cannot allocate 4 EiB (4611686018427387904 bytes) of activations memory");
}

}  // namespace
}  // namespace ndt
