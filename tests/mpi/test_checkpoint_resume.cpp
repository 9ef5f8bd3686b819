// Training checkpoints under mpirun: exact resume on the same mesh (bit-identical
// losses and parameters), resharding (save on one mesh, resume on others: one rank,
// DDP, tp, FSDP), and loads that must fail: a flipped byte, a missing file, a model
// that does not match.
#include "../common/temp_dir.h"
#include "../train/test_support.h"
#include "mpi_env.h"
#include "parity.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>

namespace ndt {
namespace {

using testing::tiny_run;

// A folder every rank of `comm` names the same (rank 0's pid), removed at scope exit.
class SharedDir {
 public:
  explicit SharedDir(Communicator& comm) : comm_(comm) {
    static int counter = 0;
    int32_t id[2] = {static_cast<int32_t>(::getpid()), counter++};
    comm.broadcast(id, 2, DType::i32, 0);
    path_ = std::filesystem::path("/tmp") / ("ndt_shared_" + std::to_string(id[0]) + "_" + std::to_string(id[1]));
    if (comm.rank() == 0) std::filesystem::remove_all(path_), std::filesystem::create_directories(path_);
    comm.barrier();
  }
  ~SharedDir() {
    comm_.barrier();
    std::error_code ec;
    if (comm_.rank() == 0) std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  Communicator& comm_;
  std::filesystem::path path_;
};

struct Layout {
  int dp_shard = 1, tp = 1, zero_stage = 0;
  bool sequence_parallel = false;
};

class CheckpointResume : public ::testing::Test {
 protected:
  CheckpointResume() { write_shard(data_.file("train.bin"), testing::synthetic_text(30000, 6)); }
  RunConfig config(const Layout& l, const std::filesystem::path& dir) const {
    RunConfig c = tiny_run(data_.file("train.bin"), 8, 0);
    c.model.arch = Arch::llama;  // GQA, RoPE, QK-norm, untied output: every kind of parameter
    c.model.tied_embeddings = false;
    c.model.n_head = 8;
    c.model.n_kv_head = 4;
    c.model.d_ff = 96;
    c.model.qk_norm = true;
    c.mesh.dp_shard = l.dp_shard;
    c.mesh.tp = l.tp;
    c.zero_stage = l.zero_stage;
    c.sequence_parallel = l.sequence_parallel;
    c.checkpoint_dir = dir.string();
    return c;
  }
  // Steps [from, to) of a run (resuming from `resume` if set), saving at `to` if `save`.
  testing::TrainedRun train(RunConfig c, DeviceMesh* mesh, int64_t to, const std::string& resume, bool save,
                            bool async = false) const {
    c.resume = resume;
    Trainer trainer(c, mesh, nullptr);
    testing::TrainedRun run;
    while (trainer.steps_done() < to) run.losses.push_back(trainer.step().loss);
    if (save) trainer.save_checkpoint(async), trainer.finish_checkpoints();
    run.params = trainer.full_parameters();
    return run;
  }
  testing::TempDir data_;
};

void expect_close(const std::vector<double>& a, const std::vector<double>& b, size_t offset, const char* what) {
  for (size_t i = 0; i < b.size(); ++i) {
    EXPECT_NEAR(b[i], a[offset + i], 1e-5 * std::fabs(a[offset + i])) << what << ": step " << offset + i;
  }
}

TEST_F(CheckpointResume, ExactOnTheSameMesh) {
  Communicator& world = testing::world();
  for (const Layout& l : {Layout{1, 1, 0}, Layout{world.size(), 1, 1}, Layout{world.size(), 1, 3},
                          Layout{1, world.size(), 0, true}}) {
    SharedDir dir(world);
    const RunConfig c = config(l, dir.path());
    DeviceMesh mesh(world, c.resolve_mesh(world.size()));
    const testing::TrainedRun straight = train(c, &mesh, 20, "", false);
    train(c, &mesh, 10, "", true, /*async=*/true);
    const testing::TrainedRun resumed = train(c, &mesh, 20, "latest", false);
    ASSERT_EQ(resumed.losses.size(), 10u);
    for (size_t i = 0; i < 10; ++i) EXPECT_EQ(resumed.losses[i], straight.losses[10 + i]) << "step " << 10 + i;
    EXPECT_EQ(resumed.params, straight.params) << "zero stage " << l.zero_stage << ", tp " << l.tp;
  }
}

TEST_F(CheckpointResume, ReshardsOntoAnyMesh) {
  Communicator& world = testing::world();
  const int n = world.size();
  SharedDir dir(world);
  // The reference: one rank, 20 steps straight (every rank computes it alone).
  testing::TempDir own;
  const testing::TrainedRun reference = train(config({}, own.path()), nullptr, 20, "", false);
  // Saved by FSDP (stage 3) x tp: 2 x 2 on 4 ranks, tp = 2 on 2.
  const Layout saved = n == 4 ? Layout{2, 2, 3, true} : Layout{1, 2, 0};
  {
    const RunConfig c = config(saved, dir.path());
    DeviceMesh mesh(world, c.resolve_mesh(n));
    train(c, &mesh, 10, "", true);
  }
  const std::string latest = "latest";
  // One rank (each rank on its own).
  expect_close(reference.losses, train(config({}, dir.path()), nullptr, 20, latest, false).losses, 10, "one rank");
  // Data parallel over 2 ranks (the world split in groups of 2).
  {
    std::unique_ptr<Communicator> pair = world.split(world.rank() / 2, world.rank(), "world");
    RunConfig c = config({}, dir.path());
    DeviceMesh mesh(*pair, c.resolve_mesh(2));
    expect_close(reference.losses, train(c, &mesh, 20, latest, false).losses, 10, "dp=2");
  }
  // tp over all ranks, FSDP and ZeRO-1 over all ranks, and HSDP (FSDP over 2 x 2 replicas).
  for (const Layout& l : {Layout{1, n, 0}, Layout{n, 1, 3}, Layout{n, 1, 1}, Layout{2, 1, 3}}) {
    const RunConfig c = config(l, dir.path());
    DeviceMesh mesh(world, c.resolve_mesh(n));
    const testing::TrainedRun resumed = train(c, &mesh, 20, latest, false);
    expect_close(reference.losses, resumed.losses, 10, ("tp=" + std::to_string(l.tp) + " zero stage " +
                                                        std::to_string(l.zero_stage)).c_str());
    testing::expect_same_run({{}, reference.params}, {{}, resumed.params}, "resharded parameters");
  }
}

TEST_F(CheckpointResume, BadCheckpointsFailWithoutLoadingAnything) {
  testing::TempDir dir;  // one rank per process
  RunConfig c = config({}, dir.path());
  train(c, nullptr, 2, "", true);
  const std::filesystem::path saved = dir.path() / "step-00000002";
  auto error_of = [&](const RunConfig& run) -> std::string {
    try {
      Trainer trainer(run, nullptr, nullptr);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  c.resume = saved.string();
  RunConfig deeper = c;
  deeper.model.n_layer = 3;
  EXPECT_NE(error_of(deeper).find("model.n_layer = 2 in the checkpoint, 3 in this run"), std::string::npos)
      << error_of(deeper);

  // A flipped byte in the data file: the checksum names the tensor.
  const std::string file = (saved / "rank-00000.bin").string();
  std::string bytes = testing::read_bytes(file);
  bytes[100] ^= 0x40;
  testing::write_bytes(file, bytes);
  const std::string flipped = error_of(c);
  EXPECT_NE(flipped.find("checksum mismatch in tensor wte.weight"), std::string::npos) << flipped;
  EXPECT_NE(flipped.find("rank-00000.bin"), std::string::npos) << flipped;

  std::filesystem::remove(file);
  const std::string missing = error_of(c);
  EXPECT_NE(missing.find("rank-00000.bin"), std::string::npos) << missing;

  RunConfig none = c;
  none.resume = (dir.path() / "nothing").string();
  EXPECT_NE(error_of(none).find("checkpoint path " + none.resume + " does not exist"), std::string::npos)
      << error_of(none);
}

}  // namespace
}  // namespace ndt
