// Megatron-LM's tensor-parallel layers, written once against the model's region
// interface (model/tensor_parallel_regions.h): on one rank the regions are the
// identity and these are plain layers; under tensor parallelism each rank holds its
// block of every weight (its placement Shard(dim) on tp, set by parallelize()) and
// the regions communicate.
//   column-parallel linear: weight [OC / tp, IC], bias [OC / tp]
//   row-parallel linear:    weight [OC, IC / tp], bias [OC] replicated, added once after the sum
//   vocab-parallel embedding and cross-entropy: the vocabulary split by rows
// and the gradients of replicated parameters that each tp rank computes only in part.
#pragma once

#include "model/matmul.h"
#include "model/parameter.h"
#include "model/tensor_parallel_regions.h"

#include <cstdint>
#include <vector>

namespace ndt {

struct LoraAdapter;  // model/lora.h

// No communication of its own: the copy-to-region (or gather-from-sequence-region)
// before it is done once for all the layers that share the input.
struct ColumnParallelLinear {
  const Parameter* weight = nullptr;
  const Parameter* bias = nullptr;
  const MatmulPrecision* precision = nullptr;  // the workspace's (model/matmul.h)
  const LoraAdapter* lora = nullptr;           // a low-rank adapter added to the output (null: none)
  // out [rows, OC / tp] = inp [rows, IC] W^T + b.
  void forward(float* out, const float* inp, int64_t rows) const;
  // dinp += dout W; weight and bias gradients +=. The same as backward_input then
  // backward_weight (zero-bubble schedules run the two apart).
  void backward(float* dinp, const float* dout, const float* inp, int64_t rows) const;
  // dinp += dout W, and the adapter's whole backward (its gradients are cheap and may
  // be partial sums over tp, which the unit reduces before a deferred weight half runs).
  void backward_input(float* dinp, const float* dout, const float* inp, int64_t rows) const;
  void backward_weight(const float* dout, const float* inp, int64_t rows) const;  // dW += dout^T inp; db +=
};

struct RowParallelLinear {
  const Parameter* weight = nullptr;
  const Parameter* bias = nullptr;
  const MatmulPrecision* precision = nullptr;
  const LoraAdapter* lora = nullptr;  // added to the partial output before the sum (null: none)
  // out [local_rows, OC] = sum over ranks (inp [rows, IC / tp] W^T) + bias. partial is
  // a [rows, OC] scratch (unused without tp; may be out itself without sequence parallel).
  void forward(const TensorParallelRegions& tp, float* out, float* partial, const float* inp, int64_t rows) const;
  // dout [local_rows, OC]: dinp [rows, IC / tp] += dout W; weight gradient +=; dbias +=
  // the sum of dout's rows (a partial sum under sequence parallel: see PartialGradients).
  // dout_full is a [rows, OC] scratch for the all-gather of dout (sequence parallel).
  void backward(const TensorParallelRegions& tp, float* dinp, float* dout_full, const float* dout,
                const float* inp, int64_t rows, float* dbias) const;
  // The same in two halves: the input half (dbias, dinp, the adapter) returns the [rows, OC] output
  // gradient (dout itself, or dout_full under sequence parallel) that the weight half
  // multiplies with inp.
  const float* backward_input(const TensorParallelRegions& tp, float* dinp, float* dout_full, const float* dout,
                              const float* inp, int64_t rows, float* dbias) const;
  void backward_weight(const float* dy, const float* inp, int64_t rows) const;
};

// Vocab-parallel embedding of ids [rows] from `table` (this rank's rows of the
// vocabulary) into out [local_rows, C]: each rank looks up the tokens it owns (zeros
// for the rest) and the row-parallel output operator sums the ranks. partial is a
// [rows, C] scratch (may be out without sequence parallel). Backward adds the rows of
// dout [local_rows, C] of the tokens this rank owns into the table's gradient.
void vocab_parallel_embedding_forward(const TensorParallelRegions& tp, const Parameter& table, const int32_t* ids,
                                      float* out, float* partial, int64_t rows, int64_t C);
void vocab_parallel_embedding_backward(const TensorParallelRegions& tp, const Parameter& table, const int32_t* ids,
                                       const float* dout, float* dout_full, int64_t rows, int64_t C);

// Softmax cross-entropy on logits [rows, V / tp] (this rank's vocabulary slice starting
// at vocab_begin), without gathering the logits: the row maxima are all-reduced (max),
// then the sums of exp(logit - max) and the target logits (from the rank that owns each
// target) are all-reduced (sum) together. losses[n] is the same on every rank. With
// grad_scale != 0 the logits are overwritten by grad_scale x (softmax - onehot) of this
// rank's slice. work: 3 x rows floats.
// z-loss (PaLM): z_losses[n] = z_loss x lse^2 of row n (lse: the whole vocabulary's
// log-sum-exp, row max + log(exp sum) after the all-reduces, so no communication of its
// own; the same on every rank; z_losses may be null), and with grad_scale != 0 the
// gradient is that of grad_scale x (losses + z_losses): grad_scale x (softmax x (1 + 2
// z_loss lse) - onehot). z_loss = 0: bitwise the results without it.
void vocab_parallel_cross_entropy(const TensorParallelRegions& tp, float* logits, float* losses,
                                  const int32_t* targets, int rows, int local_vocab, int64_t vocab_begin,
                                  float grad_scale, float* work, float z_loss = 0.0f, float* z_losses = nullptr);

// Gradients of parameters replicated over tp that each rank computes only in part
// (placement of the gradient Partial on tp: its own heads' share of a QK-norm weight,
// or under sequence parallel its own rows' share of a norm weight, a row-parallel
// bias, the position embedding). During a unit's backward they are written to a
// zeroed buffer (grad(p)), summed over tp once (finish()) and then added to the
// parameters' gradients, so accumulation across micro-steps stays exact.
class PartialGradients {
 public:
  PartialGradients() = default;
  // params: the unit's parameters (null entries ignored); those whose gradient is
  // Partial on tp are selected.
  PartialGradients(const TensorParallelRegions& tp, const std::vector<const Parameter*>& params);
  void begin();                     // zeroes the buffer
  float* grad(const Parameter* p);  // where backward writes p's gradient (null or frozen p: null)
  void finish();                    // all-reduce over tp, then add into the gradients

 private:
  const TensorParallelRegions* tp_ = nullptr;
  std::vector<const Parameter*> params_;
  std::vector<int64_t> offsets_;
  std::vector<float> buffer_;
};

}  // namespace ndt
