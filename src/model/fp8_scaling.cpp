#include "model/fp8_scaling.h"

#include "core/error.h"

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>

namespace ndt {
namespace {

// Elements below which the loops stay on the calling thread (no fork/join cost).
constexpr int64_t kParallelMin = int64_t{1} << 15;
constexpr uint32_t kAbsMask = 0x7FFFFFFFu;
constexpr uint32_t kInfBits = 0x7F800000u;

void check_fp8(DType format) {
  NDT_CHECK(format == DType::e4m3 || format == DType::e5m2,
            "fp8 scaling needs an fp8 format (e4m3 or e5m2), got {}", dtype_name(format));
}

// Rounds x[i] * scale to an fp8 format with kMant mantissa bits and exponent bias kBias,
// branch-free so the loop vectorises. The result is built directly as the f32 bits of
// the fp8 value, whose low 16 bits are zero, so its top half is the bf16 encoding.
//   normal range: drop 23 - kMant mantissa bits of the f32 pattern with round to nearest
//     even (a carry moves into the exponent), then saturate at max_bits;
//   below the smallest normal: adding kMagic = 2^23 * (the subnormal step) makes the f32
//     adder round |y| to a whole number of steps (ties to even); subtracting it is exact.
template <int kMant, int kBias>
void quantize_loop(const float* x, float scale, uint16_t* out, int64_t n, uint32_t max_bits) {
  constexpr int kDrop = 23 - kMant;
  constexpr uint32_t kDropMask = (1u << kDrop) - 1u;
  constexpr uint32_t kMinNormalBits = static_cast<uint32_t>(127 + 1 - kBias) << 23;
  constexpr float kMagic = std::bit_cast<float>(static_cast<uint32_t>(127 + 24 - kBias - kMant) << 23);
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t u = std::bit_cast<uint32_t>(x[i] * scale);
    const uint32_t a = u & kAbsMask;
    uint32_t normal = (a + (kDropMask >> 1) + ((a >> kDrop) & 1u)) & ~kDropMask;
    normal = normal > max_bits ? max_bits : normal;
    const uint32_t subnormal = std::bit_cast<uint32_t>((std::bit_cast<float>(a) + kMagic) - kMagic);
    uint32_t bits = a < kMinNormalBits ? subnormal : normal;
    bits = a > kInfBits ? 0x7FC00000u : bits;  // NaN: the quiet NaN the decoders give
    out[i] = static_cast<uint16_t>(((u & ~kAbsMask) | bits) >> 16);
  }
}

}  // namespace

void Fp8ScalingConfig::validate() const {
  NDT_CHECK(amax_history_len >= 1, "precision.fp8_amax_history = {} must be at least 1",
            amax_history_len);
  NDT_CHECK(margin >= 0, "precision.fp8_margin = {} must not be negative", margin);
}

float fp8_max(DType format) {
  check_fp8(format);
  return format == DType::e4m3 ? 448.0f : 57344.0f;
}

DelayedScale::DelayedScale(DType format, const Fp8ScalingConfig& config)
    : format_(format), config_(config) {
  check_fp8(format);
  config_.validate();
  history_.assign(static_cast<size_t>(config_.amax_history_len), 0.0f);
}

void DelayedScale::record(float amax) {
  NDT_CHECK(!(amax < 0), "fp8 amax {} must not be negative", amax);
  std::rotate(history_.begin(), history_.begin() + 1, history_.end());
  history_.back() = amax;
  float ref = history_.back();
  if (config_.algo == Fp8ScalingConfig::AmaxAlgo::max) {
    for (float h : history_) ref = std::isnan(h) ? h : std::max(ref, h);  // NaN stays NaN
  }
  if (!(ref > 0) || !std::isfinite(ref)) return;  // keep the previous scale
  scale_ = std::clamp(std::ldexp(fp8_max(format_) / ref, -config_.margin), FLT_MIN, FLT_MAX);
  if (config_.power_of_two) {
    int exponent = 0;
    std::frexp(scale_, &exponent);  // scale_ = m x 2^exponent, m in [0.5, 1)
    scale_ = std::ldexp(1.0f, exponent - 1);
  }
}

void DelayedScale::restore(const DelayedScaleState& state) {
  NDT_CHECK(state.amax_history.size() == history_.size(),
            "the checkpoint's fp8 amax history holds {} values but precision.fp8_amax_history = {}",
            state.amax_history.size(), history_.size());
  for (float h : state.amax_history) {
    NDT_CHECK(!(h < 0), "the checkpoint's fp8 amax history holds a negative value {}", h);
  }
  NDT_CHECK(std::isfinite(state.scale) && state.scale > 0,
            "the checkpoint's fp8 scale {} must be a finite positive number", state.scale);
  history_ = state.amax_history;
  scale_ = state.scale;
}

float amax_of(const float* x, int64_t n) {
  // Magnitudes compared as bit patterns: for non-negative floats the unsigned order is
  // the numeric order, with inf above every finite value and NaN above inf. An integer
  // max reduction vectorises without fast-math and propagates NaN.
  uint32_t top = 0;
#pragma omp parallel for simd schedule(static) reduction(max : top) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) top = std::max(top, std::bit_cast<uint32_t>(x[i]) & kAbsMask);
  return top > kInfBits ? std::numeric_limits<float>::quiet_NaN() : std::bit_cast<float>(top);
}

void quantize_fp8(DType format, const float* x, float scale, uint16_t* out_bf16, int64_t n) {
  const uint32_t max_bits = std::bit_cast<uint32_t>(fp8_max(format));
  if (format == DType::e4m3) {
    quantize_loop<3, 7>(x, scale, out_bf16, n, max_bits);
  } else {
    quantize_loop<2, 15>(x, scale, out_bf16, n, max_bits);
  }
}

void fake_quantize_fp8(DType format, const float* x, float scale, uint16_t* out_bf16, int64_t n) {
  int exponent = 0;
  NDT_CHECK(std::frexp(scale, &exponent) == 0.5f, "fake_quantize_fp8: scale {} is not a power of two", scale);
  quantize_fp8(format, x, scale, out_bf16, n);
  // Dividing an fp8 value by a power of two is exact: the bf16 bits of the product are
  // its top 16 bits.
  const float inverse = 1.0f / scale;
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits = static_cast<uint32_t>(out_bf16[i]) << 16;
    float v;
    std::memcpy(&v, &bits, sizeof v);
    v *= inverse;
    std::memcpy(&bits, &v, sizeof v);
    out_bf16[i] = static_cast<uint16_t>(bits >> 16);
  }
}

}  // namespace ndt
