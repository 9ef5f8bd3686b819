// The frequencies RoPE rotates by (kernels/cpu/rope.h takes them): a value type of the
// kernel interface, so the model names its RoPE without naming a backend.
#pragma once

namespace ndt {

// The frequencies: theta^(-2i/D), or with scaling_factor > 0 those remapped as Llama 3
// does (transformers' "llama3" rope_type): wavelengths 2 pi / f longer than
// original_max_seq_len / low_freq_factor are slowed by scaling_factor, those shorter than
// original_max_seq_len / high_freq_factor kept, and those between interpolated by
// s = (original_max_seq_len / wavelength - low_freq_factor) / (high_freq_factor -
// low_freq_factor) as (1 - s) f / scaling_factor + s f. A bare theta converts.
struct RopeFrequencies {
  RopeFrequencies(float base) : theta(base) {}  // NOLINT: implicit, the unscaled case
  float theta;
  float scaling_factor = 0.0f;  // 0: no scaling
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  float original_max_seq_len = 8192.0f;
};

}  // namespace ndt
