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

// Lookup in one slice of a table split by vocabulary rows (vocab-parallel embedding):
// table [local_vocab, C] holds ids [vocab_begin, vocab_begin + local_vocab).
// out[n, :] = table[ids[n] - vocab_begin, :] for owned ids, zeros for the others, so
// summing out over the slices gives the whole lookup. Any id value is allowed.
void embedding_forward_range(float* out, const int32_t* ids, const float* table, int64_t vocab_begin,
                             int64_t local_vocab, int64_t rows, int64_t C);
// dtable[ids[n] - vocab_begin, :] += dout[n, :] for owned ids; other rows are skipped.
// Each element sums in row order n = 0..rows-1 whatever the thread count.
void embedding_backward_range(float* dtable, const float* dout, const int32_t* ids, int64_t vocab_begin,
                              int64_t local_vocab, int64_t rows, int64_t C);

}  // namespace ndt::cpu
