// Context parallelism by Ulysses (DeepSpeed-Ulysses): the sequence dimension of every
// activation is split over the cp mesh axis (CpLayout runs, as ring attention), and
// around attention an all-to-all over cp (head_all_to_all.h) turns each of q, k and v from [this rank's
// tokens, all heads] into [all tokens, this rank's heads / cp], in sequence order;
// attention then runs on whole sequences of those heads (with document boundaries, under
// the whole sequences' document starts), and an all-to-all turns the output back. As in
// ring attention the probabilities are not kept: backward gathers q, k, v and the output
// again (rather than keeping head-split copies), sends the output gradient the same way,
// recomputes the probabilities from the kept log-sum-exp and sends the gradients of q, k
// and v back. Needs the heads and the KV heads (this rank's, after tensor parallelism)
// divisible by cp.
// Communicates, over cp, per block and micro-batch (N = B x T / cp local rows, QD =
// heads x head size, KD = KV heads x head size; an all-to-all sends (cp - 1) / cp of its
// buffer): forward all-to-alls of N x (QD + 2 KD) floats in and N x QD out; backward
// N x (3 QD + 2 KD) in (q, k, v, output, output gradient) and N x (QD + 2 KD) back.
#pragma once

#include "parallel/context/cp_group_attention.h"
#include "parallel/context/head_all_to_all.h"

#include <cstdint>

namespace ndt {

class UlyssesAttention : public CpGroupAttention {
 public:
  // cp: the cp axis's communicator; layout.size must equal its size.
  UlyssesAttention(Communicator& cp, const CpLayout& layout);
  void forward(const AttentionForward& a) const override;
  void backward(const AttentionBackward& a) const override;

 private:
  // The all-to-all over cp, every rank's rows placed at their sequence positions
  // (CpLayout::positions) in sequences of `whole` tokens: built once per forward or backward.
  HeadAllToAll exchange(int whole) const;
};

}  // namespace ndt
