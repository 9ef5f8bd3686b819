// `ndtrain bench checkpoint`: what a checkpoint of a model preset costs a training
// run. For one rank with AdamW state (parameters and both moments, 12 bytes per
// parameter): the time training is blocked by a synchronous save against an
// asynchronous one (which copies the state to a host snapshot before a background
// thread writes it; the wait for the write, if it outlasts the next step, counts as
// blocked too), the step time while a background write runs against
// without, and save and load throughput in MB/s. Medians over --reps.
#include "apps/ndtrain/commands.h"
#include "apps/ndtrain/synthetic_rows.h"
#include "train/training_model.h"
#include "core/timing.h"
#include "core/rng.h"
#include "kernels/cpu/threads.h"
#include "parallel/parallelize.h"
#include "train/checkpointing.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>

namespace ndt {

int run_bench_checkpoint(const CheckpointBenchOptions& o) {
  NDT_CHECK(!launched_by_mpi(), "bench checkpoint runs in one process: start it without mpirun");
  NDT_CHECK(o.reps > 0, "--reps {} must be positive", o.reps);
  cpu::set_num_threads(o.threads);
  RunConfig config;
  config.model = ModelConfig::preset(o.preset);
  config.checkpoint_dir = o.dir;
  config.keep_last = 1;
  config.out_dir = "";
  std::filesystem::create_directories(o.dir);

  config.batch_size = o.batch;
  config.seq_len = o.seq_len;
  config.seed = 1;
  config.threads = o.threads;
  DeviceMesh mesh;
  config = config.resolved(1);
  TrainingModel training(config, mesh);
  GradientSync* sync = &training.sync();
  const FetchRows rows = synthetic_rows(o.seq_len, config.model.vocab_size);
  auto train_step = [&] {
    const auto t0 = std::chrono::steady_clock::now();
    training.compute_gradients(rows, 1.0f / static_cast<float>(o.batch * o.seq_len));
    sync->step(1e-4f, 1.0f);
    return seconds_since(t0);
  };
  int64_t state_bytes = 0;
  for (const StateSlice& s : sync->state_slices()) state_bytes += shape_numel(s.shape()) * 4;
  fmt::print("bench checkpoint: {} ({:.2f}M parameters), state {:.1f} MB (parameters + AdamW moments), {} thread{}, "
             "into {}\n",
             o.preset, count_parameters(config.model) / 1e6, state_bytes / 1e6, o.threads, o.threads == 1 ? "" : "s",
             o.dir);
  std::fflush(stdout);
  train_step();  // warm-up; the moments are now non-zero

  TrainingCheckpoints checkpoints(config, mesh, nullptr);
  checkpoints.claim(std::nullopt, /*overwrite=*/true);  // the bench's own folder: an earlier bench's saves go
  std::vector<double> sync_blocked, async_blocked, plain_steps, overlapped_steps, write_rates, load_rates;
  int64_t step = 0;
  for (int r = 0; r < o.reps; ++r) {
    double before = checkpoints.blocked_seconds();
    ++step;
    checkpoints.save(step, *sync, training_state(config, step, *sync, mesh), /*async=*/false);
    sync_blocked.push_back(checkpoints.blocked_seconds() - before);
    write_rates.push_back(checkpoints.last_write_bytes() / 1e6 / checkpoints.last_write_seconds());

    plain_steps.push_back(train_step());
    before = checkpoints.blocked_seconds();
    ++step;
    checkpoints.save(step, *sync, training_state(config, step, *sync, mesh), /*async=*/true);
    overlapped_steps.push_back(train_step());  // while the background thread writes
    checkpoints.finish();  // counts as blocked only if the write outlasted the step
    async_blocked.push_back(checkpoints.blocked_seconds() - before);

    const auto t0 = std::chrono::steady_clock::now();
    load_training_checkpoint(checkpoints.root() / ("step-" + fmt::format("{:08d}", step)), *sync, config, mesh);
    load_rates.push_back(state_bytes / 1e6 / seconds_since(t0));
    fmt::print("  rep {}: blocked by a synchronous save {:.3f} s, by an asynchronous one {:.3f} s; step {:.3f} s, "
               "{:.3f} s during a background write\n",
               r, sync_blocked.back(), async_blocked.back(), plain_steps.back(), overlapped_steps.back());
    std::fflush(stdout);
  }
  fmt::print("  median: blocked {:.3f} s (sync) vs {:.3f} s (async): {:.1f}x less; write {:.0f} MB/s, load {:.0f} MB/s "
             "(verified checksums); a step takes {:.3f} s alone, {:.3f} s while a save is written\n",
             median(sync_blocked), median(async_blocked), median(sync_blocked) / median(async_blocked),
             median(write_rates), median(load_rates), median(plain_steps), median(overlapped_steps));
  return 0;
}

}  // namespace ndt
