// What one micro-batch in flight holds between its forward and its backward (its
// context: tokens, the residual stream between units, every unit's saved tensors), and
// the backward scratch all contexts share (one unit computes at a time). Both are
// views carved from one arena each, sized from the shapes alone, so the memory model
// can predict them exactly (Transformer::predict_activation_bytes).
//
// Rows: N = B x T tokens (T: the tokens of each sequence this rank holds, seq_len / cp
// under context parallelism); local rows Nl = N / tp under sequence parallel (the
// residual stream, the norms and the residual adds), else N. Widths NH, NKV, F are this
// rank's (/ tp).
#pragma once

#include "core/tensor.h"
#include "model/config.h"
#include "model/activation_layout.h"
#include "model/matmul.h"
#include "model/moe.h"
#include "model/sequence_chunks.h"
#include "model/tensor_parallel_regions.h"

#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

namespace ndt {

// Row counts and this rank's widths for a micro-batch of B x T; F is block `layer`'s
// dense MLP width (an MoE block's shared MLP, 0 without one), or for layer = -1 the
// widest block's (what shared buffers are sized for).
struct BlockDims {
  int64_t N, Nl, C, F, QD, KD, NH, NKV, HS;
  BlockDims(const ModelConfig& c, const ActivationLayout& tp, int B, int T, int layer = -1);
};

// Activation checkpointing (train.activation_checkpointing, docs/activation_checkpointing.md):
// which of its activations a block's context keeps until backward. What it does not
// keep lives in the workspace's recompute area (one block's worth, shared) while the
// block computes, and the block recomputes it at the start of its backward with the
// same kernels on the same inputs, so gradients are bitwise those without recompute.
//   none: everything.
//   full: nothing but the block's input (the residual stream, which the context keeps
//     anyway); backward reruns the whole block forward.
//   selective: everything but the norm outputs, the attention probabilities and their
//     log-sum-exp, and the MLP activation; backward reruns the norms, the attention
//     core (scores, softmax, weighted sum) and the activation function.
enum class CheckpointMode { none, full, selective };
std::string_view checkpoint_mode_name(CheckpointMode mode);
CheckpointMode checkpoint_mode_from_name(std::string_view name);  // throws naming the setting

struct ActivationCheckpointing {
  CheckpointMode mode = CheckpointMode::none;
  int every = 1;  // full: only the blocks l with l % every == 0; the others keep everything
  CheckpointMode of_block(int layer) const;
};

// Activations one block saves (views into the context's arena; a null view is kept in
// the workspace's recompute area instead: with_recompute_area).
struct BlockActivations {
  float* ln1 = nullptr;       // [N, C] norm1 output, all rows (the q/k/v input)
  float* ln1_mean = nullptr;  // [Nl] (LayerNorm only)
  float* ln1_rstd = nullptr;  // [Nl]
  float* q_pre = nullptr;     // [N, NH*HS] before QK-norm (qk_norm only)
  float* k_pre = nullptr;     // [N, NKV*HS]
  float* q_rstd = nullptr;    // [N*NH]
  float* k_rstd = nullptr;    // [N*NKV]
  float* q = nullptr;         // [N, NH*HS] as fed to attention (after QK-norm, RoPE)
  float* k = nullptr;         // [N, NKV*HS]
  float* v = nullptr;         // [N, NKV*HS]
  float* att = nullptr;       // [B, NH, T, T] probabilities (none under context parallelism)
  float* lse = nullptr;       // [B, NH, T]
  float* att_out = nullptr;   // [N, NH*HS]
  float* x_mid = nullptr;     // [Nl, C]
  float* ln2 = nullptr;       // [N, C] all rows (the MLP input)
  float* ln2_mean = nullptr;  // [Nl]
  float* ln2_rstd = nullptr;  // [Nl]
  float* ff_pre = nullptr;    // [N, F] fc output (gpt2) or gate (llama)
  float* ff_up = nullptr;     // [N, F] up projection (llama only)
  float* ff_act = nullptr;    // [N, F] activation output
};

// What the head saves: the final norm's output for all rows (the output layer's input),
// its statistics on the local rows, and each token's loss.
struct HeadActivations {
  float* lnf = nullptr;       // [N, C]
  float* lnf_mean = nullptr;  // [Nl]
  float* lnf_rstd = nullptr;  // [Nl]
  float* losses = nullptr;    // [N]
};

// The views a block computes with: those its context saved, the others from the
// workspace's recompute area.
BlockActivations with_recompute_area(const BlockActivations& saved, const BlockActivations& area);

// Low-precision compute (model/precision.h): a saved activation kept in the compute
// dtype. The block computes it in fp32 in the workspace's recompute area, packs it here
// at the end of its forward and unpacks it there at the start of its backward.
struct PackedActivation {
  float* BlockActivations::*view = nullptr;
  uint16_t* data = nullptr;  // in the context's arena
  int64_t numel = 0;
};

// One linear layer's weight gradient, deferred by a split backward (zero-bubble
// schedules): the output gradient the input half computed, copied (the workspace is
// reused by the next unit), and what adds dout^T x input to the weight and bias
// gradients, reading the input from the block's views (a: the context's, or the
// recompute area's, where the weight half restored it).
struct DeferredWeightGradient {
  Tensor dout;  // ledger tag activations
  std::function<void(const float* dout, const BlockActivations& a)> apply;
};

// A linear layer's input that a deferred weight half reads and the context does not keep
// in fp32 (one per view, shared by the layers that read it: ln1 by q, k and v). The
// weight half restores it into the recompute area before the gradients run: from the
// context's packed copy (low precision), else from `kept`, the copy the input half made
// of what the block recomputed (activation checkpointing): fp32, or in low precision
// the compute dtype, the very bits the weight GEMM reads (the block rounds recomputed
// inputs as it packs kept ones: Block::round_recomputed_inputs).
struct DeferredInput {
  float* BlockActivations::*view = nullptr;
  int64_t numel = 0;
  Tensor kept;  // ledger tag activations; undefined: restored from the context's packed copy
};

// What a block's backward_input leaves for its backward_weight.
struct DeferredWeightHalf {
  bool pending = false;  // between the two halves (also when every weight is frozen)
  std::vector<DeferredInput> inputs;
  std::vector<DeferredWeightGradient> gradients;
};

// One micro-batch in flight, owned by whoever schedules the units (one per micro-batch
// alive at once); Transformer::prepare sizes it and copies its tokens in.
struct MicroBatchContext {
  int B = 0, T = 0;  // T: this rank's tokens of each sequence
  CpLayout cp;       // how the sequences are split over context parallelism (size 1: whole)
  // Seq1F1B: which chunk of its micro-batch's sequences the context holds (count 1:
  // whole sequences). Whoever schedules the chunks sets index and count before
  // Transformer::prepare, and the earlier chunks' contexts and the key/value sums before
  // the first forward.
  SequenceChunk sequence;
  // Backward computes the gradient of grad_scale x (sum of the token losses, plus their
  // z-loss terms with a z-loss: see z_loss_sum).
  float grad_scale = 0;
  // No backward will follow (evaluation, generation): the head computes the loss in
  // forward (when there are targets).
  bool forward_only = false;
  std::vector<int32_t> inputs, targets;  // [N]
  // [N] each token's position: in its sequence, or with document boundaries in its
  // document (restarting at 0 at each document start).
  std::vector<int32_t> positions;
  // Document boundaries (Transformer::set_document_separator; empty when off): for each
  // position of each whole sequence [B, T x cp], the position where its document begins,
  // which attention reads (ContextParallelAttention: a query sees its own document only).
  std::vector<int32_t> document_starts;
  Tensor arena;                          // everything below (ledger tag activations)
  std::vector<float*> stream;            // [n_layer + 1] residual stream [Nl, C]: stream[l] is block l's input
  std::vector<BlockActivations> blocks;  // [n_layer]
  // Low precision: per block, the saved activations kept in the compute dtype (their
  // views in `blocks` are null: they live in the recompute area while the block runs).
  std::vector<std::vector<PackedActivation>> packed;
  DType compute = DType::f32;
  HeadActivations head;
  ActivationCheckpointing checkpointing;  // what the blocks saved (set by carve_context)
  // Per block: what its backward_input left for its backward_weight.
  std::vector<DeferredWeightHalf> deferred;
  double loss_sum = 0;  // the sum of the token losses (cross-entropy), set by the head's forward
  // The sum of the tokens' z-loss terms, z_loss x lse^2 (Transformer::set_z_loss; 0 without
  // it), set with loss_sum. Backward's gradient is that of grad_scale x (loss_sum + z_loss_sum).
  double z_loss_sum = 0;
  // Per block, what an MoE block's routed experts keep for backward (model/moe.h).
  std::vector<MoeActivations> moe;
  int64_t rows() const { return int64_t{B} * T; }
};

// Backward scratch shared by all blocks and all contexts; forward uses dln and
// dln_local as temporaries.
struct BlockScratch {
  float* dln = nullptr;        // [N, C] region input gradient; in forward, a row-parallel partial sum
  float* dln_local = nullptr;  // [Nl, C] sequence parallel only: reduce-scattered dln; in forward, a norm output
  float* dout_full = nullptr;  // [N, C] sequence parallel only: an all-gathered output gradient
  float* dq = nullptr;         // [N, NH*HS]
  float* dq2 = nullptr;        // [N, NH*HS]
  float* dk = nullptr;         // [N, NKV*HS]
  float* dk2 = nullptr;        // [N, NKV*HS]
  float* dv = nullptr;         // [N, NKV*HS]
  float* datt_out = nullptr;   // [N, NH*HS]
  float* dff_a = nullptr;      // [N, F]
  float* dff_b = nullptr;      // [N, F]
  float* dff_c = nullptr;      // [N, F] (llama only)
  float* cp_scratch = nullptr;  // context parallelism's or Seq1F1B's (*_scratch_floats)
  // Low-precision forward's fused projection outputs (model/fused_projections.h), over
  // scratch only backward uses: q | k | v [N, QD + 2KD] over dq..dv, gate | up [N, 2F]
  // over dff_a and dff_b.
  float* qkv_out = nullptr;
  float* gate_up_out = nullptr;
};

// The scratch of every unit, carved for the micro-batch about to run: the blocks'
// scratch, the gradient of the residual stream flowing backward through the units, the
// final norm's input gradient and one chunk of logits with the loss's work.
class Workspace {
 public:
  Workspace(const ModelConfig& config, int loss_chunk_rows) : c_(config), chunk_rows_(loss_chunk_rows) {}
  // Tensor parallelism's part of the layout; context parallelism's comes with each context.
  void set_layout(const ActivationLayout& tp) { tp_ = tp, B_ = T_ = 0; }
  void set_checkpointing(const ActivationCheckpointing& policy) { policy_ = policy, B_ = T_ = 0; }
  void set_compute_dtype(DType dtype) { matmul.dtype = dtype, B_ = T_ = 0; }
  // Carves the buffers for the context's B x T and cp layout (growing the arena first if
  // it is too small).
  void fit(const MicroBatchContext& ctx);
  int loss_chunk_rows() const { return chunk_rows_; }

  BlockScratch block;
  float* dstream = nullptr;    // [Nl, C] dL/d(residual stream) between units
  float* dlnf = nullptr;       // [N, C] the output layer's input gradient
  float* logits = nullptr;     // [chunk, V / tp]
  float* loss_work = nullptr;  // [3 x chunk] (vocab-parallel loss)
  // The activations blocks recompute instead of saving (none: all null), and in low
  // precision those they pack (then: a whole block's).
  BlockActivations recompute;
  // The compute dtype and, in low precision, the matmul operands' 16-bit scratch.
  MatmulPrecision matmul;

 private:
  const ModelConfig& c_;
  int chunk_rows_;
  ActivationLayout tp_;
  ActivationCheckpointing policy_;
  int B_ = 0, T_ = 0;  // carved for
  CpLayout cp_;
  int seq_chunks_ = 1;
  Tensor arena_;
};

// Floats of a context's arena and of the workspace's for B x T on one rank under a
// checkpointing policy and compute dtype (a 16-bit element counts half), and the floats
// of one block's saved activations (of those, the local rows') when it saves everything
// in fp32.
// local_units (pipeline parallelism: the units of this rank's stages, one flag per unit
// as in model/unit.h; empty: all): a context holds the stream slots, block activations
// and head activations of those units only.
int64_t context_floats(const ModelConfig& c, const ActivationLayout& tp, int B, int T,
                       const ActivationCheckpointing& policy = {}, const std::vector<char>& local_units = {},
                       DType compute = DType::f32);
int64_t workspace_floats(const ModelConfig& c, const ActivationLayout& tp, int B, int T, int loss_chunk_rows,
                         const ActivationCheckpointing& policy = {}, DType compute = DType::f32);
int64_t block_activation_floats(const ModelConfig& c, const ActivationLayout& tp, int B, int T);
int64_t block_local_row_floats(const ModelConfig& c, const ActivationLayout& tp, int B, int T);

// Seq1F1B (model/sequence_chunks.h): floats of one block's key/value gradient sums for
// sequence chunks of B x T rows, (k - 1) x 2 x B x T x KV heads (/ tp) x head size.
int64_t sequence_chunk_sum_floats(const ModelConfig& c, const ActivationLayout& tp, int B, int T, int seq_chunks);

// Floats an MoE block keeps outside the arena (MoeActivations) for B x T local rows,
// when its routing is balanced and nothing is dropped: the router logits (N x E) and
// N x top_k routed rows of its inputs, outputs and hidden activations (2 of width F / tp
// for gpt2, 3 for llama). Exact on one expert-parallel rank (each rank routes N x top_k
// rows); under ep the rows an expert's rank receives follow the routing. 0 for a dense
// block or one under full recompute (which keeps nothing).
int64_t moe_block_floats(const ModelConfig& c, const ActivationLayout& tp, int B, int T, int layer,
                         const ActivationCheckpointing& policy = {});

// Bytes one micro-batch's deferred weight halves keep (DeferredWeightHalf) from a split
// backward's input half to its weight half (zero-bubble schedules), summed over the
// blocks of local_units (empty: all), every linear layer trainable (a frozen one keeps
// nothing): per block the fp32 output gradient of each linear whose weight half is
// deferred ([N, its output width]: q, k, v, the attention output and a dense MLP's; an
// MoE block runs its MLP's backward whole in the input half), and the inputs of those
// linears that the policy recomputes (selective: ln1, ln2, ff_act; full: also att_out),
// in fp32 or, in low precision, in the compute dtype. Inputs the context keeps, in fp32
// or packed, cost nothing more.
int64_t deferred_weight_bytes(const ModelConfig& c, const ActivationLayout& tp, int B, int T,
                              const ActivationCheckpointing& policy = {}, const std::vector<char>& local_units = {},
                              DType compute = DType::f32);

// Points the context's views into its arena (allocated or grown here) for B x T.
void carve_context(MicroBatchContext& ctx, const ModelConfig& c, const ActivationLayout& tp, int B, int T,
                   const ActivationCheckpointing& policy = {}, const std::vector<char>& local_units = {},
                   DType compute = DType::f32);

// Low precision: the packed activations of block `layer` as the kept operands of its
// matmuls over the views of `area` (model/matmul.h): not yet written during its forward,
// written (packed) in its backward.
std::vector<KeptOperand> kept_operands(const MicroBatchContext& ctx, int layer, const BlockActivations& area,
                                       bool written);
// Low precision: the packed activations of block `layer` from the recompute area into
// the context (end of its forward; but for those of `kept` a matmul already wrote), and
// back (start of its backward; but for the views of `matmul_only`, which backward reads
// only as matmul inputs, from the kept operands).
void pack_block_activations(const MicroBatchContext& ctx, int layer, const BlockActivations& area,
                            std::span<const KeptOperand> kept);
void unpack_block_activations(const MicroBatchContext& ctx, int layer, const BlockActivations& area,
                              std::span<float* BlockActivations::* const> matmul_only);

}  // namespace ndt
