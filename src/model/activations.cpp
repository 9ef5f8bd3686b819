#include "model/activations.h"

#include "core/error.h"
#include "kernels/kernels.h"
#include "model/context_parallel_attention.h"
#include "model/sequence_chunk_attention.h"

#include <algorithm>

namespace ndt {

namespace {

int widest_mlp(const ModelConfig& c) {
  int widest = 0;
  for (int l = 0; l < c.n_layer; ++l) widest = std::max(widest, c.mlp_d_ff(l));
  return widest;
}

}  // namespace

BlockDims::BlockDims(const ModelConfig& c, const ActivationLayout& tp, int B, int T, int layer)
    : N(int64_t{B} * T), Nl(tp.local_rows(N)), C(c.d_model), F((layer < 0 ? widest_mlp(c) : c.mlp_d_ff(layer)) / tp.tp),
      QD(int64_t{c.d_model} / tp.tp), KD(int64_t{c.kv_heads()} / tp.tp * c.head_dim()),
      NH(c.n_head / tp.tp), NKV(c.kv_heads() / tp.tp), HS(c.head_dim()) {}

std::string_view checkpoint_mode_name(CheckpointMode mode) {
  switch (mode) {
    case CheckpointMode::none: return "none";
    case CheckpointMode::full: return "full";
    case CheckpointMode::selective: return "selective";
  }
  return "?";
}

CheckpointMode checkpoint_mode_from_name(std::string_view name) {
  for (CheckpointMode mode : {CheckpointMode::none, CheckpointMode::full, CheckpointMode::selective}) {
    if (name == checkpoint_mode_name(mode)) return mode;
  }
  fail("train.activation_checkpointing = \"{}\" is not a policy: none, full or selective", name);
}

CheckpointMode ActivationCheckpointing::of_block(int layer) const {
  if (mode == CheckpointMode::full && layer % every != 0) return CheckpointMode::none;
  return mode;
}

namespace {

// Every view of BlockActivations, for with_recompute_area.
constexpr float* BlockActivations::*kBlockViews[] = {
    &BlockActivations::ln1,   &BlockActivations::ln1_mean, &BlockActivations::ln1_rstd, &BlockActivations::q_pre,
    &BlockActivations::k_pre, &BlockActivations::q_rstd,   &BlockActivations::k_rstd,   &BlockActivations::q,
    &BlockActivations::k,     &BlockActivations::v,        &BlockActivations::att,      &BlockActivations::lse,
    &BlockActivations::att_out, &BlockActivations::x_mid,  &BlockActivations::ln2,      &BlockActivations::ln2_mean,
    &BlockActivations::ln2_rstd, &BlockActivations::ff_pre, &BlockActivations::ff_up,   &BlockActivations::ff_act};

}  // namespace

BlockActivations with_recompute_area(const BlockActivations& saved, const BlockActivations& area) {
  BlockActivations a = saved;
  for (float* BlockActivations::*view : kBlockViews) {
    if (a.*view == nullptr) a.*view = area.*view;
  }
  return a;
}

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

// In low precision, what a block keeps in fp32 all the same: the norms' statistics, the
// softmax's log-sum-exp (small, and what the backward's exponentials depend on), and
// the residual stream between attention and MLP (the stream stays fp32 throughout).
bool stays_fp32(float* BlockActivations::*view) {
  for (float* BlockActivations::*v : {&BlockActivations::ln1_mean, &BlockActivations::ln1_rstd,
                                      &BlockActivations::ln2_mean, &BlockActivations::ln2_rstd,
                                      &BlockActivations::q_rstd, &BlockActivations::k_rstd, &BlockActivations::lse,
                                      &BlockActivations::x_mid}) {
    if (v == view) return true;
  }
  return false;
}

// Carves the views of one block. For a context: those a block saving `saves` keeps,
// in low precision the 16-bit ones as packed slots (appended to `packed`). For the
// workspace's recompute area (complement): those it does not keep, and in low
// precision every view (packed ones are unpacked there).
// Selective recompute drops the norm outputs, the attention probabilities and
// log-sum-exp, and the MLP activation.
class BlockCarver {
 public:
  BlockCarver(CheckpointMode saves, bool complement, DType compute, Carver& m,
              std::vector<PackedActivation>* packed = nullptr)
      : saves_(saves), complement_(complement), low_(compute != DType::f32), compute_(compute), m_(m), packed_(packed) {}
  // The compute dtype the carved block runs in (f32, or a 16-bit one).
  DType compute() const { return compute_; }
  void take(BlockActivations& a, float* BlockActivations::*view, int64_t n, bool selective_recomputes = false) {
    const bool kept = saves_ == CheckpointMode::none || (saves_ == CheckpointMode::selective && !selective_recomputes);
    if (complement_) {
      if (!kept || low_) a.*view = m_.take(n);
    } else if (kept && low_ && !stays_fp32(view)) {
      // Two 16-bit elements per float of the arena.
      float* slot = m_.take((n + 1) / 2);
      if (packed_) packed_->push_back({view, reinterpret_cast<uint16_t*>(slot), n});
    } else if (kept) {
      a.*view = m_.take(n);
    }
  }

 private:
  CheckpointMode saves_;
  bool complement_;
  bool low_;
  DType compute_;
  Carver& m_;
  std::vector<PackedActivation>* packed_;
};

using A = BlockActivations;

// The activations of the local rows (split by sequence parallel), first.
void carve_local_row_acts(const ModelConfig& c, const BlockDims& d, BlockActivations& a, BlockCarver& m) {
  if (c.arch == Arch::gpt2) m.take(a, &A::ln1_mean, d.Nl);
  m.take(a, &A::ln1_rstd, d.Nl);
  m.take(a, &A::x_mid, d.Nl * d.C);
  if (c.arch == Arch::gpt2) m.take(a, &A::ln2_mean, d.Nl);
  m.take(a, &A::ln2_rstd, d.Nl);
}

BlockActivations carve_block(const ModelConfig& c, const ActivationLayout& tp, int B, int T, BlockCarver& m,
                             int layer = -1) {
  const BlockDims d(c, tp, B, T, layer);
  const bool recomputed = true;  // by selective recompute
  BlockActivations a;
  carve_local_row_acts(c, d, a, m);
  m.take(a, &A::ln1, d.N * d.C, recomputed);
  if (c.qk_norm) {
    m.take(a, &A::q_pre, d.N * d.QD);
    m.take(a, &A::k_pre, d.N * d.KD);
    m.take(a, &A::q_rstd, d.N * d.NH);
    m.take(a, &A::k_rstd, d.N * d.NKV);
  }
  m.take(a, &A::q, d.N * d.QD);
  m.take(a, &A::k, d.N * d.KD);
  m.take(a, &A::v, d.N * d.KD);
  const int64_t probabilities = tp.seq_chunks > 1 ? 0 : attention_probability_floats(tp.cp, m.compute(), B, T, d.NH);
  m.take(a, &A::att, probabilities, recomputed);
  m.take(a, &A::lse, int64_t{B} * d.NH * T, recomputed);
  m.take(a, &A::att_out, d.N * d.QD);
  m.take(a, &A::ln2, d.N * d.C, recomputed);
  m.take(a, &A::ff_pre, d.N * d.F);
  if (c.arch == Arch::llama) m.take(a, &A::ff_up, d.N * d.F);
  m.take(a, &A::ff_act, d.N * d.F, recomputed);
  return a;
}

BlockScratch carve_scratch(const ModelConfig& c, const ActivationLayout& tp, int B, int T, Carver& m) {
  const BlockDims d(c, tp, B, T);
  BlockScratch s;
  s.dln = m.take(d.N * d.C);
  if (tp.splits_rows()) {
    s.dln_local = m.take(d.Nl * d.C);
    s.dout_full = m.take(d.N * d.C);
  }
  s.dq = m.take(d.N * d.QD);  // dq to dv adjacent: qkv_out spans them
  s.dq2 = m.take(d.N * d.QD);
  s.dk = m.take(d.N * d.KD);
  s.dk2 = m.take(d.N * d.KD);
  s.dv = m.take(d.N * d.KD);
  s.qkv_out = s.dq;
  s.datt_out = m.take(d.N * d.QD);
  s.dff_a = m.take(d.N * d.F);  // dff_a and dff_b adjacent: gate_up_out spans them
  s.dff_b = m.take(d.N * d.F);
  s.gate_up_out = s.dff_a;
  if (c.arch == Arch::llama) s.dff_c = m.take(d.N * d.F);
  s.cp_scratch = m.take(tp.seq_chunks > 1 ? sequence_chunk_scratch_floats(B, T, d.NH, d.HS)
                                          : context_parallel_scratch_floats(tp.cp, B, T, d.NH, d.NKV, d.HS));
  return s;
}

// The context's layout: residual stream, the blocks' activations, the head's.
void carve_context_views(MicroBatchContext* ctx, const ModelConfig& c, const ActivationLayout& tp, int B, int T,
                         const ActivationCheckpointing& policy, const std::vector<char>& local_units, DType compute,
                         Carver& m) {
  const int64_t N = int64_t{B} * T, Nl = tp.local_rows(N), C = c.d_model;
  const int L = c.n_layer;
  auto local = [&](int unit) { return local_units.empty() || local_units[static_cast<size_t>(unit)] != 0; };
  // Stream slot l is written by unit l (the embedding, or block l - 1) and read by unit l + 1.
  std::vector<float*> stream(static_cast<size_t>(L) + 1, nullptr);
  for (int l = 0; l <= L; ++l) {
    if (local(l) || local(l + 1)) stream[static_cast<size_t>(l)] = m.take(Nl * C);
  }
  std::vector<BlockActivations> blocks(static_cast<size_t>(L));
  std::vector<std::vector<PackedActivation>> packed(static_cast<size_t>(L));
  for (int l = 0; l < L; ++l) {
    if (!local(1 + l)) continue;
    BlockCarver saved(policy.of_block(l), /*complement=*/false, compute, m, &packed[static_cast<size_t>(l)]);
    blocks[static_cast<size_t>(l)] = carve_block(c, tp, B, T, saved, l);
  }
  HeadActivations head;
  if (local(L + 1)) {
    head.lnf = m.take(N * C);
    head.lnf_mean = m.take(Nl);
    head.lnf_rstd = m.take(Nl);
    head.losses = m.take(N);
  }
  if (ctx) {
    ctx->stream = std::move(stream), ctx->blocks = std::move(blocks), ctx->head = head;
    ctx->packed = std::move(packed), ctx->compute = compute;
  }
}

// The workspace's layout: block scratch, residual-stream gradient, the output layer's
// input gradient, one logits chunk and the loss's work, then the recompute area (what
// the policy's blocks do not save; full, or low precision: a whole block's
// activations), then in low precision the matmuls' two 16-bit operand scratches, each
// as large as the largest operand (a block's [N, max(C, F, fused width)], or a loss
// chunk's [chunk, V / tp] output gradient; rows padded to 64 bytes), and with biases the
// fused projections' weight scratch [fused width, C] (fused width: QD + 2KD, or 2F for
// llama's gate and up).
void carve_workspace_views(Workspace* ws, const ModelConfig& c, const ActivationLayout& tp, int B, int T, int chunk_rows,
                           const ActivationCheckpointing& policy, DType compute, Carver& m) {
  const int64_t N = int64_t{B} * T, Nl = tp.local_rows(N), C = c.d_model;
  const int64_t chunk = std::min<int64_t>(chunk_rows, N), V = c.vocab_size / tp.tp;
  BlockScratch block = carve_scratch(c, tp, B, T, m);
  float* dstream = m.take(Nl * C);
  float* dlnf = m.take(N * C);
  float* logits = m.take(chunk * V);
  float* loss_work = m.take(3 * chunk);
  BlockCarver recomputed(policy.mode, /*complement=*/true, compute, m);
  const BlockActivations recompute = carve_block(c, tp, B, T, recomputed);
  int64_t capacity = 0, fused_capacity = 0;
  uint16_t *a = nullptr, *b = nullptr, *fused = nullptr;
  if (compute != DType::f32) {
    const BlockDims d(c, tp, B, T);
    const int64_t fused_width = std::max(d.QD + 2 * d.KD, c.arch == Arch::llama ? 2 * d.F : 0);
    // Output gradients are cast into rows lowp_row_stride apart (model/matmul.h).
    capacity = std::max(N * lowp_row_stride(std::max({d.C, d.F, fused_width})), chunk * lowp_row_stride(std::max(C, V)));
    capacity += capacity % 2;  // whole floats of the arena
    a = reinterpret_cast<uint16_t*>(m.take(capacity / 2));
    b = reinterpret_cast<uint16_t*>(m.take(capacity / 2));
    // Biases lie between the weights in the arena (parameter order): only then are they copied.
    fused_capacity = c.has_bias() ? fused_width * C + fused_width * C % 2 : 0;
    fused = reinterpret_cast<uint16_t*>(m.take(fused_capacity / 2));
  }
  if (ws) {
    ws->block = block, ws->dstream = dstream, ws->dlnf = dlnf, ws->logits = logits, ws->loss_work = loss_work;
    ws->recompute = recompute;
    ws->matmul.a = a, ws->matmul.b = b, ws->matmul.capacity = capacity;
    ws->matmul.fused_weights = fused, ws->matmul.fused_weights_capacity = fused_capacity;
  }
}

void check_shape(const ModelConfig& c, const ActivationLayout& tp, int B, int T) {
  NDT_CHECK(B > 0 && T > 0, "batch of {} rows x {} tokens is empty", B, T);
  const int64_t whole = int64_t{T} * tp.cp.size * tp.seq_chunks;
  NDT_CHECK(whole <= c.max_seq_len, "sequence length {} exceeds model.max_seq_len = {}", whole, c.max_seq_len);
  NDT_CHECK(!tp.splits_rows() || (int64_t{B} * T) % tp.tp == 0,
            "sequence parallel splits the {} x {} tokens of a micro-batch over parallel.tp = {}: not divisible", B, T,
            tp.tp);
}

// Keeps `arena` at least `floats` long (freeing the old one before allocating).
void reserve(Tensor& arena, int64_t floats) {
  if (arena.defined() && arena.numel() >= floats) return;
  arena = Tensor();
  arena = Tensor::empty({floats}, DType::f32, MemTag::activations);
}

}  // namespace

int64_t block_activation_floats(const ModelConfig& c, const ActivationLayout& tp, int B, int T) {
  Carver m(nullptr);
  BlockCarver all(CheckpointMode::none, /*complement=*/false, DType::f32, m);
  carve_block(c, tp, B, T, all);
  return m.used();
}

int64_t block_local_row_floats(const ModelConfig& c, const ActivationLayout& tp, int B, int T) {
  Carver m(nullptr);
  BlockCarver all(CheckpointMode::none, /*complement=*/false, DType::f32, m);
  BlockActivations a;
  carve_local_row_acts(c, BlockDims(c, tp, B, T), a, all);
  return m.used();
}

int64_t context_floats(const ModelConfig& c, const ActivationLayout& tp, int B, int T, const ActivationCheckpointing& policy,
                       const std::vector<char>& local_units, DType compute) {
  Carver m(nullptr);
  carve_context_views(nullptr, c, tp, B, T, policy, local_units, compute, m);
  return m.used();
}

int64_t workspace_floats(const ModelConfig& c, const ActivationLayout& tp, int B, int T, int loss_chunk_rows,
                         const ActivationCheckpointing& policy, DType compute) {
  Carver m(nullptr);
  carve_workspace_views(nullptr, c, tp, B, T, loss_chunk_rows, policy, compute, m);
  return m.used();
}

int64_t sequence_chunk_sum_floats(const ModelConfig& c, const ActivationLayout& tp, int B, int T, int seq_chunks) {
  const BlockDims d(c, tp, B, T);
  return (seq_chunks - 1) * 2 * d.N * d.KD;
}

int64_t moe_block_floats(const ModelConfig& c, const ActivationLayout& tp, int B, int T, int layer,
                         const ActivationCheckpointing& policy) {
  if (!c.is_moe_block(layer) || policy.of_block(layer) == CheckpointMode::full) return 0;
  const int64_t N = int64_t{B} * T, rows = N * c.moe_top_k, F = c.expert_d_ff() / tp.tp;
  return N * c.n_experts + rows * (2 * int64_t{c.d_model} + (c.arch == Arch::llama ? 3 : 2) * F);
}

int64_t deferred_weight_bytes(const ModelConfig& c, const ActivationLayout& tp, int B, int T,
                              const ActivationCheckpointing& policy, const std::vector<char>& local_units,
                              DType compute) {
  const int64_t input_bytes = compute == DType::f32 ? 4 : static_cast<int64_t>(dtype_size(compute));
  int64_t bytes = 0;
  for (int l = 0; l < c.n_layer; ++l) {
    if (!local_units.empty() && !local_units[static_cast<size_t>(1 + l)]) continue;
    const BlockDims d(c, tp, B, T, l);
    const CheckpointMode mode = policy.of_block(l);
    const bool dense_mlp = d.F > 0 && !c.is_moe_block(l);
    // Output gradients: q, k, v, attention output; fc (gate), up (llama), proj (down).
    int64_t dout = d.N * (d.QD + 2 * d.KD + d.C);
    if (dense_mlp) dout += d.N * ((c.arch == Arch::llama ? 2 : 1) * d.F + d.C);
    // Recomputed inputs: ln1 and (full) att_out; ln2 and ff_act of a dense MLP.
    int64_t inputs = 0;
    if (mode != CheckpointMode::none) inputs += d.N * d.C + (dense_mlp ? d.N * (d.C + d.F) : 0);
    if (mode == CheckpointMode::full) inputs += d.N * d.QD;
    bytes += 4 * dout + input_bytes * inputs;
  }
  return bytes;
}

void carve_context(MicroBatchContext& ctx, const ModelConfig& c, const ActivationLayout& tp, int B, int T,
                   const ActivationCheckpointing& policy, const std::vector<char>& local_units, DType compute) {
  check_shape(c, tp, B, T);
  reserve(ctx.arena, context_floats(c, tp, B, T, policy, local_units, compute));
  Carver m(ctx.arena.data<float>());
  carve_context_views(&ctx, c, tp, B, T, policy, local_units, compute, m);
  ctx.B = B, ctx.T = T;
  ctx.cp = tp.cp;
  ctx.sequence.count = tp.seq_chunks;
  ctx.moe.resize(static_cast<size_t>(c.n_layer));
  ctx.checkpointing = policy;
}

void Workspace::fit(const MicroBatchContext& ctx) {
  const int B = ctx.B, T = ctx.T;
  const CpLayout& cp = ctx.cp;
  const int seq_chunks = ctx.sequence.count;
  if (B == B_ && T == T_ && cp.size == cp_.size && cp.mode == cp_.mode && cp.chunks == cp_.chunks &&
      seq_chunks == seq_chunks_) {
    return;
  }
  ActivationLayout layout = tp_;
  layout.cp = cp;
  layout.seq_chunks = seq_chunks;
  check_shape(c_, layout, B, T);
  reserve(arena_, workspace_floats(c_, layout, B, T, chunk_rows_, policy_, matmul.dtype));
  Carver m(arena_.data<float>());
  carve_workspace_views(this, c_, layout, B, T, chunk_rows_, policy_, matmul.dtype, m);
  B_ = B, T_ = T, cp_ = cp, seq_chunks_ = seq_chunks;
}

std::vector<KeptOperand> kept_operands(const MicroBatchContext& ctx, int layer, const BlockActivations& area,
                                       bool written) {
  std::vector<KeptOperand> kept;
  for (const PackedActivation& p : ctx.packed[static_cast<size_t>(layer)]) {
    kept.push_back({area.*(p.view), p.data, p.numel, written});
  }
  return kept;
}

void pack_block_activations(const MicroBatchContext& ctx, int layer, const BlockActivations& area,
                            std::span<const KeptOperand> kept) {
  for (const PackedActivation& p : ctx.packed[static_cast<size_t>(layer)]) {
    auto written = [&](const KeptOperand& k) { return k.bits == p.data && k.written; };
    if (std::none_of(kept.begin(), kept.end(), written)) kernels::cast_to_lowp(ctx.compute, area.*(p.view), p.data, p.numel);
  }
}

void unpack_block_activations(const MicroBatchContext& ctx, int layer, const BlockActivations& area,
                              std::span<float* BlockActivations::* const> matmul_only) {
  for (const PackedActivation& p : ctx.packed[static_cast<size_t>(layer)]) {
    if (std::find(matmul_only.begin(), matmul_only.end(), p.view) != matmul_only.end()) continue;
    kernels::cast_from_lowp(ctx.compute, p.data, area.*(p.view), p.numel);
  }
}

}  // namespace ndt
