// Tensor parallelism (Megatron-LM): the layers of a block split across the tp mesh axis.
// Splits: attention by heads (q, k, v column-parallel; output projection row-parallel),
// the MLP by hidden units (fc / gate / up column-parallel; proj / down row-parallel),
// the embedding and output layer by vocabulary rows; with sequence parallel also the
// norms and residual adds by rows (tokens). The model declares which tensor dim each of
// its Megatron layers splits (ParameterSpec::tp_dim); tensor_parallel_placement()
// turns that into the placement Shard(tp_dim) on tp, and every rank holds block
// rank x (size / tp) of that dim.
// Communicates, over tp: the region operators of parallel/tensor/megatron_regions.h around each
// attention and MLP (2 all-reduces of B x T x C per block in forward and 2 in backward,
// or as many all-gather + reduce-scatter pairs with sequence parallel); one for the
// embedding and one for the output layer; the vocab-parallel loss's two small
// all-reduces per row chunk; and one small all-reduce per unit of the replicated
// parameters whose gradient each rank computes only in part (Partial on tp).
//
// The layers themselves are model code (model/tp_layers.h), written against the
// model's region interface; MegatronRegions is that interface's implementation over
// the tp communicator, which parallelize() installs.
#pragma once

#include "model/config.h"
#include "model/parameter.h"
#include "model/tensor_parallel_regions.h"
#include "parallel/tensor/megatron_regions.h"

#include <cstdint>
#include <optional>
#include <vector>

namespace ndt {

// Throws naming each value that does not divide by tp: heads, KV heads, d_model, d_ff,
// the MoE experts' and shared MLP's widths, vocabulary, and (sequence parallel) the
// sequence length.
void validate_tensor_parallel(const ModelConfig& config, int tp, bool sequence_parallel, int seq_len);

// What tensor parallelism does to a parameter the model declared: its value's placement
// on tp (Shard(tp_dim), or none: Replicate), and whether backward leaves its gradient
// Partial on tp (a replicated parameter used inside a region, as QK-norm is; under
// sequence parallel every replicated parameter, each rank seeing its rows only).
std::optional<Placement> tensor_parallel_placement(const ParameterSpec& spec, int tp);
bool tensor_parallel_grad_partial(const ParameterSpec& spec, int tp, bool sequence_parallel);

// The specs with each logical shape replaced by one tp rank's block (for memory models).
std::vector<ParameterSpec> local_parameter_specs(std::vector<ParameterSpec> specs, int tp);

// The Megatron region operators over the tp communicator.
class MegatronRegions : public TensorParallelRegions {
 public:
  explicit MegatronRegions(const TensorParallel& tp) : tp_(tp) {}
  ActivationLayout layout() const override { return tp_.layout(); }
  int rank() const override { return tp_.rank(); }
  const float* column_input_forward(const float* x, float* full, int64_t local_rows, int64_t C) const override;
  float* column_input_backward(float* dfull, float* dx, int64_t local_rows, int64_t C) const override;
  float* row_output_forward(float* partial, float* y, int64_t local_rows, int64_t C) const override;
  const float* row_output_backward(const float* dy, float* dfull, int64_t local_rows, int64_t C) const override;
  void all_reduce(float* x, int64_t n, Reduction op) const override;
  void all_gather(const float* in, float* out, int64_t n) const override;

 private:
  TensorParallel tp_;
};

// The logical (whole) values of every parameter, in store order, from this rank's
// tensor-parallel blocks at `tp_blocks`: each parameter's logical shape with its tp dim
// split, in store order, nothing for a parameter not on this pipeline stage (zeros in
// the result). Without expert parallelism that is the store's arena; with it, what
// gather_expert_parallel (parallel/expert/expert_parallel.h) makes of the arena. All-gathers
// each parameter sharded on tp. Collective over tp.
std::vector<float> gather_tensor_parallel(const ParameterStore& store, const float* tp_blocks,
                                          const TensorParallel& tp);

}  // namespace ndt
