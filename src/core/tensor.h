// Tensor: a shape and a dtype over a shared, ledger-tagged storage. Always
// contiguous (row-major); views reshape or take a range of rows along dim 0 and
// share the storage. Kernels work on the raw pointers; this type owns and accounts.
#pragma once

#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/memory.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ndt {

using Shape = std::vector<int64_t>;
int64_t shape_numel(const Shape& shape);
std::string shape_str(const Shape& shape);  // "[2, 3, 4]"

// Bytes of freed host blocks kept for reuse (not counted by the ledger; see tensor.cpp).
size_t storage_cached_bytes();

// One aligned allocation on a device (core/device.h), reported to that device's
// MemoryLedger under its tag for its lifetime.
class Storage {
 public:
  Storage(size_t bytes, MemTag tag, Device device = Device::cpu);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  MemTag tag() const { return tag_; }
  Device device() const { return device_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  size_t block_bytes_ = 0;  // of the block holding it (a reused block may be larger)
  MemTag tag_;
  Device device_ = Device::cpu;
};

template <typename T>
constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<uint16_t>() { return DType::u16; }

class Tensor {
 public:
  Tensor() = default;
  static Tensor empty(const Shape& shape, DType dtype, MemTag tag, Device device = Device::cpu);  // uninitialised
  static Tensor zeros(const Shape& shape, DType dtype, MemTag tag, Device device = Device::cpu);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const { return shape_.at(i < 0 ? i + ndim() : i); }
  int64_t numel() const { return shape_numel(shape_); }
  DType dtype() const { return dtype_; }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  MemTag tag() const { return storage_->tag(); }
  Device device() const { return storage_ ? storage_->device() : Device::cpu; }

  void* raw() const { return static_cast<char*>(storage_->data()) + offset_; }
  template <typename T>
  T* data() const {
    NDT_CHECK(dtype_ == dtype_of<T>(), "tensor of dtype {} accessed as {}", dtype_name(dtype_),
              dtype_name(dtype_of<T>()));
    return static_cast<T*>(raw());
  }

  // Same storage, new shape with the same number of elements.
  Tensor view(const Shape& shape) const;
  // Rows [begin, end) along dim 0, sharing storage.
  Tensor slice(int64_t begin, int64_t end) const;
  void zero_();
  // Copies other's elements into this tensor: same shape (hence numel) and dtype,
  // both defined; the copy is chosen by the two devices (host memcpy, or the device's
  // DeviceMemory::copy for host<->device and device<->device).
  void copy_from(const Tensor& other);

 private:
  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;  // bytes
  Shape shape_;
  DType dtype_ = DType::f32;
};

}  // namespace ndt
