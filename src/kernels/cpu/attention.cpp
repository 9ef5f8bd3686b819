// Causal attention with grouped K/V heads on the CPU: sgemm for the three matrix
// products, a vectorised causal softmax in between.
//
// Threading. Forward runs one OpenMP task per (b, h); backward one per (b, kv_head),
// looping over that group's query heads inside, so the dK/dV accumulation of a KV
// head is done by one thread in a fixed order: race-free and deterministic, and on the
// parallel path bitwise identical to a 1-thread run (tested). sgemm is called from
// inside the parallel region, where the OpenMP build of OpenBLAS runs single-threaded
// (it returns 1 thread inside an active parallel region): no oversubscription, no
// nested team. Measured with OMP_NUM_THREADS=2 on a 2-core AVX-512 VM, 1024^3 sgemm:
// outside any region 13.9 ms on 1 thread and 6.9 ms on 2; called by one thread of an
// active 2-thread region while the other waits, 13.8-15.9 ms, i.e. one thread.
// Calls below kMinParallelWork run serially. With fewer tasks than threads (B * NKV
// small in backward) the extra threads idle.
//
// Only the lower triangle is computed: rows are processed in blocks of kRowBlock, and
// the block [r0, r1) needs keys [0, r1) only (about 5/8 of the full work at T = 256).
// With document starts it needs keys [k0, r1), k0 the smallest start of its rows: the
// products skip every key before it, and each row's softmax runs over its own document's
// keys. Without starts k0 = 0 and every call and loop is the causal kernel's as it was.
#include "kernels/cpu/attention.h"
#include "kernels/cpu/vec_math.h"

#include "core/error.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace ndt::cpu {
namespace {

constexpr int kRowBlock = 64;
// Below this many multiply-adds per call (B * NH * T * T * HS) a parallel region
// costs more than it saves (on an oversubscribed machine a fork/join can cost
// milliseconds), so small calls run on the calling thread. It is also OpenBLAS's
// own threading threshold (M * N * K <= 65536 * 4 runs single-threaded), and no sgemm
// of a call is bigger than the call, so the serial path never threads its sgemms.
constexpr int64_t kMinParallelWork = int64_t{1} << 18;

// Parallel over tasks whenever the call is big enough, even with fewer tasks than
// threads: letting OpenBLAS thread these small sgemms instead (an inactive region) was
// measured 5x slower on 2 threads (backward, B=1, T=256, NH=12, NKV=1, HS=64: 13.0 ms
// against 2.4 ms with the second thread idle), and far worse when oversubscribed.
bool use_parallel(int B, int T, int NH, int HS) {
  const int64_t work = int64_t{B} * NH * T * T * HS;
  return work >= kMinParallelWork && omp_get_max_threads() > 1;
}

void check_heads(int NH, int NKV) {
  NDT_CHECK(NKV >= 1 && NH % NKV == 0,
            "attention: query heads ({}) must be a multiple of key/value heads ({})", NH, NKV);
}

// Every row's document start lies in [0, t] (checked before any parallel region).
void check_starts(const int32_t* starts, int B, int T) {
  if (!starts) return;
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      const int32_t s = starts[int64_t{b} * T + t];
      NDT_CHECK(s >= 0 && s <= t, "attention: document start {} of row {} (sequence {}) is outside [0, {}]", s, t, b,
                t);
    }
  }
}

// The first key rows [r0, r1) of sequence b see: the smallest of their document starts
// (0 without starts).
int first_key(const int32_t* starts, int b, int T, int r0, int r1) {
  if (!starts) return 0;
  const int32_t* s = starts + int64_t{b} * T;
  return *std::min_element(s + r0, s + r1);
}

int row_start(const int32_t* starts, int b, int T, int t) { return starts ? starts[int64_t{b} * T + t] : 0; }

// Row-major C = alpha * op(A) op(B) + beta * C.
inline void sgemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
                  const float* B, int ldb, float beta, float* C, int ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N,
              K, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace

void attention_forward(float* out, float* lse, float* att, const float* q, const float* k,
                       const float* v, const int32_t* starts, int B, int T, int NH, int NKV,
                       int HS) {
  check_heads(NH, NKV);
  check_starts(starts, B, T);
  const int group = NH / NKV;
  const int ldq = NH * HS, ldk = NKV * HS;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const int tasks = B * NH;
  const bool parallel = use_parallel(B, T, NH, HS);

#pragma omp parallel for schedule(static) if (parallel)
  for (int task = 0; task < tasks; ++task) {
    const int b = task / NH, h = task % NH, kvh = h / group;
    const float* qbh = q + static_cast<int64_t>(b) * T * ldq + h * HS;
    const float* kb = k + static_cast<int64_t>(b) * T * ldk + kvh * HS;
    const float* vb = v + static_cast<int64_t>(b) * T * ldk + kvh * HS;
    float* obh = out + static_cast<int64_t>(b) * T * ldq + h * HS;
    float* abh = att + static_cast<int64_t>(task) * T * T;
    float* lbh = lse + static_cast<int64_t>(task) * T;

    for (int r0 = 0; r0 < T; r0 += kRowBlock) {
      const int r1 = std::min(T, r0 + kRowBlock), rows = r1 - r0;
      const int k0 = first_key(starts, b, T, r0, r1);
      float* ablk = abh + static_cast<int64_t>(r0) * T;
      // S[r0:r1, k0:r1] = scale * Q[r0:r1] K[k0:r1]^T
      sgemm(false, true, rows, r1 - k0, HS, scale, qbh + static_cast<int64_t>(r0) * ldq, ldq,
            kb + static_cast<int64_t>(k0) * ldk, ldk, 0.0f, ablk + k0, T);
      for (int t = r0; t < r1; ++t) {
        float* whole_row = abh + static_cast<int64_t>(t) * T;
        const int lo = row_start(starts, b, T, t), n = t + 1 - lo;
        float* row = whole_row + lo;  // this row's keys lo..t
        // (This form vectorises; std::max from j = 1 stays scalar with GCC 12.)
        float mx = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : mx)
        for (int j = 0; j < n; ++j) mx = row[j] > mx ? row[j] : mx;
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int j = 0; j < n; ++j) {
          float e = exp_vec(row[j] - mx);
          row[j] = e;
          sum += e;
        }
        const float inv = 1.0f / sum;
#pragma omp simd
        for (int j = 0; j < n; ++j) row[j] *= inv;
        std::fill(whole_row, row, 0.0f);
        std::fill(row + n, whole_row + T, 0.0f);
        lbh[t] = mx + std::log(sum);
      }
      // O[r0:r1] = P[r0:r1, k0:r1] V[k0:r1]
      sgemm(false, false, rows, HS, r1 - k0, 1.0f, ablk + k0, T, vb + static_cast<int64_t>(k0) * ldk, ldk, 0.0f,
            obh + static_cast<int64_t>(r0) * ldq, ldq);
    }
  }
}

void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q,
                        const float* k, const float* v, const float* att, const int32_t* starts,
                        int B, int T, int NH, int NKV, int HS) {
  check_heads(NH, NKV);
  check_starts(starts, B, T);
  const int group = NH / NKV;
  const int ldq = NH * HS, ldk = NKV * HS;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const int tasks = B * NKV;
  const bool parallel = use_parallel(B, T, NH, HS);
  const int nbuf = parallel ? omp_get_max_threads() : 1;
  const int brows = std::min(T, kRowBlock);
  // dP / dS of one row block: [brows, T] per thread.
  std::vector<float> scratch(static_cast<size_t>(nbuf) * brows * T);

#pragma omp parallel for schedule(static) if (parallel)
  for (int task = 0; task < tasks; ++task) {
    const int b = task / NKV, kvh = task % NKV;
    float* ds = scratch.data() + static_cast<size_t>(omp_get_thread_num()) * brows * T;
    const float* kb = k + static_cast<int64_t>(b) * T * ldk + kvh * HS;
    const float* vb = v + static_cast<int64_t>(b) * T * ldk + kvh * HS;
    float* dkb = dk + static_cast<int64_t>(b) * T * ldk + kvh * HS;
    float* dvb = dv + static_cast<int64_t>(b) * T * ldk + kvh * HS;

    for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
      const int64_t off = static_cast<int64_t>(b) * T * ldq + h * HS;
      const float* qbh = q + off;
      const float* dobh = dout + off;
      float* dqbh = dq + off;
      const float* abh = att + (static_cast<int64_t>(b) * NH + h) * T * T;

      for (int r0 = 0; r0 < T; r0 += kRowBlock) {
        const int r1 = std::min(T, r0 + kRowBlock), rows = r1 - r0;
        // Keys [k0, r1): w of them; every product below starts at key k0.
        const int k0 = first_key(starts, b, T, r0, r1), w = r1 - k0;
        const int64_t kofs = static_cast<int64_t>(k0) * ldk;
        const float* pblk = abh + static_cast<int64_t>(r0) * T + k0;
        const float* doblk = dobh + static_cast<int64_t>(r0) * ldq;
        // dV[k0:r1] += P[r0:r1, k0:r1]^T dO[r0:r1]
        sgemm(true, false, w, HS, rows, 1.0f, pblk, T, doblk, ldq, 1.0f, dvb + kofs, ldk);
        // dP[r0:r1, k0:r1] = dO[r0:r1] V[k0:r1]^T   (ds has leading dimension w)
        sgemm(false, true, rows, w, HS, 1.0f, doblk, ldq, vb + kofs, ldk, 0.0f, ds, w);
        // dS = P o (dP - rowsum(dP o P)) * scale over the row's keys; zero elsewhere.
        for (int i = 0; i < rows; ++i) {
          const int t = r0 + i, lo = row_start(starts, b, T, t) - k0, n = t + 1 - k0 - lo;
          const float* p = pblk + static_cast<int64_t>(i) * T + lo;
          float* drow = ds + static_cast<int64_t>(i) * w;
          float* d = drow + lo;
          float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
          for (int j = 0; j < n; ++j) dot += d[j] * p[j];
#pragma omp simd
          for (int j = 0; j < n; ++j) d[j] = p[j] * (d[j] - dot) * scale;
          std::fill(drow, d, 0.0f);
          std::fill(d + n, drow + w, 0.0f);
        }
        // dQ[r0:r1] += dS K[k0:r1]
        sgemm(false, false, rows, HS, w, 1.0f, ds, w, kb + kofs, ldk, 1.0f,
              dqbh + static_cast<int64_t>(r0) * ldq, ldq);
        // dK[k0:r1] += dS^T Q[r0:r1]
        sgemm(true, false, w, HS, rows, 1.0f, ds, w, qbh + static_cast<int64_t>(r0) * ldq, ldq,
              1.0f, dkb + kofs, ldk);
      }
    }
  }
}

}  // namespace ndt::cpu
