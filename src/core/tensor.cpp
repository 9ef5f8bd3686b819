#include "core/tensor.h"

#include <cstdlib>
#include <cstring>
#include <new>

namespace ndt {

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_str(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

static constexpr size_t kAlignment = 64;

Storage::Storage(size_t bytes, MemTag tag) : bytes_(bytes), tag_(tag) {
  size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  data_ = std::aligned_alloc(kAlignment, rounded == 0 ? kAlignment : rounded);
  if (!data_) throw std::bad_alloc();
  MemoryLedger::instance().on_alloc(tag_, bytes_);
}

Storage::~Storage() {
  std::free(data_);
  MemoryLedger::instance().on_free(tag_, bytes_);
}

Tensor Tensor::empty(const Shape& shape, DType dtype, MemTag tag) {
  for (int64_t d : shape) NDT_CHECK(d >= 0, "tensor shape {} has a negative size", shape_str(shape));
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.storage_ = std::make_shared<Storage>(t.nbytes(), tag);
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, MemTag tag) {
  Tensor t = empty(shape, dtype, tag);
  t.zero_();
  return t;
}

Tensor Tensor::view(const Shape& shape) const {
  NDT_CHECK(shape_numel(shape) == numel(), "cannot view tensor of shape {} as {}", shape_str(shape_),
            shape_str(shape));
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::slice(int64_t begin, int64_t end) const {
  NDT_CHECK(ndim() >= 1 && 0 <= begin && begin <= end && end <= shape_[0],
            "slice [{}, {}) out of range for shape {}", begin, end, shape_str(shape_));
  Tensor t = *this;
  int64_t row = numel() / (shape_[0] == 0 ? 1 : shape_[0]);
  t.offset_ += static_cast<size_t>(begin * row) * dtype_size(dtype_);
  t.shape_[0] = end - begin;
  return t;
}

void Tensor::zero_() { std::memset(raw(), 0, nbytes()); }

void Tensor::copy_from(const Tensor& other) {
  NDT_CHECK(shape_ == other.shape_ && dtype_ == other.dtype_, "copy from {} {} into {} {}",
            shape_str(other.shape_), dtype_name(other.dtype_), shape_str(shape_), dtype_name(dtype_));
  std::memcpy(raw(), other.raw(), nbytes());
}

}  // namespace ndt
