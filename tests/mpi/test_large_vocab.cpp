// A vocabulary past 65,535 (Llama 3's 128,256) read from uint32 shards (version 2) trains
// under tp (vocab-parallel embedding and loss) and FSDP exactly as on one rank.
// Catches: ids past 65,535 truncated to 16 bits on the way to the embedding, a vocab-parallel
// shard boundary off by one, a uint32 shard read as uint16.
#include "../common/one_rank_mesh.h"
#include "data/shard.h"
#include "mpi_env.h"
#include "parity.h"
#include "../common/temp_dir.h"
#include "../train/test_support.h"

#include <gtest/gtest.h>

namespace ndt {
namespace {

RunConfig large_vocab_run(const std::string& train) {
  RunConfig c = testing::tiny_run(train, 8, 0);
  testing::use_llama(c);
  c.model.vocab_size = 128256;
  c.loss_chunk_rows = 16;  // 16 x 128256 logits at a time
  c.steps = 6;
  c.grad_clip = 1e3f;  // never fires: a constant-factor gradient error shows in the norms
  return c;
}

TEST(LargeVocab, Uint32ShardsTrainUnderTpAndFsdpLikeOneRank) {
  Communicator& world = testing::world();
  testing::TempDir dir;
  const std::vector<uint16_t> text = testing::synthetic_text(30000, 43);
  std::vector<uint32_t> tokens(text.size());
  for (size_t i = 0; i < text.size(); ++i) tokens[i] = 65536u + 240u * text[i];  // ids 65536 .. 126736
  write_shard_u32(dir.file("train.bin"), tokens, 128256);
  const testing::TrainedRun reference = testing::train(large_vocab_run(dir.file("train.bin")), testing::one_rank_mesh());
  ASSERT_EQ(reference.losses.size(), 6u);
  EXPECT_LT(reference.losses.back(), reference.losses.front());
  {
    RunConfig tp = large_vocab_run(dir.file("train.bin"));
    tp.mesh.tp = 2;
    DeviceMesh mesh(world, tp.resolve_mesh(world.size()));
    testing::expect_same_run(reference, testing::train(tp, mesh), "tp = 2");
  }
  {
    RunConfig fsdp = large_vocab_run(dir.file("train.bin"));
    fsdp.mesh.dp_shard = world.size();
    fsdp.zero_stage = 3;
    DeviceMesh mesh(world, fsdp.resolve_mesh(world.size()));
    testing::expect_same_run(reference, testing::train(fsdp, mesh), "fsdp");
  }
}

}  // namespace
}  // namespace ndt
