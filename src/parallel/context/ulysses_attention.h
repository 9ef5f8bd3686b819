// Context parallelism by Ulysses (DeepSpeed-Ulysses): the sequence dimension of every
// activation is split over the cp mesh axis (CpLayout runs, as ring attention), and
// around attention an all-to-all over cp turns each of q, k and v from [this rank's
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

#include "comm/communicator.h"
#include "model/context_parallel_attention.h"

#include <cstdint>
#include <vector>

namespace ndt {

class UlyssesAttention : public ContextParallelAttention {
 public:
  // cp: the cp axis's communicator; layout.size must equal its size.
  UlyssesAttention(Communicator& cp, const CpLayout& layout);
  CpLayout layout() const override { return layout_; }
  int rank() const override { return cp_.rank(); }
  void forward(const AttentionForward& a) const override;
  void backward(const AttentionBackward& a) const override;
  void sum_over_ranks(float* x, int64_t n) const override;

 private:
  // Every cp rank's local rows' sequence positions (CpLayout::positions), for sequences
  // of `whole` tokens: computed once per forward or backward.
  using Positions = std::vector<std::vector<int32_t>>;
  Positions positions(int whole) const;
  // [B, T, H, HS] of this rank's tokens -> [B, cp x T, H / cp, HS] of all tokens in
  // sequence order, this rank's heads. send and recv: B x T x H x HS floats each.
  void to_heads(const float* tokens, float* heads, int B, int T, int H, int HS, const Positions& positions,
                float* send, float* recv) const;
  // The inverse: heads -> tokens, added (+=) when accumulate, else written.
  void to_tokens(const float* heads, float* tokens, int B, int T, int H, int HS, bool accumulate,
                 const Positions& positions, float* send, float* recv) const;
  Communicator& cp_;
  CpLayout layout_;
};

// Throws unless this rank's heads and KV heads divide by cp, naming the values.
void validate_ulysses(int heads, int kv_heads, int cp);

}  // namespace ndt
