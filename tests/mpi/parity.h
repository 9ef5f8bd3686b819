// Shared by the multi-rank parity tests: a tiny training run, its losses and final
// parameters, and the comparison against the one-rank reference.
#pragma once

#include "mpi_env.h"
#include "comm/device_mesh.h"
#include "core/memory.h"
#include "core/rng.h"
#include "parallel/memory_model.h"
#include "train/trainer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

namespace ndt::testing {

inline RunConfig tiny_run(const std::string& train, int batch, int micro) {
  RunConfig c;
  c.model = ModelConfig::preset("gpt2-tiny");
  c.model.n_layer = 2;
  c.model.d_model = 32;
  c.model.d_ff = 128;
  c.model.n_head = 4;
  c.model.max_seq_len = 16;
  c.seq_len = 16;
  c.batch_size = batch;
  c.micro_batch_size = micro;
  c.steps = 20;
  c.eval_every = 0;
  c.eval_batches = 1;
  c.sample_tokens = 0;
  c.threads = 1;
  c.peak_gflops = 100;
  c.out_dir = "";
  c.schedule.max_lr = 3e-3f;
  c.schedule.warmup_steps = 2;
  c.bucket_mb = 0.02;  // several buckets even for a tiny model
  c.train_data = train;
  return c;
}

// The Llama shape of the multi-rank tests: untied output, 8 heads on 4 K/V heads (GQA,
// 2 query heads per K/V head even on 4 tp ranks), QK-norm.
inline void use_llama(RunConfig& c) {
  c.model.arch = Arch::llama;
  c.model.tied_embeddings = false;
  c.model.n_head = 8;
  c.model.n_kv_head = 4;
  c.model.d_ff = 96;
  c.model.qk_norm = true;
}

// tiny_run on sequences of 144 tokens for context parallelism: chunks of 36 (cp = 2) or
// 18 (cp = 4), local sequences of 72 or 36 tokens, none a multiple of the attention
// kernel's row block; clipping off (GPT-2) or never firing (Llama).
inline RunConfig long_context_run(const std::string& train, bool llama) {
  RunConfig c = tiny_run(train, 4, 0);
  c.model.max_seq_len = 144;
  c.seq_len = 144;
  if (llama) use_llama(c);
  c.grad_clip = llama ? 1e3f : 0.0f;
  return c;
}

// A mixture-of-experts version of tiny_run: 4 experts of width 48, top-2, every block;
// clipping off (GPT-2) or never firing (Llama), as the parity tests need.
inline RunConfig moe_run(const std::string& train, bool llama) {
  RunConfig c = tiny_run(train, 8, 0);
  if (llama) use_llama(c);
  c.model.n_experts = 4;
  c.model.moe_top_k = 2;
  c.model.moe_d_ff = 48;
  c.grad_clip = llama ? 1e3f : 0.0f;
  return c;
}

// A model family, the parameter of the tests run for both.
struct Family {
  const char* name;
  bool llama;
};
inline void PrintTo(const Family& f, std::ostream* os) { *os << f.name; }

struct TrainedRun {
  std::vector<double> losses;
  std::vector<double> grad_norms;  // of each step, before clipping
  std::vector<float> params;
  std::vector<std::string> interventions;  // of each step (StepStats::intervention; "" when none)
  // Mixture of experts: each step's load-balancing term and the assignments each expert
  // processed (empty vectors for a dense model).
  std::vector<double> moe_aux;
  std::vector<std::vector<int64_t>> moe_tokens;
};

// Optional: called just before and just after the last step (a test measuring one
// step's counters or ledger peaks).
struct LastStepProbe {
  std::function<void()> before, after;
};

inline TrainedRun train(const RunConfig& config, DeviceMesh& mesh, const LastStepProbe* probe = nullptr) {
  Trainer trainer(config, mesh, nullptr);
  TrainedRun run;
  for (int64_t s = 0; s < config.steps; ++s) {
    const bool last = probe && s + 1 == config.steps;
    if (last) probe->before();
    const StepStats stats = trainer.step();
    if (last) probe->after();
    run.losses.push_back(stats.loss);
    run.grad_norms.push_back(stats.grad_norm);
    run.interventions.push_back(stats.intervention);
    run.moe_aux.push_back(stats.moe_aux_loss);
    run.moe_tokens.push_back(stats.moe_tokens_per_expert);
  }
  run.params = trainer.full_parameters();
  return run;
}

// The run of `config` on a mesh of the whole world.
inline TrainedRun train_on_world(const RunConfig& config) {
  Communicator& world = testing::world();
  DeviceMesh mesh(world, config.resolve_mesh(world.size()));
  return train(config, mesh);
}

// Steps up to `to` (resuming from `resume` if set), saving at `to` if `save`: each
// step's loss and the final parameters.
inline TrainedRun train_until(RunConfig c, DeviceMesh& mesh, int64_t to, const std::string& resume, bool save) {
  c.resume = resume;
  Trainer trainer(c, mesh, nullptr);
  TrainedRun run;
  while (trainer.steps_done() < to) run.losses.push_back(trainer.step().loss);
  if (save) trainer.save_checkpoint(false), trainer.finish_checkpoints();
  run.params = trainer.full_parameters();
  return run;
}

// n tokens of documents of 1 to max_length tokens of [0, 200), each after `separator`, as
// `prepare` writes them (the same documents for the same max_length).
inline std::vector<uint16_t> separated_documents(int64_t n, uint16_t separator, uint64_t max_length) {
  std::vector<uint16_t> out;
  for (uint64_t d = 0; static_cast<int64_t>(out.size()) < n; ++d) {
    out.push_back(separator);
    const uint64_t length = 1 + philox(17, 1, d)[0] % max_length;
    for (uint64_t i = 0; i < length; ++i) out.push_back(static_cast<uint16_t>(philox(17, 2 + d, i)[0] % 200));
  }
  out.resize(static_cast<size_t>(n));
  return out;
}

// A first step computed by hand, to hold a run's step 1 against: its loss and the norm
// of its gradient (gradient_norm of the model that computed it).
struct FirstStep {
  double loss = 0, grad_norm = 0;
};

inline double gradient_norm(const ParameterStore& store) {
  double squares = 0;
  for (const Parameter& p : store.params()) {
    for (int64_t i = 0; i < p.numel(); ++i) squares += double(p.grad_data()[i]) * p.grad_data()[i];
  }
  return std::sqrt(squares);
}

// Losses and gradient norms of every step within 1e-5 (the norm catches a gradient off
// by a constant factor, which clipping and AdamW hide from the losses; norm_tolerance
// widens its bound where the run's own rounding is larger), and the final parameters.
inline void expect_same_run(const TrainedRun& reference, const TrainedRun& parallel, const char* what,
                            double norm_tolerance = 1e-5) {
  ASSERT_EQ(reference.losses.size(), parallel.losses.size());
  for (size_t i = 0; i < reference.losses.size(); ++i) {
    EXPECT_NEAR(parallel.losses[i], reference.losses[i], 1e-5 * std::fabs(reference.losses[i]))
        << what << ": loss of step " << i;
    EXPECT_NEAR(parallel.grad_norms[i], reference.grad_norms[i], norm_tolerance * std::fabs(reference.grad_norms[i]))
        << what << ": gradient norm of step " << i;
    // MoE: the load-balancing term, and the routing itself (the same tokens to the same
    // experts, so the same drops under a capacity).
    if (i < reference.moe_aux.size() && i < parallel.moe_aux.size()) {
      EXPECT_NEAR(parallel.moe_aux[i], reference.moe_aux[i], 1e-5 * std::fabs(reference.moe_aux[i]))
          << what << ": MoE load-balancing loss of step " << i;
      EXPECT_EQ(parallel.moe_tokens[i], reference.moe_tokens[i]) << what << ": tokens per expert of step " << i;
    }
  }
  // Parameters: relative difference of the whole vector, ||p - p_ref|| / ||p_ref||. (Per
  // element it is ill-conditioned: Adam divides by sqrt(v), so an element whose gradient
  // is at rounding level moves by up to lr whatever the order of additions.)
  ASSERT_EQ(reference.params.size(), parallel.params.size());
  double diff = 0, norm = 0;
  for (size_t i = 0; i < reference.params.size(); ++i) {
    const double d = static_cast<double>(parallel.params[i]) - reference.params[i];
    diff += d * d;
    norm += static_cast<double>(reference.params[i]) * reference.params[i];
  }
  EXPECT_LT(std::sqrt(diff / norm), 1e-5) << what << ": final parameters";
}

// The largest relative difference of the losses and gradient norms over the steps, and
// of the final parameters (as a vector, like expect_same_run).
struct Difference {
  double losses = 0, norms = 0, params = 0;
};

inline Difference compare(const testing::TrainedRun& reference, const testing::TrainedRun& run) {
  Difference d;
  for (size_t i = 0; i < reference.losses.size(); ++i) {
    d.losses = std::max(d.losses, std::fabs(run.losses[i] - reference.losses[i]) / std::fabs(reference.losses[i]));
    d.norms = std::max(d.norms,
                       std::fabs(run.grad_norms[i] - reference.grad_norms[i]) / std::fabs(reference.grad_norms[i]));
  }
  double diff = 0, norm = 0;
  for (size_t i = 0; i < reference.params.size(); ++i) {
    const double e = static_cast<double>(run.params[i]) - reference.params[i];
    diff += e * e, norm += static_cast<double>(reference.params[i]) * reference.params[i];
  }
  d.params = std::sqrt(diff / norm);
  return d;
}

// A run resumed at step `from` of a 20-step reference: its losses (steps from .. 19) within
// 1e-5 and its final parameters as expect_same_run compares them.
inline void expect_resumed(const TrainedRun& reference, const TrainedRun& resumed, size_t from, const char* what) {
  ASSERT_EQ(resumed.losses.size(), reference.losses.size() - from) << what;
  for (size_t i = 0; i < resumed.losses.size(); ++i) {
    EXPECT_NEAR(resumed.losses[i], reference.losses[from + i], 1e-5 * reference.losses[from + i])
        << what << " step " << from + i;
  }
  TrainedRun a, b;
  a.params = reference.params, b.params = resumed.params;
  expect_same_run(a, b, what);
}

// The ledger's model-state bytes at one moment, and their growth since then against the
// memory model within 2% (what: the case and rank, for the message).
struct LedgerModelStates {
  size_t params = 0, grads = 0, optimizer = 0;
  static LedgerModelStates now() {
    const MemoryLedger& l = MemoryLedger::instance();
    return {l.current(MemTag::params), l.current(MemTag::grads), l.current(MemTag::optimizer)};
  }
};

inline void expect_within_2_percent(size_t measured, int64_t expected, const std::string& what) {
  EXPECT_NEAR(static_cast<double>(measured), static_cast<double>(expected), 0.02 * expected) << what;
}

inline void expect_model_states_since(const LedgerModelStates& before, const ModelStateBytes& predicted,
                                      const std::string& what) {
  const LedgerModelStates now = LedgerModelStates::now();
  expect_within_2_percent(now.params - before.params, predicted.params, what + ", params");
  expect_within_2_percent(now.grads - before.grads, predicted.grads, what + ", grads");
  expect_within_2_percent(now.optimizer - before.optimizer, predicted.optimizer, what + ", optimizer");
}

}  // namespace ndt::testing
