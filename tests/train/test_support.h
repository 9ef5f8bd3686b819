// Synthetic text and a small run configuration for the training tests.
#pragma once

#include "core/rng.h"
#include "data/shard.h"
#include "core/error.h"
#include "train/config.h"
#include "train/trainer.h"
#include "../common/one_rank_mesh.h"
#include "../common/temp_dir.h"

#include <string>
#include <vector>

namespace ndt::testing {

// A byte stream with structure to learn: words from a small vocabulary in an
// RNG-chosen order, separated by spaces.
inline std::vector<uint16_t> synthetic_text(int64_t n, uint64_t seed) {
  static const char* words[] = {"the ", "cat ", "sat ", "on ", "a ", "mat ", "and ", "dog ", "ran "};
  std::vector<uint16_t> out;
  for (uint64_t i = 0; static_cast<int64_t>(out.size()) < n; ++i) {
    for (const char* ch = words[philox(seed, 11, i)[0] % 9]; *ch; ++ch) out.push_back(static_cast<unsigned char>(*ch));
  }
  out.resize(n);
  return out;
}

// A two-layer byte-level GPT-2 on one rank, quick to train: the trainer tests' run.
inline RunConfig small_run(const std::string& train, int64_t steps) {
  RunConfig c;
  c.model = ModelConfig::preset("gpt2-tiny");
  c.model.n_layer = 2;
  c.model.d_model = 64;
  c.model.d_ff = 256;
  c.model.max_seq_len = 32;
  c.seq_len = 32;
  c.batch_size = 8;
  c.micro_batch_size = 8;
  c.steps = steps;
  c.eval_every = 0;
  c.eval_batches = 2;
  c.sample_tokens = 0;
  c.threads = 2;
  c.peak_gflops = 100;  // skip the calibration
  c.out_dir = "";
  c.schedule.max_lr = 3e-3f;
  c.schedule.warmup_steps = 3;
  c.train_data = train;
  return c;
}

// A token shard of synthetic text for tests that only need data.train to exist (made
// once per process, removed at its end).
inline const std::string& shared_shard() {
  static TempDir dir;
  static const std::string path = [] {
    write_shard(dir.file("train.bin"), synthetic_text(4000, 7));
    return dir.file("train.bin");
  }();
  return path;
}

// The error a Trainer built from `c` stops with before step 1; "" when it starts.
inline std::string trainer_error(const RunConfig& c) {
  try {
    Trainer trainer(c, one_rank_mesh(), nullptr);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace ndt::testing

#define EXPECT_MENTIONS(message, text) \
  EXPECT_NE(std::string(message).find(text), std::string::npos) << "message lacks '" << (text) << "': " << (message)
