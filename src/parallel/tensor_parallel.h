// Tensor parallelism (Megatron-LM): the layers of a block split across the tp mesh axis.
// Splits: attention by heads (q, k, v column-parallel; output projection row-parallel),
// the MLP by hidden units (fc / gate / up column-parallel; proj / down row-parallel),
// the embedding and output layer by vocabulary rows; with sequence parallel also the
// norms and residual adds by rows (tokens). Which tensor dim each parameter splits is
// ParameterSpec::tp_dim (set where the model declares its parameters); every rank
// holds the block rank x (size / tp) of that dim (placement Shard(tp_dim) on "tp").
// Communicates, over tp: the region operators of parallel/tp_regions.h around each
// attention and MLP (2 all-reduces of B x T x C per block in forward and 2 in backward,
// or as many all-gather + reduce-scatter pairs with sequence parallel); one for the
// embedding and one for the output layer; the vocab-parallel loss's two small
// all-reduces per row chunk; and one small all-reduce per block (and for the root's
// final norm and positions) of the replicated parameters whose gradient each rank
// computes only in part (PartialGradients).
#pragma once

#include "model/config.h"
#include "model/parameter.h"
#include "parallel/tp_regions.h"

#include <cstdint>
#include <vector>

namespace ndt {

// Throws naming each value that does not divide by tp: heads, KV heads, d_model, d_ff,
// vocabulary, and (sequence parallel) the sequence length.
void validate_tensor_parallel(const ModelConfig& config, int tp, bool sequence_parallel, int seq_len);

// The specs with each logical shape replaced by one tp rank's block (for memory models).
std::vector<ParameterSpec> local_parameter_specs(std::vector<ParameterSpec> specs, int tp);

// Column-parallel linear: weight [OC / tp, IC] (this rank's output features), bias
// [OC / tp]. Input: the region's input, all rows. No communication of its own: the
// copy-to-region (or gather-from-sequence-region) before it, column_parallel_input_*
// in tp_regions.h, is done once for all the layers that share the input.
struct ColumnParallelLinear {
  const Parameter* weight = nullptr;
  const Parameter* bias = nullptr;
  void forward(float* out, const float* inp, int64_t rows) const;
  // dinp += dout W; weight and bias gradients +=.
  void backward(float* dinp, const float* dout, const float* inp, int64_t rows) const;
};

// Row-parallel linear: weight [OC, IC / tp] (this rank's input features), bias [OC]
// replicated and added once, after reduce-from-region (or reduce-scatter-to-sequence-
// region) has summed the ranks' products.
struct RowParallelLinear {
  const Parameter* weight = nullptr;
  const Parameter* bias = nullptr;
  TensorParallel tp;
  // out [local_rows, OC] = sum over ranks (inp [rows, IC / tp] W^T) + bias. partial is
  // a [rows, OC] scratch (unused without tp; may be out itself without sequence parallel).
  void forward(float* out, float* partial, const float* inp, int64_t rows) const;
  // dout [local_rows, OC]: dinp [rows, IC / tp] += dout W; weight gradient +=; dbias +=
  // the sum of dout's rows (a partial sum under sequence parallel: see PartialGradients).
  // dout_full is a [rows, OC] scratch for the all-gather of dout (sequence parallel).
  void backward(float* dinp, float* dout_full, const float* dout, const float* inp, int64_t rows,
                float* dbias) const;
};

// Vocab-parallel embedding: table [V / tp, C] holds rows [vocab_begin, vocab_begin + V / tp).
// partial [rows, C] = this rank's lookups (zero rows for tokens it does not own); the
// row-parallel output operator after it sums the ranks. Backward adds the rows of dout [rows, C] of the
// tokens it owns into dtable (deterministic, in row order).
void vocab_parallel_embedding_forward(float* partial, const int32_t* ids, const float* table, int64_t vocab_begin,
                                      int64_t local_vocab, int64_t rows, int64_t C);
void vocab_parallel_embedding_backward(float* dtable, const float* dout, const int32_t* ids, int64_t vocab_begin,
                                       int64_t local_vocab, int64_t rows, int64_t C);

// Vocab-parallel softmax cross-entropy on logits [rows, V / tp], this rank's vocabulary
// slice starting at vocab_begin, without gathering the logits: the row maxima are
// all-reduced (max), then the sums of exp(logit - max) and the target logits (from the
// rank that owns each target) are all-reduced (sum) together. losses[n] is the same on
// every rank. With grad_scale != 0 the logits are overwritten by grad_scale x
// (softmax - onehot) of this rank's slice. work: 3 x rows floats. With tp = 1 this is
// cpu::softmax_cross_entropy.
void vocab_parallel_cross_entropy(const TensorParallel& tp, float* logits, float* losses, const int32_t* targets,
                                  int rows, int local_vocab, int64_t vocab_begin, float grad_scale, float* work);

// Gradients of parameters replicated over tp that each rank computes only in part: its
// own heads' share of a QK-norm weight, or (sequence parallel) its own rows' share of
// a norm weight, a row-parallel bias, the position embedding. During a backward they
// are written to a zeroed buffer (grad(p)), summed over tp once (finish()) and then
// added to the parameters' gradients, so accumulation across micro-steps stays exact.
class PartialGradients {
 public:
  PartialGradients() = default;
  // params: those that may be partial; the ones that are (QK-norm always, the rest
  // under sequence parallel) are selected here. Nothing is selected without tp.
  PartialGradients(const TensorParallel& tp, const std::vector<const Parameter*>& params);
  void begin();                           // zeroes the buffer
  float* grad(const Parameter* p);        // where backward writes p's gradient (null p: null)
  void finish();                          // all-reduce over tp, then add into the gradients

 private:
  TensorParallel tp_;
  std::vector<const Parameter*> params_;
  std::vector<int64_t> offsets_;
  std::vector<float> buffer_;
};

// Whether a replicated parameter's gradient is partial under this tp (see above).
bool has_partial_gradient(const TensorParallel& tp, const Parameter& p);

// The logical (whole) values of every parameter, in store order, from this rank's
// local blocks at `local_values` (an arena laid out like the store's): all-gathers each
// tp-sharded parameter. Collective over tp.
std::vector<float> gather_tensor_parallel(const ParameterStore& store, const float* local_values,
                                          const TensorParallel& tp);

}  // namespace ndt
