#include "interchange/hf_slice_reader.h"

#include "core/dtype.h"
#include "core/error.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace ndt {

HfSliceReader::HfSliceReader(const HfFolder& folder)
    : folder_(folder), places_(hf_places(folder.config, folder.gpt2_prefix)) {}

HfSliceReader::~HfSliceReader() {
  for (const auto& [path, fd] : files_) ::close(fd);
}

void HfSliceReader::read_run(const HfTensorFile& t, int64_t first, int64_t count, float* out) {
  auto [it, opened] = files_.try_emplace(t.file, -1);
  if (opened) {
    it->second = ::open(t.file.c_str(), O_RDONLY | O_CLOEXEC);
    NDT_CHECK(it->second >= 0, "cannot open {}: {}", t.file, std::strerror(errno));
  }
  const size_t element = dtype_size(t.entry.dtype);
  const size_t bytes = static_cast<size_t>(count) * element;
  std::vector<char> raw(t.entry.dtype == DType::f32 ? 0 : bytes);
  char* dst = t.entry.dtype == DType::f32 ? reinterpret_cast<char*>(out) : raw.data();
  const uint64_t at = t.entry.begin + static_cast<uint64_t>(first) * element;
  for (size_t done = 0; done < bytes;) {
    const ssize_t n = ::pread(it->second, dst + done, bytes - done, static_cast<off_t>(at + done));
    NDT_CHECK(n > 0, "reading {} bytes at {} of {} failed: {}", bytes, at, t.file,
              n == 0 ? "the file ends" : std::strerror(errno));
    done += static_cast<size_t>(n);
  }
  if (t.entry.dtype != DType::f32) convert(raw.data(), t.entry.dtype, out, DType::f32, static_cast<size_t>(count));
  bytes_read_ += bytes;
}

void HfSliceReader::read(const std::string& name, const Shape& offset, const Shape& extent, float* out) {
  const auto place = places_.find(name);
  NDT_CHECK(place != places_.end(), "Hugging Face folder {} has no tensor for parameter {}", folder_.path, name);
  const HfPlace& p = place->second;
  const HfTensorFile& t = folder_.tensors.at(p.tensor);
  if (extent.size() == 1) return read_run(t, p.row_offset + offset[0], extent[0], out);
  NDT_CHECK(extent.size() == 2, "parameter {}: {}-d boxes are not read from Hugging Face folders", name, extent.size());
  const int64_t r0 = p.row_offset + offset[0], c0 = offset[1], rows = extent[0], cols = extent[1];
  if (!p.transposed) {  // file [R, C]: the box's rows, each a run of its columns
    const int64_t width = t.entry.shape[1];
    if (cols == width) return read_run(t, r0 * width, rows * cols, out);
    for (int64_t r = 0; r < rows; ++r) read_run(t, (r0 + r) * width + c0, cols, out + r * cols);
    return;
  }
  // file [C, R] (in, out): file row c holds the box's column c; read its run and scatter.
  const int64_t width = t.entry.shape[1];
  std::vector<float> run(static_cast<size_t>(rows));
  for (int64_t c = 0; c < cols; ++c) {
    read_run(t, (c0 + c) * width + r0, rows, run.data());
    for (int64_t r = 0; r < rows; ++r) out[r * cols + c] = run[static_cast<size_t>(r)];
  }
}

ModelState read_hf_folder_model(const HfFolder& folder) {
  HfSliceReader reader(folder);
  ModelState state;
  state.config = folder.config;
  for (const ParameterSpec& spec : model_parameter_specs(folder.config)) {
    std::vector<float>& values = state.tensors[spec.name];
    values.resize(static_cast<size_t>(shape_numel(spec.logical_shape)));
    reader.read(spec.name, Shape(spec.logical_shape.size(), 0), spec.logical_shape, values.data());
  }
  return state;
}

}  // namespace ndt
