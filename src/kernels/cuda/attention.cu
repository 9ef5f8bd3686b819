// Causal attention with log-sum-exp (kernels/cpu/attention.h): a simple, correct kernel
// rather than a fast one. Forward: one warp per query row (b, h, t), four rows (a query
// tile) per block; the warp's lanes hold the row's q and output in registers (head size
// <= 256, 8 per lane), walk the keys the row sees with an online softmax, then write
// lse and the probabilities att (zero where masked) that the contract keeps for backward.
// Backward, without atomics: a warp per query row computes D = sum_j P dP and adds dq;
// then a warp per key row (b, kv head, j) adds dk and dv over the query heads of its
// group and the rows that see it, in order, so results are deterministic.
#include "kernels/cuda/check.h"
#include "kernels/cuda/cuda_kernels.h"

#include <cfloat>

namespace ndt::cuda {
namespace {

constexpr int kRowsPerBlock = 4;
constexpr int kPerLane = kMaxAttentionHeadSize / kWarp;

struct Dims {
  int B, T, NH, NKV, HS;
  float scale;
  __device__ int group() const { return NH / NKV; }
  // Offsets of row t of sequence b, head h, in q/out ([B, T, NH, HS]) and k/v ([B, T, NKV, HS]).
  __device__ int64_t q_at(int b, int t, int h) const { return ((int64_t{b} * T + t) * NH + h) * HS; }
  __device__ int64_t kv_at(int b, int t, int h) const { return ((int64_t{b} * T + t) * NKV + h) * HS; }
  __device__ int64_t row_at(int b, int h, int t) const { return (int64_t{b} * NH + h) * T + t; }  // lse, D
};

__device__ inline void load_row(float (&reg)[kPerLane], const float* row, int HS, int lane) {
  for (int i = 0; i < kPerLane; ++i) reg[i] = lane + i * kWarp < HS ? row[lane + i * kWarp] : 0.0f;
}

__device__ inline float dot_row(const float (&reg)[kPerLane], const float* row, int HS, int lane) {
  float s = 0.0f;
  for (int i = 0; i < kPerLane; ++i) s += lane + i * kWarp < HS ? reg[i] * row[lane + i * kWarp] : 0.0f;
  return warp_sum(s);
}

// The query row this warp owns: (b, h, t), or false past the last.
__device__ inline bool query_row(const Dims& d, int* b, int* h, int* t) {
  const int64_t row = int64_t{blockIdx.x} * kRowsPerBlock + threadIdx.x / kWarp;
  if (row >= int64_t{d.B} * d.NH * d.T) return false;
  *t = static_cast<int>(row % d.T);
  *h = static_cast<int>(row / d.T % d.NH);
  *b = static_cast<int>(row / (int64_t{d.T} * d.NH));
  return true;
}

__global__ void check_starts_kernel(const int32_t* starts, int B, int T, int* bad_row) {
  NDT_GRID_LOOP(r, int64_t{B} * T) {
    const int32_t s = starts[r];
    if (s < 0 || s > r % T) atomicCAS(bad_row, 0, static_cast<int>(r) + 1);
  }
}

__global__ void attention_forward_kernel(float* out, float* lse, float* att, const float* q, const float* k,
                                         const float* v, const int32_t* starts, Dims d) {
  int b, h, t;
  if (!query_row(d, &b, &h, &t)) return;
  const int lane = threadIdx.x % kWarp, kvh = h / d.group();
  const int start = starts ? starts[int64_t{b} * d.T + t] : 0;
  float qreg[kPerLane], acc[kPerLane] = {};
  load_row(qreg, q + d.q_at(b, t, h), d.HS, lane);
  float m = -FLT_MAX, l = 0.0f;
  for (int j = start; j <= t; ++j) {
    const float s = dot_row(qreg, k + d.kv_at(b, j, kvh), d.HS, lane) * d.scale;
    const float m_new = fmaxf(m, s), correction = expf(m - m_new), p = expf(s - m_new);
    const float* vrow = v + d.kv_at(b, j, kvh);
    for (int i = 0; i < kPerLane; ++i) {
      acc[i] = acc[i] * correction + (lane + i * kWarp < d.HS ? p * vrow[lane + i * kWarp] : 0.0f);
    }
    l = l * correction + p;
    m = m_new;
  }
  float* orow = out + d.q_at(b, t, h);
  for (int i = 0; i < kPerLane; ++i) {
    if (lane + i * kWarp < d.HS) orow[lane + i * kWarp] = acc[i] / l;
  }
  const float row_lse = m + logf(l);
  if (lane == 0) lse[d.row_at(b, h, t)] = row_lse;
  float* arow = att + d.row_at(b, h, t) * d.T;
  for (int j = lane; j < d.T; j += kWarp) arow[j] = 0.0f;
  __syncwarp();
  for (int j = start; j <= t; ++j) {
    const float s = dot_row(qreg, k + d.kv_at(b, j, kvh), d.HS, lane) * d.scale;
    if (lane == 0) arow[j] = expf(s - row_lse);
  }
}

// Per query row: dP_j = dout . v_j, D = sum_j P_j dP_j (saved), dq += scale sum_j P_j (dP_j - D) k_j.
__global__ void attention_dq_kernel(float* dq, float* dsum, const float* dout, const float* k, const float* v,
                                    const float* att, const int32_t* starts, Dims d) {
  int b, h, t;
  if (!query_row(d, &b, &h, &t)) return;
  const int lane = threadIdx.x % kWarp, kvh = h / d.group();
  const int start = starts ? starts[int64_t{b} * d.T + t] : 0;
  const float* arow = att + d.row_at(b, h, t) * d.T;
  float doreg[kPerLane], acc[kPerLane] = {};
  load_row(doreg, dout + d.q_at(b, t, h), d.HS, lane);
  float D = 0.0f;
  for (int j = start; j <= t; ++j) D += arow[j] * dot_row(doreg, v + d.kv_at(b, j, kvh), d.HS, lane);
  for (int j = start; j <= t; ++j) {
    const float ds = arow[j] * (dot_row(doreg, v + d.kv_at(b, j, kvh), d.HS, lane) - D);
    const float* krow = k + d.kv_at(b, j, kvh);
    for (int i = 0; i < kPerLane; ++i) acc[i] += lane + i * kWarp < d.HS ? ds * krow[lane + i * kWarp] : 0.0f;
  }
  float* dqrow = dq + d.q_at(b, t, h);
  for (int i = 0; i < kPerLane; ++i) {
    if (lane + i * kWarp < d.HS) dqrow[lane + i * kWarp] += d.scale * acc[i];
  }
  if (lane == 0) dsum[d.row_at(b, h, t)] = D;
}

// Per key row (b, kv head, j): dv_j += sum P_tj dout_t, dk_j += scale sum dS_tj q_t over the
// group's query heads and the rows t >= j that see key j.
__global__ void attention_dkv_kernel(float* dk, float* dv, const float* dout, const float* q, const float* v,
                                     const float* att, const float* dsum, const int32_t* starts, Dims d) {
  const int64_t row = int64_t{blockIdx.x} * kRowsPerBlock + threadIdx.x / kWarp;
  if (row >= int64_t{d.B} * d.NKV * d.T) return;
  const int j = static_cast<int>(row % d.T), kvh = static_cast<int>(row / d.T % d.NKV);
  const int b = static_cast<int>(row / (int64_t{d.T} * d.NKV)), lane = threadIdx.x % kWarp;
  float vreg[kPerLane], dk_acc[kPerLane] = {}, dv_acc[kPerLane] = {};
  load_row(vreg, v + d.kv_at(b, j, kvh), d.HS, lane);
  for (int h = kvh * d.group(); h < (kvh + 1) * d.group(); ++h) {
    for (int t = j; t < d.T; ++t) {
      if (starts && starts[int64_t{b} * d.T + t] > j) continue;
      const float p = att[d.row_at(b, h, t) * d.T + j];
      const float* dorow = dout + d.q_at(b, t, h);
      const float ds = p * (dot_row(vreg, dorow, d.HS, lane) - dsum[d.row_at(b, h, t)]);
      const float* qrow = q + d.q_at(b, t, h);
      for (int i = 0; i < kPerLane; ++i) {
        if (lane + i * kWarp < d.HS) {
          dv_acc[i] += p * dorow[lane + i * kWarp];
          dk_acc[i] += ds * qrow[lane + i * kWarp];
        }
      }
    }
  }
  float* dkrow = dk + d.kv_at(b, j, kvh);
  float* dvrow = dv + d.kv_at(b, j, kvh);
  for (int i = 0; i < kPerLane; ++i) {
    if (lane + i * kWarp < d.HS) {
      dkrow[lane + i * kWarp] += d.scale * dk_acc[i];
      dvrow[lane + i * kWarp] += dv_acc[i];
    }
  }
}

// Checks what the CPU twin refuses: heads that do not group, a head size above the
// registers', a document start outside [0, t].
Dims checked_dims(const int32_t* starts, int B, int T, int NH, int NKV, int HS) {
  if (NKV < 1 || NH % NKV != 0) {
    refuse("attention: query heads (" + std::to_string(NH) + ") must be a multiple of key/value heads (" +
           std::to_string(NKV) + ")");
  }
  if (HS > kMaxAttentionHeadSize) {
    refuse("attention: head size " + std::to_string(HS) + " is above the cuda kernel's " +
           std::to_string(kMaxAttentionHeadSize));
  }
  if (starts && int64_t{B} * T > 0) {
    check_starts_kernel<<<blocks_for(int64_t{B} * T), kThreads>>>(starts, B, T, bad_row_flag());
    check_launch("attention (document starts)");
    if (const int64_t bad = take_bad_row(); bad >= 0) {
      int32_t s = 0;
      NDT_CUDA_CHECK(cudaMemcpy(&s, starts + bad, sizeof(s), cudaMemcpyDeviceToHost));
      refuse("attention: document start " + std::to_string(s) + " of row " + std::to_string(bad % T) +
             " (sequence " + std::to_string(bad / T) + ") is outside [0, " + std::to_string(bad % T) + "]");
    }
  }
  return Dims{B, T, NH, NKV, HS, 1.0f / sqrtf(static_cast<float>(HS))};
}

unsigned tile_blocks(int64_t rows) { return static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock); }

}  // namespace

void attention_forward(float* out, float* lse, float* att, const float* q, const float* k, const float* v,
                       const int32_t* starts, int B, int T, int NH, int NKV, int HS) {
  const Dims d = checked_dims(starts, B, T, NH, NKV, HS);
  const int64_t rows = int64_t{B} * NH * T;
  if (rows <= 0) return;
  attention_forward_kernel<<<tile_blocks(rows), kRowsPerBlock * kWarp>>>(out, lse, att, q, k, v, starts, d);
  check_launch("attention_forward");
}

void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                        const float* v, const float* att, const int32_t* starts, int B, int T, int NH, int NKV,
                        int HS) {
  const Dims d = checked_dims(starts, B, T, NH, NKV, HS);
  const int64_t rows = int64_t{B} * NH * T;
  if (rows <= 0) return;
  DeviceBuffer<float> dsum(rows, MemTag::activations);
  attention_dq_kernel<<<tile_blocks(rows), kRowsPerBlock * kWarp>>>(dq, dsum.data(), dout, k, v, att, starts, d);
  check_launch("attention_backward (dq)");
  attention_dkv_kernel<<<tile_blocks(int64_t{B} * NKV * T), kRowsPerBlock * kWarp>>>(dk, dv, dout, q, v, att,
                                                                                    dsum.data(), starts, d);
  check_launch("attention_backward (dk, dv)");
}

}  // namespace ndt::cuda
