// The decoder-only transformer as a sequence of units (model/unit.h): Embedding,
// n_layer Blocks, Head (final norm, output layer fused with the cross-entropy loss).
// The model declares its units and its parameters (with the unit owning each and what
// tensor parallelism would do to it) and nothing about layouts: parallelize()
// (parallel/parallelize.h) places the parameters, installs tensor-parallel regions and
// the data-parallel strategy from outside.
#pragma once

#include "core/tensor.h"
#include "model/activations.h"
#include "model/config.h"
#include "model/context_parallel_attention.h"
#include "model/expert_dispatch.h"
#include "model/fp8_linear.h"
#include "model/hooks.h"
#include "model/parameter.h"
#include "model/precision.h"
#include "model/tensor_parallel_regions.h"
#include "model/unit.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

namespace ndt {

class Block;
class Head;

class Transformer {
 public:
  // materialize_parameters = false: the parameters are declared but hold no memory
  // until parallelize() has placed them (see ParameterStore).
  Transformer(const ModelConfig& config, uint64_t seed, int loss_chunk_rows = 256,
              bool materialize_parameters = true);
  ~Transformer();

  const ModelConfig& config() const { return config_; }
  ParameterStore& store() { return store_; }
  const ParameterStore& store() const { return store_; }

  // The units in order: 0 the embedding, 1 + l block l, n_layer + 1 the head.
  int num_units() const { return static_cast<int>(units_.size()); }
  Unit& unit(int u) { return *units_[static_cast<size_t>(u)]; }

  // The tensor-parallel regions every unit calls (default: tp = 1, the identity).
  void set_tensor_parallel(std::unique_ptr<TensorParallelRegions> tp);
  const TensorParallelRegions& tensor_parallel() const { return *tp_; }
  // The blocks' attention core (default: cp = 1, the local kernel). Contexts prepared
  // from now on hold this rank's tokens of each sequence.
  void set_context_parallel(std::unique_ptr<ContextParallelAttention> cp);
  const ContextParallelAttention& context_parallel() const { return *cp_; }
  // Where the MoE blocks' routed rows go (default: ep = 1, every expert here). Install
  // before the first forward.
  void set_expert_dispatch(std::unique_ptr<ExpertDispatch> ep);
  const ExpertDispatch& expert_dispatch() const { return *ep_; }
  // What the MoE blocks' training forwards on this rank added up since the last call
  // (their loss terms in token-loss units, the routing counts), and a reset.
  MoeTotals take_moe_totals();
  // How this rank's activations are split over tp and cp.
  ActivationLayout activation_layout() const;

  // Document boundaries (data.document_boundaries, docs/data.md): from now on a token
  // equal to `separator` starts a document (the separator belongs to the document it
  // precedes, as `ndtrain prepare` writes it before each one), and prepare() restarts
  // the causal mask and the positions there. std::nullopt: off (the default). Throws
  // ndt::Error naming data.document_separator when it is outside the vocabulary.
  void set_document_separator(std::optional<int32_t> separator);
  std::optional<int32_t> document_separator() const { return separator_; }

  // Pipeline parallelism: the units this rank runs (one flag per unit; empty: all).
  // Contexts prepared from now on hold only their activations.
  void set_local_units(std::vector<char> units) { local_units_ = std::move(units); }
  const std::vector<char>& local_units() const { return local_units_; }
  bool holds_head() const { return local_units_.empty() || local_units_.back() != 0; }
  // The workspace's residual-stream gradient for B x T (what a pipeline stage receives
  // before its backward and sends after it).
  void fit_workspace(const MicroBatchContext& ctx) { workspace_.fit(ctx); }
  float* workspace_dstream() { return workspace_.dstream; }

  // What the blocks of every context prepared from now on save (default: everything).
  void set_activation_checkpointing(const ActivationCheckpointing& policy);
  const ActivationCheckpointing& activation_checkpointing() const { return checkpointing_; }

  // The precision policy (model/precision.h; default fp32): the parameters' compute
  // copies (ParameterStore::set_compute_dtype), the matmuls' dtype and the dtype of the
  // activations contexts prepared from now on keep. After changing parameter values,
  // store().refresh_compute() before the next forward.
  void set_precision(const Precision& precision);
  const Precision& precision() const { return precision_; }
  Fp8Linears* fp8() { return fp8_.get(); }  // precision.fp8, else null
  const Fp8Linears* fp8() const { return fp8_.get(); }

  // The output z-loss (PaLM): each token adds coefficient x lse^2 (lse: the log-sum-exp of
  // its logits over the whole vocabulary) to the loss that backward differentiates; the
  // head sums the terms into ctx.z_loss_sum, apart from the cross-entropy in ctx.loss_sum
  // (which the returned mean losses stay). 0 (default): none, bitwise as without it.
  // Throws ndt::Error naming optim.z_loss unless the coefficient is finite and >= 0.
  void set_z_loss(float coefficient);
  float z_loss() const;

  // Sizes ctx for a micro-batch of B rows of T tokens and copies its tokens in (targets
  // may be null when no loss is wanted). Backward will compute the gradient of
  // grad_scale x (sum of token losses); forward_only: no backward follows. Under context
  // parallelism the rows are whole sequences and ctx keeps this rank's runs of each
  // (ctx.T = T / cp, ctx.positions their true positions). With a document separator the
  // documents of each row are found here, once per micro-batch, from its whole inputs
  // (ctx.document_starts; positions counted from each token's document start). With
  // ctx.sequence.count = k > 1 (Seq1F1B) ctx keeps chunk ctx.sequence.index of the T / k
  // token chunks of each row (at their true positions).
  void prepare(MicroBatchContext& ctx, const int32_t* inputs, const int32_t* targets, int B, int T, float grad_scale,
               bool forward_only);

  // Conveniences over a context of the model's own, with the hooks of set_hooks():
  // forward, loss and backward of one micro-batch (parameter gradients +=; returns the
  // mean token loss), the mean token loss without gradients, and the logits [vocab] of
  // the next token after tokens[0..T) (one sequence).
  double forward_backward(const int32_t* inputs, const int32_t* targets, int B, int T, float grad_scale);
  double evaluate(const int32_t* inputs, const int32_t* targets, int B, int T);
  void next_token_logits(const int32_t* tokens, int T, float* logits);
  void set_hooks(ModelHooks* hooks) { hooks_ = hooks; }  // not owned; nullptr: none

  // Training FLOPs per token of the whole model (all tp ranks together): 6 x (parameters
  // a token uses in matmuls: of an MoE block's experts, top_k) + 12 x n_layer x d_model x
  // T (attention scores and weighted sum, forward and backward, counted in full).
  double flops_per_token(int T) const;
  // FLOPs per token that activation checkpointing adds by recomputing (matmuls only, as
  // flops_per_token counts them): full recompute reruns a block's forward, 2 x its
  // matmul parameters + 4 x d_model x T; selective reruns the attention core, 4 x
  // d_model x T; context parallelism and the low-precision (flash-style) attention
  // recompute the attention scores in backward, 2 x d_model x T per block. Hardware
  // FLOPs utilisation counts them, model FLOPs utilisation not.
  double recompute_flops_per_token(int T) const;
  // Parameters in matmuls (logical, whole model): all except lookup-only tables
  // (positions; untied input embedding).
  int64_t matmul_params() const;
  // Of those, the ones each token uses: an MoE block's router and top_k of its experts.
  int64_t active_matmul_params() const;

  // Activation memory per rank (ledger tag activations) for one context of B sequences of
  // T tokens (under context parallelism this rank holds T / cp of each) and the
  // workspace, from the shapes alone: saved activations, backward scratch and one logits
  // chunk; MoE blocks add what their routed experts keep under a balanced dropless
  // routing (moe_block_floats; the transient buffers of an MoE block's forward and
  // backward are not counted). (Model states: parallel/memory_model.h.)
  static int64_t predict_activation_bytes(const ModelConfig& config, int B, int T, int loss_chunk_rows,
                                          const ActivationLayout& tp = {}, const ActivationCheckpointing& policy = {},
                                          const std::vector<char>& local_units = {}, DType compute = DType::f32);
  // Of those, the bytes of the local rows: the residual stream, the norms' statistics and
  // the residual adds, which sequence parallel splits by tp.
  static int64_t predict_local_row_activation_bytes(const ModelConfig& config, int B, int T, const ActivationLayout& tp = {});

 private:
  // prepare() of the context `layout` describes, holding the tokens of `runs` of each
  // row (generation: whole sequences).
  void prepare_split(MicroBatchContext& ctx, const int32_t* inputs, const int32_t* targets, int B, int T,
                     float grad_scale, bool forward_only, const ActivationLayout& layout,
                     const std::vector<TokenRun>& runs);
  ModelConfig config_;
  ParameterStore store_;
  std::unique_ptr<TensorParallelRegions> tp_;
  std::unique_ptr<ContextParallelAttention> cp_;
  std::unique_ptr<ExpertDispatch> ep_;
  MoeTotals moe_totals_;
  std::vector<Block*> blocks_;
  Workspace workspace_;
  ActivationCheckpointing checkpointing_;
  Precision precision_;
  std::unique_ptr<Fp8Linears> fp8_;
  std::vector<char> local_units_;
  std::optional<int32_t> separator_;
  std::vector<std::unique_ptr<Unit>> units_;
  Head* head_ = nullptr;
  ModelHooks* hooks_ = nullptr;
  MicroBatchContext own_;  // the conveniences' context
};

// One micro-batch through every unit, forward then backward in reverse, with the hooks
// (may be null) around each unit: the one-rank step. Returns the mean token loss.
double run_forward_backward(Transformer& model, MicroBatchContext& ctx, ModelHooks* hooks);
// Every unit's forward on a forward-only context, then hooks->after_forward_only().
// Returns the mean token loss (0 without targets).
double run_forward(Transformer& model, MicroBatchContext& ctx, ModelHooks* hooks);

// Parameter specs of the whole model in order (embeddings, blocks, final norm, head),
// each with its unit.
std::vector<ParameterSpec> model_parameter_specs(const ModelConfig& config);
int64_t count_parameters(const ModelConfig& config);
// Those not frozen: with LoRA the adapters alone, else all.
int64_t count_trainable_parameters(const ModelConfig& config);

// Training FLOPs per token of each unit (0 the embedding, 1 + l block l, n_layer + 1 the
// head), whole over tp; they sum to Transformer::flops_per_token: 6 x the unit's
// parameters used in matmuls (of an MoE block's experts, top_k) + 12 x d_model x T per
// block. A planner times pipeline stages with them.
std::vector<double> unit_flops_per_token(const ModelConfig& config, int T);
// The part of unit_flops_per_token in each unit's routed experts' matmuls (k of E
// experts' weights each token): what runs where the experts are, under ep at the pace of
// the group's most loaded rank.
std::vector<double> unit_expert_flops_per_token(const ModelConfig& config);
// Whether backward recomputes the attention scores: the attention keeps no probabilities
// under context parallelism (the span kernels) and in bf16/f16 (the flash-style kernel).
bool recomputes_attention_scores(bool context_parallel, DType compute);
// What recomputation adds per unit under `policy` (and, with recomputes_scores, the
// attention scores): they sum to Transformer::recompute_flops_per_token. The planner
// passes the same recomputes_attention_scores.
std::vector<double> unit_recompute_flops_per_token(const ModelConfig& config, int T,
                                                   const ActivationCheckpointing& policy, bool recomputes_scores);

}  // namespace ndt
