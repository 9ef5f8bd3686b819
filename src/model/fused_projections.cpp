#include "model/fused_projections.h"

#include "core/error.h"
#include "kernels/kernels.h"

#include <algorithm>

namespace ndt {

FusedProjections::FusedProjections(std::initializer_list<const ColumnParallelLinear*> layers) {
  NDT_CHECK(layers.size() <= kMaxLayers, "fused projections: {} layers, at most {}", layers.size(), kMaxLayers);
  for (const ColumnParallelLinear* l : layers) layers_[static_cast<size_t>(count_++)] = l;
}

bool FusedProjections::active() const {
  if (count_ == 0) return false;
  const MatmulPrecision& mp = precision();
  if (mp.dtype == DType::f32 || mp.fp8 != nullptr) return false;
  for (int i = 0; i < count_; ++i) {
    const ColumnParallelLinear& l = *layers_[static_cast<size_t>(i)];
    if (l.weight == nullptr || l.lora != nullptr || !l.weight->trainable()) return false;
  }
  return true;
}

int64_t FusedProjections::width() const {
  int64_t total = 0;
  for (int i = 0; i < count_; ++i) total += out_features(i);
  return total;
}

// W_cat [width(), IC]: the compute copies in place where each follows the previous one in
// the arena, else copied side by side into the workspace's fused weight scratch.
const uint16_t* FusedProjections::weights() const {
  const MatmulPrecision& mp = precision();
  bool adjacent = true;
  for (int i = 1; i < count_; ++i) {
    const Parameter& prev = *layers_[static_cast<size_t>(i - 1)]->weight;
    adjacent = adjacent && prev.compute_data() + prev.numel() == layers_[static_cast<size_t>(i)]->weight->compute_data();
  }
  if (adjacent) return layers_[0]->weight->compute_data();
  const int64_t numel = width() * in_features();
  NDT_CHECK(numel <= mp.fused_weights_capacity, "fused projections: weights of {} elements exceed the workspace's {}",
            numel, mp.fused_weights_capacity);
  uint16_t* out = mp.fused_weights;
  for (int i = 0; i < count_; ++i) {
    const Parameter& w = *layers_[static_cast<size_t>(i)]->weight;
    out = std::copy(w.compute_data(), w.compute_data() + w.numel(), out);
  }
  return mp.fused_weights;
}

void FusedProjections::forward(float* const* outs, const float* inp, int64_t rows, float* out_cat) const {
  const MatmulPrecision& mp = precision();
  const int IC = static_cast<int>(in_features()), W = static_cast<int>(width());
  NDT_CHECK(rows * std::max<int64_t>(IC, W) <= mp.capacity, "fused projections: operand of {} rows x {} exceeds the workspace's {}",
            rows, std::max(IC, W), mp.capacity);
  const uint16_t* x = lowp_operand(mp, inp, rows * IC, mp.a);
  kernels::gemm_lowp(mp.dtype, false, true, static_cast<int>(rows), W, IC, x, IC, weights(), IC, 0.0f, out_cat, W);
  std::array<kernels::ColumnBlock, kMaxLayers> blocks;
  for (int i = 0; i < count_; ++i) {
    const ColumnParallelLinear& l = *layers_[static_cast<size_t>(i)];
    blocks[static_cast<size_t>(i)] = {outs[i], l.bias ? l.bias->data() : nullptr, out_features(i)};
  }
  kernels::split_columns_round(mp.dtype, out_cat, blocks.data(), count_, rows);
}

void FusedProjections::bias_gradients(const float* const* douts, int64_t rows) const {
  for (int i = 0; i < count_; ++i) {
    const ColumnParallelLinear& l = *layers_[static_cast<size_t>(i)];
    float* dbias = l.bias ? l.bias->trainable_grad() : nullptr;
    if (dbias) kernels::bias_backward(dbias, douts[i], rows, out_features(i));
  }
}

void FusedProjections::input_gradient(float* dinp, const uint16_t* dy, int64_t rows) const {
  const int IC = static_cast<int>(in_features()), W = static_cast<int>(width());
  kernels::gemm_lowp(precision().dtype, false, false, static_cast<int>(rows), IC, W, dy, W, weights(), IC, 1.0f, dinp,
                     IC);
}

// One GEMM into the gradients where they are adjacent in the gradient arena, else one per
// layer (its columns of dy, leading dimension width()).
void FusedProjections::weight_gradients(const uint16_t* dy, const uint16_t* x, int64_t rows) const {
  const DType dtype = precision().dtype;
  const int IC = static_cast<int>(in_features()), W = static_cast<int>(width()), N = static_cast<int>(rows);
  bool adjacent = true;
  for (int i = 1; i < count_; ++i) {
    const Parameter& prev = *layers_[static_cast<size_t>(i - 1)]->weight;
    adjacent = adjacent && prev.grad_data() + prev.numel() == layers_[static_cast<size_t>(i)]->weight->grad_data();
  }
  if (adjacent) {
    kernels::gemm_lowp(dtype, true, false, W, IC, N, dy, W, x, IC, 1.0f, layers_[0]->weight->grad_data(), IC);
    return;
  }
  int64_t offset = 0;
  for (int i = 0; i < count_; ++i) {
    const Parameter& w = *layers_[static_cast<size_t>(i)]->weight;
    const int OC = static_cast<int>(w.local_shape[0]);
    kernels::gemm_lowp(dtype, true, false, OC, IC, N, dy + offset, W, x, IC, 1.0f, w.grad_data(), IC);
    offset += OC;
  }
}

void FusedProjections::backward_input(float* dinp, const float* const* douts, int64_t rows) const {
  const MatmulPrecision& mp = precision();
  NDT_CHECK(rows * width() <= mp.capacity, "fused projections: output gradient of {} x {} exceeds the workspace's {}",
            rows, width(), mp.capacity);
  bias_gradients(douts, rows);
  std::array<kernels::ColumnBlock, kMaxLayers> blocks;
  for (int i = 0; i < count_; ++i) {
    blocks[static_cast<size_t>(i)] = {const_cast<float*>(douts[i]), nullptr, out_features(i)};  // read only
  }
  kernels::gather_columns_lowp(mp.dtype, blocks.data(), count_, rows, mp.a);
  input_gradient(dinp, mp.a, rows);
}

void FusedProjections::backward(float* dinp, const float* const* douts, const float* inp, int64_t rows) const {
  backward_input(dinp, douts, rows);  // leaves the rounded output gradients in the a scratch
  const MatmulPrecision& mp = precision();
  weight_gradients(mp.a, lowp_operand(mp, inp, rows * in_features(), mp.b), rows);
}

void FusedProjections::backward_weight(const float* dout_cat, const float* inp, int64_t rows) const {
  const MatmulPrecision& mp = precision();
  kernels::cast_to_lowp(mp.dtype, dout_cat, mp.a, rows * width());
  weight_gradients(mp.a, lowp_operand(mp, inp, rows * in_features(), mp.b), rows);
}

}  // namespace ndt
