// `ndtrain prepare`: turns a text file, or every regular file in a folder (sorted by
// name, recursively), into byte-level train and val shards (token = byte, vocab 256).
#pragma once

#include <cstdint>
#include <string>

namespace ndt {

struct PrepareResult {
  std::string train_path;  // <out_dir>/train.bin
  std::string val_path;    // <out_dir>/val.bin
  int64_t train_tokens = 0;
  int64_t val_tokens = 0;
  int files = 0;
};

// The last val_fraction of the concatenated bytes (0 < val_fraction < 1) becomes val.
// Files are joined with a '\n'. Errors name the path or value at fault.
PrepareResult prepare_byte_shards(const std::string& input, const std::string& out_dir,
                                  double val_fraction);

}  // namespace ndt
