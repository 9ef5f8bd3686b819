// Checkpoint storage layer (ndt::ckpt): saves and loads blocks of named logical
// tensors and knows nothing about models. A checkpoint is a directory with one data
// file per rank (rank-00000.bin: that rank's blocks as raw f32, back to back) and
// metadata.json naming, for every logical tensor, its shape, dtype and the chunks
// (box of the tensor + file + byte range + CRC32C) that hold it. Blocks are boxes of
// the logical tensor, not pieces of a particular mesh, so a checkpoint saved on one
// mesh is read back on any other. This header holds the types and file names shared
// by the writer (writer.h), the commit step (commit.h) and the reader (reader.h).
#pragma once

#include "core/tensor.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace ndt::ckpt {

inline constexpr const char* kFormat = "ndtrain-checkpoint";
// Version 2: metadata.json carries "metadata_crc32c", the CRC32C of the rest of it
// (metadata_checksum below), so an edited or damaged metadata file is refused.
inline constexpr int kFormatVersion = 2;
inline constexpr const char* kDType = "f32";
inline constexpr const char* kMetadataFile = "metadata.json";

// The CRC32C of a metadata object without its "metadata_crc32c" field, over its compact
// JSON text (nlohmann::json orders keys, so the text is canonical), as 8 hex digits.
std::string metadata_checksum(const nlohmann::json& metadata);

// Fills out[0 .. count) with elements [first, first + count) of a block (row-major).
using BlockSource = std::function<void(int64_t first, int64_t count, float* out)>;

// One rank's block of a logical tensor: a host snapshot, row-major contiguous f32, or,
// for state that does not fit in memory (offload's swap files), a source the writer
// reads piece by piece (data then empty). The bytes on disk are the same either way.
struct TensorBlock {
  std::string name;      // "blocks.0.attn.wq.weight", "optim.exp_avg.blocks.0.attn.wq.weight"
  Shape logical_shape;   // the whole tensor
  Shape offset;          // where the block starts, per dim
  Shape shape;           // block extent per dim; 0 in a dim makes an empty block (no bytes written)
  std::vector<float> data;  // shape_numel(shape) floats, or empty with a source
  BlockSource source = nullptr;
};

// Where one saved block lies: its box in the logical tensor and its bytes on disk.
struct Chunk {
  Shape offset;
  Shape shape;
  std::string file;  // data file name, relative to the checkpoint directory
  int64_t byte_offset = 0;
  int64_t byte_length = 0;
  uint32_t crc32c = 0;
};
void to_json(nlohmann::json& j, const Chunk& chunk);
void from_json(const nlohmann::json& j, Chunk& chunk);

// What one write cost, so callers can print MB/s.
struct WriteStats {
  int64_t bytes = 0;  // data bytes written (index and metadata files not counted)
  double seconds = 0;
};

std::string rank_file_name(int rank);   // "rank-00003.bin"
std::string index_file_name(int rank);  // "index-rank-00003.json"

}  // namespace ndt::ckpt
