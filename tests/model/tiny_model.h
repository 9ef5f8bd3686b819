// Tiny model shapes and tokens shared by the model tests.
#pragma once

#include "core/rng.h"
#include "model/config.h"
#include "model/transformer.h"

#include <cstdint>
#include <vector>

namespace ndt::testing {

// GPT-2 (tied, MHA) or Llama (untied, GQA: 2 KV heads for 4) of width 16, 2 layers.
inline ModelConfig tiny(Arch arch, bool qk_norm) {
  ModelConfig c;
  c.arch = arch;
  c.vocab_size = 13;
  c.max_seq_len = 8;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_kv_head = arch == Arch::llama ? 2 : 4;
  c.d_model = 16;
  c.d_ff = arch == Arch::llama ? 24 : 64;
  c.qk_norm = qk_norm;
  c.tied_embeddings = arch == Arch::gpt2;
  c.init_std = 0.3f;  // large enough that every path carries a visible gradient
  return c;
}

inline std::vector<int32_t> tokens(int n, int vocab, uint64_t stream) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = static_cast<int32_t>(philox(3, stream, i)[0] % vocab);
  return t;
}

// Two micro-batches in flight, as a pipeline schedule runs them: forward a, forward b,
// backward b, backward a (parameter gradients accumulate).
inline void run_interleaved(Transformer& model, MicroBatchContext& a, MicroBatchContext& b) {
  const int units = model.num_units();
  for (int u = 0; u < units; ++u) model.unit(u).forward(a);
  for (int u = 0; u < units; ++u) model.unit(u).forward(b);
  for (int u = units - 1; u >= 0; --u) model.unit(u).backward(b, nullptr);
  for (int u = units - 1; u >= 0; --u) model.unit(u).backward(a, nullptr);
}

}  // namespace ndt::testing
