#include "model/activations.h"

#include "core/error.h"

#include <algorithm>

namespace ndt {

BlockDims::BlockDims(const ModelConfig& c, const TpLayout& tp, int B, int T)
    : N(int64_t{B} * T), Nl(tp.local_rows(N)), C(c.d_model), F(c.d_ff / tp.size),
      QD(int64_t{c.d_model} / tp.size), KD(int64_t{c.kv_heads()} / tp.size * c.head_dim()),
      NH(c.n_head / tp.size), NKV(c.kv_heads() / tp.size), HS(c.head_dim()) {}

namespace {

// Hands out consecutive pieces of one float buffer; with base == nullptr it only counts.
class Carver {
 public:
  explicit Carver(float* base) : base_(base) {}
  float* take(int64_t n) {
    float* p = base_ ? base_ + used_ : nullptr;
    used_ += n;
    return p;
  }
  int64_t used() const { return used_; }

 private:
  float* base_;
  int64_t used_ = 0;
};

// The activations of the local rows (split by sequence parallel), first.
void carve_local_row_acts(const ModelConfig& c, const BlockDims& d, BlockActivations& a, Carver& m) {
  if (c.arch == Arch::gpt2) a.ln1_mean = m.take(d.Nl);
  a.ln1_rstd = m.take(d.Nl);
  a.x_mid = m.take(d.Nl * d.C);
  if (c.arch == Arch::gpt2) a.ln2_mean = m.take(d.Nl);
  a.ln2_rstd = m.take(d.Nl);
}

BlockActivations carve_block(const ModelConfig& c, const TpLayout& tp, int B, int T, Carver& m) {
  const BlockDims d(c, tp, B, T);
  BlockActivations a;
  carve_local_row_acts(c, d, a, m);
  a.ln1 = m.take(d.N * d.C);
  if (c.qk_norm) {
    a.q_pre = m.take(d.N * d.QD);
    a.k_pre = m.take(d.N * d.KD);
    a.q_rstd = m.take(d.N * d.NH);
    a.k_rstd = m.take(d.N * d.NKV);
  }
  a.q = m.take(d.N * d.QD);
  a.k = m.take(d.N * d.KD);
  a.v = m.take(d.N * d.KD);
  a.att = m.take(int64_t{B} * d.NH * T * T);
  a.lse = m.take(int64_t{B} * d.NH * T);
  a.att_out = m.take(d.N * d.QD);
  a.ln2 = m.take(d.N * d.C);
  a.ff_pre = m.take(d.N * d.F);
  if (c.arch == Arch::llama) a.ff_up = m.take(d.N * d.F);
  a.ff_act = m.take(d.N * d.F);
  return a;
}

BlockScratch carve_scratch(const ModelConfig& c, const TpLayout& tp, int B, int T, Carver& m) {
  const BlockDims d(c, tp, B, T);
  BlockScratch s;
  s.dln = m.take(d.N * d.C);
  if (tp.splits_rows()) {
    s.dln_local = m.take(d.Nl * d.C);
    s.dout_full = m.take(d.N * d.C);
  }
  s.dq = m.take(d.N * d.QD);
  s.dq2 = m.take(d.N * d.QD);
  s.dk = m.take(d.N * d.KD);
  s.dk2 = m.take(d.N * d.KD);
  s.dv = m.take(d.N * d.KD);
  s.datt_out = m.take(d.N * d.QD);
  s.dff_a = m.take(d.N * d.F);
  s.dff_b = m.take(d.N * d.F);
  if (c.arch == Arch::llama) s.dff_c = m.take(d.N * d.F);
  return s;
}

// The context's layout: residual stream, the blocks' activations, the head's.
void carve_context_views(MicroBatchContext* ctx, const ModelConfig& c, const TpLayout& tp, int B, int T, Carver& m) {
  const int64_t N = int64_t{B} * T, Nl = tp.local_rows(N), C = c.d_model;
  std::vector<float*> stream(static_cast<size_t>(c.n_layer) + 1);
  for (float*& s : stream) s = m.take(Nl * C);
  std::vector<BlockActivations> blocks;
  for (int l = 0; l < c.n_layer; ++l) blocks.push_back(carve_block(c, tp, B, T, m));
  HeadActivations head;
  head.lnf = m.take(N * C);
  head.lnf_mean = m.take(Nl);
  head.lnf_rstd = m.take(Nl);
  head.losses = m.take(N);
  if (ctx) ctx->stream = std::move(stream), ctx->blocks = std::move(blocks), ctx->head = head;
}

// The workspace's layout: block scratch, residual-stream gradient, the output layer's
// input gradient, one logits chunk and the loss's work.
void carve_workspace_views(Workspace* ws, const ModelConfig& c, const TpLayout& tp, int B, int T, int chunk_rows,
                           Carver& m) {
  const int64_t N = int64_t{B} * T, Nl = tp.local_rows(N), C = c.d_model;
  const int64_t chunk = std::min<int64_t>(chunk_rows, N);
  BlockScratch block = carve_scratch(c, tp, B, T, m);
  float* dstream = m.take(Nl * C);
  float* dlnf = m.take(N * C);
  float* logits = m.take(chunk * (c.vocab_size / tp.size));
  float* loss_work = m.take(3 * chunk);
  if (ws) ws->block = block, ws->dstream = dstream, ws->dlnf = dlnf, ws->logits = logits, ws->loss_work = loss_work;
}

void check_shape(const ModelConfig& c, const TpLayout& tp, int B, int T) {
  NDT_CHECK(B > 0 && T > 0, "batch of {} rows x {} tokens is empty", B, T);
  NDT_CHECK(T <= c.max_seq_len, "sequence length {} exceeds model.max_seq_len = {}", T, c.max_seq_len);
  NDT_CHECK(!tp.splits_rows() || (int64_t{B} * T) % tp.size == 0,
            "sequence parallel splits the {} x {} tokens of a micro-batch over parallel.tp = {}: not divisible", B, T,
            tp.size);
}

// Keeps `arena` at least `floats` long (freeing the old one before allocating).
void reserve(Tensor& arena, int64_t floats) {
  if (arena.defined() && arena.numel() >= floats) return;
  arena = Tensor();
  arena = Tensor::empty({floats}, DType::f32, MemTag::activations);
}

}  // namespace

int64_t block_activation_floats(const ModelConfig& c, const TpLayout& tp, int B, int T) {
  Carver m(nullptr);
  carve_block(c, tp, B, T, m);
  return m.used();
}

int64_t block_local_row_floats(const ModelConfig& c, const TpLayout& tp, int B, int T) {
  Carver m(nullptr);
  BlockActivations a;
  carve_local_row_acts(c, BlockDims(c, tp, B, T), a, m);
  return m.used();
}

int64_t context_floats(const ModelConfig& c, const TpLayout& tp, int B, int T) {
  Carver m(nullptr);
  carve_context_views(nullptr, c, tp, B, T, m);
  return m.used();
}

int64_t workspace_floats(const ModelConfig& c, const TpLayout& tp, int B, int T, int loss_chunk_rows) {
  Carver m(nullptr);
  carve_workspace_views(nullptr, c, tp, B, T, loss_chunk_rows, m);
  return m.used();
}

void carve_context(MicroBatchContext& ctx, const ModelConfig& c, const TpLayout& tp, int B, int T) {
  check_shape(c, tp, B, T);
  reserve(ctx.arena, context_floats(c, tp, B, T));
  Carver m(ctx.arena.data<float>());
  carve_context_views(&ctx, c, tp, B, T, m);
  ctx.B = B, ctx.T = T;
}

void Workspace::fit(int B, int T) {
  if (B == B_ && T == T_) return;
  check_shape(c_, tp_, B, T);
  reserve(arena_, workspace_floats(c_, tp_, B, T, chunk_rows_));
  Carver m(arena_.data<float>());
  carve_workspace_views(this, c_, tp_, B, T, chunk_rows_, m);
  B_ = B, T_ = T;
}

}  // namespace ndt
