// Rotary position embedding on x[B, T, H, D] (D even), "rotate half" pairing as in
// Hugging Face Llama: element i < D/2 pairs with i + D/2, frequency
// theta^(-2i/D), position pos_offset + t (the offset lets a sequence shard rotate
// by its global positions). The _at forms take each row's position from
// positions[B, T] (>= 0): a context-parallel rank's rows are runs of the sequence that
// need not be consecutive (docs/context_parallel.md), and with document boundaries every
// sequence restarts its positions at its own document starts (docs/data.md). Their
// (cos, sin) table holds one entry per distinct position of the call.
// Contract: forward writes out (out == inp allowed); backward adds (+=) into dinp.
// The _at forms throw ndt::Error for a negative position.
#pragma once

#include "kernels/rope_frequencies.h"

#include <cstdint>
#include <vector>

namespace ndt::cpu {

// The D/2 inverse frequencies of kernels/rope_frequencies.h, in double.
std::vector<double> rope_inverse_frequencies(int D, const RopeFrequencies& f);

void rope_forward(float* out, const float* inp, int B, int T, int H, int D, int pos_offset,
                  const RopeFrequencies& frequencies);
void rope_backward(float* dinp, const float* dout, int B, int T, int H, int D, int pos_offset,
                   const RopeFrequencies& frequencies);
void rope_forward_at(float* out, const float* inp, int B, int T, int H, int D, const int32_t* positions,
                     const RopeFrequencies& frequencies);
void rope_backward_at(float* dinp, const float* dout, int B, int T, int H, int D, const int32_t* positions,
                      const RopeFrequencies& frequencies);

}  // namespace ndt::cpu
