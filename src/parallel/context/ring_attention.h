// Context parallelism by ring attention: the sequence dimension of every activation is
// split over the cp mesh axis (CpLayout: zigzag or contiguous runs), and only attention
// communicates. Each rank keeps its queries; the keys and values travel around the cp
// ring, one rank's block per step, the next block's transfer in flight (non-blocking
// send and receive) while the current one computes. Each step computes the local
// queries against that block's runs (pairs wholly above the causal diagonal skipped,
// the diagonal ones masked) and merges the result into the running output with the
// log-sum-exp (online softmax). With grouped heads only the KV heads travel. With
// document boundaries each query sees its own document only: this rank's rows' document
// starts go to the span kernels, and a pair of runs no query of which sees a key of the
// other (other documents, or above the diagonal) is skipped.
// Backward sends the keys and values around the ring again, with the dK/dV sums of each
// block travelling beside them; after a full turn each sum is home. The probabilities
// are not kept (they would be T^2 / cp floats per head and rank): backward recomputes
// each pair's scores from q, k and the final log-sum-exp, one extra q.k product, so a
// rank's activations scale with its T / cp tokens and the longest sequence with cp.
// Communicates, over cp, per block and micro-batch (N = B x T / cp local rows,
// KD = KV heads x head size, 4-byte floats): forward (cp - 1) sends of the K/V block
// (2 x N x KD floats), backward cp - 1 K/V sends and cp dK/dV sends of the same size.
#pragma once

#include "parallel/context/cp_group_attention.h"

#include <cstdint>

namespace ndt {

class RingAttention : public CpGroupAttention {
 public:
  // cp: the cp axis's communicator; layout.size must equal its size.
  RingAttention(Communicator& cp, const CpLayout& layout);
  void forward(const AttentionForward& a) const override;
  void backward(const AttentionBackward& a) const override;
  // Query-key score pairs this rank computed in forward so far (visible pairs, summed
  // over sequences and heads): the attention FLOPs are 4 x head size x this.
  int64_t score_pairs() const { return score_pairs_; }

 private:
  mutable int64_t score_pairs_ = 0;
};

// Visible (query, key) pairs of a query run against a key run under the causal mask
// (key position <= query position), per sequence and head.
int64_t causal_pairs(const TokenRun& queries, const TokenRun& keys);

}  // namespace ndt
