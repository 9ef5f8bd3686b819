// The safetensors file format, read and written directly: an 8-byte little-endian
// header length N, N bytes of JSON header (padded with spaces to a multiple of 8)
//   {"<tensor>": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"<key>": "<string>", ...}}
// then the byte buffer, with data_offsets relative to its start. Reading accepts F32,
// BF16 and F16 tensors and widens them to f32 (exactly); writing stores every tensor
// as one of those, F32 by default (interchange/stored_values.h). Names and layouts are
// the caller's business (see interchange/hf_names.h).
#pragma once

#include "core/dtype.h"
#include "core/tensor.h"

#include <map>
#include <string>
#include <vector>

namespace ndt {

struct SafetensorsTensor {
  Shape shape;
  std::vector<float> values;  // row-major
};

struct SafetensorsFile {
  std::map<std::string, SafetensorsTensor> tensors;
  std::map<std::string, std::string> metadata;  // "__metadata__"
};

// One tensor's place in a file: its stored dtype and shape, and its bytes [begin, end)
// as offsets from the start of the file.
struct SafetensorsEntry {
  DType dtype = DType::f32;
  Shape shape;
  uint64_t begin = 0, end = 0;
};

// What the header says, without the tensors' data (how a reader that needs only some
// bytes of some tensors starts); header_bytes counts the length field and the JSON.
struct SafetensorsHeader {
  std::map<std::string, SafetensorsEntry> tensors;
  std::map<std::string, std::string> metadata;
  uint64_t header_bytes = 0;
};

// Reads and validates the header; throws as read_safetensors does.
SafetensorsHeader read_safetensors_header(const std::string& path);

// Throws ndt::Error naming the file (and the tensor, where one is at fault) for: a
// file shorter than its header, malformed JSON, an unsupported dtype, data_offsets
// outside the buffer or overlapping another tensor's, or a byte size that is not
// dtype size x shape.
SafetensorsFile read_safetensors(const std::string& path);
// Writes every tensor as `dtype` (f32 -> "F32", bf16 -> "BF16", f16 -> "F16"; values
// rounded to nearest even), in name order, atomically (core/output_file.h): the path
// holds the whole file or, after an error, nothing. Throws for another dtype, if a
// tensor's values do not match its shape, or naming the file and the reason if it
// cannot be written.
void write_safetensors(const std::string& path, const SafetensorsFile& file, DType dtype = DType::f32);

}  // namespace ndt
