#include "parallel/context/head_all_to_all.h"

#include "core/error.h"
#include "kernels/kernels.h"

#include <utility>

namespace ndt {

void validate_head_split(int heads, int kv_heads, CpMode mode, int ranks) {
  const bool usp = mode == CpMode::usp;
  NDT_CHECK(heads % ranks == 0 && kv_heads % ranks == 0,
            "parallel.cp_mode = \"{}\" splits the attention heads over parallel.{} = {}: this rank's {} heads and {} KV "
            "heads (after tensor parallelism) must both divide by it; use {}parallel.cp_mode = \"ring\", which has no "
            "such limit",
            cp_mode_name(mode), usp ? "cp_ulysses" : "cp", ranks, heads, kv_heads,
            usp ? "a parallel.cp_ulysses that divides them, or " : "");
}

HeadAllToAll::HeadAllToAll(Communicator& group, std::vector<std::vector<int32_t>> rows)
    : group_(group), rows_(std::move(rows)) {
  NDT_CHECK(static_cast<int>(rows_.size()) == group.size(), "head all-to-all: rows of {} ranks for a group of {}",
            rows_.size(), group.size());
}

std::vector<std::vector<int32_t>> HeadAllToAll::in_group_order(int n, int T) {
  std::vector<std::vector<int32_t>> rows(static_cast<size_t>(n));
  for (int j = 0; j < n; ++j) {
    for (int t = 0; t < T; ++t) rows[static_cast<size_t>(j)].push_back(j * T + t);
  }
  return rows;
}

// Blocks of the all-to-all are [B, T, H / n, HS] (rank j's rows, one rank's heads):
// in to_heads block j holds heads j*P.. of this rank's rows, going to rank j; received
// block j holds this rank's heads of rank j's rows, placed at their gathered rows.
void HeadAllToAll::to_heads(const float* tokens, float* heads, int B, int T, int H, int HS, float* send,
                            float* recv) const {
  const int n = group_.size(), P = H / n, whole = n * T;
  const int64_t piece = int64_t{P} * HS, block = int64_t{B} * T * piece;
  for (int j = 0; j < n; ++j) {
    for (int64_t row = 0; row < int64_t{B} * T; ++row) {
      kernels::copy(send + j * block + row * piece, tokens + (row * H + int64_t{j} * P) * HS, piece);
    }
  }
  group_.all_to_all(send, recv, static_cast<size_t>(block), DType::f32);
  for (int j = 0; j < n; ++j) {
    const std::vector<int32_t>& rows = rows_[static_cast<size_t>(j)];
    for (int b = 0; b < B; ++b) {
      for (int t = 0; t < T; ++t) {
        kernels::copy(heads + (int64_t{b} * whole + rows[static_cast<size_t>(t)]) * piece,
                      recv + j * block + (int64_t{b} * T + t) * piece, piece);
      }
    }
  }
}

void HeadAllToAll::to_tokens(const float* heads, float* tokens, int B, int T, int H, int HS, bool accumulate,
                             float* send, float* recv) const {
  const int n = group_.size(), P = H / n, whole = n * T;
  const int64_t piece = int64_t{P} * HS, block = int64_t{B} * T * piece;
  for (int j = 0; j < n; ++j) {
    const std::vector<int32_t>& rows = rows_[static_cast<size_t>(j)];
    for (int b = 0; b < B; ++b) {
      for (int t = 0; t < T; ++t) {
        kernels::copy(send + j * block + (int64_t{b} * T + t) * piece,
                      heads + (int64_t{b} * whole + rows[static_cast<size_t>(t)]) * piece, piece);
      }
    }
  }
  group_.all_to_all(send, recv, static_cast<size_t>(block), DType::f32);
  for (int j = 0; j < n; ++j) {
    for (int64_t row = 0; row < int64_t{B} * T; ++row) {
      float* dst = tokens + (row * H + int64_t{j} * P) * HS;
      const float* src = recv + j * block + row * piece;
      if (accumulate) {
        kernels::add_inplace(dst, src, piece);
      } else {
        kernels::copy(dst, src, piece);
      }
    }
  }
}

}  // namespace ndt
