// Writing one rank's part of a checkpoint into a (temporary) checkpoint directory:
// rank-NNNNN.bin holds the given blocks' floats back to back, and
// index-rank-NNNNN.json lists every block as a chunk (name, logical_shape, dtype,
// offset, shape, file, byte_offset, byte_length, crc32c). The data is fsynced before
// the index is written, and the index and directory after, so an index on disk
// means that rank's data is complete; commit_checkpoint (commit.h) then merges the
// indexes into metadata.json. Empty blocks write no bytes but are still listed, so
// the commit sees every tensor and its logical shape. The writer writes exactly
// what it is given: the caller picks the one rank that writes each replicated tensor.
//
// Test hook: NDT_CHECKPOINT_ABORT_AFTER_BYTES=N (read at every call) makes the
// writer call std::_Exit(86) as soon as N bytes of the data file are written,
// leaving a partial data file and no index, as a crash mid-save would. N at or
// past the end of the data has no effect.
//
// Test hook: NDT_CHECKPOINT_SLOW_RANK=R:MS (read at every call; R a rank, MS
// milliseconds, both non-negative integers) makes rank R's writer sleep MS ms after its
// data is synced and before it writes its index, so rank R is the last to finish and a
// commit that does not wait for every rank finds its index missing. Other ranks are
// not affected; a malformed value is an error naming the variable and the value.
#pragma once

#include "checkpoint/checkpoint.h"

#include <filesystem>
#include <vector>

namespace ndt::ckpt {

inline constexpr int kAbortHookExitCode = 86;

// Creates `dir` if needed. Throws ndt::Error naming the tensor for a block whose
// box does not fit its logical shape or whose data does not match its shape.
WriteStats write_rank_file(const std::filesystem::path& dir, int rank,
                           const std::vector<TensorBlock>& blocks);

}  // namespace ndt::ckpt
