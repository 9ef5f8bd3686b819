// The safetensors file format, read and written directly: an 8-byte little-endian
// header length N, N bytes of JSON header (padded with spaces to a multiple of 8)
//   {"<tensor>": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"<key>": "<string>", ...}}
// then the byte buffer, with data_offsets relative to its start. Reading accepts F32,
// BF16 and F16 tensors and converts them to f32; writing produces F32. Names and
// layouts are the caller's business (see interchange/hf_names.h).
#pragma once

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

// Throws ndt::Error naming the file (and the tensor, where one is at fault) for: a
// file shorter than its header, malformed JSON, an unsupported dtype, data_offsets
// outside the buffer or overlapping another tensor's, or a byte size that is not
// dtype size x shape.
SafetensorsFile read_safetensors(const std::string& path);
// Writes every tensor as F32, in name order, atomically (core/output_file.h): the path
// holds the whole file or, after an error, nothing. Throws if a tensor's values do not
// match its shape, or naming the file and the reason if it cannot be written.
void write_safetensors(const std::string& path, const SafetensorsFile& file);

}  // namespace ndt
