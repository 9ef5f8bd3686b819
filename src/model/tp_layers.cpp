#include "model/tp_layers.h"

#include "core/error.h"
#include "core/targets.h"
#include "kernels/kernels.h"
#include "model/lora.h"

#include <algorithm>

namespace ndt {

namespace {

int rows_of(const Parameter& p) { return static_cast<int>(p.local_shape[0]); }

}  // namespace

void ColumnParallelLinear::forward(float* out, const float* inp, int64_t rows) const {
  matmul_forward(*precision, out, inp, *weight, bias ? bias->data() : nullptr, rows);
  if (lora) lora->forward(*precision, out, inp, rows);
}

void ColumnParallelLinear::backward(float* dinp, const float* dout, const float* inp, int64_t rows) const {
  matmul_backward(*precision, dinp, /*weight_grad=*/true, bias ? bias->trainable_grad() : nullptr, dout, inp,
                  *weight, rows);
  if (lora) lora->backward(*precision, dinp, dout, inp, rows);
}

void ColumnParallelLinear::backward_input(float* dinp, const float* dout, const float* inp, int64_t rows) const {
  matmul_backward(*precision, dinp, /*weight_grad=*/false, nullptr, dout, nullptr, *weight, rows);
  if (lora) lora->backward(*precision, dinp, dout, inp, rows);
}

void ColumnParallelLinear::backward_weight(const float* dout, const float* inp, int64_t rows) const {
  matmul_backward(*precision, nullptr, /*weight_grad=*/true, bias ? bias->trainable_grad() : nullptr, dout, inp,
                  *weight, rows);
}

void RowParallelLinear::forward(const TensorParallelRegions& tp, float* out, float* partial, const float* inp,
                                int64_t rows) const {
  const int OC = rows_of(*weight);
  const float* b = bias ? bias->data() : nullptr;
  if (!tp.active()) {
    matmul_forward(*precision, out, inp, *weight, b, rows);
    if (lora) lora->forward(*precision, out, inp, rows);
    return;
  }
  const int64_t local_rows = tp.local_rows(rows);
  matmul_forward(*precision, partial, inp, *weight, nullptr, rows);
  if (lora) lora->forward(*precision, partial, inp, rows);  // summed over tp with the base's part
  const float* y = tp.row_output_forward(partial, out, local_rows, OC);
  if (y != out) kernels::copy(out, y, local_rows * OC);
  if (b) kernels::add_bias(out, b, local_rows, OC);
}

void RowParallelLinear::backward(const TensorParallelRegions& tp, float* dinp, float* dout_full, const float* dout,
                                 const float* inp, int64_t rows, float* dbias) const {
  if (dbias) kernels::bias_backward(dbias, dout, tp.local_rows(rows), rows_of(*weight));
  const float* dy = tp.row_output_backward(dout, dout_full, tp.local_rows(rows), rows_of(*weight));
  matmul_backward(*precision, dinp, /*weight_grad=*/true, nullptr, dy, inp, *weight, rows);
  if (lora) lora->backward(*precision, dinp, dy, inp, rows);
}

const float* RowParallelLinear::backward_input(const TensorParallelRegions& tp, float* dinp, float* dout_full,
                                               const float* dout, const float* inp, int64_t rows,
                                               float* dbias) const {
  const int OC = rows_of(*weight);
  if (dbias) kernels::bias_backward(dbias, dout, tp.local_rows(rows), OC);
  const float* dy = tp.row_output_backward(dout, dout_full, tp.local_rows(rows), OC);
  matmul_backward(*precision, dinp, /*weight_grad=*/false, nullptr, dy, nullptr, *weight, rows);
  if (lora) lora->backward(*precision, dinp, dy, inp, rows);
  return dy;
}

void RowParallelLinear::backward_weight(const float* dy, const float* inp, int64_t rows) const {
  matmul_backward(*precision, nullptr, /*weight_grad=*/true, nullptr, dy, inp, *weight, rows);
}

void vocab_parallel_embedding_forward(const TensorParallelRegions& tp, const Parameter& table, const int32_t* ids,
                                      float* out, float* partial, int64_t rows, int64_t C) {
  if (!tp.active()) {
    kernels::embedding_forward(out, ids, table.data(), static_cast<int>(rows), static_cast<int>(C), false);
    return;
  }
  kernels::embedding_forward_range(partial, ids, table.data(), table.local_offset[0], table.local_shape[0], rows, C);
  const float* y = tp.row_output_forward(partial, out, tp.local_rows(rows), C);
  if (y != out) kernels::copy(out, y, tp.local_rows(rows) * C);
}

void vocab_parallel_embedding_backward(const TensorParallelRegions& tp, const Parameter& table, const int32_t* ids,
                                       const float* dout, float* dout_full, int64_t rows, int64_t C) {
  if (!table.trainable()) return;  // a lookup table has no input gradient
  if (!tp.active()) {
    kernels::embedding_backward(table.grad_data(), dout, ids, static_cast<int>(rows), static_cast<int>(C));
    return;
  }
  const float* d = tp.row_output_backward(dout, dout_full, tp.local_rows(rows), C);
  kernels::embedding_backward_range(table.grad_data(), d, ids, table.local_offset[0], table.local_shape[0], rows, C);
}

void vocab_parallel_cross_entropy(const TensorParallelRegions& tp, float* logits, float* losses,
                                  const int32_t* targets, int rows, int local_vocab, int64_t vocab_begin,
                                  float grad_scale, float* work, float z_loss, float* z_losses) {
  if (!tp.active()) {
    kernels::softmax_cross_entropy(logits, losses, targets, rows, local_vocab, grad_scale, z_loss, z_losses);
    return;
  }
  const int64_t V = int64_t{local_vocab} * tp.size();
  for (int n = 0; n < rows; ++n) {
    NDT_CHECK((targets[n] >= 0 && targets[n] < V) || targets[n] == kIgnoredTarget,
              "vocab_parallel_cross_entropy: target {} of row {} is outside [0, {}) and not the ignored target {}",
              targets[n], n, V, kIgnoredTarget);
  }
  float* row_max = work;  // [rows]
  float* sums = work + rows;  // [rows] sums of exp(logit - max), then [rows] target logits
  float* target_logit = sums + rows;
  kernels::cross_entropy_row_max(logits, row_max, rows, local_vocab);
  tp.all_reduce(row_max, rows, Reduction::max);
  kernels::cross_entropy_exp_sums(logits, row_max, targets, vocab_begin, sums, target_logit, rows, local_vocab,
                                  /*keep_exp=*/grad_scale != 0.0f);
  tp.all_reduce(sums, 2 * int64_t{rows}, Reduction::sum);  // sums and target logits together
  kernels::cross_entropy_finish(logits, losses, row_max, sums, target_logit, targets, vocab_begin, rows, local_vocab,
                                grad_scale, z_loss, z_losses);
}

PartialGradients::PartialGradients(const TensorParallelRegions& tp, const std::vector<const Parameter*>& params)
    : tp_(&tp) {
  int64_t total = 0;
  for (const Parameter* p : params) {
    if (p == nullptr || !p->trainable() || !p->grad_partial_on(Axis::tp)) continue;
    params_.push_back(p);
    offsets_.push_back(total);
    total += p->numel();
  }
  buffer_.assign(static_cast<size_t>(total), 0.0f);
}

void PartialGradients::begin() { std::fill(buffer_.begin(), buffer_.end(), 0.0f); }

float* PartialGradients::grad(const Parameter* p) {
  if (p == nullptr || !p->trainable()) return nullptr;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (params_[i] == p) return buffer_.data() + offsets_[i];
  }
  return p->grad_data();
}

void PartialGradients::finish() {
  if (params_.empty()) return;
  tp_->all_reduce(buffer_.data(), static_cast<int64_t>(buffer_.size()), Reduction::sum);
  for (size_t i = 0; i < params_.size(); ++i) {
    kernels::add_inplace(params_[i]->grad_data(), buffer_.data() + offsets_[i], params_[i]->numel());
  }
}

}  // namespace ndt
