// RoPE, "rotate half" pairing (kernels/cpu/rope.h): one thread per (row, head, pair).
// The inverse frequencies come from the CPU twin's rope_inverse_frequencies (double) and
// each angle is position x frequency in double, its cos and sin rounded once to float,
// as on the CPU. Positions of the _at forms are checked (>= 0) before any rotation.
#include "kernels/cpu/rope.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/cuda_kernels.h"

#include <vector>

namespace ndt::cuda {
namespace {

__global__ void check_positions_kernel(const int32_t* positions, int64_t rows, int* bad_row) {
  NDT_GRID_LOOP(r, rows) {
    if (positions[r] < 0) atomicCAS(bad_row, 0, static_cast<int>(r) + 1);
  }
}

// out (=|+=) the pair (x1, x2) rotated by +angle, or by -angle when kInverse.
template <bool kInverse, bool kAccumulate>
__global__ void rope_kernel(float* out, const float* x, int B, int T, int H, int D, int pos_offset,
                            const int32_t* positions, const double* inv_freq) {
  const int half = D / 2;
  NDT_GRID_LOOP(idx, static_cast<int64_t>(B) * T * H * half) {
    const int i = static_cast<int>(idx % half);
    const int64_t head_row = idx / half;  // (b, t, h)
    const int64_t bt = head_row / H;      // (b, t)
    const double pos = positions ? static_cast<double>(positions[bt]) : static_cast<double>(pos_offset) + bt % T;
    double s_angle = 0.0, c_angle = 0.0;
    sincos(pos * inv_freq[i], &s_angle, &c_angle);
    const float c = static_cast<float>(c_angle), s = kInverse ? -static_cast<float>(s_angle) : static_cast<float>(s_angle);
    const int64_t base = head_row * D;
    const float x1 = x[base + i], x2 = x[base + i + half];
    const float r1 = x1 * c - x2 * s, r2 = x2 * c + x1 * s;
    if constexpr (kAccumulate) {
      out[base + i] += r1;
      out[base + i + half] += r2;
    } else {
      out[base + i] = r1;
      out[base + i + half] = r2;
    }
  }
}

template <bool kInverse, bool kAccumulate>
void rotate(const char* kernel, float* out, const float* x, int B, int T, int H, int D, int pos_offset,
            const int32_t* positions, const RopeFrequencies& frequencies) {
  const int64_t pairs = static_cast<int64_t>(B) * T * H * (D / 2);
  if (pairs <= 0) return;
  if (positions) {
    check_positions_kernel<<<blocks_for(static_cast<int64_t>(B) * T), kThreads>>>(positions, int64_t{B} * T,
                                                                                   bad_row_flag());
    check_launch(kernel);
    if (const int64_t bad = take_bad_row(); bad >= 0) {
      int32_t position = 0;
      NDT_CUDA_CHECK(cudaMemcpy(&position, positions + bad, sizeof(position), cudaMemcpyDeviceToHost));
      refuse("rope: position " + std::to_string(position) + " of row " + std::to_string(bad) + " is negative");
    }
  }
  const std::vector<double> inv_freq = cpu::rope_inverse_frequencies(D, frequencies);
  DeviceBuffer<double> device_freq(static_cast<int64_t>(inv_freq.size()), MemTag::other);
  NDT_CUDA_CHECK(cudaMemcpy(device_freq.data(), inv_freq.data(), inv_freq.size() * sizeof(double),
                            cudaMemcpyHostToDevice));
  rope_kernel<kInverse, kAccumulate>
      <<<blocks_for(pairs), kThreads>>>(out, x, B, T, H, D, pos_offset, positions, device_freq.data());
  check_launch(kernel);
}

}  // namespace

void rope_forward(float* out, const float* inp, int B, int T, int H, int D, int pos_offset,
                  const RopeFrequencies& frequencies) {
  rotate<false, false>("rope_forward", out, inp, B, T, H, D, pos_offset, nullptr, frequencies);
}

void rope_backward(float* dinp, const float* dout, int B, int T, int H, int D, int pos_offset,
                   const RopeFrequencies& frequencies) {
  rotate<true, true>("rope_backward", dinp, dout, B, T, H, D, pos_offset, nullptr, frequencies);
}

void rope_forward_at(float* out, const float* inp, int B, int T, int H, int D, const int32_t* positions,
                     const RopeFrequencies& frequencies) {
  rotate<false, false>("rope_forward_at", out, inp, B, T, H, D, 0, positions, frequencies);
}

void rope_backward_at(float* dinp, const float* dout, int B, int T, int H, int D, const int32_t* positions,
                      const RopeFrequencies& frequencies) {
  rotate<true, true>("rope_backward_at", dinp, dout, B, T, H, D, 0, positions, frequencies);
}

}  // namespace ndt::cuda
