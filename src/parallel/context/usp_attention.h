// Context parallelism by USP (unified sequence parallelism: Ulysses x ring, Fang and
// Zhao 2024): the cp ranks are cp_ulysses x cp_ring. Each ring position holds the runs
// of the ring's CpLayout of cp_ring positions (zigzag balance kept), and each of the
// position's cp_ulysses ranks (consecutive cp ranks, one node) a contiguous
// 1 / cp_ulysses of them (CpLayout::runs). Around attention an all-to-all over cp_ulysses
// (head_all_to_all.h) turns q, k and v from [this rank's tokens, all heads] into [the
// group's tokens, in the position's row order, heads / cp_ulysses]; ring attention
// (ring_attention.h) then runs over cp_ring on those rows and heads, and an all-to-all
// turns the output back. Backward as Ulysses' around the ring's backward: q, k, v, the
// output and its gradient gathered again, the gradients of q, k and v sent back.
// Needs this rank's heads and KV heads (after tensor parallelism) divisible by cp_ulysses.
// Communicates, per block and micro-batch (N = B x T / cp local rows, QD = heads x head
// size, KD = KV heads x head size, cu = cp_ulysses, cr = cp_ring, 4-byte floats):
//   cp_ulysses: Ulysses' all-to-alls over cu ranks, forward N x (QD + 2 KD) in and N x QD
//     out, backward N x (3 QD + 2 KD) in and N x (QD + 2 KD) back ((cu - 1) / cu leaves);
//   cp_ring: the ring's sends over cr ranks of its K/V block, cu x N rows of KD / cu:
//     2 x N x KD floats, as plain ring's; forward cr - 1 sends, backward 2 cr - 1.
#pragma once

#include "parallel/context/cp_group_attention.h"
#include "parallel/context/head_all_to_all.h"
#include "parallel/context/ring_attention.h"

#include <cstdint>

namespace ndt {

class UspAttention : public CpGroupAttention {
 public:
  // cp, cp_ulysses, cp_ring: the mesh's communicators (core/axis.h); layout: mode usp, its
  // size cp's and its ulysses cp_ulysses's.
  UspAttention(Communicator& cp, Communicator& cp_ulysses, Communicator& cp_ring, const CpLayout& layout);
  void forward(const AttentionForward& a) const override;
  void backward(const AttentionBackward& a) const override;

 private:
  // The all-to-all over cp_ulysses for T local rows, gathered in the ring position's order.
  HeadAllToAll exchange(int T) const;
  Communicator& cp_ulysses_;
  RingAttention ring_;  // over cp_ring, on the gathered rows
};

// Throws unless parallel.cp_ulysses fits parallel.cp_mode: under "usp" it must divide
// cp and lie strictly between 1 and cp (1 is plain ring, cp plain Ulysses); under the
// others it must be 1. Names the settings and their values.
void validate_cp_ulysses(int cp, CpMode mode, int cp_ulysses);

}  // namespace ndt
