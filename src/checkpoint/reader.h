// Reading a committed checkpoint onto any mesh: read_block fills one box of a
// logical tensor from whichever saved chunks overlap it (N-d box intersection), so
// the reading split need not match the saving one. Every chunk's CRC32C is verified
// the first time any request touches it: that read loads the whole chunk (memory
// bounded by the largest chunk) and records the chunk as verified, keeping no data;
// later requests read only the byte span they need from a verified chunk. Not
// thread-safe: one reader per thread.
#pragma once

#include "checkpoint/box.h"
#include "checkpoint/checkpoint.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace ndt::ckpt {

class CheckpointReader {
 public:
  // Loads dir/metadata.json; throws ndt::Error if it is missing or not this format.
  explicit CheckpointReader(const std::filesystem::path& dir);

  const nlohmann::json& state() const { return state_; }  // the commit's extra_state
  bool has(const std::string& name) const { return tensors_.count(name) > 0; }
  std::vector<std::string> tensor_names() const;  // sorted
  const Shape& logical_shape(const std::string& name) const;

  // Fills `out` (row-major over `shape`) with the box (offset, shape) of tensor
  // `name`, which the caller expects to have `logical_shape`. Throws ndt::Error for an
  // unknown name, a logical shape other than the saved one, a box outside the tensor
  // or not covered by the saved chunks, and a missing or truncated data file or a
  // checksum mismatch (naming the tensor, the file and what differs).
  void read_block(const std::string& name, const Shape& logical_shape, const Shape& offset,
                  const Shape& shape, float* out);

  int64_t bytes_read() const { return bytes_read_; }  // data bytes read so far, for MB/s

 private:
  struct SavedTensor {
    Shape logical_shape;
    std::vector<Chunk> chunks;
  };
  const SavedTensor& tensor(const std::string& name) const;
  void read_part(const std::string& name, const Chunk& chunk, const Box& part,
                 const Box& request, float* out);

  std::filesystem::path dir_;
  nlohmann::json state_;
  std::map<std::string, SavedTensor> tensors_;
  std::set<std::pair<std::string, int64_t>> verified_;  // (file, byte_offset) of checked chunks
  int64_t bytes_read_ = 0;
};

}  // namespace ndt::ckpt
