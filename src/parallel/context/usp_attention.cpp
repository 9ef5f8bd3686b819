#include "parallel/context/usp_attention.h"

#include "core/error.h"
#include "kernels/kernels.h"

#include <utility>

namespace ndt {

void validate_cp_ulysses(int cp, CpMode mode, int cp_ulysses) {
  if (mode != CpMode::usp) {
    NDT_CHECK(cp_ulysses == 1,
              "parallel.cp_ulysses = {} applies to parallel.cp_mode = \"usp\" only (parallel.cp_mode = \"{}\"): set "
              "parallel.cp_mode = \"usp\" or leave parallel.cp_ulysses at 1",
              cp_ulysses, cp_mode_name(mode));
    return;
  }
  NDT_CHECK(cp_ulysses > 1 && cp_ulysses < cp && cp % cp_ulysses == 0,
            "parallel.cp_mode = \"usp\" needs parallel.cp_ulysses (the Ulysses ranks of each group; the rest of "
            "parallel.cp is the ring) to divide parallel.cp = {} and lie strictly between 1 and it, not {}: "
            "parallel.cp_ulysses = 1 is parallel.cp_mode = \"ring\", parallel.cp_ulysses = parallel.cp is \"ulysses\"",
            cp, cp_ulysses);
}

UspAttention::UspAttention(Communicator& cp, Communicator& cp_ulysses, Communicator& cp_ring, const CpLayout& layout)
    : CpGroupAttention(cp, layout), cp_ulysses_(cp_ulysses), ring_(cp_ring, layout.ring()) {
  NDT_CHECK(layout.mode == CpMode::usp && layout.size == cp.size() && layout.ulysses == cp_ulysses.size() &&
                layout.size == cp_ulysses.size() * cp_ring.size(),
            "USP attention: the layout's cp = {} and cp_ulysses = {} but the groups have cp {}, cp_ulysses {} and "
            "cp_ring {} ranks",
            layout.size, layout.ulysses, cp.size(), cp_ulysses.size(), cp_ring.size());
}

HeadAllToAll UspAttention::exchange(int T) const {
  return HeadAllToAll(cp_ulysses_, HeadAllToAll::in_group_order(layout_.ulysses, T));
}

namespace {

// The head-split tensors in the scratch (context_parallel_scratch_floats), then the ring's.
struct HeadSplit {
  float *q, *k, *v, *out, *dout, *dq, *dk, *dv, *send, *recv, *ring;
  HeadSplit(float* scratch, int64_t N, int64_t QD, int64_t KD) {
    float* at = scratch;
    for (auto [x, floats] : {std::pair{&q, QD}, {&k, KD}, {&v, KD}, {&out, QD}, {&dout, QD}, {&dq, QD}, {&dk, KD},
                             {&dv, KD}, {&send, QD}, {&recv, QD}}) {
      *x = at;
      at += N * floats;
    }
    ring = at;
  }
};

}  // namespace

void UspAttention::forward(const AttentionForward& a) const {
  const int u = layout_.ulysses;
  validate_head_split(a.NH, a.NKV, CpMode::usp, u);
  HeadSplit h(a.scratch, int64_t{a.B} * a.T, int64_t{a.NH} * a.HS, int64_t{a.NKV} * a.HS);
  const HeadAllToAll heads = exchange(a.T);
  heads.to_heads(a.q, h.q, a.B, a.T, a.NH, a.HS, h.send, h.recv);
  heads.to_heads(a.k, h.k, a.B, a.T, a.NKV, a.HS, h.send, h.recv);
  heads.to_heads(a.v, h.v, a.B, a.T, a.NKV, a.HS, h.send, h.recv);
  // The ring on the group's u x T rows of NH / u heads; lse [B, NH / u, u x T], as many floats.
  ring_.forward(
      {h.out, a.lse, nullptr, h.q, h.k, h.v, a.B, u * a.T, a.NH / u, a.NKV / u, a.HS, h.ring, a.starts, a.dtype});
  heads.to_tokens(h.out, a.out, a.B, a.T, a.NH, a.HS, /*accumulate=*/false, h.send, h.recv);
}

void UspAttention::backward(const AttentionBackward& a) const {
  const int u = layout_.ulysses;
  const int64_t N = int64_t{a.B} * a.T, QD = int64_t{a.NH} * a.HS, KD = int64_t{a.NKV} * a.HS;
  HeadSplit h(a.scratch, N, QD, KD);
  const HeadAllToAll heads = exchange(a.T);
  heads.to_heads(a.q, h.q, a.B, a.T, a.NH, a.HS, h.send, h.recv);
  heads.to_heads(a.k, h.k, a.B, a.T, a.NKV, a.HS, h.send, h.recv);
  heads.to_heads(a.v, h.v, a.B, a.T, a.NKV, a.HS, h.send, h.recv);
  heads.to_heads(a.out, h.out, a.B, a.T, a.NH, a.HS, h.send, h.recv);
  heads.to_heads(a.dout, h.dout, a.B, a.T, a.NH, a.HS, h.send, h.recv);
  kernels::zero(h.dq, N * QD);
  kernels::zero(h.dk, N * KD);
  kernels::zero(h.dv, N * KD);
  ring_.backward({h.dq, h.dk, h.dv, h.dout, h.q, h.k, h.v, nullptr, h.out, a.lse, a.B, u * a.T, a.NH / u, a.NKV / u,
                  a.HS, h.ring, a.starts, a.dtype});
  heads.to_tokens(h.dq, a.dq, a.B, a.T, a.NH, a.HS, /*accumulate=*/true, h.send, h.recv);
  heads.to_tokens(h.dk, a.dk, a.B, a.T, a.NKV, a.HS, /*accumulate=*/true, h.send, h.recv);
  heads.to_tokens(h.dv, a.dv, a.B, a.T, a.NKV, a.HS, /*accumulate=*/true, h.send, h.recv);
}

}  // namespace ndt
