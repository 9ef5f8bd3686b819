// A mixture-of-experts block's row moves around its experts (model/moe.h): routed
// slots' token rows into the dispatch order, the experts' outputs combined back into
// their tokens, and the same two in backward. A slot is one (token, choice) of the
// [N, k] routing, row_of_slot[t * k + j] its row in the dispatch order, or -1 where
// capacity dropped it. Rows of width C floats.
//
// Threads split the tokens (or the slots); every output element is computed by one
// thread with the same operations in the same order on any thread count, so the bits do
// not depend on it (what recompute and micro-batches in flight need).
#pragma once

#include <cstdint>

namespace ndt::cpu {

// rows[row_of_slot[s]] = x[s / k] for every kept slot s < N x k.
void moe_dispatch_rows(float* rows, const float* x, const int64_t* row_of_slot, int64_t N, int k, int64_t C);

// out[t] += weight[t, j] x y[row_of_slot[t, j]] for each kept j = 0 .. k-1 in order.
void moe_combine(float* out, const float* y, const int64_t* row_of_slot, const float* weight, int64_t N, int k,
                 int64_t C);

// The combine's backward, per kept slot (t, j) with row r: drows[r] = weight[t, j] x
// dout[t] (overwritten) and dweight[t, j] = dout[t] . y[r], summed in double in column
// order (dropped slots: dweight untouched).
void moe_combine_backward(float* drows, float* dweight, const float* dout, const float* y, const int64_t* row_of_slot,
                          const float* weight, int64_t N, int k, int64_t C);

// The dispatch's backward: dx[t] += drows[row_of_slot[t, j]] for each kept j = 0 .. k-1 in order.
void moe_gather_add(float* dx, const float* drows, const int64_t* row_of_slot, int64_t N, int k, int64_t C);

}  // namespace ndt::cpu
