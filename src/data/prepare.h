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

// `input` is a file, or a folder whose regular files (found recursively, symlinks not
// followed or counted, sorted by full path) are all taken: the caller picks the folder, or
// filters and uses the list overload below. Errors name the path or value at fault.
PrepareResult prepare_byte_shards(const std::string& input, const std::string& out_dir,
                                  double val_fraction);

// The same for an explicit list of files (symlinks to files are fine), taken in the order
// given. The files' bytes are joined with one '\n' between consecutive files; the last
// round(val_fraction * total) bytes (at least 1, leaving at least 1 for train) become
// val.bin, the rest train.bin, both in out_dir (created if missing). Throws ndt::Error for
// an empty list, a missing or non-regular file, empty input (fewer than 2 bytes in all),
// or val_fraction outside (0, 1).
PrepareResult prepare_byte_shards(const std::vector<std::string>& files, const std::string& out_dir,
                                  double val_fraction);

}  // namespace ndt
