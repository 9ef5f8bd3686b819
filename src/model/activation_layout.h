// How this rank's activations are split, as shapes only (no groups): enough to size
// buffers and predict memory.
//   - Tensor parallelism (tp ranks): inside a region each rank holds its slice of the
//     features (heads, MLP hidden units); with sequence parallel, outside the regions it
//     holds rows / tp of the rows.
//   - Context parallelism (cp ranks, docs/context_parallel.md): each rank holds T / cp
//     tokens of every sequence, as runs of the sequence (CpLayout::runs), and only
//     attention sees the other ranks' tokens. Under USP the ring's layout of
//     cp / cp_ulysses positions gives each position its runs, and each of the position's
//     cp_ulysses ranks holds a contiguous 1 / cp_ulysses of them.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace ndt {

// parallel.cp_mode: ring attention (keys and values travel around the cp ranks),
// Ulysses (all-to-all from token-split to head-split and back), or USP, both: Ulysses
// inside groups of parallel.cp_ulysses ranks, ring attention across the groups.
enum class CpMode { ring, ulysses, usp };
// parallel.cp_chunks: zigzag (2 x cp chunks; rank r holds chunks r and 2cp-1-r, equal
// causal work on every rank) or contiguous (cp chunks; rank r holds chunk r).
enum class CpChunks { zigzag, contiguous };
std::string_view cp_mode_name(CpMode mode);
CpMode cp_mode_from_name(std::string_view name);  // throws naming parallel.cp_mode
std::string_view cp_chunks_name(CpChunks chunks);
CpChunks cp_chunks_from_name(std::string_view name);  // throws naming parallel.cp_chunks

// Rows [begin, begin + count) of a rank's local rows of a sequence hold the sequence's
// positions [position, position + count).
struct TokenRun {
  int begin = 0, count = 0, position = 0;
};

struct CpLayout {
  int size = 1;
  CpMode mode = CpMode::ring;
  CpChunks chunks = CpChunks::zigzag;
  int ulysses = 1;  // USP: the ranks of each Ulysses group (parallel.cp_ulysses); else 1
  bool active() const { return size > 1; }
  // The number of equal chunks a sequence is cut into; seq_len must divide by it. Under
  // USP the ring's chunks (2 or 1 per position) each cut into cp_ulysses: as many.
  int chunk_count() const { return chunks == CpChunks::zigzag ? 2 * size : size; }
  // USP's ring: cp / cp_ulysses positions, each holding the rows of one Ulysses group.
  CpLayout ring() const { return {size / ulysses, CpMode::ring, chunks}; }
  // Rank `rank`'s runs of a sequence of T tokens (the whole sequence), in its local row
  // order; their counts add up to T / size.
  std::vector<TokenRun> runs(int rank, int T) const;
  // The sequence position of each of rank `rank`'s T / size local rows.
  std::vector<int32_t> positions(int rank, int T) const;
  // Throws unless T divides into chunk_count() chunks, naming the values.
  void check_sequence(int T) const;
};

struct ActivationLayout {
  int tp = 1;
  bool sequence_parallel = false;
  CpLayout cp;
  // Seq1F1B (model/sequence_chunks.h): each context holds one of seq_chunks chunks of its
  // sequences, whose attention keeps no probabilities (1: whole sequences).
  int seq_chunks = 1;
  bool splits_rows() const { return tp > 1 && sequence_parallel; }
  // Rows a rank holds outside the tensor-parallel regions, of `rows` in all.
  int64_t local_rows(int64_t rows) const { return splits_rows() ? rows / tp : rows; }
};

}  // namespace ndt
