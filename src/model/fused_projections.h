// Column-parallel linears that read the same input (attention's q, k and v; SwiGLU's gate
// and up) computed in low precision as one GEMM each way, on this rank's blocks:
//   forward   out_cat [rows, sum OC] = x W_cat^T, W_cat the weights' compute copies side by
//             side, then split into the layers' outputs, biased and rounded to the compute
//             dtype in one pass (the values the block keeps, rounded once where made);
//   backward  the output gradients gathered side by side and rounded in one pass, then
//             dinp += dout_cat W_cat (one GEMM summing over the layers) and
//             dW_cat += dout_cat^T x (one GEMM where the weights' gradients are adjacent
//             in the gradient arena, else one per layer on the same rounded operands).
// The input is rounded once for all the layers. Parameters stay separate (names, splits,
// checkpoints): where the compute copies are adjacent in the arena (no bias between them)
// the GEMM reads them in place, else they are copied side by side into the workspace
// (MatmulPrecision::fused_weights). The products are those of the separate layers; in
// bf16/f16 the fp32 sums may run in another order. fp32, fp8 and adapters (LoRA) keep the
// per-layer path (active() is false): fp32 stays bitwise as it was.
#pragma once

#include "model/tp_layers.h"

#include <array>
#include <cstdint>
#include <initializer_list>

namespace ndt {

class FusedProjections {
 public:
  static constexpr int kMaxLayers = 3;
  FusedProjections() = default;
  FusedProjections(std::initializer_list<const ColumnParallelLinear*> layers);

  // Whether the fused path applies: low precision without fp8, and every layer with a
  // trainable weight and no adapter.
  bool active() const;
  int size() const { return count_; }
  int64_t out_features(int i) const { return layers_[static_cast<size_t>(i)]->weight->local_shape[0]; }
  int64_t width() const;  // the layers' output widths summed (this rank's)
  int64_t in_features() const { return layers_[0]->weight->local_shape[1]; }
  // outs[i] [rows, OC_i] = inp W_i^T + b_i rounded to the compute dtype; out_cat is an fp32
  // [rows, width()] scratch.
  void forward(float* const* outs, const float* inp, int64_t rows, float* out_cat) const;
  // douts[i] [rows, OC_i]: dinp += sum_i douts[i] W_i; weight and bias gradients +=.
  // The same as backward_input, then backward_weight of the douts side by side.
  void backward(float* dinp, const float* const* douts, const float* inp, int64_t rows) const;
  // dinp += sum_i douts[i] W_i; the bias gradients += (a zero-bubble schedule's input half).
  void backward_input(float* dinp, const float* const* douts, int64_t rows) const;
  // The weight gradients += dout_cat^T inp, dout_cat fp32 [rows, width()] (gather_columns
  // of the douts): the deferred weight half, bitwise what backward adds.
  void backward_weight(const float* dout_cat, const float* inp, int64_t rows) const;

 private:
  const MatmulPrecision& precision() const { return *layers_[0]->precision; }
  const uint16_t* weights() const;
  void bias_gradients(const float* const* douts, int64_t rows) const;
  // dinp += dy W_cat, dy the rounded output gradients [rows, width()].
  void input_gradient(float* dinp, const uint16_t* dy, int64_t rows) const;
  void weight_gradients(const uint16_t* dy, const uint16_t* x, int64_t rows) const;

  std::array<const ColumnParallelLinear*, kMaxLayers> layers_{};
  int count_ = 0;
};

}  // namespace ndt
