#include "parallel/tensor/tensor_parallel.h"

#include "core/error.h"
#include "kernels/kernels.h"

namespace ndt {

void validate_tensor_parallel(const ModelConfig& c, int tp, bool sequence_parallel, int seq_len) {
  NDT_CHECK(tp >= 1, "parallel.tp = {} must be positive", tp);
  if (tp == 1) return;
  auto divides = [tp](const char* key, int value) {
    NDT_CHECK(value % tp == 0, "{} = {} is not divisible by parallel.tp = {}", key, value, tp);
  };
  divides("model.n_head", c.n_head);
  divides(c.arch == Arch::llama ? "model.n_kv_head" : "model.n_head (the K/V heads of gpt2)", c.kv_heads());
  divides("model.d_model", c.d_model);
  divides("model.d_ff", c.d_ff);
  if (c.is_moe()) divides("model.moe_d_ff (each routed expert's width)", c.expert_d_ff());
  if (c.moe_shared_d_ff > 0) divides("model.moe_shared_d_ff", c.moe_shared_d_ff);
  divides("model.vocab_size", c.vocab_size);
  if (sequence_parallel) divides("train.seq_len (sequence parallel splits tokens)", seq_len);
}

std::optional<Placement> tensor_parallel_placement(const ParameterSpec& spec, int tp) {
  if (tp == 1 || spec.tp_dim < 0) return std::nullopt;
  return Placement{Axis::tp, Placement::Kind::shard, spec.tp_dim};
}

bool tensor_parallel_grad_partial(const ParameterSpec& spec, int tp, bool sequence_parallel) {
  if (tp == 1 || spec.tp_dim >= 0) return false;
  return spec.tp_region || sequence_parallel;
}

std::vector<ParameterSpec> local_parameter_specs(std::vector<ParameterSpec> specs, int tp) {
  for (ParameterSpec& s : specs) {
    if (const auto placement = tensor_parallel_placement(s, tp)) s.logical_shape[placement->dim] /= tp;
  }
  return specs;
}

namespace {

ReduceOp reduce_op(Reduction op) { return op == Reduction::max ? ReduceOp::max : ReduceOp::sum; }

}  // namespace

// A column-parallel layer's input goes through copy-to-region, or with sequence
// parallel gather-from-sequence-region; a row-parallel layer's output through
// reduce-from-region, or reduce-scatter-to-sequence-region (megatron_regions.h).

const float* MegatronRegions::column_input_forward(const float* x, float* full, int64_t local_rows, int64_t C) const {
  if (!tp_.splits_rows()) return x;  // copy-to-region: identity
  gather_from_sequence_region_forward(tp_, x, full, local_rows * C);
  return full;
}

float* MegatronRegions::column_input_backward(float* dfull, float* dx, int64_t local_rows, int64_t C) const {
  if (!tp_.active()) return dfull;
  if (!tp_.sequence_parallel) {
    copy_to_tp_region_backward(tp_, dfull, local_rows * C);
    return dfull;
  }
  gather_from_sequence_region_backward(tp_, dfull, dx, local_rows * C);
  return dx;
}

float* MegatronRegions::row_output_forward(float* partial, float* y, int64_t local_rows, int64_t C) const {
  if (!tp_.active()) return partial;
  if (!tp_.sequence_parallel) {
    reduce_from_tp_region_forward(tp_, partial, local_rows * C);
    return partial;
  }
  reduce_scatter_to_sequence_region_forward(tp_, partial, y, local_rows * C);
  return y;
}

const float* MegatronRegions::row_output_backward(const float* dy, float* dfull, int64_t local_rows, int64_t C) const {
  if (!tp_.splits_rows()) return dy;  // reduce-from-region: identity
  reduce_scatter_to_sequence_region_backward(tp_, dy, dfull, local_rows * C);
  return dfull;
}

void MegatronRegions::all_reduce(float* x, int64_t n, Reduction op) const { tp_all_reduce(tp_, x, n, reduce_op(op)); }

void MegatronRegions::all_gather(const float* in, float* out, int64_t n) const {
  if (!tp_.active()) return kernels::copy(out, in, n);
  tp_.comm->all_gather(in, out, static_cast<size_t>(n), DType::f32);
}

std::vector<float> gather_tensor_parallel(const ParameterStore& store, const float* tp_blocks,
                                          const TensorParallel& tp) {
  int64_t total = 0;
  for (const Parameter& p : store.params()) total += shape_numel(p.spec.logical_shape);
  std::vector<float> full(static_cast<size_t>(total));
  float* out = full.data();
  const int n = tp.size();
  std::vector<float> blocks;
  for (const Parameter& p : store.params()) {
    if (p.numel() == 0) {  // not on this pipeline stage: zeros (on every tp rank alike)
      out += shape_numel(p.spec.logical_shape);
      continue;
    }
    // This rank's tp block: the logical shape with the tp dim split, every other split
    // (ep) already joined.
    const int dim = p.shard_dim(Axis::tp);
    Shape block = p.spec.logical_shape;
    if (dim >= 0) block[static_cast<size_t>(dim)] /= n;
    const int64_t numel = shape_numel(block);
    const float* local = tp_blocks;
    tp_blocks += numel;
    if (!tp.active() || dim < 0) {
      kernels::copy(out, local, numel);
      out += numel;
      continue;
    }
    blocks.resize(static_cast<size_t>(numel * n));
    tp.comm->all_gather(local, blocks.data(), static_cast<size_t>(numel), DType::f32);
    // Rank r's block spans [r * size, (r + 1) * size) of tp_dim: for each index of the
    // dims before it, the ranks' contiguous runs follow each other.
    int64_t outer = 1;
    for (int d = 0; d < dim; ++d) outer *= block[static_cast<size_t>(d)];
    const int64_t run = outer == 0 ? 0 : numel / outer;
    for (int64_t o = 0; o < outer; ++o) {
      for (int r = 0; r < n; ++r) {
        kernels::copy(out, blocks.data() + r * numel + o * run, run);
        out += run;
      }
    }
  }
  return full;
}

}  // namespace ndt
