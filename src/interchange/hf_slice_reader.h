// Reads boxes of ndtrain parameters out of a Hugging Face folder's shards, touching only
// the bytes of the box: a rank reads the slices it holds (its tensor-parallel rows or
// columns, its FSDP rows, its pipeline stage's blocks), never the whole model. A box of
// a [rows, cols] parameter is read row by row (one read when it spans whole rows); a
// parameter stored transposed (GPT-2's Conv1D, [in, out]) is read by the file's rows,
// which are the box's columns; a part of a fused tensor (GPT-2's c_attn: q|k|v) is
// offset by the rows of the parts before it. BF16 and F16 widen to f32 exactly.
#pragma once

#include "core/tensor.h"
#include "interchange/hf_folder.h"
#include "interchange/hf_names.h"
#include "interchange/model_state.h"

#include <cstdint>
#include <map>
#include <string>

namespace ndt {

class HfSliceReader {
 public:
  explicit HfSliceReader(const HfFolder& folder);
  ~HfSliceReader();
  HfSliceReader(const HfSliceReader&) = delete;
  HfSliceReader& operator=(const HfSliceReader&) = delete;

  // Writes the box (offset, extent: per dim of the parameter's logical shape) of the
  // ndtrain parameter `name` into `out`, row-major over the box. Throws naming the
  // folder, the parameter and the file for a name the folder has no place for or a
  // failed read.
  void read(const std::string& name, const Shape& offset, const Shape& extent, float* out);
  // Bytes of tensor data read so far (each element once, in its stored dtype).
  uint64_t bytes_read() const { return bytes_read_; }

 private:
  // count elements at element index `first` of `t`, widened into out.
  void read_run(const HfTensorFile& t, int64_t first, int64_t count, float* out);

  const HfFolder& folder_;
  std::map<std::string, HfPlace> places_;
  std::map<std::string, int> files_;  // open descriptors by path
  uint64_t bytes_read_ = 0;
};

// The whole model of the folder (every parameter read as one box), as `ndtrain convert`
// takes it.
ModelState read_hf_folder_model(const HfFolder& folder);

}  // namespace ndt
