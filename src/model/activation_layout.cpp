#include "model/activation_layout.h"

#include "core/error.h"

#include <algorithm>

namespace ndt {

std::string_view cp_mode_name(CpMode mode) {
  switch (mode) {
    case CpMode::ring: return "ring";
    case CpMode::ulysses: return "ulysses";
    case CpMode::usp: return "usp";
  }
  return "?";
}

CpMode cp_mode_from_name(std::string_view name) {
  for (CpMode mode : {CpMode::ring, CpMode::ulysses, CpMode::usp}) {
    if (name == cp_mode_name(mode)) return mode;
  }
  fail("parallel.cp_mode = \"{}\" is not a context-parallel mode: ring, ulysses or usp", name);
}

std::string_view cp_chunks_name(CpChunks chunks) { return chunks == CpChunks::zigzag ? "zigzag" : "contiguous"; }

CpChunks cp_chunks_from_name(std::string_view name) {
  for (CpChunks chunks : {CpChunks::zigzag, CpChunks::contiguous}) {
    if (name == cp_chunks_name(chunks)) return chunks;
  }
  fail("parallel.cp_chunks = \"{}\" is not a chunk layout: zigzag or contiguous", name);
}

void CpLayout::check_sequence(int T) const {
  NDT_CHECK(T % chunk_count() == 0,
            "train.seq_len = {} must divide into {} chunks of equal length for parallel.cp = {} with {} chunks ({}{})",
            T, chunk_count(), size, cp_chunks_name(chunks),
            chunks == CpChunks::zigzag ? "2 x cp: rank r holds chunks r and 2cp-1-r" : "cp: rank r holds chunk r",
            mode == CpMode::usp ? "; under USP, of the ring's chunks, each split over parallel.cp_ulysses ranks" : "");
}

namespace {

// The local rows [first, first + count) of `runs` (in local row order), as runs of their own.
std::vector<TokenRun> slice_runs(const std::vector<TokenRun>& runs, int first, int count) {
  std::vector<TokenRun> out;
  for (const TokenRun& run : runs) {
    const int begin = std::max(run.begin, first), end = std::min(run.begin + run.count, first + count);
    if (begin < end) out.push_back({begin - first, end - begin, run.position + begin - run.begin});
  }
  return out;
}

}  // namespace

std::vector<TokenRun> CpLayout::runs(int rank, int T) const {
  if (size == 1) return {{0, T, 0}};
  check_sequence(T);
  if (mode == CpMode::usp) {  // a contiguous 1 / ulysses of the ring position's rows
    const int local = T / size;
    return slice_runs(ring().runs(rank / ulysses, T), (rank % ulysses) * local, local);
  }
  const int len = T / chunk_count();
  if (chunks == CpChunks::contiguous) return {{0, len, rank * len}};
  return {{0, len, rank * len}, {len, len, (2 * size - 1 - rank) * len}};
}

std::vector<int32_t> CpLayout::positions(int rank, int T) const {
  std::vector<int32_t> out;
  out.reserve(static_cast<size_t>(T / size));
  for (const TokenRun& run : runs(rank, T)) {
    for (int i = 0; i < run.count; ++i) out.push_back(run.position + i);
  }
  return out;
}

}  // namespace ndt
