// Ulysses' communication operator, kept apart from the attentions that use it (Ulysses
// over cp, USP inside each cp_ulysses group): an all-to-all over a group of n ranks that
// turns [B, T, H, HS] of this rank's T rows, all H heads, into [B, n x T, H / n, HS] of
// the group's rows, this rank's heads, and back. Where each rank's rows go in the
// gathered sequence is data (`rows`): their sequence positions for Ulysses, the next
// T rows in group order for USP.
// Communicates, per call, one all-to-all of B x T x H x HS floats over the group, of
// which (n - 1) / n leaves the rank.
#pragma once

#include "comm/communicator.h"
#include "model/activation_layout.h"

#include <cstdint>
#include <vector>

namespace ndt {

class HeadAllToAll {
 public:
  // rows[j][t]: where row t of group rank j's T rows goes among the n x T gathered rows.
  HeadAllToAll(Communicator& group, std::vector<std::vector<int32_t>> rows);
  // Rank j's rows at j x T .. (j + 1) x T - 1: the gathered rows in group order.
  static std::vector<std::vector<int32_t>> in_group_order(int n, int T);

  // tokens [B, T, H, HS] -> heads [B, n x T, H / n, HS]. send and recv: B x T x H x HS floats each.
  void to_heads(const float* tokens, float* heads, int B, int T, int H, int HS, float* send, float* recv) const;
  // The inverse: heads -> tokens, added (+=) when accumulate, else written.
  void to_tokens(const float* heads, float* tokens, int B, int T, int H, int HS, bool accumulate, float* send,
                 float* recv) const;

 private:
  Communicator& group_;
  std::vector<std::vector<int32_t>> rows_;
};

// Throws unless this rank's heads and KV heads (after tensor parallelism) divide by the
// ranks that split them: parallel.cp under Ulysses, parallel.cp_ulysses under USP. Names
// the setting and the values.
void validate_head_split(int heads, int kv_heads, CpMode mode, int ranks);

}  // namespace ndt
