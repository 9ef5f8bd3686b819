// Table lookup. Contract: forward overwrites (or adds to, when accumulate) `out`;
// backward adds (+=) rows of dout into dtable.
#pragma once

#include <cstdint>

namespace ndt::cpu {

// out[n, :] (=|+=) table[ids[n], :] for n < N; ids must be in [0, rows of table).
void embedding_forward(float* out, const int32_t* ids, const float* table, int N, int C,
                       bool accumulate);

// dtable[ids[n], :] += dout[n, :]. Deterministic (no atomics; ordered by n per row).
void embedding_backward(float* dtable, const float* dout, const int32_t* ids, int N, int C);

}  // namespace ndt::cpu
