// The disk tier of the memory model against the ledger: on one rank, the peak of every
// model-state tag during training steps equals parallel/offload_model.h's prediction,
// bytes on disk equal its swap files, and a memory limit that in-memory training of a
// model exceeds holds the same model with offload.
#include "../common/temp_dir.h"
#include "offload_runs.h"
#include "parallel/offload_model.h"
#include "parallel/tensor/tensor_parallel.h"

#include <gtest/gtest.h>

namespace ndt {
namespace {

struct Case {
  const char* name;
  int stage;
  bool optimizer, params;
  int prefetch;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class OffloadMemory : public ::testing::TestWithParam<Case> {
 protected:
  OffloadMemory() { write_shard(dir_.file("train.bin"), testing::synthetic_text(20000, 6)); }
  RunConfig run() const {
    const Case& k = GetParam();
    RunConfig c = testing::offload_run(dir_.file("train.bin"), k.stage, k.optimizer, k.params, dir_.file("swap"));
    c.offload_prefetch = k.prefetch;
    c.steps = 3;
    return c;
  }
  testing::TempDir dir_;
};

OffloadSettings settings_of(const RunConfig& c) {
  OffloadSettings o;
  o.optimizer = c.offload_optimizer;
  o.params = c.offload_params;
  o.chunk_bytes = static_cast<int64_t>(c.offload_chunk_mb * 1024 * 1024);
  o.prefetch = c.offload_prefetch;
  return o;
}

// Catches: a tag's peak drifting from the model (a buffer kept longer, a read-ahead of
// more units than offload.prefetch, shard buffers of every group kept, moments left in
// memory), and I/O per step other than predicted (a unit read twice, a chunk rewritten).
TEST_P(OffloadMemory, PeakPerTagIsThePrediction) {
  const RunConfig c = run();
  MemoryLedger& ledger = MemoryLedger::instance();
  const size_t base[] = {ledger.current(MemTag::params), ledger.current(MemTag::grads), ledger.current(MemTag::optimizer)};
  Trainer trainer(c, testing::one_rank_mesh(), nullptr);
  const TieredStates t = predict_tiered_states(model_parameter_specs(c.model), 1, c.zero_stage, settings_of(c));
  ledger.reset_peaks();
  for (int s = 0; s < 3; ++s) {
    const StepStats stats = trainer.step();
    if (s == 0) continue;  // the first step reads no moments (they start as zeros, never written)
    EXPECT_EQ(stats.io_read_bytes, t.read_bytes) << GetParam().name << ": bytes read in step " << s + 1;
    EXPECT_EQ(stats.io_write_bytes, t.write_bytes) << GetParam().name << ": bytes written in step " << s + 1;
  }
  const char* tags[] = {"params", "grads", "optimizer"};
  const int64_t predicted[] = {t.peak.params, t.peak.grads, t.peak.optimizer};
  const MemTag kinds[] = {MemTag::params, MemTag::grads, MemTag::optimizer};
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(static_cast<int64_t>(ledger.peak(kinds[i]) - base[i]), predicted[i]) << GetParam().name << ": " << tags[i];
    const int64_t disk[] = {t.disk.params, t.disk.grads, t.disk.optimizer};
    EXPECT_EQ(static_cast<int64_t>(ledger.disk_current(kinds[i])), disk[i]) << GetParam().name << ": " << tags[i] << " on disk";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, OffloadMemory,
    ::testing::Values(Case{"zero1_memory", 1, false, false, 2}, Case{"zero1_optimizer", 1, true, false, 2},
                      Case{"zero2_memory", 2, false, false, 2}, Case{"zero2_optimizer", 2, true, false, 2},
                      Case{"fsdp_memory", 3, false, false, 2}, Case{"fsdp_optimizer", 3, true, false, 2},
                      Case{"fsdp_params", 3, true, true, 2}, Case{"fsdp_params_prefetch0", 3, true, true, 0},
                      Case{"fsdp_params_prefetch1", 3, true, true, 1}, Case{"fsdp_params_prefetch4", 3, true, true, 4}),
    [](const auto& info) { return std::string(info.param.name); });

// The ledger's whole peak (every tag, activations and communication buffers too) over
// two steps of `c` from a fresh trainer, and the swap bytes on disk meanwhile.
struct Measured {
  size_t peak = 0, disk = 0;
};
Measured measure(const RunConfig& c) {
  MemoryLedger& ledger = MemoryLedger::instance();
  const size_t before = ledger.current_total();
  ledger.reset_peaks();
  Trainer trainer(c, testing::one_rank_mesh(), nullptr);
  for (int s = 0; s < 2; ++s) trainer.step();
  return {ledger.peak_total() - before, ledger.disk_current_total()};
}

// Catches: offload that moves bytes to disk yet keeps a copy in memory, or a model whose
// states fit only because the test's model is too small to tell.
TEST(OffloadMemoryLimit, AModelThatOverflowsTheLimitInMemoryTrainsUnderItWithOffload) {
  testing::TempDir dir;
  write_shard(dir.file("train.bin"), testing::synthetic_text(20000, 7));
  RunConfig c = testing::offload_run(dir.file("train.bin"), 3, false, false, dir.file("swap"));
  c.model.n_layer = 12;
  c.model.d_model = 96;
  c.model.d_ff = 384;
  c.batch_size = c.micro_batch_size = 1;
  // 12 MiB: the model's fp32 states alone are 16 bytes x 1.36M parameters = 22 MB (measured
  // in memory: 28 MB with activations and buffers; offloaded: 7.3 MB).
  const size_t limit = 12u << 20;
  const Measured memory = measure(c);
  c.offload_optimizer = c.offload_params = true;
  c.offload_chunk_mb = 0.125;
  const Measured offloaded = measure(c);
  EXPECT_GT(memory.peak, limit) << "in memory";
  EXPECT_LT(offloaded.peak, limit) << "with the optimizer, parameters and gradients on disk";
  const TieredStates t = predict_tiered_states(model_parameter_specs(c.model), 1, 3, settings_of(c));
  EXPECT_EQ(static_cast<int64_t>(offloaded.disk), t.disk.total());
  EXPECT_GT(t.disk.total(), 12 * count_parameters(c.model)) << "16 bytes a parameter, chunks rounded up, are on disk";
}

}  // namespace
}  // namespace ndt
