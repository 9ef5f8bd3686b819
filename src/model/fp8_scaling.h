// Delayed scaling for fp8 GEMM inputs, as NVIDIA Transformer Engine's DelayedScaling
// recipe. Each tensor role (a layer's input, weight or output gradient) keeps a rolling
// window of the amax (max |x|) seen in its last amax_history_len steps; the scale used
// this step comes from that window, before this step's amax is known:
//   amax_ref = max of the window (algo max) or its newest entry (algo most_recent)
//   scale    = fp8_max(format) / amax_ref / 2^margin
// so the tensor times scale just fits the format (the margin leaves 2^margin headroom).
// While amax_ref is 0 or not finite the previous scale stays (1 at the start); a scale
// that would leave the positive normal floats is clamped to [FLT_MIN, FLT_MAX].
//
// quantize_fp8 rounds x * scale to the nearest e4m3 / e5m2 value and stores it as bf16
// bits: every fp8 value is exact in bf16, so a bf16 GEMM with fp32 accumulation whose
// result is multiplied by 1 / (scale_a * scale_b) computes what an fp8 GEMM does. The
// loops here are pure and communication-free; amax reductions across ranks are the
// caller's (the max over ranks before record()).
#pragma once

#include "core/dtype.h"

#include <cstdint>
#include <vector>

namespace ndt {

struct Fp8ScalingConfig {
  enum class AmaxAlgo { max, most_recent };
  int amax_history_len = 16;  // precision.fp8_amax_history, >= 1
  int margin = 0;             // precision.fp8_margin, >= 0
  AmaxAlgo algo = AmaxAlgo::max;
  // Round each scale down to a power of two (as the MX formats' shared exponents): then
  // x_q / scale is exact in bf16, and a bf16 GEMM of the dequantised operands with fp32
  // accumulation computes exactly what an fp8 GEMM does (fake_quantize_fp8). Training
  // uses this; the plain recipe (false) is TE's.
  bool power_of_two = false;

  // Throws ndt::Error naming precision.fp8_amax_history / precision.fp8_margin and the value.
  void validate() const;
};

// What a checkpoint keeps of one DelayedScale.
struct DelayedScaleState {
  std::vector<float> amax_history;  // amax_history_len values, oldest first
  float scale = 1;
};

class DelayedScale {
 public:
  // format: DType::e4m3 or DType::e5m2. Validates config. The history starts as zeros.
  DelayedScale(DType format, const Fp8ScalingConfig& config);

  DType format() const { return format_; }
  float scale() const { return scale_; }  // the scale for this step's quantisation
  // Pushes this step's amax (>= 0, inf or NaN allowed) into the window, dropping the
  // oldest, and computes the scale for the next step.
  void record(float amax);
  const std::vector<float>& amax_history() const { return history_; }  // oldest first

  DelayedScaleState state() const { return {history_, scale_}; }
  // Throws ndt::Error when the history's length is not precision.fp8_amax_history, a
  // history value is negative, or the scale is not a finite positive number.
  void restore(const DelayedScaleState& state);

 private:
  DType format_;
  Fp8ScalingConfig config_;
  std::vector<float> history_;
  float scale_ = 1;
};

// The largest finite value of an fp8 format: 448 (e4m3), 57344 (e5m2). Throws for
// other dtypes.
float fp8_max(DType format);

// max |x[i]| over n values (0 for n = 0); NaN if any value is NaN, else inf if any is +-inf.
float amax_of(const float* x, int64_t n);

// out[i] = bf16 bits of the fp8 value nearest to x[i] * scale (round to nearest even,
// saturating to +-fp8_max, NaN stays NaN), bit-identical to
// f32_to_bf16(e4m3_to_f32(f32_to_e4m3(x[i] * scale))) (e5m2 alike).
void quantize_fp8(DType format, const float* x, float scale, uint16_t* out_bf16, int64_t n);

// out[i] = bf16 bits of fp8(x[i] * scale) / scale: x rounded to the fp8 grid of that
// scale, back in x's units. scale must be a power of two (then the division is exact
// and the result too, unless it falls below bf16's normal range).
void fake_quantize_fp8(DType format, const float* x, float scale, uint16_t* out_bf16, int64_t n);

}  // namespace ndt
