// IoBuffer: host memory for direct I/O. O_DIRECT needs the buffer, the file offset and
// the length aligned to the device's logical block size; 4096 bytes covers every device
// here. Counted by the memory ledger under its tag for its lifetime, like a Tensor's
// storage (offload's staging buffers are resident memory the memory model predicts).
// Memory: exactly `bytes` in the ledger (the allocation is rounded up to 4096).
#pragma once

#include "core/memory.h"

#include <cstddef>

namespace ndt::offload {

class IoBuffer {
 public:
  static constexpr size_t kAlignment = 4096;

  IoBuffer() = default;
  IoBuffer(size_t bytes, MemTag tag);  // uninitialised; bytes a multiple of kAlignment
  ~IoBuffer();
  IoBuffer(IoBuffer&& other) noexcept;
  IoBuffer& operator=(IoBuffer&& other) noexcept;
  IoBuffer(const IoBuffer&) = delete;
  IoBuffer& operator=(const IoBuffer&) = delete;

  bool defined() const { return data_ != nullptr; }
  void* data() const { return data_; }
  float* floats() const { return static_cast<float*>(data_); }
  size_t bytes() const { return bytes_; }

 private:
  void release();
  void* data_ = nullptr;
  size_t bytes_ = 0;
  MemTag tag_ = MemTag::other;
};

}  // namespace ndt::offload
