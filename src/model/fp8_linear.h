// fp8 training of the blocks' linear layers (precision.fp8; docs/precision.md), emulated
// exactly: each linear's input and weight are rounded to e4m3 and its output gradient
// to e5m2, each tensor at its own power-of-two scale from delayed scaling
// (model/fp8_scaling.h), and the matmul multiplies the dequantised values in the bf16
// GEMM with fp32 accumulation, which is what fp8 hardware computes (the products of
// fp8 values are exact, and power-of-two scales divide out exactly). The output layer
// stays in the compute dtype, as in Transformer Engine's and torchao's recipes.
//
// Each use of a tensor notes its amax (max |x|) for the step; after backward the caller
// max-reduces step_amax() over every rank (then every rank, and every layout, holds the
// amax one rank would see: the whole batch, the whole weight) and calls finish_step(),
// which pushes the amaxes into the histories and sets the scales of the next step.
#pragma once

#include "core/tensor.h"
#include "model/fp8_scaling.h"
#include "model/parameter.h"

#include <cstdint>
#include <unordered_map>
#include <vector>

namespace ndt {

class Fp8Linears {
 public:
  enum Role { input = 0, weight = 1, output_grad = 2 };
  static constexpr int kRoles = 3;

  // Every 2-D weight of a block ("blocks.*.weight" with two dims) is an fp8 linear.
  // config.power_of_two is forced on.
  Fp8Linears(const ParameterStore& store, Fp8ScalingConfig config);

  // The fp8 linear of this weight, or -1 (not an fp8 layer).
  int find(const Parameter& weight) const;
  // out = x [n] rounded to the fp8 grid of (linear, role), as bf16 bits; notes its amax.
  void quantize(int linear, Role role, const float* x, uint16_t* out, int64_t n);
  // A bf16 scratch for a quantised weight (the largest one's size; ledger tag other).
  uint16_t* weight_scratch() { return static_cast<uint16_t*>(weight_scratch_.raw()); }

  // This step's amax of every tensor, linear-major ([linear][role]); zeroed by
  // begin_step, max-reduced over ranks by the caller before finish_step.
  std::vector<float>& step_amax() { return step_amax_; }
  void begin_step();
  void finish_step();
  float scale(int linear, Role role) const { return scales_[index(linear, role)].scale(); }
  int count() const { return static_cast<int>(names_.size()); }

  // Checkpoints: every tensor's history (oldest first) then its scale, in order.
  std::vector<float> state() const;
  void restore(const std::vector<float>& state);  // throws naming what does not fit

 private:
  static size_t index(int linear, Role role) { return static_cast<size_t>(linear) * kRoles + role; }
  std::vector<std::string> names_;
  std::unordered_map<const Parameter*, int> linear_of_;
  std::vector<DelayedScale> scales_;
  std::vector<float> step_amax_;
  Fp8ScalingConfig config_;
  Tensor weight_scratch_;
};

}  // namespace ndt
