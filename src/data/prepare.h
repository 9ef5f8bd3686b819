// `ndtrain prepare`: turns a text file, or every regular file in a folder (recursively,
// sorted by path), into byte-level train and val shards (token = byte, vocab 256).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ndt {

struct PrepareResult {
  std::string train_path;  // <out_dir>/train.bin
  std::string val_path;    // <out_dir>/val.bin
  int64_t train_tokens = 0;
  int64_t val_tokens = 0;
  int files = 0;
};

// The fewest tokens each of train.bin and val.bin may hold: one input and its target.
// (Training then needs train.seq_len + 1 tokens in each shard it reads.)
inline constexpr int64_t kMinShardTokens = 2;

// `input` is a file, or a folder whose regular files (found recursively, symlinks not
// followed or counted, sorted by full path) are all taken: the caller picks the folder, or
// filters and uses the list overload below. Errors name the path or value at fault.
PrepareResult prepare_byte_shards(const std::string& input, const std::string& out_dir,
                                  double val_fraction, bool overwrite);

// The same for an explicit list of files (symlinks to files are fine), taken in the order
// given. The files' bytes are joined with one '\n' between consecutive files; the last
// round(val_fraction * total) bytes become val.bin, the rest train.bin, both in out_dir
// (created if missing), each written atomically. Throws ndt::Error, before writing
// anything, for: an empty list; a missing, unreadable or non-regular file; empty input;
// a part with fewer than kMinShardTokens tokens (giving the sizes); val_fraction outside
// (0, 1); or, unless overwrite, a train.bin or val.bin already in out_dir (naming them).
PrepareResult prepare_byte_shards(const std::vector<std::string>& files, const std::string& out_dir,
                                  double val_fraction, bool overwrite);

}  // namespace ndt
